"""Async copies between host and device (``copy_h2d``, ``copy_d2h``, ``copy_d2d``) and ``keep_alive``.

Every async copy records an event after itself and keeps both sides referenced until that event has
completed (CuPy's ``_EventWatcher`` idea, ``streams.hold_until_done``): a pinned buffer cannot be freed under a
copy in flight. Arrays are read through ``arrays.as_array_view``; streams through ``streams.as_stream``.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from . import _driver
from .arrays import ArrayView, as_array_view
from .errors import InvalidArgumentError
from .memory import host_owner
from .streams import Event, Stream, as_stream, hold_until_done, use_device


def keep_alive(stream: Stream, *objs: Any) -> Event:
    """Keep ``objs`` referenced until the work queued on ``stream`` so far has completed."""
    return hold_until_done(stream, tuple(_owner_of(o) for o in objs))


def _owner_of(obj: Any) -> Any:
    """What must stay alive for ``obj``'s memory: the allocation owner rather than a view."""
    if isinstance(obj, np.ndarray):
        return host_owner(obj) or obj
    return getattr(obj, "_alloc", None) or obj


# ---------------------------------------------------------------- async copies
def _host(arr: Any, parameter: str, *, writable: bool) -> np.ndarray:
    if not isinstance(arr, np.ndarray):
        raise InvalidArgumentError(parameter, type(arr).__name__, "must be a numpy array in host memory",
                                   "pass a numpy array (tmakit.pinned_empty for fast async copies)")
    host_owner(arr, parameter)  # raises when its pinned buffer was freed
    if not arr.flags.c_contiguous:
        raise InvalidArgumentError(parameter, f"array with strides {arr.strides}", "must be C-contiguous",
                                   "pass numpy.ascontiguousarray(a) (or copy into a pinned buffer)")
    if writable and not arr.flags.writeable:
        raise InvalidArgumentError(parameter, "read-only array", "must be writable to receive a copy", "pass a writable array")
    return arr


def _device(arr: Any, parameter: str) -> ArrayView:
    view = as_array_view(arr, parameter)
    if not view.is_c_contiguous:
        raise InvalidArgumentError(parameter, f"device array with strides {view.strides}", "must be C-contiguous",
                                   "copy it to a contiguous array first")
    return view


def _match(dst_shape: tuple, dst_dtype: str, src_shape: tuple, src_dtype: str) -> None:
    if dst_dtype != src_dtype:
        raise InvalidArgumentError("dst", dst_dtype, f"has a different dtype from src ({src_dtype})",
                                   "convert one side first (numpy astype) so both have the same dtype")
    if tuple(dst_shape) != tuple(src_shape):
        raise InvalidArgumentError("dst", f"shape {tuple(dst_shape)}", f"differs from src shape {tuple(src_shape)}",
                                   "copy between arrays of the same shape (slice or reshape one side)")


def _on_device(stream: Stream, view: ArrayView, parameter: str) -> None:
    if view.device != stream.device:
        raise InvalidArgumentError("stream", f"stream on device {stream.device}",
                                   f"cannot copy {parameter} which lives on device {view.device}",
                                   f"use a stream of device {view.device} (tmakit.Stream({view.device}))")


def copy_h2d(dst: Any, src: np.ndarray, stream: Any = None) -> Event:
    """Enqueue host->device ``dst[...] = src`` on ``stream``; returns the event marking its completion."""
    s = as_stream(stream)
    use_device(s.device)  # pointer queries and the copy need a context of the stream's device
    host = _host(src, "src", writable=False)
    view = _device(dst, "dst")
    _match(view.shape, view.dtype_name, host.shape, host.dtype.name)
    _on_device(s, view, "dst")
    if host.nbytes:
        _driver.call("cuMemcpyHtoDAsync", view.ptr, host.ctypes.data, host.nbytes, s.raw)
    return keep_alive(s, host, dst)


def copy_d2h(dst: np.ndarray, src: Any, stream: Any = None) -> Event:
    """Enqueue device->host ``dst[...] = src`` on ``stream``; ``dst`` is valid once the returned event is done."""
    s = as_stream(stream)
    use_device(s.device)
    host = _host(dst, "dst", writable=True)
    view = _device(src, "src")
    _match(host.shape, host.dtype.name, view.shape, view.dtype_name)
    _on_device(s, view, "src")
    if host.nbytes:
        _driver.call("cuMemcpyDtoHAsync", host.ctypes.data, view.ptr, host.nbytes, s.raw)
    return keep_alive(s, host, src)


def copy_d2d(dst: Any, src: Any, stream: Any = None) -> Event:
    """Enqueue device->device ``dst[...] = src`` on ``stream`` (same device)."""
    s = as_stream(stream)
    use_device(s.device)
    d, v = _device(dst, "dst"), _device(src, "src")
    _match(d.shape, d.dtype_name, v.shape, v.dtype_name)
    _on_device(s, d, "dst")
    _on_device(s, v, "src")
    if d.nbytes:
        _driver.call("cuMemcpyDtoDAsync", d.ptr, v.ptr, d.nbytes, s.raw)
    return keep_alive(s, dst, src)
