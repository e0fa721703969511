"""The chunked transfer pipeline: H2D copy -> user kernel -> D2H copy, overlapped over N streams.

``pipeline(inputs, kernel)`` splits host arrays along axis 0 into chunks, and for each chunk copies the
inputs to one of K device slots, calls ``kernel(chunk)`` (any callable that enqueues work on
``chunk.stream``), and copies the outputs back. Chunk i runs on stream ``i % N`` in slot ``i % K``; a slot is
reused only after the chunk that used it before has finished (a stream wait on the device, a host wait
when pinned staging buffers are involved). Pageable inputs/outputs are staged through pinned buffers.

The report times every stage with events and shows the overlap achieved: end-to-end time against the
sum of the stages (what one stream would take) and the slowest stage (the ideal). Pictures of it (text, rich,
PNG) and the progress bar are ``transfer_render.py``.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from . import transfer_render
from .device_array import DeviceArray
from .errors import InvalidArgumentError
from .memory import host_owner, pinned_empty
from .copies import copy_d2h, copy_h2d
from .streams import Event, Stream, as_stream, elapsed_ms


@dataclass(frozen=True)
class Chunk:
    """What a pipeline kernel gets: device views of this chunk's rows and the stream to enqueue on.

    For torch: ``torch.cuda.ExternalStream(chunk.stream.handle)`` and ``torch.as_tensor(chunk.input,
    device="cuda")``; for cupy: ``cupy.cuda.Stream.from_external(chunk.stream)`` (cupy 14; before it
    ``cupy.cuda.ExternalStream(chunk.stream.handle)``) and ``cupy.asarray``; for cuda.core's ``launch``:
    ``cuda.core.Stream.from_handle(chunk.stream.handle)``.
    """

    index: int
    start: int  # first row (axis 0) of the host arrays
    stop: int
    inputs: tuple[DeviceArray, ...]
    outputs: tuple[DeviceArray, ...]
    stream: Stream

    @property
    def input(self) -> DeviceArray:
        return self.inputs[0]

    @property
    def output(self) -> DeviceArray:
        return self.outputs[0]


Kernel = Callable[[Chunk], Any]
_STAGES = ("h2d", "kernel", "d2h")


@dataclass(frozen=True)
class ChunkTiming:
    """When each stage of one chunk ran, in ms since the pipeline started."""

    index: int
    stream: int
    slot: int
    rows: tuple[int, int]
    h2d: tuple[float, float]
    kernel: tuple[float, float]
    d2h: tuple[float, float]


def _busy_ms(spans: Sequence[tuple[float, float]]) -> float:
    """Length of the union of intervals: the time a stage was busy on any stream."""
    total, end = 0.0, -math.inf
    for lo, hi in sorted(spans):
        if hi <= end:
            continue
        total += hi - max(lo, end)
        end = hi
    return total


@dataclass
class TransferReport:
    """Bytes, per-stage busy time, GB/s per direction, and the overlap the pipeline achieved."""

    bytes_h2d: int
    bytes_d2h: int
    total_ms: float
    chunks: list[ChunkTiming]
    streams: int
    buffers: int
    chunk_rows: int
    staged_inputs: int = 0
    staged_outputs: int = 0
    host_staging_ms: float = 0.0  # host time spent packing/unpacking pageable data (perf_counter)
    device: int = 0
    extra: dict = field(default_factory=dict)

    def stage_ms(self, stage: str) -> float:
        if stage not in _STAGES:
            raise InvalidArgumentError("stage", stage, f"is not one of {_STAGES}", "")
        return _busy_ms([getattr(c, stage) for c in self.chunks])

    @property
    def h2d_ms(self) -> float:
        return self.stage_ms("h2d")

    @property
    def kernel_ms(self) -> float:
        return self.stage_ms("kernel")

    @property
    def d2h_ms(self) -> float:
        return self.stage_ms("d2h")

    @property
    def h2d_gbps(self) -> float:
        return _gbps(self.bytes_h2d, self.h2d_ms)

    @property
    def d2h_gbps(self) -> float:
        return _gbps(self.bytes_d2h, self.d2h_ms)

    @property
    def end_to_end_gbps(self) -> float:
        return _gbps(self.bytes_h2d + self.bytes_d2h, self.total_ms)

    @property
    def sum_stages_ms(self) -> float:
        return self.h2d_ms + self.kernel_ms + self.d2h_ms

    @property
    def max_stage_ms(self) -> float:
        return max(self.h2d_ms, self.kernel_ms, self.d2h_ms)

    @property
    def speedup_vs_serial(self) -> float:
        """Sum of stages / end-to-end: 1.0 means no overlap, up to 3.0 with three equal stages."""
        return self.sum_stages_ms / self.total_ms if self.total_ms else math.nan

    @property
    def vs_ideal(self) -> float:
        """End-to-end / slowest stage: 1.0 is perfect overlap."""
        return self.total_ms / self.max_stage_ms if self.max_stage_ms else math.nan

    def summary(self) -> str:
        lines = [
            f"{len(self.chunks)} chunks of {self.chunk_rows} rows over {self.streams} stream(s), {self.buffers} buffer slot(s)",
            f"  H2D    {_size(self.bytes_h2d)}  {self.h2d_ms:9.2f} ms  {self.h2d_gbps:7.1f} GB/s",
            f"  kernel {'':10}  {self.kernel_ms:9.2f} ms",
            f"  D2H    {_size(self.bytes_d2h)}  {self.d2h_ms:9.2f} ms  {self.d2h_gbps:7.1f} GB/s",
            f"  end-to-end {self.total_ms:9.2f} ms  (sum of stages {self.sum_stages_ms:.2f} ms, slowest {self.max_stage_ms:.2f} ms)",
            f"  overlap: {self.speedup_vs_serial:.2f}x faster than serial; {self.vs_ideal:.3f}x the ideal (1.0 = slowest stage only)",
        ]
        if self.staged_inputs or self.staged_outputs:
            lines.append(f"  staged through pinned memory: {self.staged_inputs} input(s), {self.staged_outputs} output(s);"
                         f" host copying {self.host_staging_ms:.2f} ms")
        return "\n".join(lines)

    __str__ = summary

    # ---- pictures (drawn by transfer_render)
    def timeline_rows(self, width: int = 100) -> list[tuple[int, str]]:
        """One text row per stream: H = host->device, K = kernel, D = device->host, '.' = idle."""
        return transfer_render.timeline_rows(self, width)

    def timeline_text(self, width: int = 100) -> str:
        return transfer_render.timeline_text(self, width)

    def print_timeline(self, width: int | None = None, console: Any = None) -> None:
        """Print the summary and a coloured timeline with rich."""
        transfer_render.print_timeline(self, width, console)

    def save_timeline_png(self, path: str) -> str:
        """Draw the stream timeline as a PNG (needs matplotlib: pip install 'tmakit[plot]')."""
        return transfer_render.save_timeline_png(self, path)

    def as_dict(self) -> dict:
        keys = ("bytes_h2d", "bytes_d2h", "total_ms", "h2d_ms", "kernel_ms", "d2h_ms", "h2d_gbps", "d2h_gbps",
                "sum_stages_ms", "max_stage_ms", "speedup_vs_serial", "vs_ideal", "streams", "buffers", "chunk_rows",
                "host_staging_ms")
        return {k: getattr(self, k) for k in keys} | {"chunks": len(self.chunks)}


def _size(nbytes: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:7.2f} {unit}"
    return f"{nbytes:7d} B "


def _gbps(nbytes: int, ms: float) -> float:
    return nbytes / (ms * 1e6) if ms > 0 else math.nan


@dataclass
class PipelineResult:
    output: Any  # one numpy array, or a tuple when there are several outputs
    report: TransferReport

    def __iter__(self):  # out, report = tmakit.pipeline(...)
        return iter((self.output, self.report))


# ---------------------------------------------------------------- validation
def _as_tuple(value: Any) -> tuple:
    return tuple(value) if isinstance(value, (list, tuple)) else (value,)


def _check_inputs(inputs: tuple, parameter: str) -> int:
    if not inputs:
        raise InvalidArgumentError(parameter, inputs, "is empty", "pass at least one numpy array")
    rows = None
    for i, a in enumerate(inputs):
        name = f"{parameter}[{i}]"
        if not isinstance(a, np.ndarray):
            raise InvalidArgumentError(name, type(a).__name__, "must be a numpy array (pinned or pageable)",
                                       "pass numpy.asarray(x); device arrays need no pipeline")
        if a.ndim == 0:
            raise InvalidArgumentError(name, "0-d array", "needs at least one axis to split into chunks", "reshape(1)")
        if a.dtype.hasobject:
            raise InvalidArgumentError(name, a.dtype, "holds Python objects", "use a numeric dtype")
        host_owner(a, name)  # raises if its pinned buffer was freed
        if rows is None:
            rows = a.shape[0]
        elif a.shape[0] != rows:
            raise InvalidArgumentError(name, f"shape {a.shape}", f"has {a.shape[0]} rows but {parameter}[0] has {rows}",
                                       "all arrays must have the same length along axis 0 (the chunked axis)")
    return int(rows)


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise InvalidArgumentError(name, value, "must be a positive int", "")
    return int(value)


def _direct(a: np.ndarray) -> bool:
    """Copied straight from/to the user's array (pinned and contiguous), else staged."""
    return a.flags.c_contiguous and host_owner(a) is not None


