"""``DeviceArray``: a small typed, strided device array for users without torch or cupy.

It owns (or views) one ``cuMemAlloc`` allocation, speaks ``__cuda_array_interface__`` v3 and DLPack (so
torch.from_dlpack / cupy.asarray / tmakit.arrays.device_array_view take it), and copies to and from numpy.
Views (``a[2:, ::2]``, ``reshape``) share the allocation; closing the owner frees it once and invalidates
every view. Indexing borrows numpy's rules by indexing a zero-byte stand-in with the same strides.
"""
from __future__ import annotations

import ctypes
import threading
import weakref
from typing import Any, Sequence

import numpy as np

from . import _driver
from ._accounting import LiveCounter
from .arrays import _DLDataType, _DLDevice, _DLTensor, _c_strides, is_c_contiguous
from .errors import InvalidArgumentError
from .memory import _normalize, _UseTracker
from .copies import copy_d2h, copy_h2d, keep_alive
from .streams import as_stream, use_device

_live = LiveCounter()


def live_device() -> tuple[int, int]:
    """(allocations, bytes) of device memory DeviceArrays hold now: the leak test's yardstick."""
    return _live.snapshot()


_account = _live.add

def _free_device(ctx: Any, ptr: int, nbytes: int) -> None:
    """Finalizer body: cuMemFree once, in the allocating context. Never raises."""
    try:
        if ptr:
            _driver.call("cuCtxPushCurrent", ctx)
            try:
                _driver.call("cuMemFree", ptr)
            finally:
                _driver.call("cuCtxPopCurrent")
    except Exception:  # noqa: BLE001 - a finalizer must not raise
        pass
    finally:
        _account(-1, -nbytes)


class _Allocation(_UseTracker):
    """One device allocation shared by an array and its views."""

    def __init__(self, nbytes: int, device: int):
        super().__init__()
        ctx = use_device(device)
        self.nbytes, self.device = nbytes, device
        self.ptr = int(_driver.call("cuMemAlloc", nbytes)) if nbytes else 0  # cuMemAlloc(0) is an error
        _account(1, nbytes)
        self._finalizer = weakref.finalize(self, _free_device, ctx, self.ptr, nbytes)


