"""Page-locked (pinned) host memory as numpy arrays.

``pinned_empty`` returns a numpy array whose ``.base`` is the ``PinnedBuffer`` owning the ``cuMemHostAlloc``
allocation (PyCUDA's ``pagelocked_empty`` idea): the memory lives as long as any view of it, and is freed
exactly once, by ``close()`` or by garbage collection. ``close()`` first waits for the async copies that
used the buffer (tmakit.streams records an event after each one), and any later use through tmakit raises.
Do not touch a numpy view after ``close()``: like any freed memory it no longer belongs to you.

``registered(array)`` page-locks an existing numpy array for the length of a ``with`` block.
cuda.core's pinned memory resources allocate from a pool without the portable/mapped/write-combined
flags, which is why this module talks to the driver directly.
"""
from __future__ import annotations

import contextlib
import math
import threading
import weakref
from typing import Any, Iterator, Sequence

import numpy as np

from . import _driver
from ._accounting import LiveCounter
from ._sequences import is_sequence
from .errors import InvalidArgumentError
from .streams import use_device

# cuMemHostAlloc / cuMemHostRegister flags (stable ABI values)
_ALLOC_PORTABLE, _ALLOC_DEVICEMAP, _ALLOC_WRITECOMBINED = 1, 2, 4
_REGISTER_PORTABLE, _REGISTER_DEVICEMAP = 1, 2

_live = LiveCounter()


def live_pinned() -> tuple[int, int]:
    """(allocations, bytes) of pinned memory tmakit holds now: the leak test's yardstick."""
    return _live.snapshot()


_account = _live.add

def _free_pinned(ctx: Any, ptr: int, nbytes: int, unregister: bool) -> None:
    """Finalizer body: free or unregister once, in the allocating context. Never raises."""
    try:
        _driver.call("cuCtxPushCurrent", ctx)
        try:
            _driver.call("cuMemHostUnregister" if unregister else "cuMemFreeHost", ptr)
        finally:
            _driver.call("cuCtxPopCurrent")
    except Exception:  # noqa: BLE001 - a finalizer must not raise (interpreter exit, GC thread)
        pass
    finally:
        _account(-1, -nbytes)


class _UseTracker:
    """A memory resource freed by ``self._finalizer`` (a weakref.finalize): ``close()`` first waits for the
    async work that used it (the events noted by ``_note_use``), then frees it, once."""

    _finalizer: Any

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def close(self) -> None:
        """Free now, after waiting for async copies that use it. Idempotent."""
        if not self.closed:
            self._wait_for_uses()
            self._before_free()
            self._finalizer()

    def _before_free(self) -> None:
        """Hook: bookkeeping to drop before the memory goes."""

    def __init__(self) -> None:
        self._events: list[Any] = []
        self._uses_lock = threading.Lock()  # copies from several threads must not lose an event

    def _note_use(self, event: Any) -> None:
        with self._uses_lock:
            self._events = [e for e in self._events if not e.closed and not e.query()] + [event]

    def _wait_for_uses(self) -> None:
        with self._uses_lock:
            events, self._events = self._events, []
        for event in events:
            if not event.closed:
                event.sync()