# ---------------------------------------------------------------- the pipeline
def pipeline(inputs: np.ndarray | Sequence[np.ndarray], kernel: Kernel | None = None, *,
             outputs: np.ndarray | Sequence[np.ndarray] | None = None, chunk_bytes: int = 32 << 20,
             streams: int | Sequence[Any] = 3, buffers: int | None = None, device: int = 0,
             progress: bool | None = None) -> PipelineResult:
    """Run ``kernel`` over host arrays larger than (or just large for) device memory, chunk by chunk.

    inputs: numpy array(s), pinned or pageable, split along axis 0. kernel: ``fn(chunk: Chunk)`` that
    enqueues work on ``chunk.stream`` reading ``chunk.inputs`` and writing ``chunk.outputs``; None copies
    the input back (a round trip). outputs: preallocated arrays (same rows as the inputs); by default one
    pinned array like ``inputs[0]``. chunk_bytes: size of a chunk of the widest array. streams: a count or
    existing streams (all on ``device``). buffers: device slots K (default: one per stream).
    progress: rich progress bar; None shows it for transfers of 1 GiB or more.
    """
    ins = _as_tuple(inputs)
    rows = _check_inputs(ins, "inputs")
    if kernel is not None and not callable(kernel):
        raise InvalidArgumentError("kernel", type(kernel).__name__, "must be callable as kernel(chunk)",
                                   "pass a function that enqueues work on chunk.stream")
    chunk_bytes = _positive_int("chunk_bytes", chunk_bytes)
    given_streams = isinstance(streams, (list, tuple))
    if given_streams and not streams:
        raise InvalidArgumentError("streams", streams, "is empty", "pass a count or at least one stream")
    n_streams = len(streams) if given_streams else _positive_int("streams", streams)
    n_slots = _positive_int("buffers", buffers if buffers is not None else n_streams)
    if outputs is not None:
        outs = _as_tuple(outputs)
        if _check_inputs(outs, "outputs") != rows:
            raise InvalidArgumentError("outputs", f"{outs[0].shape[0]} rows", f"differ from the inputs' {rows} rows",
                                       "give outputs the same length along axis 0")
        for i, o in enumerate(outs):
            if not o.flags.writeable:
                raise InvalidArgumentError(f"outputs[{i}]", "read-only array", "must be writable", "pass a writable array")
        if kernel is None and (len(ins) != len(outs) or any(a.dtype != b.dtype or a.shape != b.shape
                                                            for a, b in zip(ins, outs))):
            raise InvalidArgumentError("kernel", None, "a round trip needs outputs shaped and typed like the inputs",
                                       "pass a kernel, or outputs matching the inputs")
    stream_objs = [as_stream(s, parameter="streams") for s in streams] if given_streams else []
    for s in stream_objs:
        if s.device != device:
            raise InvalidArgumentError("streams", s, f"is a stream of device {s.device}, the pipeline runs on device {device}",
                                       f"create the streams on device {device} or pass device={s.device}")
    if outputs is None:
        outs = (pinned_empty(ins[0].shape, ins[0].dtype, device=device),)
    row_bytes = max(a.nbytes // rows if rows else a.dtype.itemsize for a in ins + outs)
    chunk_rows = max(1, min(rows, chunk_bytes // max(1, row_bytes)))
    output = outs[0] if len(outs) == 1 else outs
    if rows == 0:
        return PipelineResult(output, TransferReport(0, 0, 0.0, [], n_streams, n_slots, chunk_rows, device=device))
    if not given_streams:
        stream_objs = [Stream(device) for _ in range(n_streams)]
    try:
        runner = _Runner(ins, outs, kernel, stream_objs, n_slots, chunk_rows, device)
        report = runner.run(progress if progress is not None else sum(a.nbytes for a in ins + outs) >= 1 << 30)
        return PipelineResult(output, report)
    finally:
        if not given_streams:
            for s in stream_objs:
                s.close()


@dataclass
class _Pending:
    """A chunk in flight: what must happen on the host once it has finished."""

    index: int
    lo: int
    hi: int
    events: tuple[Event, Event, Event, Event]  # start, after H2D, after kernel, after D2H
    stream: int
    slot: int


class _Runner:
    def __init__(self, ins: tuple, outs: tuple, kernel: Kernel | None, streams: list[Stream], n_slots: int,
                 chunk_rows: int, device: int):
        self.ins, self.outs, self.kernel, self.streams = ins, outs, kernel, streams
        self.chunk_rows, self.device, self.n_slots = chunk_rows, device, n_slots
        self.direct_in = [_direct(a) for a in ins]
        self.direct_out = [_direct(a) for a in outs]
        self.host_ms = 0.0
        self.owned: list[Any] = []  # device arrays, pinned buffers and events, closed by run()

    def _own(self, obj: Any) -> Any:
        self.owned.append(obj.base if isinstance(obj, np.ndarray) else obj)
        return obj

    def _alloc_slots(self) -> None:
        def shape(a: np.ndarray) -> tuple[int, ...]:
            return (self.chunk_rows,) + a.shape[1:]

        def staging(arrays: tuple, direct: list[bool]) -> list[np.ndarray | None]:
            return [None if d else self._own(pinned_empty(shape(a), a.dtype, device=self.device))
                    for a, d in zip(arrays, direct)]

        self.dev_in, self.dev_out, self.stage_in, self.stage_out = [], [], [], []
        for _ in range(self.n_slots):
            d_in = [self._own(DeviceArray.empty(shape(a), a.dtype, device=self.device)) for a in self.ins]
            self.dev_in.append(d_in)
            self.dev_out.append(d_in if self.kernel is None else
                                [self._own(DeviceArray.empty(shape(a), a.dtype, device=self.device)) for a in self.outs])
            self.stage_in.append(staging(self.ins, self.direct_in))
            self.stage_out.append(staging(self.outs, self.direct_out))

    def run(self, show_progress: bool) -> TransferReport:
        try:
            self._alloc_slots()
            return self._run(show_progress)
        finally:
            for s in self.streams:
                s.sync()
            for obj in self.owned:
                obj.close()

    def _run(self, show_progress: bool) -> TransferReport:
        rows = self.ins[0].shape[0]
        n_chunks = -(-rows // self.chunk_rows)
        self.t0 = self._own(Event(self.device)).record(self.streams[0])
        for s in self.streams[1:]:
            s.wait(self.t0)
        busy: list[_Pending | None] = [None] * self.n_slots
        done: list[_Pending] = []
        with transfer_render.Progress(show_progress, n_chunks) as progress:
            for i in range(n_chunks):
                slot, s = i % self.n_slots, self.streams[i % len(self.streams)]
                if busy[slot] is not None:
                    self._release_slot(busy[slot], s)
                lo, hi = i * self.chunk_rows, min(rows, (i + 1) * self.chunk_rows)
                busy[slot] = self._enqueue(i, slot, s, lo, hi)
                done.append(busy[slot])
                progress.poll(done)
            for pending in sorted((p for p in busy if p is not None), key=lambda p: p.index):
                self._release_slot(pending, None)
            progress.poll(done, wait=True)
        ends = [self._own(Event(self.device)).record(s) for s in self.streams]
        total = max(elapsed_ms(self.t0, e) for e in ends)
        return TransferReport(
            bytes_h2d=sum(a.nbytes for a in self.ins), bytes_d2h=sum(a.nbytes for a in self.outs), total_ms=total,
            chunks=[self._timing(p) for p in done], streams=len(self.streams), buffers=self.n_slots,
            chunk_rows=self.chunk_rows, staged_inputs=self.direct_in.count(False),
            staged_outputs=self.direct_out.count(False), host_staging_ms=self.host_ms, device=self.device)

    def _enqueue(self, i: int, slot: int, s: Stream, lo: int, hi: int) -> _Pending:
        n = hi - lo
        events = tuple(self._own(Event(self.device)) for _ in range(4))
        t = time.perf_counter()
        for j, a in enumerate(self.ins):
            stage = self.stage_in[slot][j]
            if stage is not None:  # pageable (or strided): pack into pinned staging first
                np.copyto(stage[:n], a[lo:hi])
        self.host_ms += (time.perf_counter() - t) * 1e3
        events[0].record(s)
        for j, a in enumerate(self.ins):
            stage = self.stage_in[slot][j]
            copy_h2d(self.dev_in[slot][j][:n], a[lo:hi] if stage is None else stage[:n], s)
        events[1].record(s)
        if self.kernel is not None:
            self.kernel(Chunk(i, lo, hi, tuple(d[:n] for d in self.dev_in[slot]),
                              tuple(d[:n] for d in self.dev_out[slot]), s))
        events[2].record(s)
        for j, o in enumerate(self.outs):
            stage = self.stage_out[slot][j]
            copy_d2h(o[lo:hi] if stage is None else stage[:n], self.dev_out[slot][j][:n], s)
        events[3].record(s)
        return _Pending(i, lo, hi, events, self.streams.index(s), slot)

    def _release_slot(self, p: _Pending, next_stream: Stream | None) -> None:
        """Chunk p is done with its slot: unpack its staged outputs and let the slot's next user go."""
        staged = any(x is not None for x in self.stage_in[p.slot] + self.stage_out[p.slot])
        if staged or next_stream is None:
            p.events[3].sync()  # the host is about to read/rewrite the slot's pinned staging buffers
        if next_stream is not None and next_stream is not self.streams[p.stream]:
            next_stream.wait(p.events[3])  # the slot's device buffers are reused on another stream
        t = time.perf_counter()
        for j, o in enumerate(self.outs):
            stage = self.stage_out[p.slot][j]
            if stage is not None:
                np.copyto(o[p.lo:p.hi], stage[:p.hi - p.lo])
        self.host_ms += (time.perf_counter() - t) * 1e3

    def _timing(self, p: _Pending) -> ChunkTiming:
        start, h2d, ker, d2h = (elapsed_ms(self.t0, e) for e in p.events)
        return ChunkTiming(p.index, p.stream, p.slot, (p.lo, p.hi), (start, h2d), (h2d, ker), (ker, d2h))
