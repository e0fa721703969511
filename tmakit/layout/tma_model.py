"""CPU model of a TMA tile-mode box load and store: the exact bytes written to shared memory.

Sources: PTX ISA 'Tensors' (tiled mode: bounding box, traversal stride, OOB access; swizzling modes) and the
cuTensorMapEncodeTiled documentation, with the open points settled by hardware dumps on an H100
(tests/data/tma_load_images_h100.jsonl, replayed by tests/test_tma_model.py). tests/test_tma_hardware.py checks this
model byte for byte on the GPU.

Layout of one box in shared memory (no interleave):
- n_0 = box[0] elements along dim 0 (its traversal stride is ignored), n_i = ceil(box[i] / es[i]) otherwise;
- rows (all outer index combinations, dim 1 fastest) of n_0 * elem bytes each; a row is padded to the swizzle
  span when the mode swizzles; the swizzle then permutes 16-byte chunks by address (see ``swizzle``);
- element j_i along dim i reads coordinate c_i + j_i * es_i; any coordinate outside [0, dims_i) is filled
  with zero, or with the type's NaN when the OOB fill is NaN.
``box_bytes`` (the mbarrier transaction count) counts data bytes, not the padding.

Interleaved layouts (16B / 32B; NC/8HWC8-style tensors) load differently. Nothing in the PTX ISA or the
driver documentation spells this out; it was measured on an H100 (records in
tests/data/tma_interleave_images_h100.jsonl, replayed by tests/test_tma_model.py) and is checked by
tests/test_tma_hardware.py and benchmarks/tma_modes_vs_model.py:
- the unit along dim 0 is the interleave slice of S = 16 or 32 bytes, not the element: coords[0] counts
  slices (byte offset coords[0] * S), box[0] is the number of slices (stepping element_strides[0] slices),
  and every slice is copied whole, also when dims[0] * elem_size < S;
- a slice is in bounds when its slice coordinate is in [0, dims[0]) and every outer coordinate is in bounds;
- dimension rank-2 (the channel-group dimension of NC/xHWCx) is not traversed: its coordinate is used (and
  bounds-checked) but box[rank-2] is ignored, so one position is loaded;
- slices are stored densely (no padding to the swizzle span), then the swizzle permutes 16-byte chunks as usual.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Sequence

import numpy as np

from ..dtypes import DataType
from ..errors import InvalidArgumentError
from ..tensormap.enums import Interleave, OOBFill, Swizzle
from ._args import as_byte_array, as_int, as_ints
from .swizzle import swizzle_bits, swizzle_offset

# The bit pattern of the "NaN request zero FMA" fill, measured on an H100: 0x7FF7 in every 16-bit half-word
# (f16/bf16 0x7FF7, f32 0x7FF77FF7, f64 0x7FF77FF77FF77FF7), a NaN in each of these formats.
NAN_FILL = {2: 0x7FF7, 4: 0x7FF77FF7, 8: 0x7FF77FF77FF77FF7}


@dataclass(frozen=True)
class BoxGeometry:
    """Derived sizes of one box in shared memory."""

    counts: tuple[int, ...]  # elements loaded per dimension, innermost first
    elem_size: int
    row_bytes: int  # data bytes per row (dim 0)
    row_pitch: int  # bytes from one row to the next in shared memory
    rows: int
    interleaved: bool = False  # rows are interleave slices, dim 0 counted in slices
    swizzle_span: int = 0  # interleaved rows are dense, so the swizzle can move a chunk past the last row

    @property
    def box_bytes(self) -> int:
        """Data bytes the load writes = the mbarrier expect_tx count."""
        return self.rows * self.row_bytes

    @property
    def smem_bytes(self) -> int:
        """Shared-memory footprint including row padding (interleaved: rounded up to the swizzle span)."""
        total = self.rows * self.row_pitch
        return -(-total // self.swizzle_span) * self.swizzle_span if self.swizzle_span else total


_SPEC_RULE = ("must be a tiled TensorMap, a TiledSpec, or an object with dtype, dims, strides, box, "
              "element_strides, swizzle, interleave and oob_fill (driver order)")
MAX_COORD = (1 << 31) - 1  # PTX tensor coordinates are signed 32-bit


@dataclass(frozen=True)
class _Model:
    """The fields of a spec the model reads, checked and parsed (driver order)."""

    dtype: DataType
    box: tuple[int, ...]
    element_strides: tuple[int, ...]
    swizzle: Swizzle
    interleave: Interleave
    dims: tuple[int, ...] = ()
    strides: tuple[int, ...] = ()
    oob_fill: OOBFill = OOBFill.NONE


def _field(spec: Any, name: str) -> Any:
    try:
        return getattr(spec, name)
    except AttributeError:
        raise InvalidArgumentError("spec", type(spec).__name__, f"{_SPEC_RULE}; it has no {name!r}",
                                   "pass tmakit.describe_tensor(...) (or its .spec)") from None


def _model(spec: Any, memory: bool = True) -> _Model:
    """Check ``spec`` once: ranges as the driver's rules allow (box 1..256, element strides 1..8, rank 1..5)."""
    if isinstance(spec, _Model):
        return spec
    if spec is None or isinstance(spec, (str, bytes, int, float, dict, list, tuple)):
        raise InvalidArgumentError("spec", spec, _SPEC_RULE, "pass tmakit.describe_tensor(...) (or its .spec)")
    if getattr(spec, "mode", "tiled") != "tiled" or hasattr(spec, "pixels_per_column"):
        raise InvalidArgumentError("spec", type(spec).__name__, "is an im2col map; this model covers tiled maps",
                                   "describe the tensor with describe_tensor (tiled mode)")
    dtype = DataType.parse(_field(spec, "dtype"), "spec.dtype")
    box = as_ints("spec.box", _field(spec, "box"), 1, 256, fix="box sizes are 1..256 (driver order)")
    if not 1 <= len(box) <= 5:
        raise InvalidArgumentError("spec.box", box, "needs 1 to 5 entries (the rank)", "one size per dimension")
    es = as_ints("spec.element_strides", _field(spec, "element_strides"), 1, 8, len(box),
                 fix="traversal strides are 1..8, one per dimension")
    swizzle = Swizzle.parse(_field(spec, "swizzle"), "spec.swizzle")
    swizzle_bits(swizzle, "spec.swizzle")
    interleave = Interleave.parse(_field(spec, "interleave"), "spec.interleave")
    if not memory:
        return _Model(dtype, box, es, swizzle, interleave)
    dims = as_ints("spec.dims", _field(spec, "dims"), 1, 1 << 32, len(box), fix="dims are 1..2^32, one per box entry")
    strides = as_ints("spec.strides", _field(spec, "strides"), 0, (1 << 40) - 1, len(box) - 1,
                      fix="byte strides of dims 1..rank-1, each in [0, 2^40)")
    oob = OOBFill.parse(_field(spec, "oob_fill"), "spec.oob_fill")
    return _Model(dtype, box, es, swizzle, interleave, dims, strides, oob)


