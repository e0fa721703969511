"""``L2Eviction``: the L2 priority of the lines a kernel loads, as the ops' ``source_eviction`` arguments take it
(the host side of cuda_src/tmakit/cache_policy.cuh, shared by copy and transpose)."""
from __future__ import annotations

from .._enum import ParsableEnum


class L2Eviction(ParsableEnum):
    """The L2 priority of the source lines the kernel loads (cuda_src/tmakit/cache_policy.cuh's L2Eviction);
    ``parse`` takes a member, its int, "last" or "evict_last"."""

    NORMAL = 0
    FIRST = 1
    LAST = 2

    @classmethod
    def aliases(cls) -> dict[str, str]:
        return {f"evict_{m.name.lower()}": m.name for m in cls}
