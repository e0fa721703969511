"""GEMM + reduce-scatter, tensor parallelism's second layer: each rank holds a K-slice of the activations and of
the weights, so its product ``a @ b`` is a partial sum of the whole output; rank r owns rows chunk r of the sum.

Here each rank's GEMM adds its partial product straight into the owners' chunks: the epilogue's slabs go out as
TMA reduce-adds (``plan_gemm(reduce="add")``, ``cp.reduce.async.bulk.tensor .add``, atomic per element) through
maps of the owners' buffers, over NVLink for the peers' chunks. No partial is staged, and no reduction kernel runs
after the GEMM. One GEMM per chunk, the peers' first (each rank starting with a different one), its own last, each on
its own stream so that the next one's CTAs take the SMs the last wave of the one before leaves idle.

Ordering across GPUs is the caller's: every chunk must hold zeros (or what the sum adds to) before any rank's plan
runs, and holds the sum once every rank's plan has finished (a barrier of the process group before and after; in
one process, a synchronize of each GPU).
"""
from __future__ import annotations

from typing import Any, Sequence

from .. import _driver
from ..errors import InvalidArgumentError
from ..streams import Event, Stream, as_stream
from . import _checks
from .all_gather_gemm import own_index, ring_order
from .gemm import _check_inputs, _parse_b_major, _rows, plan_gemm, rows_of


class GemmReduceScatterPlan:
    """A prepared GEMM + reduce-scatter: ``plan()`` queues this rank's reduce-adds (one GEMM per chunk: the first
    on ``stream``, each other on a side stream forked from it and joined back, so each GEMM's CTAs take the SMs
    the last, part-empty wave of the one before leaves; the adds commute) and returns ``outs``."""

    def __init__(self, outs: Sequence[Any], device: int, stream: Any, flops: float):
        self.outs, self.flops, self.device = outs, flops, device
        self._stream = as_stream(stream, device=device)
        self.gemms: list = []  # (gemm plan, its stream, the event that joins it back or None)
        self._fork = Event(device, timing=False)

    def next_stream(self) -> Any:
        """The stream of the next GEMM: the plan's for the first, a new side stream after."""
        return self._stream if not self.gemms else Stream(self.device)

    def __call__(self) -> Sequence[Any]:
        self._fork.record(self._stream)
        for gemm, on, joined in self.gemms:
            if joined is not None:
                on.wait(self._fork)
            gemm()
            if joined is not None:
                self._stream.wait(joined.record(on))
        return self.outs

    def close(self) -> None:
        """Release the side streams and events now (garbage collection does it otherwise)."""
        self._fork.close()
        for _, on, joined in self.gemms:
            if joined is not None:
                joined.close()
                on.close()


def plan_gemm_reduce_scatter(a: Any, b: Any, outs: Sequence[Any], *, rank: int | None = None, b_major: str = "k",
                             out_dtype: str | None = None, stream: Any = None,
                             checked: bool | str | None = None) -> GemmReduceScatterPlan:
    """Add rows chunk r of ``a @ b`` (``a`` (M, K), ``b`` (N, K), or (K, N) with ``b_major="n"``, on one GPU)
    into ``outs[r]`` for every rank r.

    ``outs``: every rank's (M_r, N) output chunk in rank order (sum M_r = M), the peers' on other GPUs of this
    process or mapped here (``tmakit.ops.symmetric_views``); this GPU's own is ``outs[rank]`` (default: the only
    chunk on a's GPU). Chunks are a's dtype or float32 (``out_dtype``), rows of a multiple of 16 bytes.
    """
    av, bv, _, (m, n, k) = _check_inputs(a, b, None, _parse_b_major(b_major), None)
    if isinstance(outs, (str, bytes)) or not isinstance(outs, Sequence) or not outs:
        raise InvalidArgumentError("outs", type(outs).__name__, "must be a non-empty sequence of arrays, one output "
                                   "chunk per rank", "pass [chunk_of_rank_0, chunk_of_rank_1, ...]")
    want = out_dtype or av.dtype_name
    if want not in (av.dtype_name, "float32"):
        raise InvalidArgumentError("out_dtype", out_dtype, f"must be a's dtype ({av.dtype_name}) or float32",
                                   "leave it out for a's dtype")
    views = [_checks.view(o, f"outs[{i}]") for i, o in enumerate(outs)]
    for i, v in enumerate(views):
        if len(v.shape) != 2 or v.shape[1] != n or v.dtype_name != want:
            raise InvalidArgumentError(f"outs[{i}]", f"shape {v.shape} ({v.dtype_name})", f"must be (rows, {n}) of "
                                       f"{want}: a chunk of the output's rows", "allocate (rows of this rank, N)")
        if (n * v.itemsize) % 16:
            raise InvalidArgumentError(f"outs[{i}]", f"rows of {n} x {v.itemsize} bytes", "must be a multiple of 16 "
                                       "bytes (a TMA reduce-add cannot end inside a 16-byte chunk of a row)",
                                       f"pad N to a multiple of {16 // v.itemsize}")
        if v.shape[0]:  # a rank may own no rows
            _rows(v, f"outs[{i}]")
    rows = [v.shape[0] for v in views]
    if sum(rows) != m:
        raise InvalidArgumentError("outs", f"rows {rows}", f"must add up to a's {m} rows",
                                   "split the output's rows among the ranks")
    own = own_index(views, av.device, rank, "outs")
    _checks.refuse_overlap([(f"outs[{i}]", v) for i, v in enumerate(views)], [("a", av), ("b", bv)])
    for i, v in enumerate(views):  # no two chunks may share bytes: their adds would land twice
        _checks.refuse_overlap([(f"outs[{i}]", v)], [(f"outs[{j}]", w) for j, w in enumerate(views) if j > i])
    for v in views:
        if v.device != av.device:
            _driver.enable_peer_access(av.device, v.device)  # raises, naming both GPUs
    starts = [sum(rows[:i]) for i in range(len(rows))]
    plan = GemmReduceScatterPlan(outs, av.device, stream, 2.0 * m * n * k)
    for r in ring_order(own, len(views)) + [own]:
        if rows[r]:
            on = plan.next_stream()
            gemm = plan_gemm(rows_of(av, starts[r], rows[r]), b, outs[r], b_major=b_major, reduce="add",
                             out_dtype=out_dtype, stream=on, checked=checked)
            plan.gemms.append((gemm, on, None if on is plan._stream else Event(av.device, timing=False)))
    return plan


__all__ = ["GemmReduceScatterPlan", "plan_gemm_reduce_scatter"]