def box_geometry(spec: Any) -> BoxGeometry:
    """Geometry of ``spec`` (anything with dtype, box, element_strides, swizzle, interleave; driver order)."""
    m = _model(spec, memory=False)
    dtype, interleave, swizzle, es = m.dtype, m.interleave, m.swizzle, m.element_strides
    counts = [(-(-b // e) if (i > 0 or interleave is not Interleave.NONE) else b)
              for i, (b, e) in enumerate(zip(m.box, es))]
    size = dtype.size
    if interleave is not Interleave.NONE:  # rows are whole slices, counted along dim 0; dim rank-2 loads once
        if len(counts) >= 2:
            counts[len(counts) - 2] = 1
        slice_bytes = interleave_slice_bytes(interleave)
        rows = int(np.prod(counts, dtype=np.int64))
        return BoxGeometry(tuple(counts), size, slice_bytes, slice_bytes, rows, True, swizzle.span)
    row_bytes = counts[0] * size
    pitch = max(row_bytes, swizzle.span) if swizzle is not Swizzle.NONE else row_bytes
    rows = int(np.prod(counts[1:], dtype=np.int64)) if len(counts) > 1 else 1
    return BoxGeometry(tuple(counts), size, row_bytes, pitch, rows)


def interleave_slice_bytes(interleave: Interleave) -> int:
    """Bytes of one interleave slice (the unit of dim 0 in an interleaved layout): 16 or 32."""
    return 16 if interleave is Interleave.B16 else 32


def _fill_value(dtype: DataType, oob: OOBFill) -> int:
    if oob is OOBFill.NONE or not dtype.is_float:
        return 0
    return NAN_FILL[dtype.size]


def _element_map(spec: Any, coords: Sequence[int]) -> tuple[BoxGeometry, np.ndarray, np.ndarray, np.ndarray]:
    """For every loaded element: its shared-memory offset, its global byte offset and whether it is in bounds."""
    spec = _model(spec)
    geo = box_geometry(spec)
    interleave = spec.interleave
    rank = len(geo.counts)
    coords = _coords(coords, rank)
    if interleave is not Interleave.NONE:
        return geo, *_interleaved_map(spec, geo, coords)
    check_box_start(geo, coords)
    es = [1 if i == 0 else e for i, e in enumerate(spec.element_strides)]
    idx, goff, inb = _walk(spec, geo.counts, coords, es, geo.elem_size)
    row = np.zeros_like(idx[0])
    mult = 1
    for i in range(1, rank):
        row += idx[i] * mult
        mult *= geo.counts[i]
    soff = row * geo.row_pitch + idx[0] * geo.elem_size
    soff = swizzle_offset(soff, spec.swizzle)
    return geo, soff, goff, inb


def _coords(coords: Any, rank: int) -> tuple[int, ...]:
    return as_ints("coords", coords, -MAX_COORD - 1, MAX_COORD, rank,
                   fix=f"pass {rank} whole-number start coordinates (signed 32-bit), innermost first (driver order)")


def _walk(spec: Any, counts: Sequence[int], coords: Sequence[int], es: Sequence[int],
          unit0: int) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """Every box position, dim 0 fastest: its index per dimension, global byte offset and in-bounds flag.
    ``unit0`` is the byte step of dim 0 (the element size, or the slice size when interleaved)."""
    strides = [unit0] + [int(s) for s in spec.strides]
    # index grids, numpy order reversed: axis k of the grid = dimension rank-1-k
    grids = np.meshgrid(*[np.arange(n, dtype=np.int64) for n in reversed(counts)], indexing="ij")
    idx = [g.ravel() for g in reversed(grids)]  # idx[i] = index along dim i
    inb = np.ones(idx[0].shape, dtype=bool)
    goff = np.zeros(idx[0].shape, dtype=np.int64)
    for i in range(len(counts)):
        coord = int(coords[i]) + idx[i] * es[i]
        inb &= (coord >= 0) & (coord < int(spec.dims[i]))
        goff += coord * strides[i]
    return idx, goff, inb


def _interleaved_map(spec: Any, geo: BoxGeometry, coords: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Element map of an interleaved box (module docstring): rows are slices, dim 0 fastest, then dims 1.."""
    size, slice_bytes = geo.elem_size, geo.row_bytes
    idx, goff, inb = _walk(spec, geo.counts, coords, list(spec.element_strides), slice_bytes)  # one entry per slice
    per_slice = slice_bytes // size
    element = np.arange(per_slice, dtype=np.int64) * size
    soff = (np.arange(idx[0].size, dtype=np.int64)[:, None] * slice_bytes + element).ravel()
    soff = swizzle_offset(soff, spec.swizzle)
    return soff, (goff[:, None] + element).ravel(), np.repeat(inb, per_slice)


def check_box_start(geo: BoxGeometry, coords: Sequence[int]) -> None:
    """The box's start along dim 0 must be 16-byte aligned (coords[0] * elem_size % 16 == 0).

    Measured on an H100: a load whose dim-0 start is not a multiple of 16 bytes stops the kernel with
    CUDA_ERROR_ILLEGAL_INSTRUCTION, whether in bounds or not (PTX ISA: the bounding box's address must be
    16-byte aligned). tmakit refuses such coordinates before a launch. Interleaved boxes start at a whole
    slice (coords[0] counts slices), so any coordinate is aligned.
    """
    if geo.interleaved:
        return
    start = int(coords[0]) * geo.elem_size
    if start % 16:
        raise InvalidArgumentError("coords[0]", int(coords[0]), f"starts the box at byte {start} of dim 0, not a multiple "
                                   "of 16: TMA faults there (illegal instruction)",
                                   f"use a multiple of {16 // geo.elem_size or 1}")


# Measured on an H100 (tests/data/tf32_probe_h100.json, checked by tests/test_tma_model.py):
# TFLOAT32 and TFLOAT32_FTZ round the low 13 mantissa bits to nearest even (denormals too, overflow to inf) and
# turn every NaN into 0x7FFFE000; FLOAT32_FTZ copies bits unchanged (the FTZ names do not flush at load time).
TF32_NAN = 0x7FFFE000


def _convert(dtype: DataType, values: np.ndarray) -> np.ndarray:
    """Element conversions TMA applies on the way in (tf32 rounding) on the raw bytes of 4-byte elements."""
    if dtype not in (DataType.TFLOAT32, DataType.TFLOAT32_FTZ):
        return values
    bits = values.view(np.uint32)
    nan = ((bits & 0x7F800000) == 0x7F800000) & ((bits & 0x007FFFFF) != 0)
    rounded = ((bits.astype(np.uint64) + 0xFFF + ((bits >> 13) & 1)) & 0xFFFFE000).astype(np.uint32)
    return np.where(nan, np.uint32(TF32_NAN), rounded).astype(np.uint32).view(np.uint8)


def tma_load_image(spec: Any, memory: np.ndarray, coords: Sequence[int], *, poison: int | None = None) -> np.ndarray:
    """The shared-memory bytes a TMA tile load of ``spec`` at ``coords`` writes.

    ``coords`` are in DRIVER order (innermost first, like the PTX instruction's operands), unlike the numpy-order
    ``tmakit.ops.load_tiles``: pass ``coords[::-1]`` of a numpy-order coordinate.

    ``memory`` holds the tensor's bytes starting at its base address (uint8). The result has
    ``smem_bytes`` entries; padding bytes the hardware leaves untouched are ``poison`` (0 when None).
    """
    spec = _model(spec)
    poison = 0 if poison is None else as_int("poison", poison, 0, 255, "pass a byte value 0..255, or None")
    mem = as_byte_array("memory", memory)
    geo, soff, goff, inb = _element_map(spec, coords)
    dtype = spec.dtype
    image = np.full(geo.smem_bytes, poison, dtype=np.uint8)
    size = geo.elem_size
    fill = np.frombuffer(int(_fill_value(dtype, spec.oob_fill)).to_bytes(size, "little"), dtype=np.uint8)
    byte = np.arange(size, dtype=np.int64)
    src = goff[inb][:, None] + byte
    dst = soff[:, None] + byte
    if src.size and (src.max() >= mem.size):
        raise InvalidArgumentError("memory", f"{mem.size} bytes", f"is too small: the box reads up to byte {int(src.max())}",
                                   "pass the tensor's whole extent, starting at its base address")
    image[dst[inb]] = _convert(dtype, np.ascontiguousarray(mem[src])).reshape(src.shape)
    image[dst[~inb]] = np.broadcast_to(fill, dst[~inb].shape)
    return image


def check_store_start(coords: Sequence[int]) -> None:
    """A tile store's box must not start at a negative coordinate, in any dimension.

    Measured on an H100 (one box stored per case through a driver-encoded descriptor; docs/TMA_SEMANTICS.md,
    section 5): a store at (row, column) -4 or -8 in either dimension,
    16-byte aligned or not, stops the kernel with CUDA_ERROR_ILLEGAL_INSTRUCTION, while boxes that stick out
    past the far edges are clipped. The CUDA programming guide says as much ("the top left corner cannot have
    any negative indices"). A load may start anywhere (it fills).
    """
    coords = as_ints("coords", coords, -MAX_COORD - 1, MAX_COORD)
    negative = [i for i, c in enumerate(coords) if int(c) < 0]
    if negative:
        raise InvalidArgumentError(f"coords[{negative[0]}]", int(coords[negative[0]]),
                                   "is negative: a TMA store box cannot start before the tensor (illegal instruction)",
                                   "start the box at 0 and leave its first elements to another store")


def store_element_map(spec: Any, coords: Sequence[int], memory_bytes: int | None = None) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray]:
    """(geometry, smem offsets, global byte offsets, written?) of a store of ``spec``'s box at ``coords``: the
    element map of a load, with dim 0's bound widened to the row's next 16-byte boundary (measured: tmakit/layout/tma_reduce.py's docstring).
    Interleaved maps keep the load's bounds (their dim 0 is whole 16/32-byte slices already), and so do row
    pitches that are not multiples of 16 bytes (only the cp.async twin expresses those; it writes them exactly). With
    ``memory_bytes``, a store that would write past the end of the caller's memory is refused."""
    pitch_ok = len(spec.dims) == 1 or int(spec.strides[0]) % 16 == 0  # every map TMA encodes; see box_store.cuh
    if Interleave.parse(getattr(spec, "interleave", 0)) is Interleave.NONE and pitch_ok:
        size = DataType.parse(spec.dtype).size
        dims = [int(d) for d in spec.dims]
        dims[0] = -(-dims[0] * size // 16) * 16 // size
        spec = SimpleNamespace(dtype=spec.dtype, dims=dims, strides=list(spec.strides), box=list(spec.box),
                               element_strides=list(spec.element_strides), swizzle=spec.swizzle,
                               interleave=getattr(spec, "interleave", 0), oob_fill=getattr(spec, "oob_fill", 0))
    geo, soff, goff, inb = _element_map(spec, coords)
    if memory_bytes is not None and inb.any() and int(goff[inb].max()) + geo.elem_size > memory_bytes:
        raise InvalidArgumentError("memory", f"{memory_bytes} bytes", f"is too small: the store writes up to byte "
                                   f"{int(goff[inb].max()) + geo.elem_size} (TMA writes dim 0 up to the row's next "
                                   "16-byte boundary)", "pass the tensor's whole extent, rounded up to 16 bytes")
    return geo, soff, goff, inb


def tma_store(spec: Any, memory: np.ndarray, coords: Sequence[int], image: np.ndarray) -> np.ndarray:
    """Apply a TMA tile store of ``image`` at ``coords`` to ``memory`` in place (OOB elements past the far
    edges are dropped, except along dim 0 up to the row's next 16-byte boundary, which the hardware writes:
    ``store_element_map``; a negative start is refused, as the hardware faults there:
    ``check_store_start``)."""
    spec = _model(spec)
    coords = _coords(coords, len(spec.box))
    check_store_start(coords)
    if not (isinstance(memory, np.ndarray) and memory.flags.c_contiguous and memory.flags.writeable
            and not memory.dtype.hasobject):
        raise InvalidArgumentError("memory", type(memory).__name__, "must be a writable C-contiguous numpy array "
                                   "(the store writes into it in place)", "pass numpy.ascontiguousarray(...) and use the result")
    geo, soff, goff, inb = store_element_map(spec, coords, memory.nbytes)
    if not isinstance(image, np.ndarray) or image.dtype != np.uint8 or image.size != geo.smem_bytes:
        got = (f"{image.dtype} array of {image.size} elements" if isinstance(image, np.ndarray)
               else type(image).__name__)
        raise InvalidArgumentError("image", got, f"must be a uint8 numpy array of the box's {geo.smem_bytes} "
                                   "shared-memory bytes (values are stored as bytes, never cast)",
                                   "pass the image tma_load_image returns, or array.view(numpy.uint8) of one box")
    mem = memory.reshape(-1).view(np.uint8)
    byte = np.arange(geo.elem_size, dtype=np.int64)
    src = goff[inb][:, None] + byte
    if src.size and src.max() >= mem.size:
        raise InvalidArgumentError("memory", f"{mem.size} bytes", f"is too small: the box writes up to byte "
                                   f"{int(src.max())}", "pass the tensor's whole extent, starting at its base address")
    mem[src] = image.reshape(-1)[(soff[inb][:, None] + byte)]
    return memory
