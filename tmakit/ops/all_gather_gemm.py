"""All-gather + GEMM, tensor parallelism's first layer: ``out = concat(a_shards) @ B`` on this GPU, where
``a_shards`` are the ranks' row blocks of A, this GPU's own and its peers' (on other GPUs of this process, reached
over the peer path, or peer buffers already mapped here, such as torch symmetric memory's views).

The peers' shards come by TMA (``plan_copy``'s pulling kernel, on ``copy_blocks`` SMs of a side stream) into a
gathered A on this GPU, while the GEMM of part of this GPU's own shard runs on the other SMs; once every shard has
arrived (an event) one GEMM of the rest of the gathered A runs on every SM (two for a rank in the middle, whose
own rows sit inside the gathered A: the second on the side stream, beside the first). How many own rows go beside
the pulls is a turn model's choice (``choose_overlap``): more launches, each with a part-empty last wave, can cost
more than the pulls they hide. Why not a GEMM whose producer reads A through peer maps: measured on two H200s (4096 x 8192 x
8192), 95 TFLOP/s against 806 from local A, because each of the N / BN tile columns re-reads A over NVLink (peer
lines are not cached in this GPU's L2); gathered once, A crosses NVLink once.

Ordering across GPUs is the caller's: every shard must be written before any rank's plan runs, and stay until
every rank's plan has pulled it (a barrier of the process group on each side; in one process, a synchronize).
"""
from __future__ import annotations

from typing import Any, Sequence

from .. import _driver
from ..arrays import ArrayView
from ..errors import InvalidArgumentError
from ..streams import Event, Stream, as_stream
from . import _checks
from ._kernels import sm_count
from .copy import plan_copy
from .gemm import DTYPES, _parse_b_major, _rows, plan_gemm, rows_of, turn_cost

_COPY_BLOCKS = 16  # measured on the H200 pair, 64 MiB: 8 blocks pulled 238 GB/s, 16 358 (torch's copy: 351)
# The cost model of overlap_rows: NVLink pulls at about 350 GB/s each way (358 measured with 16 blocks), a local copy
# on those blocks at about 1.5 TB/s, a GEMM turn of 128 x 256 x K tiles at about 6 TFLOP/s per SM (806 TFLOP/s
# measured at 8192 x 8192 x 8192, whole turns, on 132 SMs).
_PULL_BYTES_PER_S = 350e9
_LOCAL_BYTES_PER_S = 1.5e12
_FLOPS_PER_SM = 6.0e12
_ROW_STEP = 256  # whole 2-CTA cluster rows of 128-row tiles


def gemm_seconds(m: int, n: int, k: int, sms: int) -> float:
    """The tile model's time of an m x n x k GEMM on ``sms`` SMs (``turn_cost`` at _FLOPS_PER_SM)."""
    return turn_cost(m, n, k, sms) * 2.0 * 128 * 256 * k / _FLOPS_PER_SM if m > 0 else 0.0


def choose_overlap(rows: list[int], own: int, n: int, k: int, itemsize: int, sms: int, beside: int) -> int:
    """The rows of the own shard to compute beside the copies (on ``beside`` SMs) before one GEMM of the rest of
    the gathered A on every SM: the count (0, or a multiple of _ROW_STEP up to the shard) the turn model finds
    fastest. 0 is the plain all-gather then GEMM, best where the pulls are short against a turn."""
    total, mine = sum(rows), rows[own]
    pulls = (total - mine) * k * itemsize / _PULL_BYTES_PER_S + mine * k * itemsize / _LOCAL_BYTES_PER_S
    best, best_t = 0, pulls + gemm_seconds(total, n, k, sms)
    for h in list(range(_ROW_STEP, mine, _ROW_STEP)) + [mine]:
        # a middle rank's two rest pieces run on two streams, the second's CTAs filling the first's last wave
        t = max(pulls, gemm_seconds(h, n, k, beside)) + gemm_seconds(total - h, n, k, sms)
        if t < best_t:
            best, best_t = h, t
    return best


