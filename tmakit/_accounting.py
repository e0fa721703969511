"""Counts of live allocations (what leak tests measure), one counter per kind of memory."""
from __future__ import annotations

import threading


class LiveCounter:
    """Thread-safe (allocations, bytes) held now."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0
        self._bytes = 0

    def add(self, count: int, nbytes: int) -> None:
        with self._lock:
            self._count += count
            self._bytes += nbytes

    def snapshot(self) -> tuple[int, int]:
        with self._lock:
            return self._count, self._bytes
