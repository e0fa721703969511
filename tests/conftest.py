"""One place that probes the GPU once and turns capability markers into skips with reasons.

Markers: requires_gpu, requires_sm90 (TMA), requires_sm80 (cp.async). A skipped test is reported as
skipped, never as passed.
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


def pytest_collection_modifyitems(config, items):
    probe = None
    for item in items:
        needs = {m.name for m in item.iter_markers()} & {"requires_gpu", "requires_sm90", "requires_sm80"}
        if not needs:
            continue
        probe = probe or gpu_probe()
        if not probe.available:
            item.add_marker(pytest.mark.skip(reason=f"requires a GPU: {probe.reason}"))
        elif "requires_sm90" in needs and probe.major < 9:
            item.add_marker(pytest.mark.skip(reason=f"requires sm_90 (TMA); {probe.name} is sm_{probe.major}{probe.minor}"))
        elif "requires_sm80" in needs and probe.major < 8:
            item.add_marker(pytest.mark.skip(reason=f"requires sm_80 (cp.async); {probe.name} is sm_{probe.major}{probe.minor}"))


def have_tool(name: str) -> bool:
    return shutil.which(name) is not None


requires_ptxas = pytest.mark.skipif(not have_tool("ptxas"), reason="ptxas is not on the PATH")