class DeviceArray:
    """A strided view of device memory: ``shape``, ``dtype``, ``strides`` (bytes), ``device``, ``ptr``."""

    def __init__(self, alloc: _Allocation, shape: tuple[int, ...], dtype: np.dtype, strides: tuple[int, ...],
                 offset: int = 0):
        self._alloc, self.shape, self.dtype, self.strides, self._offset = alloc, shape, dtype, strides, offset

    # ---- construction
    @classmethod
    def empty(cls, shape: int | Sequence[int], dtype: Any = np.float32, *, device: int = 0) -> "DeviceArray":
        dims, dt = _normalize(shape, dtype)
        nbytes = int(np.prod(dims, dtype=np.int64)) * dt.itemsize
        return cls(_Allocation(nbytes, int(device)), dims, dt, _c_strides(dims, dt.itemsize))

    @classmethod
    def zeros(cls, shape: int | Sequence[int], dtype: Any = np.float32, *, device: int = 0,
              stream: Any = None) -> "DeviceArray":
        out = cls.empty(shape, dtype, device=device)
        out.fill(0, stream=stream)
        return out

    @classmethod
    def from_host(cls, array: Any, *, device: int = 0, stream: Any = None) -> "DeviceArray":
        """Copy a numpy array to a new device array. Synchronous unless ``stream`` is given."""
        host = np.ascontiguousarray(array)
        out = cls.empty(host.shape, host.dtype, device=device)
        s = as_stream(stream, device=device)
        copy_h2d(out, host, s)
        if stream is None:
            s.sync()
        return out

    def to_host(self, out: np.ndarray | None = None, *, stream: Any = None) -> np.ndarray:
        """Copy to numpy. Synchronous unless ``stream`` is given (then ``out`` is valid after a sync)."""
        self._require_contiguous("to_host")
        host = np.empty(self.shape, self.dtype) if out is None else out
        s = as_stream(stream, device=self.device)
        copy_d2h(host, self, s)
        if stream is None:
            s.sync()
        return host

    def copy_from_host(self, array: np.ndarray, *, stream: Any = None) -> "DeviceArray":
        s = as_stream(stream, device=self.device)
        copy_h2d(self, array, s)
        if stream is None:
            s.sync()
        return self

    def fill(self, value: Any, *, stream: Any = None) -> "DeviceArray":
        """Set every element to ``value`` (cast to dtype) with cuMemsetD*; async when ``stream`` is given."""
        self._require_contiguous("fill")
        s = as_stream(stream, device=self.device)
        if s.device != self.device:
            raise InvalidArgumentError("stream", s, f"is on device {s.device}, the array on device {self.device}",
                                       f"use a stream of device {self.device}")
        try:
            pattern = np.array(value, dtype=self.dtype).tobytes()
        except (TypeError, ValueError, OverflowError):
            raise InvalidArgumentError("value", value, f"cannot be stored as {self.dtype}", "pass a number") from None
        n, ptr = self.size, self.ptr
        use_device(self.device)
        if n:
            if len(pattern) == 1:
                _driver.call("cuMemsetD8Async", ptr, pattern[0], n, s.raw)
            elif len(pattern) == 2:
                _driver.call("cuMemsetD16Async", ptr, int.from_bytes(pattern, "little"), n, s.raw)
            elif len(pattern) == 4:
                _driver.call("cuMemsetD32Async", ptr, int.from_bytes(pattern, "little"), n, s.raw)
            elif len(pattern) == 8 and pattern[:4] == pattern[4:]:  # e.g. zeros: one fast 32-bit memset
                _driver.call("cuMemsetD32Async", ptr, int.from_bytes(pattern[:4], "little"), 2 * n, s.raw)
            elif len(pattern) == 8:
                # two 32-bit halves, each a 2D memset of width 1 and pitch 8
                for half in (0, 4):
                    _driver.call("cuMemsetD2D32Async", ptr + half, 8, int.from_bytes(pattern[half:half + 4], "little"),
                                 1, n, s.raw)
            else:
                raise InvalidArgumentError("dtype", self.dtype, "cannot be filled (element size is not 1, 2, 4 or 8)",
                                           "fill a uint8 view instead")
        keep_alive(s, self)
        if stream is None:
            s.sync()
        return self

    # ---- properties
    @property
    def device(self) -> int:
        return self._alloc.device

    @property
    def ptr(self) -> int:
        if self._alloc.closed:
            raise InvalidArgumentError("array", "DeviceArray", "was closed (its device memory is freed)",
                                       "keep the array open until its last use")
        return self._alloc.ptr + self._offset

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize

    @property
    def is_c_contiguous(self) -> bool:
        return is_c_contiguous(self.shape, self.strides, self.itemsize)

    @property
    def closed(self) -> bool:
        return self._alloc.closed

    def close(self) -> None:
        """Free the allocation (shared with every view of it). Idempotent."""
        self._alloc.close()

    def __enter__(self) -> "DeviceArray":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _require_contiguous(self, what: str) -> None:
        if not self.is_c_contiguous:
            raise InvalidArgumentError("array", f"view with strides {self.strides}", f"must be C-contiguous for {what}",
                                       "copy it into a contiguous DeviceArray first (tmakit.copy_d2d)")

    # ---- views
    def _stand_in(self) -> np.ndarray:
        # zero-byte base with our shape/strides: numpy computes views without touching memory
        return np.lib.stride_tricks.as_strided(np.empty(1, self.dtype), self.shape, self.strides)

    def _view_of(self, ref: np.ndarray, base_addr: int) -> "DeviceArray":
        offset = self._offset + (ref.__array_interface__["data"][0] - base_addr)
        return DeviceArray(self._alloc, tuple(ref.shape), self.dtype, tuple(ref.strides), offset)

    def __getitem__(self, index: Any) -> "DeviceArray":
        parts = index if isinstance(index, tuple) else (index,)
        for part in parts:
            if not (part is None or part is Ellipsis or isinstance(part, slice)
                    or (isinstance(part, (int, np.integer)) and not isinstance(part, bool))):
                raise InvalidArgumentError("index", index, "may hold only ints, slices, None and Ellipsis",
                                           "fancy (list/array/bool) indexing would copy; use basic slicing")
        if not any(p is Ellipsis for p in parts):
            parts = parts + (Ellipsis,)  # numpy then returns a 0-d view rather than a scalar
        stand_in = self._stand_in()
        try:
            ref = stand_in[parts]
        except IndexError as exc:
            raise InvalidArgumentError("index", index, f"is out of range for shape {self.shape} ({exc})",
                                       "index within the array's shape") from None
        return self._view_of(ref, stand_in.__array_interface__["data"][0])

    def reshape(self, *shape: Any) -> "DeviceArray":
        dims = shape[0] if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)) else shape
        self._require_contiguous("reshape")
        flat = np.lib.stride_tricks.as_strided(np.empty(1, self.dtype), (self.size,), (self.itemsize,))
        try:
            new_shape = tuple(flat.reshape(dims).shape)
        except (ValueError, TypeError) as exc:
            raise InvalidArgumentError("shape", dims, f"does not fit {self.size} elements ({exc})",
                                       "keep the element count") from None
        return DeviceArray(self._alloc, new_shape, self.dtype, _c_strides(new_shape, self.itemsize), self._offset)

    def ravel(self) -> "DeviceArray":
        return self.reshape(-1)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d DeviceArray")
        return self.shape[0]

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"ptr={self._alloc.ptr + self._offset:#x}"
        return f"tmakit.DeviceArray(shape={self.shape}, dtype={self.dtype}, device={self.device}, {state})"

    # ---- interop
    @property
    def __tmakit_device__(self) -> int:
        """The device ordinal, for tmakit's array adapter (its pointer's attributes are not always right)."""
        return self._alloc.device

    @property
    def __cuda_array_interface__(self) -> dict:
        ptr = self.ptr  # raises when closed
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (ptr if self.size else 0, False),
            "strides": None if self.is_c_contiguous else self.strides,
            "version": 3,
        }

    def __dlpack_device__(self) -> tuple[int, int]:
        return (_DL_CUDA, self.device)

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None,
                   copy: bool | None = None) -> Any:
        """A legacy ``dltensor`` capsule (allowed for any max_version). The consumer orders its stream
        after our work itself: tmakit copies without ``stream=`` are synchronous."""
        if copy:
            raise BufferError("tmakit.DeviceArray exports DLPack without copying; copy=True is not supported")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"tmakit.DeviceArray lives on {self.__dlpack_device__()}, cannot export to {dl_device}")
        return _dlpack_capsule(self)


