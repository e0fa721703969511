"""Shared-memory bank conflicts of a warp's access pattern (32 banks of 4 bytes)."""
from __future__ import annotations

from typing import Sequence

from .._sequences import is_sequence
from ..errors import InvalidArgumentError
from ._args import as_int, is_int

BANKS = 32
BANK_BYTES = 4


def bank_conflicts(byte_offsets: Sequence[int | None], access_bytes: int = 4) -> int:
    """Extra shared-memory wavefronts a warp's access takes beyond the ideal.

    ``byte_offsets``: the address each thread of a warp accesses (up to 32 entries, in lane order; None for a
    lane that does not take part), ``access_bytes`` the width of each access (1, 2, 4, 8 or 16). The hardware
    splits wide accesses into phases of 128 bytes (8 threads for 16-byte, 16 threads for 8-byte accesses);
    within a phase, distinct 4-byte words in the same bank serialise while identical words broadcast.
    Returns (wavefronts - ideal wavefronts); 0 = conflict free.
    """
    if not is_int(access_bytes) or int(access_bytes) not in (1, 2, 4, 8, 16):
        raise InvalidArgumentError("access_bytes", access_bytes, "must be 1, 2, 4, 8 or 16", "use a native width")
    access_bytes = int(access_bytes)
    if not is_sequence(byte_offsets):
        raise InvalidArgumentError("byte_offsets", byte_offsets, "must be a sequence of up to 32 byte offsets "
                                   "(None for an inactive lane)", "pass one warp's addresses, e.g. [0, 4, 8, ...]")
    lanes = [None if a is None else as_int(f"byte_offsets[{i}]", a, 0, (1 << 62) - 1,
                                            "pass byte offsets >= 0 (None for an inactive lane)")
             for i, a in enumerate(byte_offsets)]
    if not lanes or len(lanes) > 32:
        raise InvalidArgumentError("byte_offsets", len(lanes), "must hold 1..32 addresses (one warp)", "pass one warp")
    active = [a for a in lanes if a is not None]
    if any(a % access_bytes for a in active):
        raise InvalidArgumentError("byte_offsets", lanes, f"must be {access_bytes}-byte aligned",
                                   "align each access to its width")
    per_phase = max(1, 128 // max(access_bytes, 4))
    total, ideal = 0, 0
    for start in range(0, len(lanes), per_phase):
        phase = [int(a) for a in lanes[start:start + per_phase] if a is not None]
        if not phase:
            continue
        words = {a // BANK_BYTES + k for a in phase for k in range(max(1, access_bytes // BANK_BYTES))}
        by_bank: dict[int, int] = {}
        for w in words:
            by_bank[w % BANKS] = by_bank.get(w % BANKS, 0) + 1
        total += max(by_bank.values())
        ideal += 1
    return total - ideal
