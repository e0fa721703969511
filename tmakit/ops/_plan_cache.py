"""The plans behind the one-shot ops (``ops.copy``, ``transpose``, ``gemm``, ``attention``), kept by geometry.

A one-shot call on a geometry seen before re-points the plan the first call made (``plan(*buffers)``: the tensor
maps re-addressed, the launch's arguments replaced, every check of a re-pointed plan made, overlap included)
instead of deciding, describing, encoding and binding again. What it earns and what it costs are in
docs/CONTRACTS.md ("The one-shot ops' plan cache").

Key: the op; each buffer's shape, byte strides, dtype, device and address modulo 256 (the alignments an op's
decisions read are all below 256 bytes, so a hit never meets a decision its plan did not make); the stream's
handle; the options (backend, tuning, alpha, ...); TMAKIT_CHECK and TMAKIT_BACKEND. Options that cannot be
hashed skip the cache. The last call's plan is tried first when the op, stream object, options and those
settings repeat (its re-pointing refuses, before any launch, buffers its decisions do not take; then the key
decides). Bounded: the least recently used plan goes first. A cached plan keeps the buffers of its last call
alive, as any plan does, until its next call or its eviction; ``clear_plan_cache()`` drops them all.
"""
from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import Any, Callable

from ..arrays import device_array_view
from ..backend import ENV_VAR as _BACKEND_VAR
from ..errors import InvalidArgumentError
from ..streams import Stream, stream_handle

CAPACITY = 16
# The settings as os.environ holds them: os.environ.get encodes the name and decodes the value on every call (about
# a third of a key); CPython's os.environ keeps its encoded dict, _data, in step with every change made through it.
_ENVIRON_DATA = getattr(os.environ, "_data", None)
_BYTES = isinstance(next(iter(_ENVIRON_DATA or {b"": 0})), bytes)
_CHECK_VAR = "TMAKIT_CHECK"
_CHECK, _BACKEND = (_CHECK_VAR.encode(), _BACKEND_VAR.encode()) if _BYTES else (_CHECK_VAR, _BACKEND_VAR)


def _settings() -> tuple:
    """TMAKIT_CHECK and TMAKIT_BACKEND: what a plan reads from the environment when it is made."""
    if _ENVIRON_DATA is not None:
        return _ENVIRON_DATA.get(_CHECK), _ENVIRON_DATA.get(_BACKEND)
    return os.environ.get(_CHECK_VAR), os.environ.get(_BACKEND_VAR)


class PlanCache:
    """A bounded map from a call's geometry to its plan; one lock, so two threads never re-point one plan at once
    (it is held through a call's planning and launch: one-shot ops of several threads run one at a time; threads
    that need to overlap keep plans of their own)."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._plans: OrderedDict[Any, Any] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0
        self._stream: tuple[Any, int] = (None, 0)  # the last stream object of a call, and its handle
        self._last: tuple | None = None  # (op, stream, options, environment settings, plan) of the last call

    def run(self, op: str, names: tuple[str, ...], arrays: tuple, stream: Any, options: dict[str, Any],
            make: Callable[[], Any], rerun: Callable[[Any, list], Any] | None) -> Any:
        """``rerun(plan, views)`` on the plan cached for this call's key (``views``: the arrays' ArrayViews, None
        for an array not given; ``rerun`` None: ``plan(*views)``, for ops whose plan returns its result), else
        ``plan = make()``, ``plan()``, and keep the plan. ``options``: the call's options but the stream.

        The call site of the last call (the same op, stream object, options and settings) first tries the last
        plan as it is: re-pointing checks the geometry and every address-dependent decision and refuses, before
        it launches anything, buffers that do not fit; only then is the key built (a loop calling one op on one
        geometry never builds it)."""
        views = [device_array_view(obj, name) if obj is not None else None for name, obj in zip(names, arrays)]
        check = _settings()
        lock = self._lock
        lock.acquire()  # not `with`: the one-shot copy's whole margin is a few tenths of a microsecond
        try:
            last = self._last
            # a tmakit Stream goes through the key, where its handle is read (a closed one is refused)
            if last is not None and last[0] is op and last[1] is stream and type(stream) is not Stream and \
                    last[3] == check and last[2] == options and _same_types(last[2], options):
                try:
                    result = rerun(last[4], views) if rerun is not None else last[4](*views)
                except InvalidArgumentError:
                    pass  # another geometry, or an address the plan's decisions do not take: the keyed path
                else:
                    self.hits += 1
                    return result
            key = self._key(op, views, stream, options, check)
            try:
                plan = self._plans.get(key)
            except TypeError:  # an option that is no value (a list, a dict): plan afresh, keep nothing
                plan, key = None, None
            if plan is not None:
                self._plans.move_to_end(key)
                self.hits += 1
                result = rerun(plan, views) if rerun is not None else plan(*views)
            else:
                self.misses += 1
                plan = make()
                result = plan()
                if key is None:
                    return result
                self._plans[key] = plan
                while len(self._plans) > self.capacity:
                    evicted = self._plans.popitem(last=False)[1]
                    if self._last is not None and self._last[4] is evicted:
                        self._last = None
            self._last = (op, stream, options, check, plan)
            return result
        finally:
            lock.release()

    def clear(self) -> None:
        with self._lock:
            self._plans.clear()
            self.hits = self.misses = 0
            self._stream = (None, 0)
            self._last = None

    def __len__(self) -> int:
        return len(self._plans)

    def _key(self, op: str, views: list, stream: Any, options: dict[str, Any], check: Any) -> tuple:
        """The call's key (built for speed: it is most of what a hit adds to ``plan(*buffers)``). Options in the
        caller's order: the same call site always builds the same key. The stream by its handle (a stream object
        hashes slowly, torch's); the last stream object seen is kept with its handle, so a loop passing one stream
        reads the handle once (kept alive, its identity cannot pass to another object; tmakit's own Streams are read
        every call)."""
        if stream is None:
            handle = 0
        elif stream is self._stream[0]:
            handle = self._stream[1]
        else:
            handle = stream_handle(stream)
            if type(stream) is not Stream:  # tmakit's own read fast, and one closed must be refused, not recalled
                self._stream = (stream, handle)
        # each option with its type: True == 1 and 2.0 == 2, but a plan made for one must not answer the other
        return (op, handle, tuple((k, v.__class__, v) for k, v in options.items()), check,
                *[None if v is None else (v.shape, v.strides, v.dtype_name, v.device, v.ptr & 255) for v in views])


def _same_types(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two equal option dicts (the same keys) hold values of the same types, option by option. A plain
    loop: it runs on every one-shot call, and a generator took three times as long (docs/PERFORMANCE.md, "Host cost
    of the ops")."""
    for k, x in a.items():
        if x.__class__ is not b[k].__class__:
            return False
    return True


_CACHE = PlanCache()


# The one-shot ops' entry (``PlanCache.run``), bound: a wrapper's call is a tenth of the copy's margin.
cached = _CACHE.run


def clear_plan_cache() -> None:
    """Drop every plan the one-shot ops keep (and the buffers of their last calls); the counts start again."""
    _CACHE.clear()


def plan_cache_info() -> dict[str, int]:
    """{"plans", "capacity", "hits", "misses"} of the one-shot ops' plan cache."""
    return {"plans": len(_CACHE), "capacity": _CACHE.capacity, "hits": _CACHE.hits, "misses": _CACHE.misses}
