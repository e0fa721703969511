"""Streams and events: the one stream adapter (``as_stream``, ``stream_handle``), timing, and the watcher that
keeps objects alive until the work queued before an event has completed. Async copies are ``copies.py``.

``Stream`` and ``Event`` own driver handles (created through ``tmakit._driver``, so every failure is a
``CudaDriverError`` naming the call). Foreign streams (cuda.core, torch, cupy, a raw ``CUstream`` int)
are adopted with ``as_stream`` and never destroyed. Our ``Stream`` speaks ``__cuda_stream__`` (cupy 14's
``cupy.cuda.Stream.from_external(s)`` takes it); cuda.core takes ``Stream.from_handle(s.handle)`` (cuda.core
1.2 deprecates adopting other objects inside ``launch``), torch ``torch.cuda.ExternalStream(s.handle)``.

Every async copy records an event after itself and keeps both sides referenced until that event has
completed (CuPy's ``_EventWatcher`` idea): a pinned buffer cannot be freed under a copy in flight.
"""
from __future__ import annotations

import contextlib
import math
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from . import _driver
from .arrays import is_array
from .errors import InvalidArgumentError, TmakitError

# Driver constants (stable ABI values; plain ints keep this module free of cuda.bindings enums).
_STREAM_NON_BLOCKING = 1
_EVENT_BLOCKING_SYNC, _EVENT_DISABLE_TIMING = 1, 2
_NOT_READY = 600  # CUDA_ERROR_NOT_READY: a query's "not yet", a value rather than an error
_LEGACY_DEFAULT, _PER_THREAD_DEFAULT = 0x1, 0x2  # CU_STREAM_LEGACY / CU_STREAM_PER_THREAD


def _check_device_ordinal(device: Any, parameter: str = "device") -> int:
    if isinstance(device, bool) or not isinstance(device, (int, np.integer)) or int(device) < 0:
        raise InvalidArgumentError(parameter, device, "must be a CUDA device ordinal (an int >= 0)", "pass 0 for the first GPU")
    return int(device)


def use_device(device: int = 0) -> Any:
    """Make ``device``'s primary context current unless a context of that device already is; return it.

    This is the same context ``cuda.core.Device(device).set_current()`` selects (both retain the primary
    context), so tmakit objects and cuda.core objects made on the same device interoperate.
    """
    return _driver.ensure_context(_check_device_ordinal(device))


def _release(kind: str, ctx: Any, handle: Any) -> None:
    """Finalizer body: destroy a stream/event in its own context. Never raises (may run at exit or in GC)."""
    try:
        _driver.call("cuCtxPushCurrent", ctx)
        try:
            _driver.call("cuStreamDestroy" if kind == "stream" else "cuEventDestroy", handle)
        finally:
            _driver.call("cuCtxPopCurrent")
    except Exception:  # noqa: BLE001 - a finalizer must not raise; the process may be shutting down
        pass


class Event:
    """A CUDA event (timing enabled by default). ``end.elapsed_ms(start)`` or ``elapsed_ms(start, end)``."""

    def __init__(self, device: int = 0, *, timing: bool = True, blocking_sync: bool = False):
        self.device = _check_device_ordinal(device)
        ctx = use_device(self.device)
        flags = (0 if timing else _EVENT_DISABLE_TIMING) | (_EVENT_BLOCKING_SYNC if blocking_sync else 0)
        self._handle = _driver.call("cuEventCreate", flags)
        self.timing, self.recorded = timing, False
        self._finalizer = weakref.finalize(self, _release, "event", ctx, self._handle)

    @property
    def handle(self) -> int:
        self._require_open()
        return int(self._handle)

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def _require_open(self) -> None:
        if self.closed:
            raise InvalidArgumentError("event", self, "is closed", "create a new tmakit.Event")

    def record(self, stream: Any = None) -> "Event":
        s = as_stream(stream, device=self.device)
        if s.device != self.device:
            raise InvalidArgumentError("stream", s, f"is on device {s.device} but the event is on device {self.device}",
                                       "record on a stream of the event's device")
        self._require_open()
        with _driver.context_for(self.device):  # a default stream (0) is the current context's
            _driver.call("cuEventRecord", self._handle, s.raw)
        self.recorded = True
        return self

    def query(self) -> bool:
        """True once all work captured by the last ``record`` has completed (never recorded: True)."""
        self._require_open()
        err = _driver.driver().cuEventQuery(self._handle)[0]
        if int(err) == _NOT_READY:
            return False
        _driver.check("cuEventQuery", (err,))
        return True

    done = property(query)

    def sync(self) -> None:
        self._require_open()
        _driver.call("cuEventSynchronize", self._handle)

    def elapsed_ms(self, start: "Event") -> float:
        """Milliseconds from ``start`` to this event (waits for this event to complete)."""
        return elapsed_ms(start, self)

    def close(self) -> None:
        self._finalizer()

    def __enter__(self) -> "Event":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else ("recorded" if self.recorded else "new")
        return f"tmakit.Event(device={self.device}, timing={self.timing}, {state})"


