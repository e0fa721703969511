"""All-gather + GEMM, tensor parallelism's first layer: ``out = concat(a_shards) @ B`` on this GPU, where
``a_shards`` are the ranks' row blocks of A, this GPU's own and its peers' (on other GPUs of this process, reached
over the peer path, or peer buffers already mapped here, such as torch symmetric memory's views).

The peers' shards come by TMA (``plan_copy``'s pulling kernel, on ``copy_blocks`` SMs of a side stream) into a
gathered A on this GPU, while the GEMM of this GPU's own shard runs on the other SMs; each peer's GEMM starts
when its shard has arrived (an event), the last one on every SM. Why not a GEMM whose producer reads A through
peer maps: measured on two H200s, 95 TFLOP/s against 806 from local A, because each of the N / BN tile columns
re-reads A over NVLink (peer lines are not cached in this GPU's L2); gathered once, A crosses NVLink once.

Ordering across GPUs is the caller's: every shard must be written before any rank's plan runs (a barrier of the
process group; in one process, events or a synchronize).
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
from .gemm import DTYPES, _parse_b_major, plan_gemm

_COPY_BLOCKS = 16  # measured on the H200 pair, 64 MiB: 8 blocks pulled 238 GB/s, 16 358 (torch's copy: 351)


def rows_of(v: ArrayView, row0: int, rows: int) -> ArrayView:
    """Rows [row0, row0 + rows) of a 2-D view (same pitch, same owner)."""
    return ArrayView(v.ptr + row0 * v.strides[0], (rows, v.shape[1]), v.strides, v.dtype_name, v.itemsize, v.device,
                     v.owner)


def new_rows(like: Any, v: ArrayView, shape: tuple[int, int], device: int) -> tuple[Any, ArrayView]:
    """A fresh row-major (rows, cols) array of v's dtype on ``device`` and its view: torch's allocator for a torch
    ``like``, else a DeviceArray of the bytes (the view names the dtype and owns it)."""
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
    """A prepared all-gather + GEMM. ``plan()`` runs it on ``stream`` (the copies on the plan's side stream, joined
    back before the end) and returns ``out``; ``plan.gathered`` holds all of A once that work is done."""

    def __init__(self, device: int, stream: Any, out: Any, gathered: Any, flops: float):
        self.device, self.out, self.gathered, self.flops = device, out, gathered, flops
        self._stream, self._side = as_stream(stream, device=device), Stream(device)
        self._steps: list = []  # (copy plan or None, gemm plan), the own shard's first
        self._own_copy: Any = None
        self._start, self._joined = Event(device, timing=False), Event(device, timing=False)
        self._arrived: list = []

    def _add(self, copy: Any, gemm: Any) -> None:
        self._steps.append((copy, gemm))
        self._arrived.append(Event(self.device, timing=False) if copy is not None else None)

    def __call__(self) -> Any:
        self._side.wait(self._start.record(self._stream))  # the copies follow earlier work on the stream
        for (copy, _), event in zip(self._steps, self._arrived):
            if copy is not None:
                copy()
                event.record(self._side)
        if self._own_copy is not None:
            self._own_copy()
        for (_, gemm), event in zip(self._steps, self._arrived):
            if event is not None:
                self._stream.wait(event)
            gemm()
        self._stream.wait(self._joined.record(self._side))  # gathered is complete when the stream's work is
        return self.out

    def close(self) -> None:
        """Release the side stream and the events now (garbage collection does it otherwise)."""
        for e in (self._start, self._joined, *filter(None, self._arrived)):
            e.close()
        self._side.close()


def plan_all_gather_gemm(a_shards: Sequence[Any], b: Any, out: Any = None, *, rank: int | None = None,
                         gathered: Any = None, b_major: str = "k", copy_blocks: int = _COPY_BLOCKS,
                         stream: Any = None, checked: bool | str | None = None) -> AllGatherGemmPlan:
    """``out = concat(a_shards) @ b`` (``b`` stored (N, K), or (K, N) with ``b_major="n"``) on b's GPU.

    ``a_shards``: every rank's (M_r, K) row block of A in rank order, contiguous, bf16 or fp16: this GPU's own
    (``rank``; default the only shard on b's GPU) and the peers', on other GPUs of this process or mapped here
    (``tmakit.ops.symmetric_views``). ``gathered`` (sum M_r, K) receives all of A (allocated when left out);
    ``out`` (sum M_r, N) in A's dtype (allocated for torch inputs). ``copy_blocks``: the SMs pulling the peers'
    shards while the GEMM of the own shard runs on the others.
    """
    if isinstance(a_shards, (str, bytes)) or not isinstance(a_shards, Sequence) or not a_shards:
        raise InvalidArgumentError("a_shards", type(a_shards).__name__, "must be a non-empty sequence of arrays, one "
                                   "row block of A per rank", "pass [shard_of_rank_0, shard_of_rank_1, ...]")
    views = [_checks.view(s, f"a_shards[{i}]") for i, s in enumerate(a_shards)]
    first = views[0]
    for i, v in enumerate(views):
        name = f"a_shards[{i}]"
        if v.dtype_name not in DTYPES or v.dtype_name != first.dtype_name:
            raise InvalidArgumentError(name, f"dtype {v.dtype_name}", "must be bfloat16 or float16, one dtype for "
                                       "every shard", "convert the shards to one 16-bit dtype")
        if len(v.shape) != 2 or v.shape[1] != first.shape[1]:
            raise InvalidArgumentError(name, f"shape {v.shape}", f"must be (rows, {first.shape[1]}): every shard "
                                       "has A's K columns", "pass row blocks of one A")
        _checks.require_contiguous(v, name)
    bv = _checks.view(b, "b")
    device = bv.device
    n = bv.shape[0] if _parse_b_major(b_major) else bv.shape[-1]
    rows = [v.shape[0] for v in views]
    total, k = sum(rows), first.shape[1]
    if out is None:
        if not hasattr(b, "new_empty"):
            raise InvalidArgumentError("out", None, f"must be given here: an output of ({total}, {n}) is allocated "
                                       "only for torch inputs", "pass out=")
        out, ov = new_rows(b, first, (total, n), device)
    else:
        ov = _checks.view(out, "out")
        if ov.device != device or ov.shape != (total, n) or ov.dtype_name != first.dtype_name:
            raise InvalidArgumentError("out", f"shape {ov.shape} ({ov.dtype_name}) on GPU {ov.device}",
                                       f"must be ({total}, {n}) of {first.dtype_name} on GPU {device} (b's)",
                                       "allocate (sum of the shards' rows, N) like A")
    inputs = [(f"a_shards[{i}]", v) for i, v in enumerate(views)] + [("b", bv)]
    _checks.refuse_overlap([("out", ov)], inputs)
    own = own_index(views, device, rank, "a_shards")
    if gathered is not None:
        gv = _checks.view(gathered, "gathered")
        if gv.shape != (total, k) or gv.dtype_name != first.dtype_name or gv.device != device:
            raise InvalidArgumentError("gathered", f"shape {gv.shape} ({gv.dtype_name}) on GPU {gv.device}",
                                       f"must be ({total}, {k}) of {first.dtype_name} on GPU {device}",
                                       "allocate it like A, or leave it out")
        _checks.require_contiguous(gv, "gathered")
        _checks.refuse_overlap([("gathered", gv)], inputs + [("out", ov)])
    if not isinstance(copy_blocks, int) or isinstance(copy_blocks, bool) or not 1 <= copy_blocks < sm_count(device):
        raise InvalidArgumentError("copy_blocks", copy_blocks, f"must be an int in [1, {sm_count(device)}) (SMs of "
                                   f"GPU {device} given to the copies)", f"leave it at {_COPY_BLOCKS}")
    for v in views:
        if v.device != device:  # a shard on another GPU of this process: pulled over the peer path
            _driver.enable_peer_access(device, v.device)  # raises, naming both GPUs
    if gathered is None:
        gathered, gv = new_rows(a_shards[own], first, (total, k), device)
    plan = AllGatherGemmPlan(device, stream, out, gathered, 2.0 * total * n * k)
    starts = [sum(rows[:i]) for i in range(len(rows))]
    order = [r for r in [own] + ring_order(own, len(views)) if rows[r]]
    for j, r in enumerate(order):
        a_rows = views[r] if r == own else rows_of(gv, starts[r], rows[r])
        copy = None if r == own else plan_copy(a_rows, views[r], blocks=copy_blocks, stream=plan._side,
                                               checked=checked)
        # GEMMs that run beside copies leave the copies' SMs to them; the last runs on every SM
        gemm = plan_gemm(a_rows, b, rows_of(ov, starts[r], rows[r]), b_major=b_major, stream=stream, checked=checked,
                         sms=None if j == len(order) - 1 else sm_count(device) - copy_blocks)
        plan._add(copy, gemm)
    if rows[own]:
        plan._own_copy = plan_copy(rows_of(gv, starts[own], rows[own]), views[own], stream=plan._side,
                                   checked=checked)
    return plan


__all__ = ["AllGatherGemmPlan", "plan_all_gather_gemm"]
