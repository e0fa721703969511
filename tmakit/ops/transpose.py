"""``transpose(dst, src)``: dst (C x R) = src (R x C)^T for 1/2/4/8-byte elements (cuda_src/transpose.cu).

The source is read in tiles of 128 or 256 rows by 128 bytes (128B swizzle; ``TMA_TILE_PLANS``,
``DEFAULT_TILE_PLANS``) through the one-source box load, turned with bank-conflict-free shared-memory accesses,
and written as 128B-swizzled boxes through the one-source box store (a TMA store on sm_90, whole-line plain
stores on the cp.async path). TMA describes an array whose base is 16-byte aligned and whose row pitch is a
multiple of 16 bytes. Other pitches, on sm_90:
- src: a pitch that is not a multiple of 16 bytes on an aligned base is read as super-rows of
  k = 16/gcd(pitch, 16) rows (``source_classes``: one TMA box per row class, each row the aligned 16-byte
  window around it, shifted into place in shared memory);
- dst: the block writes it in aligned 16-byte pieces (TMA loads src, plain stores write dst).
A source base that is not 16-byte aligned (or fewer rows than one super-row) makes ``backend="auto"`` use the
cp.async path (which gathers any pitch; logged and recorded on the result) and an explicit ``backend="tma"``
refuse. Measured on the H100 (benchmarks/copy_bandwidth.py), odd source pitches went from 0.45-0.64x of
torch's copy on the cp.async path to 0.88-0.91x at 2, 4 and 8 bytes with the row classes.

Every tile writes each dst row in a run that starts and ends on a 32-byte sector boundary (``sector_plan``):
where dst rows start 16 bytes into a sector (a pitch of 16 mod 32 bytes, or a base of 16 mod 32), those rows'
runs move V = 16/E elements earlier, each tile loading the V source rows before it; where dst's rows are not
16-byte aligned at all, each row's run starts (its address mod 32) / E elements early (row-sector runs, a
prefix of 32/E rows). Measured on the H100, runs that straddle sectors cost 40% of the bandwidth (10007x8192
fp16, dst pitch 20014 bytes: 0.59x of copy speed, 0.85-0.89x with row-sector runs).

Every tile row is one whole 128-byte L2 line of the source where the rows allow (``source_lead``): a source
base inside a line, with a pitch of whole lines, moves the tile columns after the first back to the line.
Measured on the H100, a base 32 or 64 bytes into a line cost 0.08-0.15 of copy speed without it.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

from .. import _driver
from ..arrays import ArrayView
from ..backend import Backend, BackendChoice, choose_backend
from ..device import RESERVED_SMEM_PER_BLOCK, blocks_per_sm, device_limits
from ..dtypes import dtype_from_any
from ..errors import InvalidArgumentError
from ..tensormap import describe_tensor
from ..tensormap.enums import L2Promotion, Swizzle
from . import _checks
from ._boxparams import pack_box_params
from ._cache_policy import L2Eviction
from ._kernels import kernel
from ._plan_cache import cached
from ._plan import Plan, repoint

log = logging.getLogger("tmakit")

_SPAN = 128  # bytes per image row = the 128B swizzle span
_SWIZZLE_128B = 3
_MAX_GRID = 2**31 - 1  # blocks in a grid's x dimension; past it, blocks walk several tiles
_MAX_EXTENT = 2**31 - 1024  # tile coordinates (r0 - V .. r0 + 2H) stay in int32
_PREFIX_BYTES = 16 * _SPAN  # per stage, when some dst rows are shifted (kPrefixBytes)


@dataclass(frozen=True)
class TilePlan:
    """A block's tile: one source tile (the kernel's one-stage box ring) and one image buffer, one block per tile."""

    rows: int  # source rows per tile (TMAKIT_TRANSPOSE_TILE_ROWS)
    shared_mem: int  # dynamic shared memory per block, bytes
    run_bytes: int  # dst bytes per row written by a group of tiles (TMAKIT_TRANSPOSE_RUN_BYTES)
    threads: int  # per block (the kernel walks every loop by blockDim)

    @classmethod
    def of(cls, rows: int, *, run_bytes: int = 65536, threads: int = 256) -> "TilePlan":
        return cls(rows, 2 * rows * _SPAN + 1024, run_bytes, threads)

    def shared_mem_for(self, prefix: bool, row_sectors: bool = False, esize: int = 1, classes: int = 0) -> int:
        """Dynamic shared memory with room for a prefix in every stage (shifted rows) or without; row-sector
        runs (``SectorPlan.row_sectors``) take a prefix of two chunks and those chunks of the W = 128/E image
        rows per image buffer; source row classes (``source_classes``) take 144-byte rows in a stage rounded
        up to 1 KiB (transpose.cu: class_stage_bytes)."""
        side = (_SPAN // esize) * 32 if row_sectors else 0
        chunks = 2 if row_sectors else 1 if prefix else 0
        if classes:
            box = -(-(self.rows + chunks * 16 // esize) // classes * (_SPAN + 16) // 128) * 128  # each box 128-aligned
            stage = -(-classes * box // 1024) * 1024
        else:
            stage = self.rows * _SPAN + chunks * _PREFIX_BYTES
        images = self.rows * _SPAN
        if self.split_turn(row_sectors, classes):  # the lower half, and its last chunk of each row again
            images = images // 2 + (_SPAN // esize) * 16
        return stage + images + side + 1024

    def split_turn(self, row_sectors: bool, classes: int) -> bool:
        """Whether the kernel turns the tile in two halves, the upper half's images in the stage rows the lower
        half read (TMAKIT_TRANSPOSE_SPLIT_TURN): 256-row tiles of 1-byte rows in 16 classes with row-sector runs,
        where it takes a block from 79 to 65 KiB of shared memory (three blocks per SM on sm_90, not two)."""
        return row_sectors and classes == 16 and self.rows == 256


# The default candidates, preferred first. One block per tile, each with one stage and one image buffer (65 KiB
# with 256-row tiles: three blocks per SM on sm_90, two on sm_80, one on sm_86/89), the resident blocks
# overlapping each other's loads, turns and stores (a persistent grid walking the tiles through a ring of stages
# was slower: docs/PERFORMANCE.md). The tiles are ordered in whole columns where they fit 64 KiB runs of dst
# (run_bytes); 256-row tiles write dst in runs of 256*E bytes; the 128-row plan is for smaller limits on the
# cp.async path. The TMA path takes 128-row tiles first (TMA_TILE_PLANS): on both Hopper cards they were never
# slower than 256 rows and up to 0.15 of copy speed faster on odd pitches and short sides, where a 128-row tile
# leaves less of its row empty and more, smaller blocks stay resident (docs/PERFORMANCE.md, Copy and transpose).
# ``plan_transpose(tile_plan=...)`` picks another.
DEFAULT_TILE_PLANS = (TilePlan.of(256), TilePlan.of(128))
TMA_TILE_PLANS = (TilePlan.of(128), TilePlan.of(256))
_DEFAULT_MIN_ROWS = min(p.rows for p in DEFAULT_TILE_PLANS)


def choose_tile_plan(shared_mem_limit: int, prefix: bool = False, candidates: tuple[TilePlan, ...] = DEFAULT_TILE_PLANS,
              parameter: str = "device", row_sectors: bool = False, esize: int = 1, classes: int = 0) -> TilePlan:
    """The first of ``candidates`` whose shared memory (with prefixes, for shifted rows or row-sector runs)
    fits a block's opt-in limit (bytes)."""
    for plan in candidates:
        if plan.shared_mem_for(prefix, row_sectors, esize, classes) <= shared_mem_limit:
            return plan
    smallest = min(candidates, key=lambda p: p.shared_mem_for(prefix, row_sectors, esize, classes))
    value = f"{shared_mem_limit} bytes of shared memory per block" if parameter == "device" else candidates[0]
    need = smallest.shared_mem_for(prefix, row_sectors, esize, classes)
    raise InvalidArgumentError(parameter, value, f"the transpose needs at least {need} "
                               f"bytes of shared memory per block (the device gives {shared_mem_limit})",
                               "run it on an sm_80+ GPU" if parameter == "device" else "use fewer rows")


