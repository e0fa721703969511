"""The rule checker: every rule of cuTensorMapEncodeTiled / cuTensorMapEncodeIm2col, checked on the CPU.

All rules are evaluated and every violation is reported (not only the first). Parameters are in the
driver's order and units: ``dims``, ``box``, ``element_strides`` innermost first; ``strides`` in bytes for
dims 1..rank-1. Each rule has a stable id, the parameter and value it concerns, the rule in words, the
driver-doc reference (or, for rules the driver enforces without documenting them, the evidence) and a fix.
The driver-truth corpus in tests/data/ (recorded on an H100) checks that the verdicts agree.

Two halves: ``tiled_ok`` tests every tiled rule with plain comparisons on parsed values and builds nothing
(describe_tensor's path); ``collect_tiled`` builds the Violation of each broken rule, all of them, only when the
pass test fails. ``check_tiled`` = parse + pass test + collect; tests/test_rules.py checks the halves agree.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from ..arch import Arch
from ..dtypes import DataType
from ..errors import InvalidArgumentError
from .enums import Interleave, L2Promotion, OOBFill, Swizzle
from .spec import Im2colSpec, TiledSpec
from .spec import int_sequence as _int_list

TILED_DOC = "cuTensorMapEncodeTiled"
IM2COL_DOC = "cuTensorMapEncodeIm2col"
MAX_RANK = 5
MAX_DIM = 1 << 32
MAX_STRIDE = 1 << 40
MAX_BOX = 256
MAX_BOX_BYTES = 228 * 1024  # observed: accepted at 233472 B, rejected from 235520 B (= an SM's 228 KiB)
MAX_ELEMENT_STRIDE = 8
MAX_CHANNELS = 256
MAX_PIXELS = 1024
IM2COL_CORNER_RANGE = {3: (-32768, 32767), 4: (-128, 127), 5: (-16, 15)}


@dataclass(frozen=True)
class Violation:
    """One broken rule. ``str()`` gives a one-line explanation with the fix."""

    rule: str  # stable id, e.g. "box.inner_bytes_vs_swizzle"
    parameter: str  # e.g. "box[0]"
    value: Any
    message: str  # the rule in plain words
    fix: str
    reference: str  # driver documentation section, or the evidence for an observed rule
    observed: bool = False  # True for rules the driver enforces but does not document
    extra: dict = field(default_factory=dict, compare=False)

    def __str__(self) -> str:
        tag = " [observed]" if self.observed else ""
        return f"{self.parameter}={self.value!r}: {self.message} (rule {self.rule}{tag}; {self.reference}). Fix: {self.fix}"

    def as_dict(self) -> dict:
        return {"rule": self.rule, "parameter": self.parameter, "value": _jsonable(self.value),
                "message": self.message, "fix": self.fix, "reference": self.reference, "observed": self.observed}


def _jsonable(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "short"):
        return value.short
    return value


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


class _Collector:
    def __init__(self, reference: str):
        self.reference = reference
        self.items: list[Violation] = []

    def add(self, rule: str, parameter: str, value: Any, message: str, fix: str, *, section: str = "",
            observed: bool = False) -> None:
        ref = section if observed else f"{self.reference}: {section}" if section else self.reference
        self.items.append(Violation(rule, parameter, value, message, fix, ref, observed))


def _common_checks(v: _Collector, kind: str, dtype: DataType, address: int, dims: list[int], strides: list[int],
                   element_strides: list[int], interleave: Interleave, swizzle: Swizzle, oob: OOBFill,
                   arch: Arch) -> None:
    rank = len(dims)
    size = dtype.size
    # --- architecture -------------------------------------------------------------------------------
    if not arch.has_tma:
        v.add("arch.no_tma", "arch", arch.sm, f"tensor maps need compute capability 9.0 or newer; {arch.sm} has no TMA",
              "run on sm_90+ or use tmakit's cp.async backend (backend='cp.async'), which needs no descriptor",
              section="Tensor map objects are only supported on devices of compute capability 9.0 or higher")
    if swizzle.blackwell_only and not arch.is_blackwell_or_newer:
        v.add("arch.swizzle_blackwell", "swizzle", swizzle.short,
              f"swizzle {swizzle.short} exists only on Blackwell (sm_100+); the driver rejects it on {arch.sm}",
              "use swizzle '128B' on Hopper", observed=True,
              section="observed: every 128B_ATOM_* swizzle is CUDA_ERROR_INVALID_VALUE on an H100, driver 13.0")
    if dtype.blackwell_only and not arch.is_blackwell_or_newer:
        v.add("arch.dtype_blackwell", "dtype", dtype.short,
              f"packed type {dtype.short} exists only on Blackwell (sm_100+); the driver rejects it on {arch.sm}",
              "move the data as uint8 on Hopper", observed=True,
              section="observed: 16U4_*/16U6_* are CUDA_ERROR_INVALID_VALUE on an H100, driver 13.0")
    # --- rank ---------------------------------------------------------------------------------------
    lo = 3 if kind == "im2col" else 1
    if not lo <= rank <= MAX_RANK:
        v.add("rank.range", "rank", rank, f"the rank (len(dims)) must be between {lo} and {MAX_RANK}",
              "reshape the tensor (merge or split dimensions)" if rank > MAX_RANK else
              f"add outer dimensions of size 1 to reach rank {lo}", section="tensorRank")
    if interleave is not Interleave.NONE and rank < 3:
        v.add("rank.interleave", "rank", rank, f"interleave {interleave.short} needs rank >= 3",
              "add outer dimensions of size 1, or use interleave 'none'", section="tensorRank")
    # --- address ------------------------------------------------------------------------------------
    need = 32 if (interleave is Interleave.B32 or dtype in (DataType.U4X16_ALIGN16B, DataType.U6X16_ALIGN16B)) else 16
    why = (" (interleave 32B)" if interleave is Interleave.B32 else f" ({dtype.short})") if need == 32 else ""
    if address % need:
        v.add(f"address.align{need}", "address", hex(address), f"the global address must be {need}-byte aligned{why}",
              f"start the tensor at a {need}-byte boundary (e.g. {hex(_round_up(address, need))}); slice so the first "
              f"element is aligned", section="globalAddress")
    # --- dims ---------------------------------------------------------------------------------------
    for i, d in enumerate(dims):
        if not 1 <= d <= MAX_DIM:
            v.add("dims.range", f"dims[{i}]", d, "every dimension must be between 1 and 2^32",
                  "drop empty tensors before describing them" if d < 1 else "split the dimension", section="globalDim")
    if dims:
        if dtype in (DataType.U4X16_ALIGN16B, DataType.U6X16_ALIGN16B) and dims[0] % 128:
            v.add("dims.packed128", "dims[0]", dims[0], f"{dtype.short} needs dims[0] to be a multiple of 128",
                  f"pad dims[0] to {_round_up(dims[0], 128)}", section="globalDim")
        if dtype is DataType.U4X16_ALIGN8B and dims[0] % 2:
            v.add("dims.packed2", "dims[0]", dims[0], f"{dtype.short} needs dims[0] to be even",
                  f"pad dims[0] to {dims[0] + 1}", section="globalDim")
    # --- strides ------------------------------------------------------------------------------------
    if len(strides) != max(rank - 1, 0):
        v.add("strides.length", "strides", strides, f"strides needs rank-1 = {max(rank - 1, 0)} entries (dims 1..rank-1, "
              "bytes); dim 0 is contiguous by definition", "pass one byte stride per outer dimension",
              section="globalStrides")
    granule = 32 if need == 32 else 16
    for i, s in enumerate(strides):
        if s % granule:
            v.add(f"strides.align{granule}", f"strides[{i}]", s, f"every stride must be a multiple of {granule} bytes{why}",
                  f"pad rows: round strides[{i}] up to {_round_up(s, granule)}", section="globalStrides")
        if s < 0:
            v.add("strides.negative", f"strides[{i}]", s, "strides must not be negative (reversed views cannot "
                  "be described)", "describe a forward view or copy the tensor", section="globalStrides")
        elif s >= MAX_STRIDE:
            v.add("strides.max", f"strides[{i}]", s, "every stride must be less than 2^40 bytes",
                  "split the tensor into several tensor maps", section="globalStrides")
    # --- element strides ----------------------------------------------------------------------------
    if len(element_strides) != rank:
        v.add("element_strides.length", "element_strides", element_strides, f"needs rank = {rank} entries",
              "pass one traversal stride per dimension (1 = every element)", section="elementStrides")
    for i, e in enumerate(element_strides):
        if not 1 <= e <= MAX_ELEMENT_STRIDE:
            v.add("element_strides.range", f"element_strides[{i}]", e, "every traversal stride must be between 1 and 8",
                  "use 1..8; take every k-th element with k <= 8", section="elementStrides")
    # --- enum pairings ------------------------------------------------------------------------------
    if oob is OOBFill.NAN_REQUEST_ZERO_FMA and (not dtype.is_float or dtype.is_packed):
        v.add("oob_fill.nan_needs_float", "oob_fill", oob.short, f"NaN fill needs a floating-point type; {dtype.short} is not",
              "use oob_fill 'zero' for integer types", section="oobFill")
    if dtype is DataType.U6X16_ALIGN16B and interleave is not Interleave.NONE:
        v.add("dtype.16u6_no_interleave", "interleave", interleave.short, "16U6_ALIGN16B requires interleave NONE",
              "use interleave 'none'", section="interleave")


def _inner_box_checks(v: _Collector, parameter: str, count: int, dtype: DataType, interleave: Interleave,
                      swizzle: Swizzle, section: str) -> None:
    size = dtype.size
    inner = count * size
    if inner % 16:
        fix_n = _round_up(inner, 16) // size
        if interleave is Interleave.NONE:
            v.add("box.inner_multiple_16", parameter, count,
                  f"{parameter} * element size = {inner} bytes must be a multiple of 16",
                  f"use {parameter} = {fix_n} ({fix_n * size} bytes)", section=section)
        else:
            v.add("box.inner_multiple_16_interleaved", parameter, count,
                  f"{parameter} * element size = {inner} bytes must be a multiple of 16, also with interleave "
                  f"{interleave.short} (the documentation states it only for interleave NONE)",
                  f"use {parameter} = {fix_n} ({fix_n * size} bytes)", observed=True,
                  section="observed on an H100, driver 13.0: every interleaved box with inner bytes not a multiple "
                          "of 16 was rejected (tests/data/tensormap_corpus.jsonl)")
    if interleave is Interleave.NONE and swizzle is not Swizzle.NONE and inner > swizzle.span:
        wider = [s for s in (Swizzle.B32, Swizzle.B64, Swizzle.B128) if s.span >= inner]
        fix = f"use swizzle {wider[0].short} or " if wider else ""
        v.add("box.inner_vs_swizzle", parameter, count,
              f"the inner box ({inner} bytes) must fit the swizzle span of {swizzle.short} ({swizzle.span} bytes)",
              f"{fix}{parameter} <= {swizzle.span // size}", section=section)
    if dtype in (DataType.U4X16_ALIGN16B, DataType.U6X16_ALIGN16B) and count != 128:
        v.add("box.packed128", parameter, count, f"{dtype.short} needs {parameter} == 128", f"use {parameter} = 128",
              section=section)


def _parse_all(dtype, address, interleave, swizzle, l2_promotion, oob_fill, arch):
    if isinstance(address, bool) or not hasattr(address, "__index__"):
        raise InvalidArgumentError("address", address, "must be an integer device address", "pass array.data_ptr()")
    if not 0 <= int(address) < 1 << 64:
        raise InvalidArgumentError("address", address, "must be a 64-bit unsigned device address",
                                   "pass array.data_ptr()")
    return (DataType.parse(dtype, "dtype"), int(address), Interleave.parse(interleave, "interleave"),
            Swizzle.parse(swizzle, "swizzle"), L2Promotion.parse(l2_promotion, "l2_promotion"),
            OOBFill.parse(oob_fill, "oob_fill"), Arch.parse(arch, "arch"))


def check_tiled(dtype: Any, address: int, dims: Sequence[int], strides: Sequence[int], box: Sequence[int],
                element_strides: Sequence[int], *, interleave: Any = "none", swizzle: Any = "none",
                l2_promotion: Any = "none", oob_fill: Any = "none", arch: Any = "sm_90") -> list[Violation]:
    """Every violation of cuTensorMapEncodeTiled's rules; an empty list means the driver will accept it."""
    dt, addr, il, sw, _l2, oob, ar = _parse_all(dtype, address, interleave, swizzle, l2_promotion, oob_fill, arch)
    dims_, strides_, box_, es_ = (_int_list("dims", dims), _int_list("strides", strides), _int_list("box", box),
                                  _int_list("element_strides", element_strides))
    if tiled_ok(dt, addr, dims_, strides_, box_, es_, il, sw, oob, ar):
        return []
    return collect_tiled(dt, addr, dims_, strides_, box_, es_, il, sw, oob, ar)


