"""Argument checks shared by the ops: every failure names the parameter, its value, the rule and the fix."""
from __future__ import annotations

from typing import Any

from ..arrays import ArrayView, device_array_view
from ..errors import InvalidArgumentError


def view(array: Any, parameter: str) -> ArrayView:
    return device_array_view(array, parameter)


def require_contiguous(v: ArrayView, parameter: str) -> None:
    if not v.is_c_contiguous:
        raise InvalidArgumentError(parameter, f"array with shape {v.shape} and byte strides {v.strides}",
                                   "must be C-contiguous (row-major, no gaps)",
                                   "pass a contiguous array (tensor.contiguous(), cupy.ascontiguousarray)")


def require_same_device(dst: ArrayView, src: ArrayView) -> None:
    if dst.device != src.device:
        raise InvalidArgumentError("dst", f"array on device {dst.device}", f"must be on the device of src ({src.device})",
                                   "copy one of them to the other's device first")


def require_same_dtype(dst: ArrayView, src: ArrayView) -> None:
    if dst.dtype_name != src.dtype_name or dst.itemsize != src.itemsize:
        raise InvalidArgumentError("dst", f"dtype {dst.dtype_name}", f"must have the dtype of src ({src.dtype_name})",
                                   "allocate dst with src's dtype (these ops move bytes, they do not convert)")


def require_disjoint(dst: ArrayView, src: ArrayView) -> None:
    dst_bytes, src_bytes = dst.nbytes, src.nbytes  # each a product over the shape: computed once
    if dst_bytes and src_bytes and dst.ptr < src.ptr + src_bytes and src.ptr < dst.ptr + dst_bytes:
        raise InvalidArgumentError("dst", f"0x{dst.ptr:x}..+{dst.nbytes}", f"overlaps src (0x{src.ptr:x}..+{src.nbytes})",
                                   "use a separate output buffer")
