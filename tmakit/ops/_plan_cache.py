"""The plans behind the one-shot ops (``ops.copy``, ``transpose``, ``gemm``, ``attention``), kept by geometry.

A one-shot call on a geometry seen before re-points the plan the first call made (``plan(*buffers)``: the tensor
maps re-addressed, the launch's arguments replaced, every check of a re-pointed plan made, overlap included)
instead of deciding, describing, encoding and binding again. What it earns and what it costs are in
docs/CONTRACTS.md ("The one-shot ops' plan cache").

Key: the op; each buffer's shape, byte strides, dtype, device and address modulo 256 (the alignments an op's
decisions read are all below 256 bytes, so a hit never meets a decision its plan did not make); the stream's
handle; the options (backend, tuning, alpha, ...); TMAKIT_CHECK. Options that cannot be hashed skip the cache.
Bounded: the least recently used plan goes first. A cached plan keeps the buffers of its last call alive, as any
plan does, until its next call or its eviction; ``clear_plan_cache()`` drops them all.
"""
from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import Any, Callable, Sequence

from ..arrays import device_array_view
from ..streams import stream_handle

CAPACITY = 16


class PlanCache:
    """A bounded map from a call's geometry to its plan; one lock, so two threads never re-point one plan at once."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._plans: OrderedDict[Any, Any] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def run(self, op: str, buffers: Sequence[tuple[str, Any]], options: dict[str, Any],
            make: Callable[[], Any], rerun: Callable[[Any, tuple], Any]) -> Any:
        """``rerun(plan, views)`` on the plan cached for this call's key (``views``: the buffers' ArrayViews, None
        for a buffer not given), else ``make()`` (which plans and runs once; it returns ``(plan, result)``) and
        keep its plan."""
        views = tuple(device_array_view(obj, name) if obj is not None else None for name, obj in buffers)
        key = self._key(op, views, options)
        with self._lock:
            plan = self._plans.get(key) if key is not None else None
            if plan is not None:
                self._plans.move_to_end(key)
                self.hits += 1
                return rerun(plan, views)
            self.misses += 1
            plan, result = make()
            if key is not None:
                self._plans[key] = plan
                while len(self._plans) > self.capacity:
                    self._plans.popitem(last=False)
            return result

    def clear(self) -> None:
        with self._lock:
            self._plans.clear()
            self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._plans)

    @staticmethod
    def _key(op: str, views: tuple, options: dict[str, Any]) -> Any:
        parts: list[Any] = [op]
        for v in views:
            parts.append(None if v is None else (v.shape, v.strides, v.dtype_name, v.itemsize, v.device, v.ptr % 256))
        stream = options.get("stream")
        parts.append(stream_handle(stream) if stream is not None else 0)
        parts.append(tuple(sorted((k, v) for k, v in options.items() if k != "stream")))
        parts.append(os.environ.get("TMAKIT_CHECK"))
        key = tuple(parts)
        try:
            hash(key)
        except TypeError:  # an option that is no value (a list, a dict): plan afresh
            return None
        return key


_CACHE = PlanCache()


def cached(op: str, buffers: Sequence[tuple[str, Any]], options: dict[str, Any], make: Callable[[], Any],
           rerun: Callable[[Any, tuple], Any]) -> Any:
    """The one-shot ops' entry: see ``PlanCache.run``."""
    return _CACHE.run(op, buffers, options, make, rerun)


def clear_plan_cache() -> None:
    """Drop every plan the one-shot ops keep (and the buffers of their last calls); the counts start again."""
    _CACHE.clear()


def plan_cache_info() -> dict[str, int]:
    """{"plans", "capacity", "hits", "misses"} of the one-shot ops' plan cache."""
    return {"plans": len(_CACHE), "capacity": _CACHE.capacity, "hits": _CACHE.hits, "misses": _CACHE.misses}