def collect_tiled(dt: DataType, addr: int, dims_: Sequence[int], strides_: Sequence[int], box_: Sequence[int],
                  es_: Sequence[int], il: Interleave, sw: Swizzle, oob: OOBFill, ar: Arch) -> list[Violation]:
    """Every violation of cuTensorMapEncodeTiled's rules on parsed values, each with its message and fix."""
    v = _Collector(TILED_DOC)
    _common_checks(v, "tiled", dt, addr, dims_, strides_, es_, il, sw, oob, ar)
    rank = len(dims_)
    if len(box_) != rank:
        v.add("box.length", "box", box_, f"box needs rank = {rank} entries", "pass one box size per dimension",
              section="boxDim")
    for i, b in enumerate(box_):
        if not 1 <= b <= MAX_BOX:
            v.add("box.range", f"box[{i}]", b, "every box size must be between 1 and 256",
                  "load the tile in several boxes of <= 256" if b > MAX_BOX else "use a box size >= 1", section="boxDim")
    if box_:
        _inner_box_checks(v, "box[0]", box_[0], dt, il, sw, "boxDim")
    if box_ and len(box_) == len(es_) and all(1 <= b <= MAX_BOX for b in box_) and all(e >= 1 for e in es_):
        driver_bytes = dt.size
        for b, e in zip(box_, es_):
            driver_bytes *= b // e
        if driver_bytes > MAX_BOX_BYTES:
            v.add("box.smem_limit", "box", box_,
                  f"the box is {driver_bytes} bytes as the driver counts it (element size x the product of "
                  f"floor(box[i] / element_strides[i]), dim 0 included), over the {MAX_BOX_BYTES}-byte (228 KiB) "
                  "limit (an SM's shared memory)",
                  "load the tile in several smaller boxes", observed=True,
                  section="observed on an H100, driver 13.0: accepted up to 233472 bytes (228 KiB), rejected from "
                          "235520 bytes, with floor division and element_strides[0] counted even without interleave "
                          "(tests/data/tensormap_corpus.jsonl and a fresh corpus, seed 525431033)")
    return v.items


