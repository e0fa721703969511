"""tmakit.device_limits: the planning table (no GPU), the GPU read through cuda.core (checked against the
driver's own attributes on the device), and the one home for device limits (no other module names a device
attribute)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from _fake_driver import fake_h100
import tmakit
from tmakit import Arch, DeviceLimits, InvalidArgumentError, UnsupportedDeviceError, device_limits

PACKAGE = Path(tmakit.__file__).resolve().parent


@pytest.mark.parametrize("arch, optin, per_sm, tma", [("sm_80", 163 * 1024, 164 * 1024, False),
                                                     ("sm_86", 99 * 1024, 100 * 1024, False),
                                                     ("sm_89", 99 * 1024, 100 * 1024, False),
                                                     ("sm_90a", 227 * 1024, 228 * 1024, True),
                                                     ("sm_100", 227 * 1024, 228 * 1024, True)])
def test_the_planning_table_answers_without_a_gpu(arch, optin, per_sm, tma):
    limits = device_limits(arch=arch)
    assert isinstance(limits, DeviceLimits) and limits.source == "table" and limits.ordinal is None
    assert limits.arch == Arch(int(arch[3:-1] if arch.endswith("a") else arch[3:]) // 10,
                               int(arch[3:-1] if arch.endswith("a") else arch[3:]) % 10)
    assert (limits.smem_per_block_optin, limits.smem_per_sm, limits.tma, limits.clusters) == (optin, per_sm, tma, tma)
    assert limits.cp_async and limits.smem_per_block == 48 * 1024 and limits.warp_size == 32
    # what differs between products of one architecture is not guessed
    assert limits.sm_count is None and limits.l2_bytes is None and limits.memory_bytes is None
    assert limits.as_dict()["arch"] == limits.arch.sm and limits.as_dict()["cp_async"] is True


def test_the_table_refuses_an_architecture_it_does_not_know():
    with pytest.raises(InvalidArgumentError, match=r"arch='sm_53': has no entry in tmakit's planning table.*sm_90"):
        device_limits(arch="sm_53")
    with pytest.raises(InvalidArgumentError, match="is not a compute capability"):
        device_limits(arch="hopper")


@pytest.mark.parametrize("device", [-1, True, 1.5, "0"])
def test_a_bad_device_is_refused(device):
    with pytest.raises(InvalidArgumentError, match=r"device=.*must be a device ordinal"):
        device_limits(device)


def test_without_a_gpu_the_error_names_the_planning_table(monkeypatch):
    from tmakit import _driver

    def no_driver():
        raise UnsupportedDeviceError("no NVIDIA driver found on this machine")

    _driver.device_count.cache_clear()
    monkeypatch.setattr(_driver, "driver", no_driver)
    try:
        with pytest.raises(UnsupportedDeviceError, match=r"no NVIDIA driver.*device_limits\(arch='sm_90'\)"):
            device_limits(0)
    finally:
        _driver.device_count.cache_clear()


def test_a_gpu_stand_in_and_the_arch_check(monkeypatch):
    fake_h100(monkeypatch)
    limits = device_limits(0)
    assert (limits.source, limits.ordinal, limits.sm_count, limits.arch) == ("driver", 0, 132, Arch(9, 0))
    assert device_limits(0, arch="sm_90a") == limits
    with pytest.raises(InvalidArgumentError, match=r"arch='sm_80': does not match device 0 \(fake H100, sm_90\)"):
        device_limits(0, arch="sm_80")


def test_the_ops_plan_with_the_table_without_a_gpu():
    import importlib

    gemm, attention = (importlib.import_module(f"tmakit.ops.{m}") for m in ("gemm", "attention"))
    device = importlib.import_module("tmakit.device")
    # one home: the ops' planning limit is tmakit.device's
    assert gemm.shared_mem_limit is attention.shared_mem_limit is device.shared_mem_limit
    assert device.shared_mem_limit(Arch(8, 6), None) == 99 * 1024
    assert device.shared_mem_limit(Arch(9, 0), None) == device_limits(arch="sm_90").smem_per_block_optin
    assert device.plan_limits(Arch(9, 0), None) == device_limits(arch="sm_90")


def _strings(path: Path) -> set[str]:
    return {n.value for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Constant)
            and isinstance(n.value, str)}


def test_one_home_for_device_limits():
    """Only the driver layer (compute capability, for loading code) and tmakit/device.py name a device
    attribute; no per-architecture table lives anywhere else."""
    named = {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
             if any("CU_DEVICE_ATTRIBUTE" in s for s in _strings(p))}
    assert named <= {"_driver.py"}, sorted(named)
    tables = {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if "_SMEM_OPTIN" in p.read_text()}
    assert tables == set(), sorted(tables)
    users = {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if "device_attribute(" in p.read_text()}
    assert users <= {"_driver.py"}, sorted(users)


@pytest.mark.requires_gpu
def test_the_gpu_read_agrees_with_the_driver():
    from cuda.bindings import driver as drv

    limits = device_limits(0)

    def attribute(name: str) -> int:
        err, value = drv.cuDeviceGetAttribute(getattr(drv.CUdevice_attribute, name), 0)
        assert int(err) == 0
        return int(value)

    assert limits.source == "driver" and limits.ordinal == 0 and limits.name
    assert (limits.arch.major, limits.arch.minor) == (attribute("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR"),
                                                      attribute("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR"))
    assert limits.sm_count == attribute("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT") > 0
    assert limits.smem_per_block_optin == attribute("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN")
    assert limits.l2_bytes == attribute("CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE") > 0
    assert limits.tma == limits.arch.has_tma and limits.memory_bytes > 0
    table = device_limits(arch=limits.arch)  # the planning table agrees with the GPU on what the arch fixes
    fixed = ("smem_per_block", "smem_per_block_optin", "smem_per_sm", "max_threads_per_block", "max_threads_per_sm",
             "registers_per_sm", "warp_size", "tma", "clusters")
    assert {f: getattr(table, f) for f in fixed} == {f: getattr(limits, f) for f in fixed}
