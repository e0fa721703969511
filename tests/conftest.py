"""One place that probes the GPU once and turns capability markers into skips with reasons.

Markers: requires_gpu, requires_sm90 (TMA), requires_sm80 (cp.async). A skipped test is reported as
skipped, never as passed. On a machine meant to run them, ``TMAKIT_TEST_REQUIRE_GPU=1`` (or ``=sm_90``) turns
those skips into an error: a broken driver then fails the run instead of skipping every GPU test.
tests/test_suite_rules.py keeps the tests honest (no early return, every skip with a reason, known markers).
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class GpuProbe:
    available: bool
    reason: str
    major: int = 0
    minor: int = 0
    name: str = ""


def _probe() -> GpuProbe:
    if os.environ.get("TMAKIT_TEST_NO_GPU"):
        return GpuProbe(False, "TMAKIT_TEST_NO_GPU is set")
    try:
        from tmakit import _driver

        if _driver.device_count() == 0:
            return GpuProbe(False, "the CUDA driver reports no GPU")
        arch = _driver.device_arch(0)
        return GpuProbe(True, "", arch.major, arch.minor, _driver.device_name(0))
    except Exception as exc:  # noqa: BLE001 - any failure means "no GPU here", with the reason
        return GpuProbe(False, f"no usable CUDA GPU: {type(exc).__name__}: {str(exc).splitlines()[0]}")


_PROBE: GpuProbe | None = None


def gpu_probe() -> GpuProbe:
    global _PROBE
    if _PROBE is None:
        _PROBE = _probe()
    return _PROBE


@pytest.fixture(scope="session")
def gpu() -> GpuProbe:
    return gpu_probe()


def _required_gpu(probe: GpuProbe) -> None:
    """With TMAKIT_TEST_REQUIRE_GPU set, a GPU (of at least that arch) must be here: no GPU test may skip."""
    want = os.environ.get("TMAKIT_TEST_REQUIRE_GPU", "")
    if not want or want == "0":
        return
    major = int(want[3:4]) if want.startswith("sm_") and want[3:4].isdigit() else 0
    if not probe.available or probe.major < major:
        have = f"{probe.name} (sm_{probe.major}{probe.minor})" if probe.available else probe.reason
        raise pytest.UsageError(f"TMAKIT_TEST_REQUIRE_GPU={want}, but {have}: the GPU tests would all skip")


def _gpu_count() -> int:
    from tmakit import _driver

    return _driver.device_count()


def pytest_collection_modifyitems(config, items):
    probe = None
    for item in items:
        needs = {m.name for m in item.iter_markers()} & {"requires_gpu", "requires_sm90", "requires_sm80",
                                                          "requires_2gpus"}
        if not needs:
            continue
        if probe is None:
            probe = gpu_probe()
            _required_gpu(probe)
        if not probe.available:
            item.add_marker(pytest.mark.skip(reason=f"requires a GPU: {probe.reason}"))
        elif "requires_sm90" in needs and probe.major < 9:
            item.add_marker(pytest.mark.skip(reason=f"requires sm_90 (TMA); {probe.name} is sm_{probe.major}{probe.minor}"))
        elif "requires_sm80" in needs and probe.major < 8:
            item.add_marker(pytest.mark.skip(reason=f"requires sm_80 (cp.async); {probe.name} is sm_{probe.major}{probe.minor}"))
        elif "requires_2gpus" in needs and _gpu_count() < 2:
            if int(os.environ.get("TMAKIT_TEST_REQUIRE_GPUS", "1") or "1") >= 2:
                raise pytest.UsageError(f"TMAKIT_TEST_REQUIRE_GPUS=2, but {_gpu_count()} GPU(s) here")
            item.add_marker(pytest.mark.skip(reason=f"requires 2 GPUs; {_gpu_count()} here"))


@pytest.fixture(scope="session")
def built_wheel(tmp_path_factory):
    """tmakit's wheel, built once per session: with this environment's setuptools where it is new enough (no
    package index needed, as on a GPU machine without network), else in pip's isolated build environment."""
    import subprocess
    import sys
    from pathlib import Path

    folder, root, errors = tmp_path_factory.mktemp("dist"), Path(__file__).resolve().parents[1], []
    # built from a copy: setuptools writes build/ and *.egg-info into the tree it builds, which the xdist workers
    # would share (a wheel built beside another worker's build then failed to import)
    source = tmp_path_factory.mktemp("source") / "tmakit"

    def ignore(folder: str, names: list[str]) -> list[str]:  # build/ and dist/ at the top only: tmakit/build is a package
        top = Path(folder) == root
        return [n for n in names if (top and (n.startswith(".") or n in ("build", "dist"))) or n == "__pycache__"
                or n.endswith(".egg-info")]

    shutil.copytree(root, source, ignore=ignore)
    for isolation in (["--no-build-isolation"], []):
        done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *isolation, "-w", str(folder),
                               str(source)], capture_output=True, text=True, timeout=600)
        wheels = sorted(folder.glob("tmakit-*.whl"))
        if done.returncode == 0 and wheels:
            return wheels[-1]
        errors.append(done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"])
    pytest.skip(f"could not build tmakit's wheel here (setuptools>=77 or a package index is needed): {errors}")


def have_tool(name: str) -> bool:
    return shutil.which(name) is not None


requires_ptxas = pytest.mark.skipif(not have_tool("ptxas"), reason="ptxas is not on the PATH")
