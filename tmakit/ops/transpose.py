"""``transpose(dst, src)``: dst (C x R) = src (R x C)^T for 1/2/4/8-byte elements (cuda_src/transpose.cu).

The source is read in tiles of 256 rows by 128 bytes (128B swizzle) through the one-source box load, turned
with bank-conflict-free shared-memory accesses, and written as 128B-swizzled boxes through the one-source box
store (a TMA store on sm_90, whole-line plain stores on the cp.async path). TMA can describe an array only
when its base is 16-byte aligned and its row pitch a multiple of 16 bytes, for src and for dst: otherwise
``backend="auto"`` uses the cp.async path (which walks any pitch; logged and recorded on the result) and an
explicit ``backend="tma"`` refuses.

Every tile writes each dst row in a run that starts and ends on a 32-byte sector boundary, and for 1-byte
elements on a 128-byte line boundary (``run_plan``): dst rows that start at the same place in a sector (line)
form a row class, and a class whose rows start 16*s bytes in has its runs move s chunks (s*V elements, V =
16/E) earlier, each tile loading the source rows before it (the prefix). Measured on the H100, runs that
straddle sectors cost 40% of the bandwidth (benchmarks/experiments/sector_probe.py), and 1-byte runs of 256
bytes across three lines instead of two 0.03-0.05 of copy speed (l2_policy_probe.py).

Every tile row is one whole 128-byte L2 line of the source where the rows allow (``source_lead``): a source
base inside a line, with a pitch of whole lines, moves the tile columns after the first back to the line.
Measured on the H100, a base 32 or 64 bytes into a line cost 0.08-0.15 of copy speed without it
(benchmarks/experiments/l2_policy_probe.py).
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

from .. import _driver
from .._enum import ParsableEnum
from ..arrays import ArrayView
from ..backend import Backend, BackendChoice, choose_backend
from ..dtypes import dtype_from_any
from ..errors import InvalidArgumentError
from ..tensormap.enums import L2Promotion
from . import _checks
from ._boxparams import pack_box_params
from ._kernels import kernel

log = logging.getLogger("tmakit")

_SPAN = 128  # bytes per image row = the 128B swizzle span
_SWIZZLE_128B = 3
_THREADS = 256
_MAX_EXTENT = 2**31 - 1024  # tile coordinates (r0 - V .. r0 + 2H) stay in int32
_IMAGE_BUFFERS = {Backend.TMA: 2, Backend.CP_ASYNC: 1}  # destination image buffers (kImageBuffers)
_MAX_CLASSES = 8  # the kernel's dst row-class parameters (dst0..dst7)
# Aligned runs (run_plan); the experiment harness turns them off to measure what they gain.
_ALIGN_RUNS = True
# Element sizes whose runs align to 128-byte lines (else 32-byte sectors): a 1-byte tile writes 256-byte runs,
# which cross three lines instead of two when they start inside one (0.03-0.05 of copy speed, l2_policy_probe.py);
# longer runs lose less, and 2-byte images of 8 rows would store with bank conflicts (the test counts them).
_LINE_ALIGNED_SIZES = frozenset({1})
# No L2 promotion (tensor map) or cp.async .L2:: prefetch hint. A tile's source rows are 128-byte segments,
# whole L2 lines only when the source pitch is a multiple of 128; measured on the H100 (transpose_stages.py,
# 2026-11-23), promoting to 128 B cost 0.06-0.09 of copy speed when it is not (pitch = 64 mod 128), and
# gained nothing when it is.
_L2_PROMOTION = L2Promotion.NONE


class L2Eviction(ParsableEnum):
    """The L2 priority of the source lines the kernel loads (cuda_src/tmakit/cache_policy.cuh's L2Eviction);
    ``parse`` takes a member, its int, "last" or "evict_last"."""

    NORMAL = 0
    FIRST = 1
    LAST = 2

    @classmethod
    def aliases(cls) -> dict[str, str]:
        return {f"evict_{m.name.lower()}": m.name for m in cls}


# Source rows of 128 bytes straddle two L2 lines where the source pitch is not a multiple of 128, and the
# next tile column reads the other halves: keeping them (evict_last) gained 0.01-0.04 of copy speed at a
# pitch of 64 mod 128 on the H100 and was neutral at aligned pitches (l2_policy_probe.py, 2026-11-23).
_SOURCE_EVICTION = L2Eviction.LAST


@dataclass(frozen=True)
class TilePlan:
    rows: int  # source rows per tile (TMAKIT_TRANSPOSE_TILE_ROWS)
    stages: int  # source tiles in the ring (TMAKIT_TRANSPOSE_STAGES)
    shared_mem: int  # dynamic shared memory per block, bytes
    run_bytes: int = 4096  # dst bytes per row written by a group of tiles (TMAKIT_TRANSPOSE_RUN_BYTES)

    @classmethod
    def of(cls, backend: Backend, rows: int, stages: int, run_bytes: int = 4096) -> "TilePlan":
        return cls(rows, stages, (stages + _IMAGE_BUFFERS[backend]) * rows * _SPAN + 1024, run_bytes)

    def shared_mem_for(self, prefix_rows: int) -> int:
        """Dynamic shared memory with room in every stage for a prefix of ``prefix_rows`` source rows (shifted
        runs), in whole KiB as the kernel's prefix_bytes."""
        return self.shared_mem + self.stages * -(-prefix_rows * _SPAN // 1024) * 1024


# Preferred first. 256-row tiles write dst in runs of 256*E bytes; measured on the H100 against 128 rows
# (benchmarks/experiments/transpose_stages.py), the 1-byte cp.async transpose went from 0.76-0.78x to
# 0.82-0.83x of a plain copy. TMA: 129 KiB, one block per SM. cp.async: 97 KiB, two blocks per SM on sm_90,
# one on sm_80, and it still fits sm_86/89 (99 KiB a block); the 128-row plans are for smaller limits.
_PLANS = {Backend.TMA: (TilePlan.of(Backend.TMA, 256, 2), TilePlan.of(Backend.TMA, 128, 3)),
          Backend.CP_ASYNC: (TilePlan.of(Backend.CP_ASYNC, 256, 2), TilePlan.of(Backend.CP_ASYNC, 128, 4))}


def tile_plan(backend: Backend, shared_mem_limit: int, prefix_rows: int = 0) -> TilePlan:
    """The first plan of `backend` whose shared memory (with ``prefix_rows`` per stage, for shifted runs)
    fits a block's opt-in limit (bytes)."""
    for plan in _PLANS[backend]:
        if plan.shared_mem_for(prefix_rows) <= shared_mem_limit:
            return plan
    smallest = _PLANS[backend][-1]
    raise InvalidArgumentError("device", f"{shared_mem_limit} bytes of shared memory per block",
                               f"the transpose needs at least {smallest.shared_mem_for(prefix_rows)}",
                               "run it on an sm_80+ GPU")


@dataclass(frozen=True)
class RunPlan:
    """How dst rows meet the boundaries their runs are aligned to: ``align`` bytes (128: L2 lines, 32:
    sectors, 16: none, the dst is not 16-byte aligned); rows k, k + classes, ... form class k, whose rows all
    start at the same place in an ``align``-byte block, ``shifts[k]`` 16-byte chunks in, so its runs move that
    many chunks (V = 16/E elements each) earlier."""

    align: int
    shifts: tuple[int, ...]

    @property
    def classes(self) -> int:
        return len(self.shifts)

    @property
    def max_shift(self) -> int:
        return max(self.shifts)

    @property
    def packed(self) -> int:
        """The kernel's ``shifts``: 3 bits per class."""
        return sum(s << 3 * k for k, s in enumerate(self.shifts))

    def prefix_rows(self, esize: int) -> int:
        """Source rows a shifted tile loads before itself: V per chunk of the largest shift."""
        return self.max_shift * (16 // esize)


def run_plan(address: int, pitch: int, dst_rows: int, esize: int, lines: bool = True) -> RunPlan:
    """The run plan of a dst of ``dst_rows`` rows of ``pitch`` bytes at ``address``, for ``esize``-byte
    elements: lines for _LINE_ALIGNED_SIZES (unless ``lines`` is False), where dst has a row of every class,
    else sectors. The rows'
    offsets in an ``align``-byte block repeat every align / gcd(pitch, align) rows: that many classes (one
    when there is one row). A dst that is not 16-byte aligned (the cp.async path's any-pitch walk) has no
    16-byte step to align to."""
    if not _ALIGN_RUNS or address % 16 or pitch % 16:
        return RunPlan(16, (0,))
    for align in (128, 32) if lines and esize in _LINE_ALIGNED_SIZES else (32,):
        classes = 1 if dst_rows == 1 else align // math.gcd(pitch, align)
        if classes <= dst_rows:
            return RunPlan(align, tuple((address + k * pitch) % align // 16 for k in range(classes)))
    raise AssertionError("a sector plan has at most 2 classes")  # dst_rows >= 2 here


def _class_rows(d: ArrayView, k: int, classes: int) -> ArrayView:
    """dst's rows k, k + classes, ...: a strided view (one tensor map or BoxParams per class). The pitch comes
    from the shape: dst is C-contiguous, and a 1-row dst may carry any stride."""
    rows, pitch = d.shape[0], d.shape[1] * d.itemsize
    return ArrayView(d.ptr + k * pitch, ((rows - k + classes - 1) // classes, d.shape[1]), (classes * pitch, d.itemsize),
                     d.dtype_name, d.itemsize, d.device, d.owner)


def source_lead(address: int, pitch: int, esize: int) -> int:
    """Elements by which the tile columns after the first start early, so that each tile row (128 bytes of a
    source row) is one whole L2 line: where every row starts at the same place in a line (a pitch of whole
    128-byte lines), its offset there; else 0. A multiple of V = 16/E (the TMA path needs a 16-byte aligned
    base; the cp.async path's any-pitch walk gets 0), so even, as two row classes need."""
    if pitch % _SPAN or address % 16:
        return 0
    return address % _SPAN // esize


def tile_grid(rows: int, cols: int, esize: int, tile_rows: int, prefix_rows: int, lead: int = 0) -> tuple[int, int]:
    """(tile rows, tile columns) of the transpose of a rows x cols source: tiles of ``tile_rows`` source rows
    by 128 bytes of columns, and one more tile row where shifted runs (up to ``prefix_rows`` rows early)
    leave rows over (never when one tile row holds them all: the first tile row is unshifted); tile columns
    after the first start ``lead`` columns early (source_lead), so one more column where that leaves columns
    over (never when the first holds them all). The kernel takes both."""
    width = _SPAN // esize
    extra = prefix_rows if rows > tile_rows else 0
    return -(-(rows + extra) // tile_rows), -(-(cols + (lead if cols > width else 0)) // width)


@dataclass(frozen=True)
class TransposeResult:
    backend: BackendChoice
    reason: str  # why this backend ran (e.g. the TMA rule the source broke under "auto")
    runs: "RunPlan | None" = None  # how dst runs were aligned to sectors or lines (None: nothing to transpose)
    lead: int = 0  # source columns by which the tile columns after the first started early (source_lead)


def _tma_rule_broken(arrays: dict[str, Any]) -> tuple[str, Any, str]:
    """(name, view, rule) of the first array a TMA tensor map cannot describe, or ("", None, "")."""
    for name, a in arrays.items():
        pitch = a.shape[1] * a.itemsize
        if a.ptr % 16:
            return name, a, f"{name}'s address 0x{a.ptr:x} is not 16-byte aligned"
        if pitch % 16:
            return name, a, f"{name}'s row pitch of {pitch} bytes is not a multiple of 16"
    return "", None, ""


def transpose(dst: Any, src: Any, *, backend: Any = "auto", stream: Any = None) -> TransposeResult:
    """``dst = src.T`` for contiguous 2-D device arrays; asynchronous on ``stream``."""
    d, s = _checks.view(dst, "dst"), _checks.view(src, "src")
    if len(s.shape) != 2:
        raise InvalidArgumentError("src", f"shape {s.shape}", "must be 2-D", "reshape it to (rows, cols)")
    if d.shape != s.shape[::-1]:
        raise InvalidArgumentError("dst", f"shape {d.shape}", f"must be {s.shape[::-1]} (src {s.shape} transposed)",
                                   "allocate dst with the reversed shape")
    if max(s.shape) > _MAX_EXTENT:
        raise InvalidArgumentError("src", f"shape {s.shape}", f"each dimension must be at most {_MAX_EXTENT} (tile "
                                   "coordinates are 32-bit, as TMA's are)", "transpose it in pieces of fewer rows")
    # the most tiles any plan could make: the smallest tiles, the longest shift, a lead (below W: one column more)
    worst = tile_grid(*s.shape, s.itemsize, min(p.rows for plans in _PLANS.values() for p in plans), 7 * 16, _SPAN)
    if worst[0] * worst[1] >= 2**32:
        raise InvalidArgumentError("src", f"shape {s.shape}", f"makes up to {worst[0] * worst[1]} tiles; the kernel counts "
                                   "tiles in 32 bits (fewer than 2**32)", "transpose it in pieces of fewer rows")
    _checks.require_same_dtype(d, s)
    _checks.require_same_device(d, s)
    _checks.require_contiguous(d, "dst")
    _checks.require_contiguous(s, "src")
    _checks.require_disjoint(d, s)
    esize = s.itemsize
    if esize not in (1, 2, 4, 8):
        raise InvalidArgumentError("src", s.dtype_name, "must have 1, 2, 4 or 8-byte elements", "view it as such an integer type")
    choice = choose_backend(backend, device=s.device)
    rows, cols = s.shape
    reason = choice.reason
    if rows * cols == 0:
        return TransposeResult(choice, "empty")
    name, view, broken = _tma_rule_broken({"src": s, "dst": d})
    if choice.backend is Backend.TMA and broken:
        if choice.source != "auto":
            raise InvalidArgumentError(name, f"array of shape {view.shape} ({s.dtype_name})",
                                       f"cannot be described by a TMA tensor map: {broken}",
                                       'use backend="auto" or "cp.async" (any pitch), or pad the rows to 16 bytes')
        choice = choose_backend("cp.async", device=s.device)
        reason = f"TMA cannot describe {name} ({broken}); using the cp.async path"
        log.info("tmakit.ops.transpose: %s", reason)
    width = _SPAN // esize  # elements per image row
    runs, plan, k = _runs_and_plan(choice, s.device, d.ptr, rows * esize, cols, esize)
    prefix_rows = runs.prefix_rows(esize)

    def class_views() -> list[ArrayView]:
        """dst's rows of each class as strided views; built only where used (a one-class TMA map describes dst)."""
        return [_class_rows(d, c, runs.classes) for c in range(runs.classes)]

    if choice.backend is Backend.TMA:
        from ..tensormap import describe_tensor

        def src_box(box_rows: int) -> Any:
            return describe_tensor(src, box=(box_rows, width), swizzle="128B", oob_fill="zero",
                                   l2_promotion=_L2_PROMOTION.short)

        # one class: the caller's dst object (a torch tensor takes describe_tensor's fast path)
        targets = [describe_tensor(c, box=(width // runs.classes, width), swizzle="128B")
                   for c in ([dst] if runs.classes == 1 else class_views())]
    else:
        dtype = int(dtype_from_any({1: "uint8", 2: "uint16", 4: "uint32", 8: "uint64"}[esize]))

        def src_box(box_rows: int) -> Any:
            return pack_box_params(s.ptr, (cols, rows), (esize, cols * esize), (width, box_rows), esize, dtype,
                                   swizzle=_SWIZZLE_128B, l2_promotion=int(_L2_PROMOTION))

        targets = [pack_box_params(c.ptr, (rows, c.shape[0]), (esize, c.strides[0]), (width, width // runs.classes),
                                   esize, dtype, swizzle=_SWIZZLE_128B) for c in class_views()]
    source = src_box(plan.rows)
    source_prefix = src_box(prefix_rows) if prefix_rows else source
    targets += [targets[0]] * (_MAX_CLASSES - len(targets))  # the kernel's unused class parameters
    lead = source_lead(s.ptr, cols * esize, esize)
    tiles_r, tiles_c = tile_grid(rows, cols, esize, plan.rows, prefix_rows, lead)
    shared_mem = plan.shared_mem_for(prefix_rows)
    grid = max(1, min(tiles_r * tiles_c, k.resident_blocks(_THREADS, shared_mem)))
    k(source, source_prefix, *targets, tiles_r, tiles_c, lead, esize, runs.classes, runs.packed, grid=(grid, 1, 1),
      block=(_THREADS, 1, 1), shared_mem=shared_mem, stream=stream)
    return TransposeResult(choice, reason, runs, lead)


def _runs_and_plan(choice: BackendChoice, device: int, address: int, pitch: int, dst_rows: int, esize: int) -> tuple[RunPlan, TilePlan, Any]:
    """The run plan, tile plan and kernel of a transpose: runs on lines (run_plan) where their prefix (up to
    7 chunks) costs neither a smaller tile plan nor a resident block per SM against runs on sectors (the
    cp.async path keeps two blocks per SM that way; measured on the H100, one block per SM cost it 0.15 and
    more of copy speed, transpose_stages.py)."""
    limit = _driver.device_attribute("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", device)

    def planned(runs: RunPlan) -> tuple[RunPlan, TilePlan, Any]:
        plan = tile_plan(choice.backend, limit, runs.prefix_rows(esize))
        k = kernel("transpose.cu", "tmakit_transpose", choice, device, TMAKIT_TRANSPOSE_STAGES=plan.stages,
                   TMAKIT_TRANSPOSE_TILE_ROWS=plan.rows, TMAKIT_TRANSPOSE_RUN_BYTES=plan.run_bytes,
                   TMAKIT_TRANSPOSE_SOURCE_EVICTION=int(_SOURCE_EVICTION))
        return runs, plan, k

    lines = run_plan(address, pitch, dst_rows, esize)
    fallback = planned(run_plan(address, pitch, dst_rows, esize, lines=False) if lines.align == 128 else lines)
    if lines.align != 128:
        return fallback
    try:
        best = planned(lines)
    except InvalidArgumentError:  # its prefix does not fit at all
        return fallback
    if best[1] != fallback[1]:
        return fallback

    def resident(option: tuple[RunPlan, TilePlan, Any]) -> int:
        return option[2].resident_blocks(_THREADS, option[1].shared_mem_for(option[0].prefix_rows(esize)))

    return fallback if resident(best) < resident(fallback) else best
