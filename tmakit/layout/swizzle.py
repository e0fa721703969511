"""The TMA shared-memory swizzle as an address function.

Measured on an H100 (benchmarks/experiments/tma_probe.py, 2026-11-22) and consistent with the PTX ISA's
swizzle figures: with span S (32/64/128 B) the 16-byte chunk index inside a 128-byte line, bits [4, 4+b),
is XORed with bits [7, 7+b) of the offset, b = log2(S/16); the pattern repeats every 8*S bytes, so the
destination must be aligned to 256/512/1024 B. Rows narrower than S are padded to S.
"""
from __future__ import annotations

import numpy as np

from ..tensormap.enums import Swizzle

_BITS = {Swizzle.NONE: 0, Swizzle.B32: 1, Swizzle.B64: 2, Swizzle.B128: 3}


def swizzle_bits(swizzle: Swizzle) -> int:
    """How many chunk-index bits the mode permutes (0 for NONE)."""
    if swizzle not in _BITS:
        raise NotImplementedError(f"swizzle {swizzle.short} (Blackwell) is not modelled")
    return _BITS[swizzle]


def swizzle_offset(offset, swizzle: Swizzle | str):
    """Byte offset(s) after the swizzle permutation; works on ints and numpy arrays. It is an involution."""
    bits = swizzle_bits(Swizzle.parse(swizzle, "swizzle"))
    if bits == 0:
        return offset
    mask = (1 << bits) - 1
    return offset ^ (((offset >> 7) & mask) << 4)


def swizzle_pattern(swizzle: Swizzle | str, rows: int | None = None) -> np.ndarray:
    """Chunk map: entry [r, c] is the 16-byte chunk position where logical chunk c of row r lands."""
    sw = Swizzle.parse(swizzle, "swizzle")
    span = sw.span or 128
    rows = rows if rows is not None else 8 * (1 if sw is Swizzle.NONE else 1) * (128 // span if sw.span else 1)
    chunks = span // 16
    r = np.arange(rows)[:, None]
    c = np.arange(chunks)[None, :]
    logical = r * span + c * 16
    return (swizzle_offset(logical, sw) - r * span) // 16