def new_rows(like: Any, v: ArrayView, shape: tuple[int, int], device: int) -> tuple[Any, ArrayView]:
    """A fresh row-major (rows, cols) array of v's dtype (``like``'s, for torch) on ``device`` and its view:
    torch's allocator for a torch ``like``, else a DeviceArray of the bytes (the view names the dtype, owns it)."""
    if hasattr(like, "new_empty"):
        import torch  # the caller already uses torch

        t = torch.empty(shape, dtype=like.dtype, device=f"cuda:{device}")
        return t, _checks.view(t, "out")
    from ..device_array import DeviceArray

    raw = DeviceArray.empty(shape, f"uint{8 * v.itemsize}", device=device)
    view = ArrayView(raw.ptr, shape, (shape[1] * v.itemsize, v.itemsize), v.dtype_name, v.itemsize, device, raw)
    return view, view


def own_index(views: Sequence[ArrayView], device: int, rank: Any, parameter: str) -> int:
    """The index of this GPU's own array: ``rank`` when given, else the only one on ``device``."""
    if rank is not None:
        if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < len(views):
            raise InvalidArgumentError("rank", rank, f"must be an int in [0, {len(views)}) (an index of {parameter})",
                                       "pass this GPU's rank in the group")
        if views[rank].device != device:
            raise InvalidArgumentError("rank", rank, f"names {parameter}[{rank}] on GPU {views[rank].device}, but "
                                       f"this GPU's own must be on GPU {device}", "pass this GPU's rank")
        return rank
    here = [i for i, v in enumerate(views) if v.device == device]
    if len(here) != 1:
        raise InvalidArgumentError("rank", None, f"must be given: {len(here)} of {parameter} are on GPU {device} "
                                   "(mapped peer buffers look local)", "pass rank= (this GPU's index in the group)")
    return here[0]


def ring_order(own: int, world: int) -> list[int]:
    """The ranks after ``own``, then those before it: every rank starts with a different peer."""
    return [(own + i) % world for i in range(1, world)]


class AllGatherGemmPlan:
    """A prepared all-gather + GEMM. ``plan()`` runs it on ``stream`` (the copies on the plan's side stream) and
    returns ``out``; ``plan.gathered`` holds all of A once that work is done. ``plan.overlap_rows``: the rows of
    the own shard computed beside the copies."""

    def __init__(self, device: int, stream: Any, out: Any, gathered: Any, flops: float):
        self.device, self.out, self.gathered, self.flops = device, out, gathered, flops
        self.overlap_rows = 0
        self._stream, self._side = as_stream(stream, device=device), Stream(device)
        self.copies: list = []  # the own shard's copy into gathered, then the peers' pulls, on the side stream
        self.beside: list = []  # the GEMM run beside the copies (the own shard's part)
        self.after: list = []  # the GEMM of the rest of the gathered A, once every copy is done, on the stream
        self.after_side: list = []  # a middle rank's second rest piece: on the side stream, after the copies
        self._start, self._copied = Event(device, timing=False), Event(device, timing=False)
        self._joined = Event(device, timing=False)

    def __call__(self) -> Any:
        self._side.wait(self._start.record(self._stream))  # the copies follow earlier work on the stream
        for copy in self.copies:
            copy()
        self._copied.record(self._side)
        for gemm in self.beside:
            gemm()
        self._stream.wait(self._copied)
        for gemm in self.after:
            gemm()
        if self.after_side:  # the side stream has finished the copies: its GEMM needs no other wait
            for gemm in self.after_side:
                gemm()
            self._stream.wait(self._joined.record(self._side))
        return self.out

    def close(self) -> None:
        """Release the side stream and the events now (garbage collection does it otherwise)."""
        for e in (self._start, self._copied, self._joined):
            e.close()
        self._side.close()


