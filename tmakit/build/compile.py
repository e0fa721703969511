"""NVRTC (through ``cuda.core.Program``) to cubin, hand-written PTX, ptxas checks, and the disk cache around them.

One NVRTC compile yields both the cubin and its PTX (read from the same ``nvrtcProgram`` handle): the cubin
is what gets loaded (NVRTC newer than the driver makes PTX the driver cannot JIT), and the PTX gives the
kernel signatures and entry names on a machine without a GPU, and lands in ``TMAKIT_DUMP_DIR`` when set.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Mapping, Sequence

from .. import _driver
from ..arch import Arch
from ..errors import CompileError, UnsupportedDeviceError
from ..kernel_signature import ptx_targets
from . import cache
from .code import CompiledKernelCode
from .diagnose import arch_advice
from .status import compile_status
from .versions import driver_version_tag, nvrtc_version
from .options import program_options
from .sources import Source, cuda_include_dirs, included_headers, resolve_source, source_dirs

def default_arch(arch: Any, device: int = 0) -> Arch:
    """``arch`` parsed, or the device's own with the arch-specific 'a' suffix on sm_90+ (sm_90 -> sm_90a)."""
    if arch is not None:
        return Arch.parse(arch)
    if not _driver.gpu_available():
        raise UnsupportedDeviceError("arch=None means 'the GPU's architecture', but there is no GPU here; "
                                     "pass arch='sm_90a' or arch='sm_80' to compile without one")
    return _driver.device_arch(device).with_accelerated()


def _dump(name: str, key: str, ptx: str) -> None:
    folder = os.environ.get("TMAKIT_DUMP_DIR")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        stem = Path(name).stem or "kernel"
        Path(folder, f"{stem}.{key[:12]}.ptx").write_text(ptx)


def _read_log(program: Any) -> str:
    from cuda.bindings import nvrtc

    err, size = nvrtc.nvrtcGetProgramLogSize(program.handle)
    if int(err) != 0 or size <= 1:
        return ""
    buf = b" " * size
    nvrtc.nvrtcGetProgramLog(program.handle, buf)
    return buf.rstrip(b"\0").decode(errors="replace")


def _read_ptx(program: Any) -> str:
    # cuda.core's compile("ptx") asks the driver whether it could load the PTX and so fails on machines
    # without one; the PTX is already in the program from the cubin compile, so read it from the handle.
    from cuda.bindings import nvrtc

    err, size = nvrtc.nvrtcGetPTXSize(program.handle)
    if int(err) != 0:
        return ""
    buf = b" " * size
    nvrtc.nvrtcGetPTX(program.handle, buf)
    return buf.rstrip(b"\0").decode()


def _compile_error(name: str, log: str, options: Sequence[str], source: str, target: Arch) -> CompileError:
    """The CompileError for a failed compile: the log, and on its first line the target to use where the log
    shows the target lacks instructions the source uses."""
    advice = arch_advice(log, target)
    if advice is None:
        return CompileError(name, log, options, source)
    return CompileError(name, log, options, source, parameter="arch", value=target.sm, rule=advice[0], fix=advice[1])


def _nvrtc_cubin(src: Source, opts: Any, target: Arch) -> tuple[bytes, str, str]:
    """(cubin, ptx, log) from one NVRTC compile; CompileError with the log and numbered source on failure."""
    from cuda.core import Program

    program = Program(src.text, "c++", options=opts)
    try:
        try:
            obj = program.compile("cubin")
        except Exception as exc:  # cuda.core raises NVRTCError; the full log is in the program
            log = _read_log(program) or str(exc)
            raise _compile_error(opts.name, log, [o.decode() for o in opts.as_bytes("nvrtc", "cubin")], src.text,
                                 target) from None
        return bytes(obj.code), _read_ptx(program), _read_log(program)
    finally:
        program.close()


