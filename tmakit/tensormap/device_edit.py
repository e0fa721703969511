"""Tensor maps edited on the device: the ``tensormap.replace`` steps that turn one map into another, and a CPU model
of the 128 bytes they leave (PTX ISA "tensormap.replace"; the device side is cuda_src/tmakit/tensormap_replace.cuh).

A kernel that re-points a map per group or per sequence (a grouped GEMM, a paged KV cache) copies a host-encoded
template into shared memory, replaces the fields that change, and publishes the map with tensormap.cp_fenceproxy.
Nothing on the device checks the result, so the host does it here: ``tensormap_replace_steps(target, since=template)``
lists the PTX values that turn ``template`` into ``target`` (a TensorMap the rule checker and the driver accepted),
and ``apply_tensormap_replace(template.descriptor, steps)`` is the descriptor the GPU will hold afterwards.

The bit positions are those the driver uses (tmakit/doctor/tensormap_layout.json, learned from 3,000 driver
encodes on the H100 and driver 13.0) and the GPU test (tests/test_tensormap_replace.py) checks, over >= 1,000
random edits, that the hardware writes exactly these bytes and that they equal a driver encode of the target.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from ..dtypes import DataType
from ..errors import InvalidArgumentError

FIELDS = ("global_address", "rank", "box_dim", "global_dim", "global_stride", "element_stride", "elemtype",
          "interleave_layout", "swizzle_mode", "fill_mode")  # the device kernel's field codes are these indices
_ORDERED = ("box_dim", "global_dim", "global_stride", "element_stride")  # the fields that take an ordinal

# PTX's elemtype numbering (the descriptor's), which differs from CUtensorMapDataType's for f64, bf16, f32.ftz.
PTX_ELEMTYPE = {DataType.UINT8: 0, DataType.UINT16: 1, DataType.UINT32: 2, DataType.INT32: 3, DataType.UINT64: 4,
                DataType.INT64: 5, DataType.FLOAT16: 6, DataType.FLOAT32: 7, DataType.FLOAT32_FTZ: 8,
                DataType.FLOAT64: 9, DataType.BFLOAT16: 10, DataType.TFLOAT32: 11, DataType.TFLOAT32_FTZ: 12}
_LIMITS = {"rank": 5, "elemtype": 13, "interleave_layout": 3, "swizzle_mode": 4, "fill_mode": 2}
# (lowest, highest, rule) of the fields the descriptor stores in a narrower form: what the bits can hold
_RANGES = {"global_address": (0, (1 << 64) - 1, "a 64-bit address"),
           "box_dim": (1, 256, "1 <= value <= 256"), "element_stride": (1, 8, "1 <= value <= 8"),
           "global_dim": (1, 1 << 32, "1 <= value <= 2^32"),
           "global_stride": (0, (1 << 40) - 16, "a multiple of 16 below 2^40; 0 past the rank")}


@dataclass(frozen=True)
class ReplaceStep:
    """One ``tensormap.replace.tile.<field>`` with PTX's operands: ``ord`` (the dimension, innermost first, for
    box_dim / global_dim / global_stride / element_stride) and ``value`` (PTX's new_val)."""

    field: str
    value: int
    ord: int = 0

    def __post_init__(self) -> None:
        if self.field not in FIELDS:
            raise InvalidArgumentError("field", self.field, "is not a tensormap.replace field",
                                       f"use one of {', '.join(FIELDS)}")
        if type(self.value) is not int and not hasattr(self.value, "__index__"):
            raise InvalidArgumentError("value", self.value, "must be an integer", "pass PTX's new_val as an int")
        object.__setattr__(self, "value", int(self.value))
        if not 0 <= self.ord < 5 or (self.ord and self.field not in _ORDERED):
            raise InvalidArgumentError("ord", self.ord, f"is out of range for {self.field}", "use 0..4 for box_dim, "
                                       "global_dim, global_stride and element_stride, 0 for the other fields")
        if self.field == "global_stride" and self.ord > 3:
            raise InvalidArgumentError("ord", self.ord, "is out of range for global_stride (the strides of "
                                       "dimensions 1..4: ord 0..3)", "use ord 0..3")
        lo, hi, rule = _RANGES.get(self.field, (0, _LIMITS.get(self.field, 1 << 32) - 1, ""))
        if not lo <= self.value <= hi or (self.field == "global_stride" and self.value % 16):
            what = rule or f"{lo} <= value <= {hi}"
            raise InvalidArgumentError("value", self.value, f"is out of range for {self.field} ({what})",
                                       "pass the value tensormap_replace_steps gives")

    @property
    def ptx(self) -> str:
        """The instruction, with the map in shared memory (the global form differs in the state space only)."""
        width = "b64" if self.field in ("global_address", "global_stride") else "b32"
        operands = f"{self.ord}, {self.value:#x}" if self.field in _ORDERED else f"{self.value:#x}"
        return f"tensormap.replace.tile.{self.field}.shared::cta.b1024.{width} [map], {operands};"


def _target_values(tm: Any, padded: bool = False) -> list[ReplaceStep]:
    """Every field's step for ``tm``; ``padded``: also the dimensions past its rank, at the values a driver encode
    leaves there (a count of 1, a stride of 0: all-zero bits)."""
    if getattr(tm, "mode", "tiled") != "tiled":
        raise InvalidArgumentError("target", "an im2col map", "cannot be built by tensormap.replace (tile mode only)",
                                   "build tiled maps on the device; encode im2col maps on the host")
    dtype = DataType.parse(tm.dtype)
    if dtype not in PTX_ELEMTYPE:
        raise InvalidArgumentError("target", f"a {dtype.short} map", "has an element type tensormap.replace cannot "
                                   "set on sm_90", "use one of " + ", ".join(d.short for d in PTX_ELEMTYPE))
    pad = 5 - tm.rank if padded else 0
    steps = [ReplaceStep("global_address", int(tm.address)), ReplaceStep("rank", tm.rank - 1)]
    steps += [ReplaceStep("box_dim", int(b), i) for i, b in enumerate(list(tm.box) + [1] * pad)]
    steps += [ReplaceStep("global_dim", int(d), i) for i, d in enumerate(list(tm.dims) + [1] * pad)]
    steps += [ReplaceStep("global_stride", int(s), i) for i, s in enumerate(list(tm.strides) + [0] * min(pad, 4))]
    steps += [ReplaceStep("element_stride", int(e), i) for i, e in enumerate(list(tm.element_strides) + [1] * pad)]
    steps += [ReplaceStep("elemtype", PTX_ELEMTYPE[dtype]), ReplaceStep("interleave_layout", int(tm.interleave)),
              ReplaceStep("swizzle_mode", int(tm.swizzle)), ReplaceStep("fill_mode", int(tm.oob_fill))]
    return steps


def tensormap_replace_steps(target: Any, *, since: Any = None) -> tuple[ReplaceStep, ...]:
    """The steps that make a map equal ``target`` (a tiled TensorMap): every field's (``since=None``: the map is
    built from 128 zero bytes), or only those that differ from the TensorMap ``since`` (a template the kernel
    starts from), the dimensions past a smaller target's rank included (cleared as a driver encode leaves them).
    Its L2 promotion is not a replaceable field: a map built from zeros has none."""
    if since is None:
        return tuple(_target_values(target))
    if int(since.l2_promotion) != int(target.l2_promotion):
        raise InvalidArgumentError("since", f"a map with L2 promotion {since.l2_promotion!r}", "differs from the target "
                                   f"in L2 promotion ({target.l2_promotion!r}), which tensormap.replace cannot set",
                                   "encode the template with the target's l2_promotion")
    tf32 = (DataType.TFLOAT32, DataType.TFLOAT32_FTZ)
    if DataType.parse(since.dtype) in tf32 and DataType.parse(target.dtype) not in tf32:
        raise InvalidArgumentError("since", f"a {DataType.parse(since.dtype).short} map", "cannot become a "
                                   f"{DataType.parse(target.dtype).short} map on the device: tensormap.replace.elemtype "
                                   "sets the tf32 rounding bit and no value clears it (measured on the H100), so "
                                   "the loads would still round to tf32", "start from a template of another type, "
                                   "or from 128 zero bytes (since=None)")
    have = {(s.field, s.ord): s.value for s in _target_values(since, padded=True)}
    return tuple(s for s in _target_values(target, padded=True) if have.get((s.field, s.ord)) != s.value)


# Where each field lives in the descriptor (bit offsets, little-endian over the 128 bytes). The driver also
# writes two values derived from the others, which no tensormap.replace touches (measured on the H100): the box's
# bytes, prod(box[i] // element_strides[i]) * element size, from bit 512, and a one-hot of the swizzle at bits 580
# (none), 584 (32B), 585 (64B), 586 (128B). DERIVED_BITS lists them.
DERIVED_BITS = tuple(range(512, 536)) + (580, 584, 585, 586)


def _put(bits: int, offset: int, width: int, value: int) -> int:
    mask = ((1 << width) - 1) << offset
    return (bits & ~mask) | ((value << offset) & mask)


def _apply(bits: int, s: ReplaceStep) -> int:
    f, v, o = s.field, s.value, s.ord
    if f == "global_address":
        return _put(bits, 0, 64, v)
    if f == "rank":
        return _put(bits, 68, 3, v)
    if f == "box_dim":
        return _put(bits, 440 + 8 * o, 8, v - 1)
    if f == "global_dim":
        return _put(bits, 256 + 32 * o, 32, v - 1)
    if f == "global_stride":
        return _put(_put(bits, 96 + 32 * o, 32, v >> 4), 224 + 4 * o, 4, v >> 36)
    if f == "element_stride":
        return _put(bits, 416 + 3 * o, 3, v - 1)
    if f == "elemtype":  # tf32 is f32 (or f32.ftz) with the rounding bit 80 set; no value clears that bit
        low, tf32 = {11: (7, 1), 12: (8, 1)}.get(v, (v, 0))
        return _put(bits, 71, 4, low) | (tf32 << 80)
    if f == "interleave_layout":
        return _put(bits, 75, 2, v)
    if f == "swizzle_mode":
        return _put(bits, 77, 2, v)
    return _put(bits, 79, 1, v)  # fill_mode


def apply_tensormap_replace(descriptor: bytes | None, steps: Iterable[ReplaceStep]) -> bytes:
    """The 128 bytes a map holds after ``steps`` ran on ``descriptor`` (None: 128 zero bytes), in order."""
    if descriptor is None:
        descriptor = bytes(128)
    if not isinstance(descriptor, (bytes, bytearray, memoryview)) or len(descriptor) != 128:
        raise InvalidArgumentError("descriptor", f"{type(descriptor).__name__} of {len(descriptor) if hasattr(descriptor, '__len__') else '?'} bytes",
                                   "must be 128 bytes (a CUtensorMap)", "pass TensorMap.descriptor, or None")
    bits = int.from_bytes(bytes(descriptor), "little")
    for s in steps:
        if not isinstance(s, ReplaceStep):
            raise InvalidArgumentError("steps", repr(s)[:60], "must hold ReplaceStep objects",
                                       "build them with tensormap_replace_steps or ReplaceStep(field, value, ord)")
        bits = _apply(bits, s)
    return bits.to_bytes(128, "little")


_DERIVED_MASK = sum(1 << b for b in DERIVED_BITS)


def same_fields(a: bytes, b: bytes) -> bool:
    """Whether two descriptors agree on every field but the driver's derived ones (DERIVED_BITS)."""
    return (int.from_bytes(bytes(a), "little") ^ int.from_bytes(bytes(b), "little")) & ~_DERIVED_MASK == 0


def steps_as_records(steps: Sequence[ReplaceStep]) -> list[tuple[int, int, int]]:
    """(field code, ord, value) per step, as the device kernel reads them."""
    return [(FIELDS.index(s.field), s.ord, s.value) for s in steps]
