"""The driver layer: the only importer of ``cuda.bindings.driver`` (besides the tensor-map encoder).

``call(fn, *args)`` is the single chokepoint that turns a ``CUresult`` into ``CudaDriverError``.
Importing this module never touches the driver; the first ``driver()`` does, and a missing driver
or GPU becomes ``UnsupportedDeviceError``.
"""
from __future__ import annotations

import functools
import threading
from typing import Any

from .arch import Arch
from .errors import CudaDriverError, InvalidArgumentError, UnsupportedDeviceError

_lock = threading.Lock()
_initialised = False


@functools.lru_cache(maxsize=1)
def bindings() -> Any:
    """The ``cuda.bindings.driver`` module (no driver call is made)."""
    try:
        from cuda.bindings import driver as drv
    except ImportError as exc:  # pragma: no cover - dependency is declared
        raise UnsupportedDeviceError(f"cuda-python is not installed ({exc}); pip install 'cuda-python>=13'") from exc
    return drv


def _error_text(drv: Any, err: Any) -> tuple[str, str]:
    name, text = getattr(err, "name", str(err)), ""
    try:
        e, s = drv.cuGetErrorString(err)
        if int(e) == 0 and s:
            text = s.decode() if isinstance(s, bytes) else str(s)
    except Exception:  # noqa: BLE001 - naming the error must never raise a second error
        pass
    return name, text or "no description"


_HINTS = {
    "CUDA_ERROR_INVALID_CONTEXT": "no CUDA context is current on this thread; tmakit.use_device(device) makes one current",
    "CUDA_ERROR_NO_DEVICE": "the driver sees no GPU",
    "CUDA_ERROR_OUT_OF_MEMORY": "free memory or ask for less",
}


def check(call: str, result: Any) -> Any:
    """Check a cuda.bindings return tuple ``(CUresult, *values)``; return the values (or the one value)."""
    if isinstance(result, tuple):
        err, values = result[0], result[1:]
    else:
        err, values = result, ()
    code = int(err)
    if code != 0:
        drv = bindings()
        name, text = _error_text(drv, err)
        raise CudaDriverError(call, code, name, text, _HINTS.get(name, ""))
    if not values:
        return None
    return values[0] if len(values) == 1 else values


def call(fn_name: str, *args: Any) -> Any:
    """Call ``cuda.bindings.driver.<fn_name>(*args)`` after making sure the driver is initialised."""
    drv = driver()
    return check(fn_name, getattr(drv, fn_name)(*args))


def driver() -> Any:
    """The initialised driver bindings, or ``UnsupportedDeviceError`` when there is no driver/GPU."""
    global _initialised
    drv = bindings()
    if _initialised:
        return drv
    with _lock:
        if not _initialised:
            try:
                res = drv.cuInit(0)
            except Exception as exc:  # cuda.pathfinder raises when libcuda.so is absent
                raise UnsupportedDeviceError(
                    f"no NVIDIA driver found on this machine ({type(exc).__name__}); "
                    "tmakit can still validate, simulate layouts and compile kernels without one"
                ) from exc
            if int(res[0]) != 0:
                name, text = _error_text(drv, res[0])
                raise UnsupportedDeviceError(f"cuInit failed: {name}: {text}")
            _initialised = True
    return drv


def gpu_available() -> bool:
    """True when a driver is present and reports at least one device. Never raises."""
    try:
        return device_count() > 0
    except Exception:  # noqa: BLE001 - a probe answers yes or no
        return False


@functools.lru_cache(maxsize=1)
def device_count() -> int:
    return int(call("cuDeviceGetCount"))


def driver_version() -> tuple[int, int]:
    v = int(call("cuDriverGetVersion"))
    return v // 1000, (v % 1000) // 10


@functools.lru_cache(maxsize=None)
def device_handle(ordinal: int = 0) -> Any:
    n = device_count()
    if not 0 <= ordinal < n:
        raise UnsupportedDeviceError(f"device={ordinal} does not exist: the driver sees {n} GPU(s)")
    return call("cuDeviceGet", ordinal)


def device_attribute(attr_name: str, ordinal: int = 0) -> int:
    drv = driver()
    attr = getattr(drv.CUdevice_attribute, attr_name)
    return int(call("cuDeviceGetAttribute", attr, device_handle(ordinal)))


@functools.lru_cache(maxsize=None)
def device_arch(ordinal: int = 0) -> Arch:
    major = device_attribute("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR", ordinal)
    minor = device_attribute("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR", ordinal)
    return Arch(major, minor)


def device_name(ordinal: int = 0) -> str:
    raw = call("cuDeviceGetName", 256, device_handle(ordinal))
    return raw.split(b"\0", 1)[0].decode() if isinstance(raw, bytes) else str(raw)


