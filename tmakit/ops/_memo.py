"""Prepared launches of an op, launched again when a call with the same geometry comes.

An op call spends its host time deciding: viewing and checking the arrays, choosing the backend, describing
tensor maps, planning tiles and packing the kernel's parameters (measured on the H100: 137-269 us per
``transpose`` call, 81-124 us per ``copy``, against 20-26 us for torch's copy; at several GB that made
single calls 0.06-0.1 slower than back-to-back ones). Every decision is a function of the arrays' geometry
(address, shape, strides, dtype, device), the op's arguments, the stream, ``TMAKIT_BACKEND`` and the op's
module settings, so a ``LaunchMemo`` keys the prepared launch by exactly those and launches its frozen
parameter bytes when the key comes again.

The key holds addresses and layouts, not objects: the memo keeps no caller array alive, and a new array at a
freed one's address with the same layout is served by the same descriptors, which describe just that memory.
A call that raises stores nothing, so every error still comes from the op's checks. The log lines the
prepared call wrote (the backend choice, a fallback) are written again on every repeat.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any, Hashable

from ..arrays import device_array_view, is_torch_like
from ..backend import ENV_VAR
from ..errors import TmakitError
from ..launch import BoundLaunch, stream_handle

log = logging.getLogger("tmakit")

_CAPACITY = 256  # prepared launches per op; the oldest goes first


def geometry(array: Any) -> tuple:
    """Everything an op reads from ``array``: a torch tensor's (data_ptr, shape, stride, dtype, device) in five
    cheap calls, else the ``ArrayView``'s (ptr, shape, strides, dtype, itemsize, device)."""
    if is_torch_like(array):
        return array.data_ptr(), array.shape, array.stride(), array.dtype, array.get_device()
    v = device_array_view(array)
    return v.ptr, v.shape, v.strides, v.dtype_name, v.itemsize, v.device


@dataclass(frozen=True)
class Prepared:
    launch: BoundLaunch  # holds the packed parameters, not the arrays (Kernel.bind(keep_args=False))
    result: Any  # the op's (immutable) result object
    notes: tuple[tuple[int, str], ...]  # (level, message) log lines to write again on each repeat


class LaunchMemo:
    def __init__(self) -> None:
        self._entries: dict[Hashable, Prepared] = {}
        self.hits = self.misses = 0

    def key(self, arrays: tuple, options: tuple, stream: Any) -> Hashable | None:
        """The key of a call, or None when it cannot have one (an array or stream the op will reject, a
        look-alike missing an attribute, no driver, an unhashable option): then the op takes its full path,
        which names the problem."""
        try:
            key = (tuple(map(geometry, arrays)), options, os.environ.get(ENV_VAR), stream_handle(stream))
            hash(key)
        except (TmakitError, TypeError, AttributeError):
            return None
        return key

    def run(self, key: Hashable | None) -> Any:
        """Launch the prepared call of ``key`` and return its result; None when there is none (then prepare)."""
        prepared = self._entries.get(key) if key is not None else None
        if prepared is None or not prepared.launch.alive:
            self.misses += 1
            return None
        self.hits += 1
        for level, message in prepared.notes:
            log.log(level, message)
        prepared.launch()
        return prepared.result

    def store(self, key: Hashable | None, launch: BoundLaunch, result: Any, notes: tuple[tuple[int, str], ...]) -> None:
        if key is None:
            return
        if len(self._entries) >= _CAPACITY:
            self._entries.pop(next(iter(self._entries)))
        self._entries[key] = Prepared(launch, result, notes)

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