def plan_all_gather_gemm(a_shards: Sequence[Any], b: Any, out: Any = None, *, rank: int | None = None,
                         gathered: Any = None, b_major: str = "k", copy_blocks: int = _COPY_BLOCKS,
                         overlap_rows: int | None = None, stream: Any = None,
                         checked: bool | str | None = None) -> AllGatherGemmPlan:
    """``out = concat(a_shards) @ b`` (``b`` stored (N, K), or (K, N) with ``b_major="n"``) on b's GPU.

    ``a_shards``: every rank's (M_r, K) row block of A in rank order, contiguous, bf16 or fp16: this GPU's own
    (``rank``; default the only shard on b's GPU) and the peers', on other GPUs of this process or mapped here
    (``tmakit.ops.symmetric_views``). ``gathered`` (sum M_r, K) receives all of A (allocated when left out);
    ``out`` (sum M_r, N) in A's dtype (allocated for torch shards). ``copy_blocks``: the SMs pulling the peers'
    shards; ``overlap_rows``: the rows of the own shard computed on the other SMs meanwhile (default: the count a
    turn model of the GEMM and the NVLink rate finds fastest, ``choose_overlap``; 0 for a short pull); the rest of
    the gathered A then runs as one GEMM on every SM (a rank in the middle: two, side by side).
    """
    if isinstance(a_shards, (str, bytes)) or not isinstance(a_shards, Sequence) or not a_shards:
        raise InvalidArgumentError("a_shards", type(a_shards).__name__, "must be a non-empty sequence of arrays, one "
                                   "row block of A per rank", "pass [shard_of_rank_0, shard_of_rank_1, ...]")
    views = [_checks.view(s, f"a_shards[{i}]") for i, s in enumerate(a_shards)]
    first = views[0]
    k = first.shape[1] if len(first.shape) == 2 else None
    for i, v in enumerate(views):
        name = f"a_shards[{i}]"
        if v.dtype_name not in DTYPES or v.dtype_name != first.dtype_name:
            raise InvalidArgumentError(name, f"dtype {v.dtype_name}", "must be bfloat16 or float16, one dtype for "
                                       "every shard", "convert the shards to one 16-bit dtype")
        if len(v.shape) != 2 or v.shape[1] != k:
            same = f", K = {k} as in a_shards[0]" if k else ""
            raise InvalidArgumentError(name, f"shape {v.shape}", f"must be 2-D (rows, K){same}",
                                       "pass row blocks of one A")
        _checks.require_contiguous(v, name)
    if (k * first.itemsize) % 16:
        raise InvalidArgumentError("a_shards", f"rows of {k} x {first.itemsize} bytes", "must be a multiple of 16 "
                                   "bytes (the row pitch of the gathered A's TMA map)",
                                   f"pad K to a multiple of {16 // first.itemsize}")
    bv = _checks.view(b, "b")
    if bv.dtype_name != first.dtype_name:
        raise InvalidArgumentError("b", f"dtype {bv.dtype_name}", f"must match the shards' dtype ({first.dtype_name})",
                                   "convert A and B to one dtype")
    br, bc, _ = _rows(bv, "b")
    b_kmajor = _parse_b_major(b_major)
    n, kb = (br, bc) if b_kmajor else (bc, br)
    if kb != k:
        raise InvalidArgumentError("b", f"shape {bv.shape}", f'must be {"(N, K)" if b_kmajor else "(K, N)"} with '
                                   f'b_major="{"k" if b_kmajor else "n"}", K = {k} as in the shards',
                                   'pass B transposed, or the other b_major')
    device = bv.device
    rows = [v.shape[0] for v in views]
    total = sum(rows)
    inputs = [(f"a_shards[{i}]", v) for i, v in enumerate(views)] + [("b", bv)]
    if out is None:
        if not hasattr(a_shards[0], "new_empty"):
            raise InvalidArgumentError("out", None, f"must be given here: an output of ({total}, {n}) is allocated "
                                       "only for torch shards", "pass out=")
    else:
        ov = _checks.view(out, "out")
        if ov.device != device or ov.shape != (total, n) or ov.dtype_name != first.dtype_name:
            raise InvalidArgumentError("out", f"shape {ov.shape} ({ov.dtype_name}) on GPU {ov.device}",
                                       f"must be ({total}, {n}) of {first.dtype_name} on GPU {device} (b's)",
                                       "allocate (sum of the shards' rows, N) like A")
        _rows(ov, "out")
        _checks.refuse_overlap([("out", ov)], inputs)
    own = own_index(views, device, rank, "a_shards")
    if gathered is not None:
        gv = _checks.view(gathered, "gathered")
        if gv.shape != (total, k) or gv.dtype_name != first.dtype_name or gv.device != device:
            raise InvalidArgumentError("gathered", f"shape {gv.shape} ({gv.dtype_name}) on GPU {gv.device}",
                                       f"must be ({total}, {k}) of {first.dtype_name} on GPU {device}",
                                       "allocate it like A, or leave it out")
        _checks.require_contiguous(gv, "gathered")
        _checks.refuse_overlap([("gathered", gv)], inputs + ([("out", ov)] if out is not None else []))
    sms = sm_count(device)
    if not isinstance(copy_blocks, int) or isinstance(copy_blocks, bool) or not 1 <= copy_blocks < sms:
        raise InvalidArgumentError("copy_blocks", copy_blocks, f"must be an int in [1, {sms}) (SMs of GPU {device} "
                                   "given to the copies)", f"leave it at {_COPY_BLOCKS}")
    if overlap_rows is not None and (not isinstance(overlap_rows, int) or isinstance(overlap_rows, bool)
                                     or not 0 <= overlap_rows <= rows[own]):
        raise InvalidArgumentError("overlap_rows", overlap_rows, f"must be an int in [0, {rows[own]}] (rows of the "
                                   "own shard)", "leave it out for the cost model's choice")
    for v in views:
        if v.device != device:  # a shard on another GPU of this process: pulled over the peer path
            _driver.enable_peer_access(device, v.device)  # raises, naming both GPUs
    if out is None:
        out, ov = new_rows(a_shards[0], first, (total, n), device)
    if gathered is None:
        gathered, gv = new_rows(a_shards[0], first, (total, k), device)
    plan = AllGatherGemmPlan(device, stream, out, gathered, 2.0 * total * n * k)
    starts = [sum(rows[:i]) for i in range(len(rows))]
    beside = sms - copy_blocks  # the SMs a GEMM has while the copies run
    mine = rows[own]
    for r in [own] + ring_order(own, len(views)):  # the own shard into the gathered A first (local, short)
        if rows[r]:
            plan.copies.append(plan_copy(rows_of(gv, starts[r], rows[r]), views[r], blocks=copy_blocks,
                                         stream=plan._side, checked=checked))
    head = overlap_rows if overlap_rows is not None else (
        choose_overlap(rows, own, n, k, first.itemsize, sms, beside) if total > mine else mine)
    plan.overlap_rows = head
    # the head comes from the end of the own shard that leaves the rest of the gathered A in one piece (rank 0:
    # its first rows; others: its last rows), so the rest is one GEMM; a rank in the middle has two, the second on
    # the side stream so that its CTAs take the SMs the first one's last, part-empty wave leaves
    h0 = 0 if own == 0 else mine - head
    if head:
        plan.beside.append(plan_gemm(rows_of(views[own], h0, head), b, rows_of(ov, starts[own] + h0, head),
                                     b_major=b_major, stream=stream, checked=checked,
                                     sms=beside if total > mine else None))
    pieces = ((0, total),) if not head else ((0, starts[own] + h0), (starts[own] + h0 + head, total))
    for lo, hi in pieces:
        if hi > lo:
            on = plan._side if plan.after else plan._stream
            (plan.after_side if plan.after else plan.after).append(
                plan_gemm(rows_of(gv, lo, hi - lo), b, rows_of(ov, lo, hi - lo), b_major=b_major, stream=on,
                          checked=checked))
    return plan


__all__ = ["AllGatherGemmPlan", "plan_all_gather_gemm"]
