"""Argument checks shared by the ops: every failure names the parameter, its value, the rule and the fix."""
from __future__ import annotations

from typing import Any, Sequence

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


def byte_span(v: ArrayView) -> tuple[int, int]:
    """[first, end) of the bytes the view's elements occupy (strides of any sign); empty for an empty array."""
    if not v.shape:
        return v.ptr, v.ptr + v.itemsize
    if 0 in v.shape:
        return v.ptr, v.ptr
    lo = hi = v.ptr
    for n, stride in zip(v.shape, v.strides):
        if stride < 0:
            lo += (n - 1) * stride
        else:
            hi += (n - 1) * stride
    return lo, hi + v.itemsize


def _rows_apart(v: ArrayView, w: ArrayView) -> bool:
    """Whether two 2-D views of rows at one pitch (column slices of one buffer, say) share no byte, though their
    spans interleave: row r of v is [v.ptr + r p, + width), and some row of w can only meet a row of v at a row
    distance q (row r + q of w beside row r of v) with -w.width < w.ptr - v.ptr + q p < v.width."""
    if len(v.shape) != 2 or len(w.shape) != 2 or v.strides[0] != w.strides[0] or v.strides[0] <= 0:
        return False
    if v.strides[1] != v.itemsize or w.strides[1] != w.itemsize:
        return False
    pitch, d = v.strides[0], w.ptr - v.ptr
    width_v, width_w = v.shape[1] * v.itemsize, w.shape[1] * w.itemsize
    if width_v > pitch or width_w > pitch:
        return False
    for q in range(-d // pitch - 1, -d // pitch + 2):  # the only row distances that can bring them together
        if -(v.shape[0] - 1) <= q <= w.shape[0] - 1 and -width_w < d + q * pitch < width_v:
            return False
    return True


def refuse_overlap(outputs: Sequence[tuple[str, ArrayView]], inputs: Sequence[tuple[str, ArrayView]]) -> None:
    """Every output apart from every input and from the other outputs: a kernel that writes an array while its
    TMA or cp.async loads of another are in flight gives timing-dependent results when the two share bytes.
    Byte spans are compared; where they meet, 2-D views of one row pitch (column slices of one buffer) are compared
    row by row, and other interleaved views are refused."""
    spans = [(name, v, byte_span(v)) for name, v in outputs]
    others = spans + [(name, v, byte_span(v)) for name, v in inputs]
    for i, (name, v, (lo, hi)) in enumerate(spans):
        for other, w, (olo, ohi) in others[i + 1:]:
            if lo < hi and olo < ohi and lo < ohi and olo < hi and v.device == w.device and not _rows_apart(v, w):
                raise InvalidArgumentError(name, f"bytes 0x{lo:x}..0x{hi:x}",
                                           f"overlaps {other} (bytes 0x{olo:x}..0x{ohi:x}): the kernel would write "
                                           f"{name} while it reads {other}", f"write {name} into a separate buffer")