def check_im2col(dtype: Any, address: int, dims: Sequence[int], strides: Sequence[int], lower_corner: Sequence[int],
                 upper_corner: Sequence[int], channels_per_pixel: int, pixels_per_column: int,
                 element_strides: Sequence[int], *, interleave: Any = "none", swizzle: Any = "none",
                 l2_promotion: Any = "none", oob_fill: Any = "none", arch: Any = "sm_90") -> list[Violation]:
    """Every violation of cuTensorMapEncodeIm2col's rules; an empty list means the driver will accept it."""
    dt, addr, il, sw, _l2, oob, ar = _parse_all(dtype, address, interleave, swizzle, l2_promotion, oob_fill, arch)
    dims_, strides_, es_ = _int_list("dims", dims), _int_list("strides", strides), _int_list("element_strides", element_strides)
    lower, upper = _int_list("lower_corner", lower_corner), _int_list("upper_corner", upper_corner)
    channels = _int_list("channels_per_pixel", [channels_per_pixel])[0]
    pixels = _int_list("pixels_per_column", [pixels_per_column])[0]
    v = _Collector(IM2COL_DOC)
    _common_checks(v, "im2col", dt, addr, dims_, strides_, es_, il, sw, oob, ar)
    rank = len(dims_)
    spatial = max(rank - 2, 0)
    lo, hi = IM2COL_CORNER_RANGE.get(rank, (-16, 15))
    for name, corner in (("lower_corner", lower), ("upper_corner", upper)):
        if len(corner) != spatial:
            v.add(f"{name}.length", name, corner, f"needs rank-2 = {spatial} entries (the spatial dims D, H, W)",
                  "pass one offset per spatial dimension", section=f"pixelBox{'Lower' if name[0] == 'l' else 'Upper'}Corner")
        for i, c in enumerate(corner):
            if not lo <= c <= hi:
                v.add(f"{name}.range", f"{name}[{i}]", c, f"with rank {rank} each corner offset must be in [{lo}, {hi}]",
                      f"clamp to [{lo}, {hi}]", section=f"pixelBox{'Lower' if name[0] == 'l' else 'Upper'}Corner")
    # Without interleave the spatial dims are dims[1..rank-2] (dims[0] is C). With interleave the driver
    # measures the box against dims[0..rank-3] (observed: 726/726 interleaved cases in the corpus).
    first = 0 if il is not Interleave.NONE else 1
    for i in range(min(spatial, len(lower), len(upper))):
        extent = dims_[i + first] + upper[i] - lower[i]
        extent32 = ((extent + (1 << 31)) % (1 << 32)) - (1 << 31)  # the driver's 32-bit signed arithmetic
        if extent32 <= 0:
            wrapped = "" if extent == extent32 else f", {extent} wraps to {extent32} in 32-bit arithmetic"
            d = i + first
            v.add("corners.empty_box", f"upper_corner[{i}]", upper[i],
                  f"the bounding box along dims[{d}] (dims[{d}] + upper - lower = {extent}{wrapped}) "
                  "is empty", f"raise upper_corner[{i}] or lower lower_corner[{i}] so that dims[{d}] + upper - "
                  "lower is between 1 and 2^31 - 1", observed=extent != extent32 or first == 0,
                  section=("pixelBoxUpperCorner: the bounding box must have non-zero area" if extent == extent32 else
                           "observed on an H100, driver 13.0: the extent is computed modulo 2^32 as a signed "
                           "32-bit value (tests/data/tensormap_corpus.jsonl)"))
    if not 1 <= channels <= MAX_CHANNELS:
        v.add("channels.range", "channels_per_pixel", channels, "must be between 1 and 256", "use 1..256",
              section="channelsPerPixel")
    else:
        _inner_box_checks(v, "channels_per_pixel", channels, dt, il, sw, "channelsPerPixel")
    if not 1 <= pixels <= MAX_PIXELS:
        v.add("pixels.range", "pixels_per_column", pixels, "must be between 1 and 1024", "use 1..1024",
              section="pixelsPerColumn")
    elif 1 <= channels <= MAX_CHANNELS and channels * pixels * dt.size > MAX_BOX_BYTES:
        v.add("im2col.smem_limit", "pixels_per_column", pixels,
              f"channels_per_pixel x pixels_per_column x element size = {channels * pixels * dt.size} bytes is over "
              f"the {MAX_BOX_BYTES}-byte (228 KiB) limit (an SM's shared memory)",
              f"use pixels_per_column <= {MAX_BOX_BYTES // (channels * dt.size)}", observed=True,
              section="observed on an H100, driver 13.0 (tests/data/tensormap_corpus.jsonl)")
    return v.items


