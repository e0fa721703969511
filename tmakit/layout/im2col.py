"""CPU model of a TMA im2col-mode load: the exact bytes ``cp.async.bulk.tensor.Nd...im2col`` writes to shared memory.

Sources: PTX ISA "Tensors / im2col mode" (bounding box, traversal stride, OOB access) and "cp.async.bulk.tensor"
(the im2colInfo offsets), the cuTensorMapEncodeIm2col documentation, and an H100 check of this model over
>= 1000 random descriptors (tests/test_tma_modes_hardware.py). Everything is in driver order (innermost first):
dims = (C, W[, H[, D]], N).

- The bounding box lives in the spatial (W, H, D) space: along spatial dim s of size S it spans
  [lower_corner[s], S - 1 + upper_corner[s]] (upper is measured from the last pixel).
- The instruction's coordinates are (c, w[, h[, d]], n). (w, h, d) is the filter base position in the box and
  n the image. The base must lie inside the bounding box (PTX ISA §5.5.4 "im2col mode": the coordinates give
  "the location of the convolution filter base", which "must be within the bounding box"; only the
  ``.im2col::w`` modes of sm_100 let the first element lie outside, on the left, §5.5.5.1). Measured on an
  H100, a base outside the box stops the kernel with CUDA_ERROR_ILLEGAL_INSTRUCTION (6 of 10 random
  off-box starts; the context is then lost): ``check_im2col_start`` refuses it, here and before a launch. ``pixels_per_column`` positions are walked in raster order from there: w advances by
  element_strides[1]; past the box's upper edge it restarts at the lower corner and h advances by
  element_strides[2], and so on; past the last spatial dimension the walk moves on by element_strides[rank-1]
  images (n + es_N; measured on an H100: the batch dimension's traversal stride is honoured).
- Pixel k reads channels c .. c + channels_per_pixel - 1 at spatial position (walk position + offsets), where
  the offsets are the instruction's im2col offsets (a filter tap, dilation included). A channel, spatial
  coordinate or image outside the tensor is filled (zero bytes, or the type's OOB NaN like a tiled load).
- Shared memory holds one row of channels_per_pixel elements per pixel, pixel-major. Rows narrower than the
  swizzle span are padded to it (as tiled rows are), and the swizzle permutes 16-byte chunks by address.
  The transaction count (expect_tx) is pixels_per_column * channels_per_pixel * element size.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..dtypes import DataType
from .._sequences import is_sequence
from ..errors import InvalidArgumentError
from ..tensormap.enums import Interleave, OOBFill, Swizzle
from .swizzle import swizzle_offset
from .tma_model import _convert, _fill_value

# The im2col offsets are unsigned 16-bit operands; their range shrinks with the rank (PTX ISA "im2col mode").
OFFSET_LIMIT = {3: 1 << 16, 4: 1 << 8, 5: 1 << 5}


@dataclass(frozen=True)
class Im2colGeometry:
    """Sizes of one im2col box in shared memory."""

    pixels: int  # rows (pixels_per_column)
    channels: int  # elements per row (channels_per_pixel)
    elem_size: int
    row_pitch: int  # bytes from one pixel's row to the next (padded to the swizzle span)

    @property
    def row_bytes(self) -> int:
        return self.channels * self.elem_size

    @property
    def box_bytes(self) -> int:
        """Data bytes the load writes = the mbarrier expect_tx count."""
        return self.pixels * self.row_bytes

    @property
    def smem_bytes(self) -> int:
        return self.pixels * self.row_pitch


def _spec(tm: Any) -> Any:
    spec = getattr(tm, "spec", tm)
    missing = [a for a in ("dtype", "dims", "strides", "lower_corner", "upper_corner", "channels_per_pixel",
                           "pixels_per_column", "element_strides", "swizzle", "oob_fill") if not hasattr(spec, a)]
    if missing:
        raise InvalidArgumentError("tm", type(tm).__name__, f"is not an im2col tensor map (no {', '.join(missing)})",
                                   "pass a TensorMap from tmakit.describe_im2col, or its .spec")
    if Interleave.parse(getattr(spec, "interleave", 0)) is not Interleave.NONE:
        raise InvalidArgumentError("tm.interleave", str(Interleave.parse(spec.interleave)),
                                   "is not modelled for im2col loads (only interleave 'none')",
                                   "describe the tensor without interleave")
    return spec


def im2col_geometry(tm: Any) -> Im2colGeometry:
    """Geometry of the im2col box of ``tm`` (a describe_im2col TensorMap or its Im2colSpec)."""
    spec = _spec(tm)
    size = DataType.parse(spec.dtype).size
    swizzle = Swizzle.parse(spec.swizzle)
    row = int(spec.channels_per_pixel) * size
    pitch = max(row, swizzle.span) if swizzle is not Swizzle.NONE else row
    return Im2colGeometry(int(spec.pixels_per_column), int(spec.channels_per_pixel), size, pitch)


def _int_list(name: str, values: Any, length: int) -> list[int]:
    if not is_sequence(values) or not hasattr(values, "__len__") or len(values) != length or \
            any(isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) for v in values):
        raise InvalidArgumentError(name, values, f"must be {length} integers (driver order, innermost first)",
                                   f"pass a list of {length} ints")
    return [int(v) for v in values]


_AXES = ("w", "h", "d")


def bounding_box(tm: Any) -> list[tuple[int, int]]:
    """The inclusive range [lower_corner[s], S - 1 + upper_corner[s]] of each spatial dimension (W first)."""
    spec = _spec(tm)
    return [(int(spec.lower_corner[s]), int(spec.dims[s + 1]) - 1 + int(spec.upper_corner[s]))
            for s in range(len(spec.dims) - 2)]


def check_im2col_start(tm: Any, coords: Sequence[int]) -> None:
    """Refuse a filter base (coords[1..rank-2] = w[, h[, d]]) outside the map's bounding box.

    PTX ISA §5.5.4 "im2col mode": the spatial coordinates give "the location of the convolution filter base",
    which "must be within the bounding box". Measured on an H100: a base outside it (w = -1 with lower corner 0,
    w = 24 on a 24-wide image with upper corner 0) stops the kernel with CUDA_ERROR_ILLEGAL_INSTRUCTION and
    loses the context. Bases inside the box, on or off the traversal-stride grid, load as the model says."""
    spec = _spec(tm)
    at = _int_list("coords", coords, len(spec.dims))
    for s, (lo, hi) in enumerate(bounding_box(spec)):
        value = at[s + 1]
        if not lo <= value <= hi:
            axis = _AXES[s]
            raise InvalidArgumentError(
                f"coords[{s + 1}]", value,
                f"puts the filter base at {axis}={value}, outside the bounding box [{lo}, {hi}] of {axis} (size "
                f"{int(spec.dims[s + 1])}, lower corner {lo}, upper corner {int(spec.upper_corner[s])}): PTX ISA "
                "§5.5.4 'im2col mode' requires the base within the bounding box, and an H100 faults there "
                "(illegal instruction, the context is lost)",
                f"start {axis} in [{lo}, {hi}] and reach the other pixels through the im2col offsets, or describe "
                f"the map with corners whose box holds {value}")


def im2col_pixels(tm: Any, coords: Sequence[int], offsets: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """The walk: (positions [ppc, rank-2] of the filter base, images [ppc]) for each pixel of the column. A base
    outside the bounding box is refused (``check_im2col_start``)."""
    spec = _spec(tm)
    rank = len(spec.dims)
    spatial = rank - 2
    at = _int_list("coords", coords, rank)
    _int_list("offsets", offsets, spatial)
    check_im2col_start(spec, at)
    es = [int(e) for e in spec.element_strides]
    lower = [int(v) for v in spec.lower_corner]
    last = [int(spec.dims[s + 1]) - 1 + int(spec.upper_corner[s]) for s in range(spatial)]
    pos, n = at[1:rank - 1], at[rank - 1]
    positions = np.empty((int(spec.pixels_per_column), spatial), dtype=np.int64)
    images = np.empty(int(spec.pixels_per_column), dtype=np.int64)
    for k in range(int(spec.pixels_per_column)):
        positions[k], images[k] = pos, n
        for s in range(spatial):
            pos[s] += es[s + 1]
            if pos[s] <= last[s]:
                break
            pos[s] = lower[s]
        else:
            n += es[rank - 1]
    return positions, images


def im2col_load_image(tm: Any, host_bytes: np.ndarray, coords: Sequence[int], offsets: Sequence[int], *,
                      poison: int | None = None) -> np.ndarray:
    """The shared-memory bytes an im2col load of ``tm`` at ``coords`` with im2col ``offsets`` writes.

    ``tm`` is a TensorMap from ``tmakit.describe_im2col`` (or its Im2colSpec); ``host_bytes`` holds the tensor's
    bytes from its base address; ``coords`` = (c, w[, h[, d]], n) and ``offsets`` = (w[, h[, d]]) in driver
    order, as the instruction takes them. Padding bytes (rows narrower than the swizzle span) are ``poison``
    (0 when None). See the module docstring for the rules.
    """
    spec = _spec(tm)
    geo = im2col_geometry(spec)
    rank = len(spec.dims)
    off = _int_list("offsets", offsets, rank - 2)
    limit = OFFSET_LIMIT.get(rank, 1 << 5)
    bad = [i for i, o in enumerate(off) if not 0 <= o < limit]
    if bad:
        raise InvalidArgumentError(f"offsets[{bad[0]}]", off[bad[0]], f"im2col offsets of a rank-{rank} tensor are in "
                                   f"[0, {limit})", f"use 0..{limit - 1}")
    if poison is not None and (isinstance(poison, bool) or not isinstance(poison, (int, np.integer))
                               or not 0 <= poison <= 255):
        raise InvalidArgumentError("poison", poison, "must be a byte value 0..255 or None", "pass e.g. 0xA5")
    positions, images = im2col_pixels(spec, coords, offsets)
    c0 = int(coords[0])
    dims = [int(d) for d in spec.dims]
    strides = [int(s) for s in spec.strides]
    size = geo.elem_size
    channel = c0 + np.arange(geo.channels, dtype=np.int64)  # [cpp]
    spatial = positions + np.asarray(off, dtype=np.int64)  # [ppc, rank-2]
    pixel_in = np.all((spatial >= 0) & (spatial < np.asarray(dims[1:rank - 1])), axis=1) & (images >= 0) & \
        (images < dims[rank - 1])
    pixel_off = spatial @ np.asarray(strides[:rank - 2], dtype=np.int64) + images * strides[rank - 2]
    inb = pixel_in[:, None] & (channel >= 0)[None, :] & (channel < dims[0])[None, :]
    goff = (pixel_off[:, None] + channel[None, :] * size).ravel()
    inb = inb.ravel()
    soff = (np.arange(geo.pixels, dtype=np.int64)[:, None] * geo.row_pitch +
            np.arange(geo.channels, dtype=np.int64)[None, :] * size).ravel()
    soff = swizzle_offset(soff, Swizzle.parse(spec.swizzle))
    dtype = DataType.parse(spec.dtype)
    mem = np.ascontiguousarray(host_bytes).view(np.uint8).ravel()
    image = np.full(geo.smem_bytes, 0 if poison is None else int(poison), dtype=np.uint8)
    byte = np.arange(size, dtype=np.int64)
    src = goff[inb][:, None] + byte
    dst = soff[:, None] + byte
    if src.size and src.max() >= mem.size:
        raise InvalidArgumentError("host_bytes", f"{mem.size} bytes", f"is too small: the box reads up to byte "
                                   f"{int(src.max())}", "pass the tensor's whole extent, starting at its base address")
    fill = np.frombuffer(int(_fill_value(dtype, OOBFill.parse(spec.oob_fill))).to_bytes(size, "little"), dtype=np.uint8)
    image[dst[inb]] = _convert(dtype, np.ascontiguousarray(mem[src])).reshape(src.shape)
    image[dst[~inb]] = np.broadcast_to(fill, dst[~inb].shape)
    return image