@dataclass(frozen=True)
class SectorPlan:
    """How dst rows meet 32-byte sectors: ``classes`` 1 (every row alike) or 2 (even and odd rows, when the
    pitch is 16 mod 32 bytes); bit k of ``shifted``: class k's rows start 16 bytes into a sector, so its runs
    move 16 bytes (V elements) earlier."""

    classes: int
    shifted: int
    row_sectors: bool = False  # each row's run starts (address mod 32) / E elements early (any pitch)


def sector_plan(address: int, pitch: int, dst_rows: int, align: bool = True) -> SectorPlan:
    """The sector plan of a dst whose first row is at ``address`` with ``dst_rows`` rows of ``pitch`` bytes. A
    dst that is not 16-byte aligned (written by the block's plain stores) gets row-sector runs: each row's run
    starts where a sector does (TMAKIT_TRANSPOSE_ROW_SECTORS in cuda_src/transpose.cu); measured on the H100,
    runs straddling sectors ran at 0.59x of copy speed. ``align=False`` turns the alignment off (every row
    alike, unshifted)."""
    if not align:
        return SectorPlan(1, 0)
    if address % 16 or pitch % 16:
        return SectorPlan(1, 0, dst_rows > 0)
    if pitch % 32 == 0 or dst_rows < 2:
        return SectorPlan(1, int(address % 32 == 16))
    return SectorPlan(2, 1 if address % 32 == 16 else 2)