def elapsed_ms(start: Event, end: Event) -> float:
    """GPU time in ms between two recorded, timing-enabled events; waits for ``end``."""
    for name, ev in (("start", start), ("end", end)):
        if not isinstance(ev, Event):
            raise InvalidArgumentError(name, type(ev).__name__, "must be a tmakit.Event", "create it with tmakit.Event(device)")
        if not ev.timing:
            raise InvalidArgumentError(name, ev, "was created with timing=False", "create it with tmakit.Event(device, timing=True)")
        if not ev.recorded:
            raise InvalidArgumentError(name, ev, "was never recorded", "call event.record(stream) first")
    end.sync()
    return float(_driver.call("cuEventElapsedTime", start._handle, end._handle))


class Stream:
    """A CUDA stream. Owned (``Stream(device)``, destroyed by ``close()``/GC) or borrowed (``as_stream``)."""

    def __init__(self, device: int = 0, *, nonblocking: bool = True, priority: int = 0):
        if isinstance(priority, bool) or not isinstance(priority, (int, np.integer)):
            raise InvalidArgumentError("priority", priority, "must be an int (lower is higher priority)",
                                       "use e.g. priority=-1 for a high-priority stream, 0 for the default")
        self.device = _check_device_ordinal(device)
        ctx = use_device(self.device)
        flags = _STREAM_NON_BLOCKING if nonblocking else 0
        self._raw = _driver.call("cuStreamCreateWithPriority", flags, int(priority))
        self._owner: Any = None
        self._finalizer: Any = weakref.finalize(self, _release, "stream", ctx, self._raw)

    @classmethod
    def _borrow(cls, handle: int, owner: Any, device: int | None) -> "Stream":
        self = cls.__new__(cls)
        self._raw, self._owner, self._finalizer = int(handle), owner, None
        self.device = device if device is not None else _stream_device(int(handle))
        return self

    @property
    def borrowed(self) -> bool:
        return self._finalizer is None

    @property
    def closed(self) -> bool:
        return self._finalizer is not None and not self._finalizer.alive

    @property
    def raw(self) -> Any:
        """The handle as the driver bindings take it."""
        if self.closed:
            raise InvalidArgumentError("stream", self, "is closed", "create a new tmakit.Stream")
        return self._raw

    @property
    def handle(self) -> int:
        """The ``CUstream`` address as an int (``torch.cuda.ExternalStream(s.handle)``,
        ``cuda.core.Stream.from_handle(s.handle)``)."""
        return int(self.raw)

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.handle)

    def sync(self) -> None:
        with _driver.context_for(self.device):  # a default stream (0) is the current context's
            _driver.call("cuStreamSynchronize", self.raw)
        _watcher.sweep()

    def record(self, event: Event | None = None) -> Event:
        return (event or Event(self.device)).record(self)

    def wait(self, other: "Event | Stream") -> None:
        """Make later work on this stream wait for ``other`` (an event, or everything queued on a stream)."""
        if isinstance(other, Stream):
            other = other.record(Event(other.device, timing=False))
        if not isinstance(other, Event):
            raise InvalidArgumentError("other", type(other).__name__, "must be a tmakit.Event or tmakit.Stream", "")
        with _driver.context_for(self.device):  # a default stream (0) is the current context's
            _driver.call("cuStreamWaitEvent", self.raw, other._handle, 0)

    def close(self) -> None:
        if self._finalizer is not None:
            self._finalizer()
        self._owner = None

    def __enter__(self) -> "Stream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        kind = "borrowed" if self.borrowed else ("closed" if self.closed else "owned")
        return f"tmakit.Stream(device={self.device}, handle={int(self._raw):#x}, {kind})"


def _stream_device(handle: int) -> int:
    if handle in (0, _LEGACY_DEFAULT, _PER_THREAD_DEFAULT):  # default streams follow the current context
        cur = _driver.current_device_ordinal()
        return 0 if cur is None else cur
    return int(_driver.call("cuStreamGetDevice", handle))