class PinnedBuffer(_UseTracker):
    """Owns one page-locked allocation; numpy arrays made by ``pinned_empty`` have it as ``.base``."""

    def __init__(self, nbytes: int, *, portable: bool = False, mapped: bool = False, write_combined: bool = False,
                 device: int = 0):
        super().__init__()
        self.nbytes = int(nbytes)
        self._shape, self._dtype = (self.nbytes,), np.dtype(np.uint8)  # what np.asarray(buffer) shows
        self.portable, self.mapped, self.write_combined, self.device = portable, mapped, write_combined, device
        flags = ((_ALLOC_PORTABLE if portable else 0) | (_ALLOC_DEVICEMAP if mapped else 0)
                 | (_ALLOC_WRITECOMBINED if write_combined else 0))
        ctx = use_device(device)
        # one byte at least: numpy needs a real address even for empty arrays
        self.ptr = int(_driver.call("cuMemHostAlloc", max(1, self.nbytes), flags))
        _account(1, self.nbytes)
        self._finalizer = weakref.finalize(self, _free_pinned, ctx, self.ptr, self.nbytes, False)

    @property
    def __array_interface__(self) -> dict:
        if self.closed:
            raise InvalidArgumentError("buffer", self, "was freed", "allocate a new one with tmakit.pinned_empty")
        return {"shape": self._shape, "typestr": self._dtype.str, "descr": self._dtype.descr,
                "data": (self.ptr, False), "version": 3}

    @property
    def device_pointer(self) -> int:
        """The device address of a ``mapped=True`` buffer (zero-copy access from kernels)."""
        if not self.mapped:
            raise InvalidArgumentError("buffer", self, "was not allocated with mapped=True",
                                       "use tmakit.pinned_empty(..., mapped=True)")
        return int(_driver.call("cuMemHostGetDevicePointer", self.ptr, 0))

    def __enter__(self) -> "PinnedBuffer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        flags = [n for n, on in (("portable", self.portable), ("mapped", self.mapped),
                                 ("write_combined", self.write_combined)) if on]
        state = "freed" if self.closed else f"ptr={self.ptr:#x}"
        return f"tmakit.PinnedBuffer({self.nbytes} bytes, {state}{', ' + ', '.join(flags) if flags else ''})"


def _normalize(shape: Any, dtype: Any) -> tuple[tuple[int, ...], np.dtype]:
    dims = (shape,) if isinstance(shape, (int, np.integer)) else shape
    if is_sequence(dims):
        dims = tuple(dims)  # a generator is read once
    if not is_sequence(dims) or not all(
            isinstance(d, (int, np.integer)) and not isinstance(d, bool) for d in dims):
        raise InvalidArgumentError("shape", shape, "must be an int or a sequence of ints", "e.g. (1024, 1024)")
    dims = tuple(int(d) for d in dims)
    if any(d < 0 for d in dims):
        raise InvalidArgumentError("shape", shape, "has a negative dimension", "use sizes >= 0")
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise InvalidArgumentError("dtype", dtype, "is not a numpy dtype", 'use e.g. "float32" or numpy.float32') from None
    if dt.hasobject:
        raise InvalidArgumentError("dtype", dtype, "holds Python objects, which cannot live in pinned memory",
                                   "use a numeric dtype")
    nbytes = math.prod(dims) * dt.itemsize  # Python ints: (2**64, 2) is refused here, not an OverflowError
    if nbytes >= 1 << 47:
        raise InvalidArgumentError("shape", shape, f"needs {nbytes} bytes, more than 2^47 (no memory holds that)",
                                   "allocate a smaller buffer (split the work into chunks)")
    return dims, dt


def pinned_empty(shape: int | Sequence[int], dtype: Any = np.float32, *, portable: bool = False,
                 mapped: bool = False, write_combined: bool = False, device: int = 0) -> np.ndarray:
    """An uninitialised C-contiguous numpy array in page-locked memory; ``.base`` is its ``PinnedBuffer``.

    portable: pinned for every context, not only ``device``'s. mapped: also addressable from kernels
    (``arr.base.device_pointer``). write_combined: faster host->device over PCIe, very slow host reads.
    """
    dims, dt = _normalize(shape, dtype)
    nbytes = math.prod(dims) * dt.itemsize
    for name, flag in (("portable", portable), ("mapped", mapped), ("write_combined", write_combined)):
        if not isinstance(flag, (bool, np.bool_)):
            raise InvalidArgumentError(name, flag, "must be True or False", f"pass {name}=True or {name}=False")
    if isinstance(device, (bool, np.bool_)) or not hasattr(device, "__index__") or int(device) < 0:
        raise InvalidArgumentError("device", device, "must be a device ordinal (an int >= 0)", "pass device=0")
    buf = PinnedBuffer(nbytes, portable=portable, mapped=mapped, write_combined=write_combined, device=device)
    buf._shape, buf._dtype = dims, dt
    return np.asarray(buf)  # .base is `buf`; views chain back to it (host_owner follows the chain)