def _class_rows(d: ArrayView, k: int, classes: int) -> ArrayView:
    """dst's rows k, k + classes, ...: a strided view (one tensor map or BoxParams per class). The pitch comes
    from the shape: dst is C-contiguous, and a 1-row dst may carry any stride."""
    rows, pitch = d.shape[0], d.shape[1] * d.itemsize
    # tuple.__new__: the named tuple's own __new__ is a Python function (each plan makes one view per class)
    return _tuple_new(ArrayView, (d.ptr + k * pitch, ((rows - k + classes - 1) // classes, d.shape[1]),
                                  (classes * pitch, d.itemsize), d.dtype_name, d.itemsize, d.device, d.owner))


_tuple_new = tuple.__new__


def source_lead(address: int, pitch: int, esize: int) -> int:
    """Elements by which the tile columns after the first start early, so that each tile row (128 bytes of a
    source row) is one whole L2 line: where every row starts at the same place in a line (a pitch of whole
    128-byte lines), its offset there; else 0. A multiple of V = 16/E (the TMA path needs a 16-byte aligned
    base; the cp.async path's any-pitch walk gets 0), so even, as two row classes need."""
    if pitch % _SPAN or address % 16:
        return 0
    return address % _SPAN // esize


def tile_grid(rows: int, cols: int, esize: int, tile_rows: int, prefix: bool, lead: int = 0,
              row_sectors: bool = False) -> tuple[int, int]:
    """(tile rows, tile columns) of the transpose of a rows x cols source: tiles of ``tile_rows`` source rows
    by 128 bytes of columns, and one more tile row where shifted runs (V = 16/E rows early) leave rows over
    (never when one tile row holds them all: the first tile row is unshifted); row-sector runs (up to 32/E - 1
    rows early) need none, the last tile row's runs going on to the end of dst's rows; tile columns after the
    first start ``lead`` columns early (source_lead), so one more column where that leaves columns over (never
    when the first holds them all). The kernel takes both."""
    width = _SPAN // esize
    extra = 16 // esize if prefix and not row_sectors and rows > tile_rows else 0
    return -(-(rows + extra) // tile_rows), -(-(cols + (lead if cols > width else 0)) // width)


@dataclass(frozen=True)
class TransposeResult:
    backend: BackendChoice
    reason: str  # why this backend ran (e.g. the TMA rule the source broke under "auto")
    sectors: "SectorPlan | None" = None  # how dst rows were aligned to sectors (None: nothing to transpose)
    lead: int = 0  # source columns by which the tile columns after the first started early (source_lead)
    tile_plan: "TilePlan | None" = None  # the tiles and block that ran (None: nothing to transpose)
    tiles: tuple[int, int] = (0, 0)  # (tile rows, tile columns)
    dst_stores: str = ""  # "tma" (box stores), "plain" (the block's 16-byte stores, any pitch) or "" (nothing ran)


def _tma_rule_broken(arrays: dict[str, Any]) -> tuple[str, Any, str]:
    """(name, view, rule) of the first array a TMA tensor map cannot describe, or ("", None, "")."""
    for name, a in arrays.items():
        pitch = a.shape[1] * a.itemsize
        if a.ptr % 16:
            return name, a, f"{name}'s address 0x{a.ptr:x} is not 16-byte aligned"
        if pitch % 16:
            return name, a, f"{name}'s row pitch of {pitch} bytes is not a multiple of 16"
    return "", None, ""


def source_classes(address: int, pitch: int, rows: int) -> int:
    """k, where TMA can read a source whose row pitch is not a multiple of 16 bytes as super-rows of k rows
    back to back (k * pitch bytes, a multiple of 16: cuda_src/transpose.cu, TMAKIT_TRANSPOSE_SOURCE_CLASSES):
    16 / gcd(pitch, 16), given a 16-byte aligned base, at least one whole super-row and super-rows whose
    element coordinates stay in int32; else 0 (a pitch of whole 16 bytes needs none; a base that is not
    16-byte aligned cannot be described)."""
    k = 16 // math.gcd(pitch, 16)
    return k if k > 1 and address % 16 == 0 and rows >= k and k * pitch < 2**31 else 0


@dataclass(frozen=True)
class _Layout:
    """The decisions a transpose reads from the buffers' addresses (a new buffer must make the same)."""

    tma_broken: str  # the TMA rule an array breaks, or ""
    sectors: SectorPlan
    lead: int
    classes: int = 0  # source row classes (source_classes), where the plan reads src through super-rows


def _layout(d: ArrayView, s: ArrayView, align_sectors: bool, tma_broken: str | None = None,
            classes: bool = False) -> _Layout:
    """``tma_broken``: ``_tma_rule_broken``'s rule for (src, dst) when the caller has it already; ``classes``:
    whether the plan reads an odd source pitch through TMA row classes (``source_classes``)."""
    rows, cols = s.shape
    if tma_broken is None:
        tma_broken = _tma_rule_broken({"src": s, "dst": d})[2]
    return _Layout(tma_broken, sector_plan(d.ptr, rows * s.itemsize, cols, align_sectors),
                   source_lead(s.ptr, cols * s.itemsize, s.itemsize),
                   source_classes(s.ptr, cols * s.itemsize, rows) if classes else 0)


class TransposePlan(Plan):
    op, names = "transpose", ("dst", "src")

    def __init__(self, result: TransposeResult, views: tuple, layout: _Layout | None = None, align_sectors: bool = True,
                 l2_promotion: L2Promotion = L2Promotion.NONE, kernel: Any = None, tail: tuple = (),
                 across: str = "push", **launch_options: Any) -> None:
        self.result, self._layout, self._align_sectors, self._l2_promotion = result, layout, align_sectors, l2_promotion
        self._across = across
        args = (*self._operands(*views), *tail) if kernel is not None else ()
        super().__init__(result, views, kernel, args, **launch_options)

    def _adopt(self, views: tuple) -> tuple:
        return across_gpus(*views, self._across)

    def _retarget(self, views: tuple) -> None:
        d, s = views
        _checks.refuse_overlap([("dst", d)], [("src", s)])
        layout = _layout(d, s, self._align_sectors, classes=self._layout.classes != 0)
        if layout != self._layout:
            name = "src" if layout.lead != self._layout.lead else "dst"
            v = s if name == "src" else d
            self._refuse(name, f"address 0x{v.ptr:x}", f"must sit where the plan's buffers sat relative to 16-byte "
                         f"units, 32-byte sectors and 128-byte lines (the plan's {self._layout}, this one's {layout})")
        if self._launch is not None:
            for index, operand in enumerate(self._operands(d, s, self._args[:4])):
                self._update(index, operand)

    def _prefix_rows(self, v: int) -> int:
        """Source rows before each tile that the kernel loads: V for shifted classes, 2V for row-sector runs."""
        sectors = self._layout.sectors
        return 2 * v if sectors.row_sectors else v if sectors.shifted else 0

    def _operands(self, d: ArrayView, s: ArrayView, previous: list | None = None) -> list:
        """(source, source prefix, target of class 0, target of class 1): tensor maps on the TMA path (described,
        or re-pointed from ``previous``), BoxParams on the cp.async path."""
        rows, cols = s.shape
        esize, width, v = s.itemsize, _SPAN // s.itemsize, 16 // s.itemsize
        classes = self._layout.sectors.classes
        views = [d] if classes == 1 else [_class_rows(d, k, classes) for k in range(classes)]
        plain_dst = self.result.dst_stores == "plain"
        if self.result.backend.backend is Backend.TMA and self._layout.classes:
            k = self._layout.classes
            box_rows = (self.result.tile_plan.rows + self._prefix_rows(v)) // k
            supers = ArrayView(s.ptr, (rows // k, k * cols), (k * cols * esize, esize), s.dtype_name, esize, s.device, s.owner)
            source = repoint(previous[0], s) if previous is not None else describe_tensor(
                supers, box=(box_rows, width + v), swizzle=Swizzle.NONE, oob_fill="zero", l2_promotion=self._l2_promotion)
            dtype = _bits_dtype(esize)
            out = [source, pack_box_params(s.ptr, (cols, rows), (esize, cols * esize), (width, 8), esize, dtype)]
            out += _tma_targets(views, previous, rows, esize, classes, plain_dst)
        elif self.result.backend.backend is Backend.TMA:
            if previous is not None:
                source = repoint(previous[0], s)
                out = [source, source if previous[1] is previous[0] else repoint(previous[1], s)]
            else:
                def src_box(box_rows: int) -> Any:
                    return describe_tensor(s, box=(box_rows, width), swizzle=Swizzle.B128, oob_fill="zero",
                                           l2_promotion=self._l2_promotion)

                source = src_box(self.result.tile_plan.rows)
                out = [source, src_box(self._prefix_rows(v)) if self._prefix_rows(v) else source]
            out += _tma_targets(views, previous, rows, esize, classes, plain_dst)
        else:
            dtype = _bits_dtype(esize)

            def src_box(box_rows: int) -> Any:
                return pack_box_params(s.ptr, (cols, rows), (esize, cols * esize), (width, box_rows), esize, dtype,
                                       swizzle=_SWIZZLE_128B, l2_promotion=int(self._l2_promotion))

            source = src_box(self.result.tile_plan.rows)
            out = [source, src_box(self._prefix_rows(v)) if self._prefix_rows(v) else source]
            out += [_dst_box(c, rows, esize, width // classes) for c in views]
        if classes == 1:
            out.append(out[2])
        return out


def _tma_targets(views: list, previous: list | None, rows: int, esize: int, classes: int, plain_dst: bool) -> list:
    """The TMA path's dst operand per row class: BoxParams where the block's plain stores write dst, else a
    tensor map (re-pointed from ``previous``; a class of the first class's geometry, an even row count, is the
    first class's map re-pointed)."""
    width = _SPAN // esize
    out: list = []
    for k, c in enumerate(views):
        if plain_dst:
            out.append(_dst_box(c, rows, esize, width // classes))
        elif previous is not None:
            out.append(repoint(previous[2 + k], c))
        elif out and c.shape == views[0].shape:
            out.append(out[0].with_address(c.ptr))
        else:
            out.append(describe_tensor(c, box=(width // classes, width), swizzle=Swizzle.B128))
    return out


def _bits_dtype(esize: int) -> int:
    """The driver's unsigned dtype of ``esize`` bytes: the transpose moves bits, whatever the elements are."""
    return int(dtype_from_any({1: "uint8", 2: "uint16", 4: "uint32", 8: "uint64"}[esize]))


def _dst_box(c: ArrayView, rows: int, esize: int, class_rows: int) -> Any:
    """BoxParams of one dst row class for the kernel's plain stores (the cp.async path, and the TMA path where
    TMA cannot describe dst): box [W, W / classes] of 128B-swizzled images."""
    dtype = _bits_dtype(esize)
    return pack_box_params(c.ptr, (rows, c.shape[0]), (esize, c.strides[0]), (_SPAN // esize, class_rows), esize, dtype,
                           swizzle=_SWIZZLE_128B)


def _min_blocks(plan: TilePlan, shared_mem: int, optin_limit: int) -> int:
    """Blocks per SM that shared memory allows (an SM holds the opt-in limit plus the driver's 1 KiB a block),
    at most three and at most what leaves 64 registers a thread: the kernel's register cap (__launch_bounds__), so
    that registers do not stop a block shared memory would take."""
    per_sm = optin_limit + RESERVED_SMEM_PER_BLOCK
    return max(1, min(3, blocks_per_sm(shared_mem, per_sm), 65536 // (plan.threads * 64)))


def plan_transpose(dst: Any, src: Any, *, backend: Any = "auto", stream: Any = None,
                   tile_plan: TilePlan | None = None, align_sectors: bool = True, l2_promotion: Any = "auto",
                   source_eviction: Any = "last", min_blocks: int | None = None,
                   source_row_classes: bool = True, max_blocks: int | None = None,
                   checked: bool | str | None = None, across: str = "push") -> TransposePlan:
    """A prepared ``dst = src.T`` for contiguous 2-D device arrays, asynchronous on ``stream``: ``plan()``
    transposes, ``plan(dst2, src2)`` transposes other buffers of the same geometry. ``src`` may live on another
    GPU of the host: ``across="push"`` (the default) runs the kernel on src's GPU, writing dst over the peer path,
    ``"pull"`` on dst's GPU, reading src over it (``stream``, when given, is one of the GPU that runs it). Measured
    on two H200s, 256 MiB to 4 GiB of int32: push 0.89-0.90x torch's copy between them, pull 0.46-0.67x (its
    tiles read 128-byte pieces of many rows across NVLink; push's reads are local and its writes posted).

    Tuning (the defaults are the measured best on the H100):
    - ``tile_plan``: a ``TilePlan`` (tile rows, dst run bytes, threads); default the first of
      ``DEFAULT_TILE_PLANS`` whose shared memory fits the device.
    - ``align_sectors``: write dst rows in runs aligned to 32-byte sectors (``sector_plan``).
    - ``l2_promotion``: the source's L2 promotion ("auto", "none", "64B", "128B", "256B"). "auto": "128B" where
      TMA reads the source as row classes (their 144-byte windows straddle lines; over the 61 odd-pitch
      transposes of sweep seeds 0 and 1, against torch's copy: geomean 0.869x -> 0.875x on the H100 and
      0.801x -> 0.811x on the H200 over "256B", min 0.51x -> 0.57x and 0.45x -> 0.51x; "none" 0.850x and
      0.791x; docs/PERFORMANCE.md), else "none" (on the swizzled boxes of 16-byte pitches promoting cost
      0.06-0.09 of copy speed where the pitch is not a multiple of 128 bytes and gained nothing where it is).
    - ``source_eviction``: the L2 priority of the source lines (``L2Eviction``); "last" gained 0.01-0.04 of copy
      speed at a pitch of 64 mod 128 bytes (the next tile column reads the other halves of the lines).
    - ``min_blocks``: blocks per SM the kernel's register cap is set for (1..3; default what shared memory
      allows, at most 3).
    - ``source_row_classes``: on the TMA path, read a source whose pitch is not a multiple of 16 bytes (on an
      aligned base) through TMA as super-rows of k rows (``source_classes``); False: the cp.async path.
    - ``max_blocks``: launch at most this many blocks, each transposing several tiles in turn (default None: one
      block per tile, the fastest measured; a cap leaves SMs to kernels running beside it).
    """
    d, s = _checks.view(dst, "dst"), _checks.view(src, "src")
    if len(s.shape) != 2:
        raise InvalidArgumentError("src", f"shape {s.shape}", "must be 2-D", "reshape it to (rows, cols)")
    if d.shape != s.shape[::-1]:
        raise InvalidArgumentError("dst", f"shape {d.shape}", f"must be {s.shape[::-1]} (src {s.shape} transposed)",
                                   "allocate dst with the reversed shape")
    if max(s.shape) > _MAX_EXTENT:
        raise InvalidArgumentError("src", f"shape {s.shape}", f"each dimension must be at most {_MAX_EXTENT} (tile "
                                   "coordinates are 32-bit, as TMA's are)", "transpose it in pieces of fewer rows")
    if tile_plan is not None and not isinstance(tile_plan, TilePlan):
        raise InvalidArgumentError("tile_plan", tile_plan, "must be a tmakit.ops.transpose.TilePlan or None",
                                   "TilePlan.of(rows, ...) or None for the default")
    if tile_plan is not None and (tile_plan.rows not in (128, 256) or tile_plan.threads % 32 or
                                  not 32 <= tile_plan.threads <= 1024 or tile_plan.run_bytes < 1):
        raise InvalidArgumentError("tile_plan", tile_plan, "must have 128 or 256 rows (a box dimension is at most 256; "
                                   "images come in 128-row steps), whole warps of 32..1024 threads and a positive "
                                   "run_bytes", "TilePlan.of(256) or TilePlan.of(128, threads=256)")
    candidates = (tile_plan,) if tile_plan is not None else DEFAULT_TILE_PLANS
    # the most tiles any plan could make: the smallest tiles, shifted runs, a lead (below W: one column more)
    worst = tile_grid(*s.shape, s.itemsize, _DEFAULT_MIN_ROWS if tile_plan is None else tile_plan.rows, True, _SPAN)
    if worst[0] * worst[1] >= 2**32:
        raise InvalidArgumentError("src", f"shape {s.shape}", f"makes up to {worst[0] * worst[1]} tiles; the kernel counts "
                                   "tiles in 32 bits (fewer than 2**32)", "transpose it in pieces of fewer rows")
    _checks.require_same_dtype(d, s)
    _checks.require_contiguous(d, "dst")
    _checks.require_contiguous(s, "src")
    _checks.refuse_overlap([("dst", d)], [("src", s)])
    esize = s.itemsize
    if esize not in (1, 2, 4, 8):
        raise InvalidArgumentError("src", s.dtype_name, "must have 1, 2, 4 or 8-byte elements", "view it as such an integer type")
    if max_blocks is not None and (isinstance(max_blocks, bool) or not isinstance(max_blocks, int) or max_blocks < 1):
        raise InvalidArgumentError("max_blocks", max_blocks, "must be a positive int or None",
                                   "pass None (one block per tile) or a block count such as 132")
    if min_blocks is not None and (isinstance(min_blocks, bool) or not isinstance(min_blocks, int) or not 1 <= min_blocks <= 3):
        raise InvalidArgumentError("min_blocks", min_blocks, "must be an int from 1 to 3 or None",
                                   "pass 1, 2 or 3 (blocks per SM), or None for what shared memory allows")
    if across not in ("pull", "push"):
        raise InvalidArgumentError("across", across, 'must be "push" (src\'s GPU writes dst) or "pull" (dst\'s GPU '
                                   'reads src)', 'leave it at "push"')
    local = d.device == s.device
    d, s = across_gpus(d, s, across)
    promotion = None  # "auto": decided with the source row classes below
    if not (isinstance(l2_promotion, str) and l2_promotion.lower() == "auto"):
        try:
            promotion = L2Promotion.parse(l2_promotion, "l2_promotion")
        except InvalidArgumentError:
            raise InvalidArgumentError("l2_promotion", l2_promotion, "must be 'auto' or an L2Promotion",
                                       "use 'auto', 'none', '64B', '128B' or '256B'") from None
    eviction = L2Eviction.parse(source_eviction, "source_eviction")
    choice = choose_backend(backend, device=s.device)
    if s.shape[0] * s.shape[1] == 0:
        return TransposePlan(TransposeResult(choice, "empty"), (d, s))
    if not isinstance(source_row_classes, bool):
        raise InvalidArgumentError("source_row_classes", source_row_classes, "must be True or False",
                                   "pass True to read odd source pitches through TMA row classes")
    limit = device_limits(s.device).smem_per_block_optin
    # across GPUs the 256-row tiles stay first: the 128-row preference was measured on local transposes only
    result, layout, promotion = decide_transpose(d, s, choice, limit, tile_plan=tile_plan,
                                                 align_sectors=align_sectors, promotion=promotion,
                                                 source_row_classes=source_row_classes, device=s.device,
                                                 short_tiles=local)
    choice, chosen = result.backend, result.tile_plan
    shared_mem = chosen.shared_mem_for(layout.sectors.shifted != 0, layout.sectors.row_sectors, esize, layout.classes)
    tiles_r, tiles_c = result.tiles
    k = kernel("transpose.cu", "tmakit_transpose", choice, s.device,
               **kernel_defines(result, layout, esize, eviction, min_blocks, limit))
    grid = max(1, min(tiles_r * tiles_c, _MAX_GRID, max_blocks or _MAX_GRID))
    tail = (tiles_r, tiles_c, layout.lead, layout.sectors.shifted)
    return TransposePlan(result, (d, s), layout, align_sectors, promotion, k, tail, across, grid=(grid, 1, 1),
                         block=(chosen.threads, 1, 1), shared_mem=shared_mem, stream=stream, checked=checked,
                         pdl=choice.arch.major >= 9)  # the kernel waits (griddepcontrol) before it touches memory


def across_gpus(d: ArrayView, s: ArrayView, across: str) -> tuple[ArrayView, ArrayView]:
    """dst and src as the GPU that runs the transpose sees them: "pull", dst's GPU reading a src on another GPU
    of the host over the peer path; "push", src's GPU writing dst over it (peer access checked and enabled; the
    other side's maps are encoded for the running GPU, its address is the same there)."""
    if s.device == d.device:
        return d, s
    if across == "push":
        _driver.enable_peer_access(s.device, d.device)  # raises, naming both GPUs
        return d._replace(device=s.device), s
    _driver.enable_peer_access(d.device, s.device)
    return d, s._replace(device=d.device)


def kernel_defines(result: TransposeResult, layout: _Layout, esize: int, eviction: L2Eviction, min_blocks: int | None,
                   limit: int) -> dict[str, int]:
    """The compile-time parameters of the transpose.cu variant a decision runs (``decide_transpose``'s result and
    layout; ``limit``: a block's opt-in shared memory)."""
    chosen, plain_dst = result.tile_plan, result.dst_stores == "plain"
    row_sectors = layout.sectors.row_sectors
    shared_mem = chosen.shared_mem_for(layout.sectors.shifted != 0, row_sectors, esize, layout.classes)
    return dict(TMAKIT_TRANSPOSE_ELEMENT_BYTES=esize, TMAKIT_TRANSPOSE_ROW_CLASSES=layout.sectors.classes,
                TMAKIT_TRANSPOSE_TILE_ROWS=chosen.rows, TMAKIT_TRANSPOSE_RUN_BYTES=chosen.run_bytes,
                TMAKIT_TRANSPOSE_SOURCE_EVICTION=int(eviction),
                TMAKIT_TRANSPOSE_PLAIN_STORE=int(plain_dst and result.backend.backend is Backend.TMA),
                TMAKIT_TRANSPOSE_ROW_SECTORS=int(row_sectors), TMAKIT_TRANSPOSE_SOURCE_CLASSES=layout.classes,
                TMAKIT_TRANSPOSE_SPLIT_TURN=int(chosen.split_turn(row_sectors, layout.classes)),
                TMAKIT_TRANSPOSE_THREADS=chosen.threads,
                TMAKIT_TRANSPOSE_MIN_BLOCKS=min_blocks or _min_blocks(chosen, shared_mem, limit))


def decide_transpose(d: ArrayView, s: ArrayView, choice: BackendChoice, limit: int, *,
                     tile_plan: TilePlan | None = None, align_sectors: bool = True,
                     promotion: L2Promotion | None = None, source_row_classes: bool = True, device: int | None = None,
                     arch: Any = None, short_tiles: bool = True) -> tuple[TransposeResult, _Layout, L2Promotion]:
    """What ``plan_transpose`` decides from the buffers' geometry and addresses, a block's shared-memory ``limit``
    and the backend ``choice``: (the result it records, the layout, the source's L2 promotion). The plan calls
    it on the GPU; ``tmakit.ops.describe_transpose`` calls it without one (``arch=``), so both decide alike.
    ``promotion`` None is "auto"; ``short_tiles``: the TMA path's 128-row tiles first (False, across GPUs: 256)."""
    rows, cols = s.shape
    esize = s.itemsize
    reason = choice.reason
    name, view, broken = _tma_rule_broken({"src": s, "dst": d})
    plain_dst = choice.backend is not Backend.TMA
    classes = source_classes(s.ptr, cols * esize, rows) \
        if source_row_classes and choice.backend is Backend.TMA and name == "src" else 0
    layout = _layout(d, s, align_sectors, broken, classes != 0)
    if promotion is None:
        promotion = L2Promotion.L2_128B if classes else L2Promotion.NONE
    if classes:
        # TMA reads src as super-rows of k rows (a pitch of whole 16 bytes); dst as below
        name, view, broken = _tma_rule_broken({"dst": d})
        reason = (f"{reason}; TMA loads src as {classes} row classes ({_tma_rule_broken({'src': s})[2]}), L2 promotion "
                  f"{promotion.short}")
    if choice.backend is Backend.TMA and name == "dst" and (classes or not _tma_rule_broken({"src": s})[0]):
        # TMA on the side it can describe: TMA loads src, the block writes dst in aligned 16-byte pieces
        plain_dst, broken = True, ""
        reason = f"{reason}; TMA loads src, plain 16-byte stores write dst ({_tma_rule_broken({'dst': d})[2]})"
    if choice.backend is Backend.TMA and broken:
        if choice.source != "auto":
            raise InvalidArgumentError(name, f"array of shape {view.shape} ({s.dtype_name})",
                                       f"cannot be described by a TMA tensor map: {broken}",
                                       'use backend="auto" or "cp.async" (any pitch), or pad the rows to 16 bytes')
        choice, plain_dst = choose_backend("cp.async", device=device, arch=arch), True
        reason = f"TMA cannot describe {name} ({broken}); using the cp.async path"
        log.info("tmakit.ops.transpose: %s", reason)
    prefix, row_sectors = layout.sectors.shifted != 0, layout.sectors.row_sectors
    candidates = (tile_plan,) if tile_plan is not None else (
        TMA_TILE_PLANS if choice.backend is Backend.TMA and short_tiles else DEFAULT_TILE_PLANS)
    chosen = choose_tile_plan(limit, prefix, candidates, "tile_plan" if tile_plan is not None else "device", row_sectors,
                              esize, layout.classes)
    tiles = tile_grid(rows, cols, esize, chosen.rows, prefix, layout.lead, row_sectors)
    result = TransposeResult(choice, reason, layout.sectors, layout.lead, chosen, tiles, "plain" if plain_dst else "tma")
    return result, layout, promotion


_NAMES = ("dst", "src")


def transpose(dst: Any, src: Any, *, backend: Any = "auto", stream: Any = None, **tuning: Any) -> TransposeResult:
    """``dst = src.T`` once (``plan_transpose(...)()``). A geometry seen before re-points the plan made then
    (``tmakit.ops._plan_cache``); for repeated transposes of the same buffers keep the plan."""
    return cached("transpose", _NAMES, (dst, src), stream, {"backend": backend, **tuning},
                  lambda: plan_transpose(dst, src, backend=backend, stream=stream, **tuning), None)