def _foreign_handle(obj: Any) -> tuple[int, Any] | None:
    """(handle, owner) of a stream object that is not a tmakit Stream, or None when ``obj`` is no stream:
    the ``__cuda_stream__`` protocol (cuda.core, cupy 14), torch/cupy (``.cuda_stream`` / ``.ptr``), a
    ``CUstream`` or a non-negative int handle."""
    if hasattr(obj, "__cuda_stream__"):
        return int(obj.__cuda_stream__()[1]), obj
    for attr in ("cuda_stream", "ptr"):  # torch.cuda.Stream, cupy.cuda.Stream
        value = getattr(obj, attr, None)
        if isinstance(value, int) and not is_array(obj):
            return value, obj
    if type(obj).__name__ == "CUstream":
        return int(obj), None
    if isinstance(obj, (int, np.integer)) and not isinstance(obj, bool) and int(obj) >= 0:
        return int(obj), None
    return None


def _not_a_stream(obj: Any, parameter: str) -> InvalidArgumentError:
    if is_array(obj):
        return InvalidArgumentError(parameter, type(obj).__name__, "is an array, not a stream",
                                    "pass the stream as stream=..., and the array where the data goes")
    return InvalidArgumentError(parameter, type(obj).__name__, "is not a CUDA stream",
                                "pass a tmakit.Stream, cuda.core Stream, torch/cupy stream or a CUstream int")


def stream_handle(obj: Any, parameter: str = "stream") -> int:
    """The ``CUstream`` handle (an int) of anything ``as_stream`` adopts, without adopting it; None -> 0
    (the legacy default stream). What a launch needs on every call."""
    if obj is None:
        return 0
    if type(obj) is int and obj >= 0:
        return obj
    if type(obj) is Stream:
        return int(obj.raw)
    found = _foreign_handle(obj)
    if found is None:
        raise _not_a_stream(obj, parameter)
    return found[0]


def as_stream(obj: Any = None, *, device: int | None = None, parameter: str = "stream") -> Stream:
    """Adopt a stream: a tmakit Stream, cuda.core Stream, any ``__cuda_stream__`` object, a torch or cupy
    stream, or a raw ``CUstream`` int. ``None`` means the legacy default stream of ``device`` (or the
    current device). Foreign streams are borrowed: the caller keeps them alive, tmakit never destroys them."""
    if isinstance(obj, Stream):
        return obj
    if obj is None:
        dev = device if device is not None else (_driver.current_device_ordinal() or 0)
        use_device(dev)
        return Stream._borrow(0, None, dev)
    found = _foreign_handle(obj)
    if found is None:
        raise _not_a_stream(obj, parameter)
    return Stream._borrow(found[0], found[1], None)


# ---------------------------------------------------------------- keep-alive until copies complete
class _Watcher:
    """Holds objects used by async work until the event recorded after that work has completed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: list[tuple[Event, tuple[Any, ...]]] = []

    def hold(self, stream: Stream, objs: tuple[Any, ...]) -> Event:
        event = Event(stream.device, timing=False).record(stream)
        for obj in objs:
            note = getattr(obj, "_note_use", None)  # PinnedBuffer / allocation: close() waits for it
            if note is not None:
                note(event)
        with self._lock:
            self._pending.append((event, objs))
            crowded = len(self._pending) >= 64
        if crowded:  # sweeping queries every pending event; batching keeps a copy's host overhead flat
            self.sweep()
        return event

    def sweep(self) -> int:
        """Drop references whose work has completed; return how many are still pending."""
        with self._lock:
            self._pending = [(ev, objs) for ev, objs in self._pending if not ev.query()]
            return len(self._pending)

    def pending(self) -> int:
        with self._lock:
            return len(self._pending)


_watcher = _Watcher()


def hold_until_done(stream: Stream, owners: tuple[Any, ...]) -> Event:
    """Keep ``owners`` referenced until the work queued on ``stream`` so far has completed."""
    return _watcher.hold(stream, owners)


# ---------------------------------------------------------------- timing
@dataclass
class Timing:
    """Result of ``with tmakit.timed(stream) as t``: ``t.ms`` is set when the block exits."""

    _ms: float = math.nan

    @property
    def ms(self) -> float:
        if math.isnan(self._ms):
            raise TmakitError("t.ms is known only after the `with tmakit.timed(stream) as t:` block has exited")
        return self._ms


@contextlib.contextmanager
def timed(stream: Any = None) -> Iterator[Timing]:
    """Time the GPU work enqueued on ``stream`` inside the block (events, not host clocks)."""
    s = as_stream(stream)
    start, end = Event(s.device), Event(s.device)
    result = Timing()
    try:
        start.record(s)
        yield result
        end.record(s)
        result._ms = elapsed_ms(start, end)
    finally:
        start.close()
        end.close()