def pinned_like(array: np.ndarray, *, copy: bool = False, **flags: Any) -> np.ndarray:
    """A pinned array with ``array``'s shape and dtype; ``copy=True`` also copies its contents."""
    if not isinstance(array, np.ndarray):
        raise InvalidArgumentError("array", type(array).__name__, "must be a numpy array", "pass numpy.asarray(x)")
    if not isinstance(copy, (bool, np.bool_)):
        raise InvalidArgumentError("copy", copy, "must be True or False", "pass copy=True to copy the contents")
    unknown = set(flags) - {"portable", "mapped", "write_combined", "device"}
    if unknown:
        raise InvalidArgumentError(sorted(unknown)[0], flags[sorted(unknown)[0]], "is not a pinned_like option",
                                   "use portable=, mapped=, write_combined= or device=")
    out = pinned_empty(array.shape, array.dtype, **flags)
    if copy:
        np.copyto(out, array)
    return out


# ---------------------------------------------------------------- registering existing arrays
class Registration(_UseTracker):
    """An existing numpy array page-locked with ``cuMemHostRegister`` (see ``registered``)."""

    def __init__(self, array: np.ndarray, *, portable: bool, mapped: bool, device: int):
        super().__init__()
        self.array, self.ptr, self.nbytes = array, int(array.ctypes.data), int(array.nbytes)
        ctx = use_device(device)
        flags = (_REGISTER_PORTABLE if portable else 0) | (_REGISTER_DEVICEMAP if mapped else 0)
        _driver.call("cuMemHostRegister", self.ptr, self.nbytes, flags)
        _account(1, self.nbytes)
        self._finalizer = weakref.finalize(self, _free_pinned, ctx, self.ptr, self.nbytes, True)

    def _before_free(self) -> None:
        with _reg_lock:
            _registrations.pop(self.ptr, None)


_reg_lock = threading.Lock()
_registrations: dict[int, Registration] = {}


@contextlib.contextmanager
def registered(array: np.ndarray, *, portable: bool = False, mapped: bool = False, device: int = 0) -> Iterator[np.ndarray]:
    """Page-lock ``array`` for the ``with`` block (async copies from it then run at pinned speed).

    On exit waits for tmakit's async copies that used it, then unregisters.
    """
    if not isinstance(array, np.ndarray):
        raise InvalidArgumentError("array", type(array).__name__, "must be a numpy array", "pass numpy.asarray(x)")
    if not array.flags.c_contiguous:
        raise InvalidArgumentError("array", f"array with strides {array.strides}", "must be C-contiguous to be registered",
                                   "register numpy.ascontiguousarray(a) instead")
    if array.nbytes == 0:
        raise InvalidArgumentError("array", f"shape {array.shape}", "is empty; the driver cannot register 0 bytes",
                                   "skip registering empty arrays")
    if host_owner(array) is not None:
        raise InvalidArgumentError("array", f"array at {array.ctypes.data:#x}", "is already pinned or registered",
                                   "use it as it is; it is already page-locked")
    reg = Registration(array, portable=portable, mapped=mapped, device=device)
    with _reg_lock:
        _registrations[reg.ptr] = reg
    try:
        yield array
    finally:
        reg.close()


def host_owner(array: np.ndarray, parameter: str = "array") -> PinnedBuffer | Registration | None:
    """The PinnedBuffer or Registration holding ``array``'s memory, None for pageable memory.

    Raises when the array's pinned buffer was freed: using it would read freed memory.
    """
    if not isinstance(array, np.ndarray):
        raise InvalidArgumentError(parameter, array if isinstance(array, (int, float, str, bytes, type(None))) else
                                   type(array).__name__, "must be a numpy array (host memory)",
                                   "pass a numpy array, e.g. one from tmakit.pinned_empty(...)")
    base: Any = array
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    if isinstance(base, PinnedBuffer):
        if base.closed:
            raise InvalidArgumentError(parameter, base, "is a view of a pinned buffer that was already freed",
                                       "keep the buffer open until its last use, or allocate a new one")
        return base
    if _registrations:
        start = int(array.ctypes.data)
        with _reg_lock:
            for reg in _registrations.values():
                if reg.ptr <= start and start + array.nbytes <= reg.ptr + reg.nbytes:
                    return reg
    return None


def is_pinned(array: np.ndarray) -> bool:
    """True when ``array`` lives in tmakit pinned memory (allocated or registered, still open)."""
    return host_owner(array) is not None
