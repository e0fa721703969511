"""Every kernel in cuda_src/*.cu compiles with NVRTC and every ptx/*.ptx assembles with ptxas (no GPU needed).

A .cu file compiles for sm_90a and sm_80 unless it restricts itself with a comment ``// tmakit: arch sm_90a``
(several allowed). A .ptx file assembles for its ``.target`` and for each ``// tmakit: also-arch sm_XX``.
The files are found at collection time, so a new kernel is covered without editing this test.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tmakit.build import assemble_ptx, compile_cuda, source_dirs
from tmakit.kernel_signature import ptx_targets

from conftest import requires_ptxas

DEFAULT_ARCHS = ("sm_90a", "sm_80")
CUDA_SRC, PTX_DIR = source_dirs()


def _declared(path: Path, tag: str) -> list[str]:
    return re.findall(rf"//\s*tmakit:\s*{tag}\s+((?:sm|compute)_\w+)", path.read_text())


def _cuda_cases() -> list:
    cases = []
    for path in sorted(CUDA_SRC.glob("*.cu")):
        for arch in _declared(path, "arch") or DEFAULT_ARCHS:
            cases.append(pytest.param(path.name, arch, id=f"{path.stem}-{arch}"))
    return cases


def _ptx_cases() -> list:
    cases = []
    for path in sorted(PTX_DIR.glob("*.ptx")):
        archs = ptx_targets(path.read_text())[:1] + _declared(path, "also-arch")
        for arch in dict.fromkeys(archs) or ["<no .target>"]:
            cases.append(pytest.param(path.name, arch, id=f"{path.stem}-{arch}"))
    return cases


@pytest.mark.parametrize("name, arch", _cuda_cases())
def test_cuda_kernel_compiles(name: str, arch: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMAKIT_CACHE", "0")  # prove the source compiles now, not that it once did
    code = compile_cuda(name, arch=arch)
    assert code.kind == "cubin" and code.code[:4] == b"\x7fELF"
    assert code.entry_names(), f'{name} has no extern "C" __global__ entry point'


@requires_ptxas
@pytest.mark.parametrize("name, arch", _ptx_cases())
def test_ptx_kernel_assembles(name: str, arch: str) -> None:
    assert arch != "<no .target>", f"{name} has no .target line"
    assert assemble_ptx(name, arch=arch)[:4] == b"\x7fELF"

@pytest.mark.parametrize("header, arch", [pytest.param(h.name, a, id=f"{h.stem}-{a}")
                                           for h in sorted((CUDA_SRC / "tmakit").glob("*.cuh")) for a in DEFAULT_ARCHS])
def test_header_compiles_alone(header: str, arch: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each cuda_src/tmakit/*.cuh is self-contained: including it first in an empty kernel compiles."""
    monkeypatch.setenv("TMAKIT_CACHE", "0")
    text = f'#include "tmakit/{header}"\nextern "C" __global__ void tmakit_header_probe() {{}}\n'
    compile_cuda(text, arch=arch, name=f"probe_{Path(header).stem}.cu")