# ---------------------------------------------------------------------------------------------------------
# The pass test: the same rules as check_tiled, as straight-line comparisons on parsed values that build
# nothing. describe_tensor calls it; only when it says False does check_tiled build the Violations (all of
# them, with fixes). tests/test_rules.py checks the two agree on the driver corpus and on random requests.

_SIZE = {dt: dt.size for dt in DataType}
_FLOAT_UNPACKED = frozenset(dt for dt in DataType if dt.is_float and not dt.is_packed)
_PACKED16 = frozenset((DataType.U4X16_ALIGN16B, DataType.U6X16_ALIGN16B))
_SPAN = {sw: sw.span for sw in Swizzle}
# enum members as module constants: an attribute of an Enum class costs a lookup through its metaclass
_IL_NONE, _IL_B32, _SW_NONE, _OOB_NAN = Interleave.NONE, Interleave.B32, Swizzle.NONE, OOBFill.NAN_REQUEST_ZERO_FMA
_U4_8B, _U6_16B = DataType.U4X16_ALIGN8B, DataType.U6X16_ALIGN16B


def tiled_ok(dt: DataType, address: int, dims: tuple, strides: tuple, box: tuple, element_strides: tuple,
             interleave: Interleave, swizzle: Swizzle, oob: OOBFill, arch: Arch) -> bool:
    """True when ``check_tiled`` would report nothing (parsed enums and int tuples, driver order)."""
    if arch.major < 9 or (arch.major < 10 and (swizzle >= 4 or dt >= 13)):
        return False
    rank = len(dims)
    if not 1 <= rank <= MAX_RANK or len(strides) != rank - 1 or len(box) != rank or len(element_strides) != rank:
        return False
    need = 32 if (interleave is _IL_B32 or dt in _PACKED16) else 16
    if address % need or (interleave is not _IL_NONE and rank < 3):
        return False
    # plain loops over the (at most five) entries: cheaper than min()/max() on such short tuples
    for d in dims:
        if not 1 <= d <= MAX_DIM:
            return False
    for s in strides:
        if s % need or not 0 <= s < MAX_STRIDE:
            return False
    size = _SIZE[dt]
    nbytes = size
    for b, e in zip(box, element_strides):  # equal lengths (checked above)
        if not 1 <= b <= MAX_BOX or not 1 <= e <= MAX_ELEMENT_STRIDE:
            return False
        nbytes *= b // e
    if nbytes > MAX_BOX_BYTES:
        return False
    inner = box[0] * size
    if inner % 16 or (interleave is _IL_NONE and swizzle is not _SW_NONE and inner > _SPAN[swizzle]):
        return False
    if dt >= 13:  # packed types (Blackwell): the rare rules
        if (dt in _PACKED16 and (dims[0] % 128 or box[0] != 128)) or (dt is _U4_8B and dims[0] % 2):
            return False
        if dt is _U6_16B and interleave is not _IL_NONE:
            return False
    if oob is _OOB_NAN and dt not in _FLOAT_UNPACKED:
        return False
    return True


def check_spec(spec: TiledSpec | Im2colSpec, arch: Arch) -> list[Violation]:
    """Every violation of a spec's parameters (``check_tiled`` or ``check_im2col``)."""
    common = dict(interleave=spec.interleave, swizzle=spec.swizzle, l2_promotion=spec.l2_promotion,
                  oob_fill=spec.oob_fill, arch=arch)
    if isinstance(spec, TiledSpec):
        return check_tiled(spec.dtype, spec.address, spec.dims, spec.strides, spec.box, spec.element_strides, **common)
    return check_im2col(spec.dtype, spec.address, spec.dims, spec.strides, spec.lower_corner, spec.upper_corner,
                        spec.channels_per_pixel, spec.pixels_per_column, spec.element_strides, **common)