# ---------------------------------------------------------------- DLPack export (ctypes, no numpy involvement)
_DL_CUDA = 2
_DL_CODES = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}
_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]


_exports: dict[int, tuple[Any, ...]] = {}  # struct address -> (struct, shape, strides, array): alive until deleted
_exports_lock = threading.Lock()


@_DELETER
def _dl_deleter(address: int) -> None:
    with _exports_lock:
        _exports.pop(address, None)


_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", ctypes.pythonapi))
_capsule_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_IsValid", ctypes.pythonapi))
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))
_NAME = b"dltensor"


@_CAPSULE_DESTRUCTOR
def _capsule_destructor(capsule: int) -> None:
    # A consumer renames the capsule to "used_dltensor" and calls the deleter itself; otherwise we do.
    if _capsule_is_valid(capsule, _NAME):
        _dl_deleter(_capsule_pointer(capsule, _NAME))


def _dlpack_capsule(arr: DeviceArray) -> Any:
    if arr.dtype.kind not in _DL_CODES:
        raise BufferError(f"dtype {arr.dtype} has no DLPack type code")
    managed = _DLManagedTensor()
    shape = (ctypes.c_int64 * max(1, arr.ndim))(*arr.shape)
    strides = (ctypes.c_int64 * max(1, arr.ndim))(*(s // arr.itemsize for s in arr.strides))
    t = managed.dl_tensor
    t.data = arr.ptr or None  # empty arrays may have no allocation (NULL is allowed then)
    t.device = _DLDevice(_DL_CUDA, arr.device)
    t.ndim = arr.ndim
    t.dtype = _DLDataType(_DL_CODES[arr.dtype.kind], arr.itemsize * 8, 1)
    t.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
    t.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
    t.byte_offset = 0
    managed.manager_ctx = None
    managed.deleter = _dl_deleter
    address = ctypes.addressof(managed)
    with _exports_lock:
        _exports[address] = (managed, shape, strides, arr)
    return _capsule_new(address, _NAME, ctypes.cast(_capsule_destructor, ctypes.c_void_p))