def primary_context(ordinal: int = 0) -> Any:
    """Retain the device's primary context (kept for the process lifetime; never released twice)."""
    return _primary_contexts(ordinal)


@functools.lru_cache(maxsize=None)
def _primary_contexts(ordinal: int) -> Any:
    return call("cuDevicePrimaryCtxRetain", device_handle(ordinal))


@functools.lru_cache(maxsize=None)
def _primary_address(ordinal: int) -> int:
    return int(primary_context(ordinal))


def is_current(ordinal: int) -> bool:
    """Whether the current context is device ``ordinal``'s primary context (one driver call; False when unsure)."""
    result = driver().cuCtxGetCurrent()
    return not result[0] and result[1] is not None and int(result[1]) == _primary_address(ordinal)


def _current_context_of(ordinal: int) -> Any:
    """The current context when it belongs to device ``ordinal``, else None (hot path: one driver call)."""
    err, ctx = driver().cuCtxGetCurrent()
    check("cuCtxGetCurrent", (err,))
    if ctx is not None and int(ctx) != 0 and (int(ctx) == int(primary_context(ordinal))
                                              or int(call("cuCtxGetDevice")) == ordinal):
        return ctx
    return None


def ensure_context(ordinal: int = 0) -> Any:
    """Make a context of device ``ordinal`` current on this thread (its primary one unless the current context
    already belongs to that device); return the current context."""
    ctx = _current_context_of(ordinal)
    if ctx is not None:
        return ctx
    ctx = primary_context(ordinal)
    call("cuCtxSetCurrent", ctx)
    return ctx


class context_for:  # noqa: N801 - used like a function: ``with context_for(device):``
    """Run a block in a context of device ``ordinal`` and restore the caller's current context afterwards.

    When the current context already belongs to the device nothing is pushed; otherwise the primary context
    is pushed and popped, so describing a tensor on another GPU does not change torch's or cupy's device.
    """

    __slots__ = ("ordinal", "pushed")

    def __init__(self, ordinal: int = 0) -> None:
        self.ordinal, self.pushed = ordinal, False

    def __enter__(self) -> "context_for":
        if _current_context_of(self.ordinal) is not None:
            return self
        call("cuCtxPushCurrent", primary_context(self.ordinal))
        self.pushed = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self.pushed:
            call("cuCtxPopCurrent")


def current_device_ordinal() -> int | None:
    """Ordinal of the current context's device, or None when no context is current."""
    ctx = call("cuCtxGetCurrent")
    if ctx is None or int(ctx) == 0:
        return None
    return int(call("cuCtxGetDevice"))


def pointer_device(ptr: int) -> int | None:
    """Device ordinal a device pointer belongs to, or None for host/unknown memory.

    By the pointer's context, matched against the GPUs' primary contexts where there are several: with two H100s,
    cuda-bindings 13.3 answered CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL with 0 for memory of GPU 1."""
    drv = driver()
    attr = drv.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
    err, value = drv.cuPointerGetAttribute(attr, ptr)
    if int(err) != 0:
        return None
    count = device_count()
    if count > 1:
        err, ctx = drv.cuPointerGetAttribute(drv.CUpointer_attribute.CU_POINTER_ATTRIBUTE_CONTEXT, ptr)
        if int(err) == 0 and ctx is not None and int(ctx):
            for ordinal in range(count):
                if int(ctx) == _primary_address(ordinal):
                    return ordinal
    return int(value)


def make_current(device: int) -> None:
    """Make the device's primary context current unless a context of that device already is."""
    if current_device_ordinal() != device:
        call("cuCtxSetCurrent", primary_context(device))


@functools.lru_cache(maxsize=None)
def enable_peer_access(device: int, peer: int) -> None:
    """Let kernels (and TMA) on ``device`` read and write ``peer``'s memory: checked with cuDeviceCanAccessPeer,
    then enabled from ``device``'s primary context (once per pair and process; already enabled is fine)."""
    count = device_count()
    for name, ordinal in (("device", device), ("peer", peer)):
        if not 0 <= ordinal < count:
            raise InvalidArgumentError(name, ordinal, f"is not a GPU here ({count} visible)",
                                       f"pass a device ordinal in 0..{count - 1}")
    if not int(call("cuDeviceCanAccessPeer", device_handle(device), device_handle(peer))):
        raise UnsupportedDeviceError(f"GPU {device} ({device_name(device)}) cannot access GPU {peer}'s memory "
                                     f"({device_name(peer)}): no peer path between them (NVLink or PCIe P2P), or "
                                     "peer access is disabled", required="peer access", actual="none")
    with context_for(device):
        err = driver().cuCtxEnablePeerAccess(primary_context(peer), 0)
        code = err[0] if isinstance(err, tuple) else err
        if int(code) != 0 and getattr(code, "name", "") != "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED":
            check("cuCtxEnablePeerAccess", (code,))
