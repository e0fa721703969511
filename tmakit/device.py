"""The one home for device limits: ``device_limits(device)`` reads a GPU through cuda.core's ``Device(ordinal)
.properties``; ``device_limits(arch="sm_90")`` answers from a planning table, with no GPU.

The table holds what the compute capability fixes (CUDA C++ Programming Guide, "Technical Specifications per
Compute Capability": shared memory per block and per SM, threads, registers; TMA and clusters from sm_90,
cp.async from sm_80). What differs between products of one architecture (SM count, L2 size, memory) is None
there: a plan that needs it needs the GPU. ``DeviceLimits.source`` says which of the two answered.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import _driver
from .arch import Arch
from .errors import InvalidArgumentError, UnsupportedDeviceError


@dataclass(frozen=True)
class DeviceLimits:
    """What a kernel plan asks of a GPU. Sizes are bytes; ``None``: not known without the GPU itself."""

    name: str
    arch: Arch  # compute capability (no "a" suffix: that belongs to a compile target)
    source: str  # "driver" (read from this GPU) or "table" (the planning table, no GPU)
    ordinal: int | None  # the CUDA device ordinal; None for the table
    sm_count: int | None
    smem_per_block: int  # dynamic + static shared memory a block gets without opting in
    smem_per_block_optin: int  # the most a block may opt into (cuFuncSetAttribute)
    smem_per_sm: int
    l2_bytes: int | None
    memory_bytes: int | None
    max_threads_per_block: int
    max_threads_per_sm: int
    registers_per_sm: int
    warp_size: int
    tma: bool  # tensor maps (cp.async.bulk.tensor): sm_90+
    clusters: bool  # thread-block clusters (multicast, distributed shared memory): sm_90+

    @property
    def cp_async(self) -> bool:
        """cp.async (commit_group / wait_group): sm_80+."""
        return self.arch.has_cp_async

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arch": self.arch.sm, "source": self.source, "ordinal": self.ordinal,
                "sm_count": self.sm_count, "smem_per_block": self.smem_per_block,
                "smem_per_block_optin": self.smem_per_block_optin, "smem_per_sm": self.smem_per_sm,
                "l2_bytes": self.l2_bytes, "memory_bytes": self.memory_bytes,
                "max_threads_per_block": self.max_threads_per_block, "max_threads_per_sm": self.max_threads_per_sm,
                "registers_per_sm": self.registers_per_sm, "warp_size": self.warp_size, "tma": self.tma,
                "cp_async": self.cp_async, "clusters": self.clusters}


KIB = 1024
# (major, minor) -> (shared memory per SM, opt-in per block, threads per SM), from the programming guide's table
_TABLE = {
    (7, 0): (96 * KIB, 96 * KIB, 2048), (7, 5): (64 * KIB, 64 * KIB, 1024),
    (8, 0): (164 * KIB, 163 * KIB, 2048), (8, 6): (100 * KIB, 99 * KIB, 1536), (8, 7): (164 * KIB, 163 * KIB, 1536),
    (8, 9): (100 * KIB, 99 * KIB, 1536), (9, 0): (228 * KIB, 227 * KIB, 2048), (10, 0): (228 * KIB, 227 * KIB, 2048),
    (12, 0): (100 * KIB, 99 * KIB, 1536),
}


RESERVED_SMEM_PER_BLOCK = 1024  # shared memory the driver reserves for each resident block (sm_80 and later)


def blocks_per_sm(shared_mem: int, per_sm: int) -> int:
    """Blocks of ``shared_mem`` dynamic shared memory bytes an SM of ``per_sm`` bytes (``smem_per_sm``) holds at
    once: each takes RESERVED_SMEM_PER_BLOCK more."""
    return per_sm // (shared_mem + RESERVED_SMEM_PER_BLOCK)


def planning_architectures() -> list[str]:
    """The architectures the planning table knows (``device_limits(arch=...)``)."""
    return [Arch(*key).sm for key in sorted(_TABLE)]


def _table(arch: Arch) -> DeviceLimits:
    entry = _TABLE.get((arch.major, arch.minor))
    if entry is None:
        raise InvalidArgumentError("arch", arch.sm, "has no entry in tmakit's planning table",
                                   f"plan on a GPU of that architecture (device_limits(device)) or use one of "
                                   f"{', '.join(planning_architectures())}")
    per_sm, optin, threads = entry
    cc = Arch(arch.major, arch.minor)
    return DeviceLimits(f"{cc.sm} (planning table)", cc, "table",
                        None, None, 48 * KIB, optin, per_sm, None, None, 1024, threads, 64 * KIB, 32,
                        arch.has_tma, arch.major >= 9)


def _read_device(ordinal: int) -> DeviceLimits:
    """Every limit of GPU ``ordinal``, from cuda.core's ``Device(ordinal).properties`` (tests replace this one
    function to stand in for a GPU)."""
    try:
        count = _driver.device_count()
    except UnsupportedDeviceError as exc:
        raise UnsupportedDeviceError(f"{exc}; device_limits(arch='sm_90') answers from the planning table "
                                     "without a GPU") from exc
    if not 0 <= ordinal < count:
        raise UnsupportedDeviceError(f"device={ordinal} does not exist: the driver sees {count} GPU(s)")
    memory = int(_driver.call("cuDeviceTotalMem", _driver.device_handle(ordinal)))
    from cuda.core import Device

    try:
        dev = Device(ordinal)
        p = dev.properties
        cc = dev.compute_capability
        return DeviceLimits(
            dev.name, Arch(int(cc.major), int(cc.minor)), "driver", ordinal, p.multiprocessor_count,
            p.max_shared_memory_per_block, p.max_shared_memory_per_block_optin,
            p.max_shared_memory_per_multiprocessor, p.l2_cache_size, memory, p.max_threads_per_block,
            p.max_threads_per_multiprocessor, p.max_registers_per_multiprocessor, p.warp_size,
            bool(p.tensor_map_access_supported), bool(p.cluster_launch))
    except Exception as exc:  # cuda.core's own errors become the one tmakit error for "cannot read this GPU"
        raise UnsupportedDeviceError(f"cuda.core could not read device {ordinal}'s properties: "
                                     f"{type(exc).__name__}: {exc}") from exc


def device_limits(device: int | None = None, *, arch: Any = None) -> DeviceLimits:
    """The limits of GPU ``device`` (read from the driver), or, with ``arch=`` and no device, the planning
    table's for that architecture (no GPU needed). ``device_limits()`` is GPU 0.

    With both, the GPU is read and must be of that architecture."""
    if device is not None and (isinstance(device, bool) or not hasattr(device, "__index__") or int(device) < 0):
        raise InvalidArgumentError("device", device, "must be a device ordinal (an int >= 0) or None",
                                   "pass device=0, or arch='sm_90' to plan without a GPU")
    wanted = Arch.parse(arch) if arch is not None else None
    if device is None and wanted is not None:
        return _table(wanted)
    limits = _read_device(int(device or 0))
    if wanted is not None and (wanted.major, wanted.minor) != (limits.arch.major, limits.arch.minor):
        raise InvalidArgumentError("arch", wanted.sm, f"does not match device {limits.ordinal} ({limits.name}, "
                                   f"{limits.arch.sm})", "leave arch out to read the GPU, or pass device=None to plan")
    return limits


def plan_limits(arch: Any, device: int | None) -> DeviceLimits:
    """The limits a plan for ``arch`` on GPU ``device`` works within: the GPU's where one is present, else the
    architecture's from the planning table (the ops plan without a GPU as ``describe_*`` do)."""
    return device_limits(device if _driver.gpu_available() else None, arch=arch)


def shared_mem_limit(arch: Any, device: int | None) -> int:
    """Bytes of dynamic shared memory a block may opt into (``plan_limits``)."""
    return plan_limits(arch, device).smem_per_block_optin


__all__ = ["DeviceLimits", "RESERVED_SMEM_PER_BLOCK", "blocks_per_sm", "device_limits", "plan_limits",
           "planning_architectures", "shared_mem_limit"]
