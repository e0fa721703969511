"""The wgmma shared-memory matrix descriptor, derived from the TensorMap that fills the stage.

``wgmma.mma_async`` reads its shared-memory operands through a 64-bit descriptor (PTX ISA 9.7.15.5.1.2.2, "Matrix
Descriptor Format"): bits 0-13 start address >> 4, 16-29 leading-dimension byte offset (LBO) >> 4, 32-45 stride
byte offset (SBO) >> 4, 49-51 base offset, 62-63 swizzle mode (0 none, 1 128B, 2 64B, 3 32B). Every operand type
(bf16, f16, tf32, e4m3, e5m2, s8, u8) reads 32 bytes of K per instruction: k16 for 16-bit types, k8 for tf32, k32
for 8-bit ones; only 16-bit operands may be MN-major. What LBO and SBO mean depends on the operand's major-ness and
the swizzle ("canonical layouts", PTX ISA 9.7.15.5.1.2), with e the element size, W the swizzle span in bytes
(32/64/128) and T = 16 / e elements per 16 bytes:

    K-major, swizzled:   (mn, k) -> start + (mn // 8) * SBO + (mn % 8) * W + k * e           (LBO unused)
    K-major, none:       (mn, k) -> start + (mn // 8) * SBO + (k // T) * LBO + (mn % 8) * 16 + (k % T) * e
    MN-major, swizzled:  (mn, k) -> start + (mn // (W/e)) * LBO + (k // 8) * SBO + (k % 8) * W + (mn % (W/e)) * e
    MN-major, none:      (mn, k) -> start + (mn // T) * SBO + (k // 8) * LBO + (k % 8) * 16 + (mn % T) * e

and a swizzled address is then permuted like TMA's (16-byte chunk bits [4, 4 + log2(W/16)) XOR bits [7, ...)), the
pattern's rows counted from where it starts: the base offset b = (pattern start >> 7) & 7 says where that is when
it is not on the pattern's 1024/512/256-byte repeat boundary (a stage written by threads at a 128-byte aligned
address; TMA writes swizzled boxes only to aligned ones), and the chunk bits XOR ((address >> 7) - b).

A stage is one or more boxes of one TensorMap placed ``box_bytes`` apart: K-major boxes are (rows, K chunk) with
the K chunk one swizzle span wide (8 elements without swizzle), successive boxes advancing along K; MN-major boxes
are (K rows, MN chunk) with the MN chunk one span wide, successive boxes advancing along MN. For that geometry
``wgmma_descriptors`` gives the descriptor of every instruction's k-slice, ``operand_offsets`` the shared-memory
byte each (mn, k) element of a slice is read from, ``read_operand`` reads a stage image through a descriptor (with
``tmakit.tma_load_image`` that closes the loop on the CPU), and ``check_wgmma_descriptor`` explains, rule by rule
in the Violation style, why a hand-derived descriptor will not read the matrix the map wrote.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from .._sequences import is_sequence
from ..errors import InvalidArgumentError
from ..tensormap.enums import Swizzle
from ..tensormap.rules import Violation

_REF = "PTX ISA 9.7.15.5.1.2.2 Matrix Descriptor Format"
# TMA swizzle -> (descriptor swizzle field, span W in bytes)
_MODES = {Swizzle.NONE: (0, 16), Swizzle.B32: (3, 32), Swizzle.B64: (2, 64), Swizzle.B128: (1, 128)}
_SPAN_OF_FIELD = {0: 16, 1: 128, 2: 64, 3: 32}
_ALIGN = {16: 128, 32: 256, 64: 512, 128: 1024}  # stage alignment per span (none: TMA's 128)


@dataclass(frozen=True)
class WgmmaDescriptor:
    """One descriptor, its fields, and which k16 slice of the stage it reads."""

    value: int
    start_address: int
    lbo: int
    sbo: int
    base_offset: int
    swizzle_field: int
    k_slice: int

    @staticmethod
    def encode(start_address: int, lbo: int, sbo: int, swizzle_field: int, base_offset: int = 0) -> int:
        return (((start_address & 0x3FFFF) >> 4) | (((lbo & 0x3FFFF) >> 4) << 16) | (((sbo & 0x3FFFF) >> 4) << 32)
                | ((base_offset & 7) << 49) | ((swizzle_field & 3) << 62))

    @classmethod
    def decode(cls, value: int, k_slice: int = -1) -> "WgmmaDescriptor":
        return cls(int(value), (value & 0x3FFF) << 4, ((value >> 16) & 0x3FFF) << 4, ((value >> 32) & 0x3FFF) << 4,
                   (value >> 49) & 7, (value >> 62) & 3, k_slice)

    def __str__(self) -> str:
        return (f"0x{self.value:016x} (start 0x{self.start_address:x}, LBO {self.lbo}, SBO {self.sbo}, base offset "
                f"{self.base_offset}, swizzle {('none', '128B', '64B', '32B')[self.swizzle_field]})")


def k_per_instruction(elem: int) -> int:
    """Elements of K one wgmma instruction reads from a stage of ``elem``-byte elements: always 32 bytes."""
    return 32 // elem


@dataclass(frozen=True)
class OperandStage:
    """The geometry of one operand's stage: what wgmma_descriptors derived from the map."""

    role: str  # "A" | "B"
    major: str  # "K" | "MN"
    elem: int
    span: int  # W: 16 (none), 32, 64, 128 bytes
    swizzle_field: int
    box_bytes: int
    box_shape: tuple[int, int]  # numpy order
    mn: int  # MN extent of the stage
    k: int  # K extent of the stage

    @property
    def kslice(self) -> int:
        """Elements of K per instruction (the k of m64nNkK)."""
        return k_per_instruction(self.elem)

    @property
    def lbo(self) -> int:
        if self.major == "K":
            return self.box_bytes if self.span == 16 else 16  # swizzled K-major: unused (1 in 16-byte units)
        return 128 if self.span == 16 else self.box_bytes

    @property
    def sbo(self) -> int:
        if self.major == "K":
            return 128 if self.span == 16 else 8 * self.span
        return self.box_bytes if self.span == 16 else 8 * self.span

    def slice_offset(self, k0: int) -> int:
        """Bytes from the stage start to the descriptor start of the slice beginning at element k0."""
        if self.major == "K":
            per_box = self.box_shape[1]
            return (k0 // per_box) * self.box_bytes + (k0 % per_box) * self.elem
        return k0 * (16 if self.span == 16 else self.span)

    def mn_offset(self, mn0: int) -> int:
        """Bytes from the stage start to the row/column mn0 of MN (a whole core matrix or swizzle chunk in)."""
        if self.major == "K":
            unit, step = 8, self.sbo
        elif self.span == 16:
            unit, step = 16 // self.elem, self.sbo
        else:
            unit, step = self.span // self.elem, self.lbo
        if mn0 % unit:
            raise InvalidArgumentError("mn_offset", mn0, f"must be a multiple of {unit} for a {self.major}-major operand "
                                       f"of this map (a whole {'8-row core matrix' if self.major == 'K' else 'MN chunk'})",
                                       f"use a multiple of {unit}")
        return (mn0 // unit) * step


def _whole(name: str, value: Any, lo: int, hi: int, rule: str, fix: str) -> int:
    """``value`` as an int in [lo, hi] (bools, floats and strings refused), else InvalidArgumentError."""
    if isinstance(value, bool) or not hasattr(value, "__index__") or not lo <= int(value.__index__()) <= hi:
        raise InvalidArgumentError(name, value, rule, fix)
    return int(value.__index__())


def _check_args(tmap: Any, role: Any, major: Any, stage_address: Any, k: Any, mn: Any,
                mn_offset: Any) -> tuple[str, str]:
    """The arguments every descriptor function takes, checked: (role, major) upper-cased. (Whether k and mn_offset
    fit the operand's element size and layout, _stage and OperandStage say.)"""
    if not all(hasattr(tmap, a) for a in ("swizzle", "dtype", "box_shape", "box_bytes")) or \
            getattr(tmap, "mode", "tiled") != "tiled":
        raise InvalidArgumentError("tmap", type(tmap).__name__, "must be a tiled TensorMap (the map whose boxes fill "
                                   "the stage)", "pass tmakit.describe_tensor(..., box=...)'s result")
    names = {"role": (role, ("A", "B"), 'pass role="A" or role="B"'),
             "major": (major, ("K", "MN"), 'pass major="K" (K contiguous) or major="MN"')}
    for name, (value, allowed, fix) in names.items():
        if not isinstance(value, str) or value.upper() not in allowed:
            raise InvalidArgumentError(name, value, f"must be one of {', '.join(map(repr, allowed))}", fix)
    _whole("stage_address", stage_address, 0, (1 << 18) - 1, "must be a shared-memory byte address: an int in "
           "[0, 2**18) (the descriptor holds bits 4-17)", "pass the stage's shared address, e.g. stage_address=0")
    _whole("k", k, 1, 1 << 16, "must be a positive int: the K extent of the stage in elements", "use 64")
    if mn is not None:
        _whole("mn", mn, 8, 256, "must be None or the MN extent wgmma reads (8..256)", "use 64 for A, the N for B")
    _whole("mn_offset", mn_offset, 0, 256, "must be an int in [0, 256]: the first MN row/column the instruction "
           "reads", "use 0, or 64 for the second consumer of a 128-row stage")
    return role.upper(), major.upper()


def _descriptor_values(descriptors: Any) -> list[int]:
    """Each descriptor as its 64-bit value (WgmmaDescriptor or int), else InvalidArgumentError naming the entry."""
    if not is_sequence(descriptors):
        raise InvalidArgumentError("descriptors", descriptors, "must be a sequence of 64-bit descriptors (ints or "
                                   "WgmmaDescriptor), one per k-slice", "pass e.g. [d.value for d in "
                                   "tmakit.wgmma_descriptors(tmap, 'A', 'K', stage_address=0)]")
    out = []
    for i, d in enumerate(descriptors):
        value = d.value if isinstance(d, WgmmaDescriptor) else d
        out.append(_whole(f"descriptors[{i}]", value, 0, (1 << 64) - 1, "must be a 64-bit descriptor: an int in "
                          "[0, 2**64) or a WgmmaDescriptor", "pass the descriptor's integer value"))
    return out


def _stage(tmap: Any, role: str, major: str, mn: int | None) -> OperandStage:
    sw = Swizzle.parse(tmap.swizzle)
    if sw not in _MODES:
        raise InvalidArgumentError("tmap.swizzle", sw, "must be none, 32B, 64B or 128B for wgmma",
                                   "describe the tensor with swizzle='128B'")
    field, span = _MODES[sw]
    elem = tmap.dtype.size
    if elem not in (1, 2, 4):
        raise InvalidArgumentError("tmap.dtype", tmap.dtype.name, "must have 1, 2 or 4-byte elements: wgmma reads "
                                   "bf16/f16, tf32 (4 bytes) and e4m3/e5m2/s8/u8 (1 byte)",
                                   "describe the operand with its element type (uint8 for fp8 and int8)")
    if major == "MN" and elem != 2:
        raise InvalidArgumentError("major", major, f"wgmma reads {elem}-byte operands (tf32, fp8, 8-bit integers) "
                                   "K-major only: the transpose immediates are for .f16/.bf16 (PTX ISA 9.7.15.5.2)",
                                   "store the operand with K contiguous and pass major=\"K\"")
    box = tuple(tmap.box_shape[-2:]) if len(tmap.box_shape) >= 2 else (1, tmap.box_shape[0])
    inner = box[1] * elem
    if inner != span:
        raise InvalidArgumentError("tmap.box", box, f"must have an innermost extent of {span} bytes ({span // elem} "
                                   f"elements) for a {major}-major operand with {sw.name} swizzle: one swizzle span per "
                                   "box, further boxes placed box_bytes apart",
                                   f"describe it with box[-1] = {span // elem}")
    want_mn = mn or (64 if role == "A" else (box[0] if major == "K" else None))
    if major == "K":
        stage_mn, stage_k = box[0], None
    else:
        stage_mn, stage_k = None, box[0]
    return OperandStage(role, major, elem, span, field, int(tmap.box_bytes), box, want_mn or stage_mn or box[1],
                        stage_k or 0)


def _base_offset(stage_address: int, span: int) -> int:
    """The descriptor's base offset for a stage whose swizzle pattern starts at ``stage_address``."""
    if span == 16:
        if stage_address % 16:
            raise InvalidArgumentError("stage_address", hex(stage_address), "must be 16-byte aligned (a wgmma "
                                       "descriptor's start address is in 16-byte units)", "align the stage to 16 bytes")
        return 0
    if stage_address % _ALIGN[span] == 0:
        return 0
    if stage_address % 128:
        raise InvalidArgumentError("stage_address", hex(stage_address), "must be 128-byte aligned for a swizzled stage "
                                   f"(its pattern's rows are 128 bytes; at a {_ALIGN[span]}-byte boundary the base "
                                   "offset is 0)", f"align the stage to {_ALIGN[span]} bytes (or at least 128)")
    return (stage_address >> 7) & 7


def wgmma_descriptors(tmap: Any, role: str = "A", major: str = "K", *, stage_address: int = 0, k: int = 64,
                      mn: int | None = None, mn_offset: int = 0) -> list[WgmmaDescriptor]:
    """The descriptor of each instruction's k-slice (32 bytes of K) of a stage of ``k`` elements of K filled with
    boxes of ``tmap``.

    ``stage_address``: the stage's shared-memory address. TMA writes swizzled boxes to addresses aligned to the
    swizzle's repeat (1024/512/256 bytes: base offset 0); a stage laid out the same way by threads may start at any
    128-byte boundary, its descriptors then carry the base offset. ``mn``: the MN extent wgmma reads (64 for A; the
    instruction's N for B). ``mn_offset``: the first MN row/column the instruction reads (e.g. 64 for the second
    consumer warpgroup of a 128-row A stage)."""
    role, major = _check_args(tmap, role, major, stage_address, k, mn, mn_offset)
    st = _stage(tmap, role, major, mn)
    if k % st.kslice:
        raise InvalidArgumentError("k", k, f"must be a positive multiple of {st.kslice} (one wgmma k-slice of "
                                   f"{st.elem}-byte elements reads 32 bytes of K)", f"use {4 * st.kslice}")
    base = _base_offset(stage_address, st.span)
    first = stage_address + st.mn_offset(mn_offset)
    out = []
    for i in range(k // st.kslice):
        start = first + st.slice_offset(st.kslice * i)
        out.append(WgmmaDescriptor.decode(WgmmaDescriptor.encode(start, st.lbo, st.sbo, st.swizzle_field, base), i))
    return out


def descriptor_define(descriptors: Sequence[WgmmaDescriptor]) -> str:
    """The descriptors as a C list of 64-bit literals: the value of a kernel's define (cuda_src/gemm.cu's
    TMAKIT_GEMM_DESC_A, ...), read there with tmakit::list_item and moved to the stage's address with
    wgmma_desc_rebase."""
    return ", ".join(f"0x{d.value:016x}ull" for d in descriptors)


def _swizzle(addr: np.ndarray, span: int, base_offset: int = 0) -> np.ndarray:
    if span <= 16:
        return addr
    mask = span // 16 - 1
    return addr ^ ((((addr >> 7) - base_offset) & mask) << 4)


def operand_offsets(descriptor: int, major: str, mn: int, *, elem: int = 2) -> np.ndarray:
    """(mn, 32 / elem) array: the shared-memory byte address each element (row mn, column k) of one instruction's
    k-slice is read from, by the canonical layout the descriptor names."""
    d = WgmmaDescriptor.decode(descriptor)
    span = _SPAN_OF_FIELD[d.swizzle_field]
    t = 16 // elem
    m = np.arange(mn, dtype=np.int64)[:, None]
    kk = np.arange(k_per_instruction(elem), dtype=np.int64)[None, :]
    s = d.start_address
    if str(major).upper() == "K":
        if span == 16:
            addr = s + (m // 8) * d.sbo + (kk // t) * d.lbo + (m % 8) * 16 + (kk % t) * elem
        else:
            addr = s + (m // 8) * d.sbo + (m % 8) * span + kk * elem
    else:
        if span == 16:
            addr = s + (m // t) * d.sbo + (kk // 8) * d.lbo + (kk % 8) * 16 + (m % t) * elem
        else:
            per = span // elem
            addr = s + (m // per) * d.lbo + (kk // 8) * d.sbo + (kk % 8) * span + (m % per) * elem
    return _swizzle(addr, span, d.base_offset)


def read_operand(image: np.ndarray, image_address: int, descriptors: Sequence[Any], major: str, mn: int, *,
                 dtype: Any = np.uint16) -> np.ndarray:
    """The (mn, (32 / itemsize) * len(descriptors)) matrix wgmma reads from ``image`` (bytes of shared memory
    starting at ``image_address``) through ``descriptors`` (one per k-slice): its element bit patterns as ``dtype``."""
    dt = np.dtype(dtype)
    img = np.ascontiguousarray(image).view(np.uint8).ravel()
    cols = []
    for desc in descriptors:
        value = desc.value if isinstance(desc, WgmmaDescriptor) else int(desc)
        off = operand_offsets(value, major, mn, elem=dt.itemsize) - image_address
        if off.min() < 0 or off.max() + dt.itemsize > img.size:
            raise InvalidArgumentError("descriptors", str(WgmmaDescriptor.decode(value)),
                                       f"reads bytes {int(off.min())}..{int(off.max())} outside the {img.size}-byte image",
                                       "check the start address and LBO/SBO (check_wgmma_descriptor explains them)")
        b = img[off[..., None] + np.arange(dt.itemsize)]
        cols.append(np.ascontiguousarray(b).view(dt)[..., 0])
    return np.concatenate(cols, axis=1)


def check_wgmma_descriptor(tmap: Any, role: str, major: str, descriptors: Sequence[Any], *, stage_address: int,
                           k: int = 64, mn: int | None = None, mn_offset: int = 0,
                           tma_box: Sequence[int] | None = None) -> list[Violation]:
    """Why ``descriptors`` (one per k-slice, ints or WgmmaDescriptor) will not read the operand that boxes of
    ``tmap`` wrote at ``stage_address``: a list of Violations (empty when they match), each with its fix."""
    out: list[Violation] = []
    role_u, major_u = _check_args(tmap, role, major, stage_address, k, mn, mn_offset)
    values = _descriptor_values(descriptors)
    sw = Swizzle.parse(tmap.swizzle)
    box = tuple(tmap.box_shape[-2:])
    elem = tmap.dtype.size
    span = _MODES.get(sw, (None, None))[1]
    if span is not None and box[1] * elem != span:
        hint = ("a K-major operand's box is (rows, K chunk)" if major_u == "K"
                else "an MN-major operand's box is (K rows, MN chunk)")
        looks = "MN" if major_u == "K" else "K"
        out.append(Violation("wgmma.major_vs_box", "tmap.box", box,
                             f"{hint} with the chunk one swizzle span ({span} bytes = {span // elem} elements) wide; "
                             f"this box's innermost extent is {box[1] * elem} bytes (is the operand {looks}-major, or the "
                             "box transposed?)",
                             f"describe the tensor with box[-1] = {span // elem}, or pass major=\"{looks}\" if the "
                             "tensor's contiguous dimension is that one", _REF))
        return out
    if major_u == "K" and box[0] % 8:
        out.append(Violation("wgmma.major_vs_box", "tmap.box", box, f"K-major rows come in 8-row core matrices; "
                             f"{box[0]} rows is not a multiple of 8", "use a multiple of 8 rows (64 for A)", _REF))
    align = _ALIGN[span]
    if stage_address % align:
        out.append(Violation("wgmma.stage_alignment", "stage_address", hex(stage_address),
                             f"a {sw.name} stage must start on a {align}-byte boundary (the swizzle pattern repeats "
                             f"there; wgmma's base offset is 0 for aligned stages and TMA writes the pattern from an "
                             f"aligned base)", f"align the stage to {align} bytes (align_shared(p, {align}))", _REF))
        return out  # TMA cannot write the map's boxes there: no descriptor reads them back
    want = wgmma_descriptors(tmap, role_u, major_u, stage_address=stage_address, k=k, mn=mn, mn_offset=mn_offset)
    if len(values) != len(want):
        out.append(Violation("wgmma.k_advance", "descriptors", len(values),
                             f"a stage of K = {k} needs {len(want)} k-slices of {k_per_instruction(elem)} elements "
                             "(32 bytes of K per instruction)", f"pass {len(want)} descriptors", _REF))
    names = ("none", "128B", "64B", "32B")
    for i, (got_raw, w) in enumerate(zip(values, want)):
        got = WgmmaDescriptor.decode(got_raw, i)
        p = f"descriptors[{i}]"
        if got.swizzle_field != w.swizzle_field:
            out.append(Violation("wgmma.swizzle_vs_map", p + ".swizzle", names[got.swizzle_field],
                                 f"the map writes the stage with {sw.name} swizzle, so the descriptor's swizzle mode (bits "
                                 f"62-63) must be {names[w.swizzle_field]} (field {w.swizzle_field}; note the "
                                 "descriptor's order 1=128B, 2=64B, 3=32B is not the map's)",
                                 f"set bits 62-63 to {w.swizzle_field}", _REF))
        if got.start_address != w.start_address:
            delta = got.start_address - stage_address
            row = span if span > 16 else 16
            step = (f"+32 bytes per k-slice ({k_per_instruction(elem)} elements) inside a box of {box[1]} elements, "
                    f"boxes {tmap.box_bytes} bytes apart" if major_u == "K"
                    else f"+{16 * row} bytes per k-slice: 16 k-rows of {row} bytes")
            out.append(Violation("wgmma.k_advance", p + ".start_address", hex(got.start_address),
                                 f"k-slice {i} starts {w.start_address - stage_address} bytes into the stage for this "
                                 f"map ({major_u}-major: {step}); this descriptor starts {delta} bytes in",
                                 f"start at stage + {w.start_address - stage_address}", _REF))
        if got.sbo != w.sbo:
            what = ("8-row core-matrix groups along MN" if major_u == "K" else
                    "8-k-row groups" if span > 16 else "MN groups of 8 elements (the next box)")
            out.append(Violation("wgmma.sbo", p + ".sbo", got.sbo, f"SBO is the byte distance between {what}: {w.sbo} "
                                 f"for this map", f"set SBO = {w.sbo}", _REF))
        if got.lbo != w.lbo and not (major_u == "K" and span > 16):  # swizzled K-major ignores LBO
            what = ("the next 8 elements of K (the next box)" if major_u == "K" else
                    f"the next {span // elem}-element MN chunk (the next box)" if span > 16 else "8-k-row groups")
            out.append(Violation("wgmma.lbo", p + ".lbo", got.lbo, f"LBO is the byte distance to {what}: {w.lbo} for "
                                 "this map", f"set LBO = {w.lbo}", _REF))
        if got.base_offset != w.base_offset:
            where = ("an aligned stage has base offset 0" if w.base_offset == 0 else
                     f"the stage's swizzle pattern starts at {hex(stage_address)}, not on its {align}-byte repeat "
                     f"boundary: base offset = (start >> 7) & 7 = {w.base_offset}")
            out.append(Violation("wgmma.base_offset", p + ".base_offset", got.base_offset, where,
                                 f"set bits 49-51 to {w.base_offset}", _REF))
    return out


__all__ = ["OperandStage", "WgmmaDescriptor", "check_wgmma_descriptor", "descriptor_define", "k_per_instruction",
           "operand_offsets", "read_operand", "wgmma_descriptors"]