def compile_cuda(source: str | Path, *, arch: Arch | str | tuple | None = None,
                 defines: Mapping[str, str | int] | None = None, options: Sequence[str] = (),
                 name: str | None = None) -> CompiledKernelCode:
    """Compile CUDA C++ (a file under cuda_src/, a path, or the text) to a cubin, through the disk cache."""
    cuda_src, _ = source_dirs()
    src = resolve_source(source, cuda_src, ".cu")
    target = default_arch(arch)
    prog_name = name or src.name or "kernel.cu"
    local_dirs = [cuda_src] + ([src.path.parent] if src.path else [])
    opts = program_options(target, local_dirs + list(cuda_include_dirs()), defines, options, prog_name)
    flags = tuple(o.decode() for o in opts.as_bytes("nvrtc", "cubin"))
    key = cache.cache_key({
        "kind": "cubin", "source": src.text, "headers": included_headers(src.text, local_dirs, src.path),
        "options": flags, "arch": target.sm, "nvrtc": list(nvrtc_version()), "driver": driver_version_tag(),
    })
    hit = cache.load(key)
    if hit is not None:
        header, code = hit
        return CompiledKernelCode(code, "cubin", target, flags, key, header["log"], prog_name, header["ptx"], True)
    with compile_status(prog_name, target.sm, str(cache.cache_dir()) if cache.cache_enabled() else None):
        code, ptx, log = _nvrtc_cubin(src, opts, target)
    cache.store(key, {"log": log, "ptx": ptx, "arch": target.sm, "name": prog_name}, code)
    _dump(prog_name, key, ptx)
    return CompiledKernelCode(code, "cubin", target, flags, key, log, prog_name, ptx)


def load_ptx(source: str | Path, *, arch: Arch | str | tuple | None = None) -> CompiledKernelCode:
    """Hand-written PTX from ptx/ (or a path or the text), loaded by the driver on the GPU.

    ``arch`` defaults to the PTX's ``.target``; it is what ``assemble_ptx`` checks against and what a
    device must reach to load it.
    """
    _, ptx_dir = source_dirs()
    src = resolve_source(source, ptx_dir, ".ptx")
    targets = ptx_targets(src.text)
    if arch is None and not targets:
        raise CompileError(src.name or "ptx", "the PTX has no .target line, so its architecture is unknown",
                           source=src.text)
    target = Arch.parse(arch if arch is not None else targets[0])
    key = cache.cache_key({"kind": "ptx", "source": src.text, "arch": target.sm})
    return CompiledKernelCode(src.text.encode(), "ptx", target, (), key, "", src.name or "kernel.ptx", src.text)


def assemble_ptx(source: str | Path | CompiledKernelCode, *, arch: Arch | str | tuple | None = None) -> bytes:
    """Run ``ptxas -arch=<arch>`` on the PTX (a CPU-side check of hand-written PTX); returns the cubin."""
    code = source if isinstance(source, CompiledKernelCode) else load_ptx(source, arch=arch)
    target = Arch.parse(arch) if arch is not None else code.arch
    ptxas = shutil.which("ptxas")
    if ptxas is None:
        raise CompileError(code.name, "ptxas was not found on the PATH; install the CUDA toolkit (or put its "
                           "bin/ on the PATH) to assemble PTX without a GPU", source=code.ptx)
    with tempfile.TemporaryDirectory(prefix="tmakit-ptxas-") as tmp:
        ptx_file, out = Path(tmp, Path(code.name).name or "kernel.ptx"), Path(tmp, "out.cubin")
        ptx_file.write_text(code.ptx)
        args = [ptxas, f"-arch={target.sm}", str(ptx_file), "-o", str(out)]
        proc = subprocess.run(args, capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise _compile_error(code.name, proc.stderr or proc.stdout or f"ptxas exited with {proc.returncode}",
                                 args[1:2], code.ptx, target)
        return out.read_bytes()


def is_ptx_text(source: str | Path) -> bool:
    """True for a ``.ptx`` file name/path or PTX text (it has a ``.version`` directive)."""
    text = str(source)
    if isinstance(source, Path) or "\n" not in text:
        return text.endswith(".ptx")
    return re.search(r"^\s*\.version\s", text, re.M) is not None


def load_module(source: str | Path | CompiledKernelCode, *, device: int = 0, arch: Arch | str | tuple | None = None,
                defines: Mapping[str, str | int] | None = None, options: Sequence[str] = ()) -> Any:
    """Compile (through the cache) or read PTX, and load it on ``device`` -> ``Module``."""
    if isinstance(source, CompiledKernelCode):
        return source.load(device)
    if is_ptx_text(source):
        return load_ptx(source, arch=arch).load(device)
    target = default_arch(arch, device) if arch is None else Arch.parse(arch)
    return compile_cuda(source, arch=target, defines=defines, options=options).load(device)
