"""The TMA shared-memory swizzle as an address function.

Measured on an H100 (the load images in tests/data/tma_load_images_h100.jsonl) and consistent with the PTX ISA's
swizzle figures: with span S (32/64/128 B) the 16-byte chunk index inside a 128-byte line, bits [4, 4+b),
is XORed with bits [7, 7+b) of the offset, b = log2(S/16); the pattern repeats every 8*S bytes, so the
destination must be aligned to 256/512/1024 B. Rows narrower than S are padded to S.
"""
from __future__ import annotations

import numpy as np

from ..errors import InvalidArgumentError
from ..tensormap.enums import Swizzle
from ._args import as_int, is_int

MAX_PATTERN_ROWS = 1 << 16

_BITS = {Swizzle.NONE: 0, Swizzle.B32: 1, Swizzle.B64: 2, Swizzle.B128: 3}


def swizzle_bits(swizzle: Swizzle, parameter: str = "swizzle") -> int:
    """How many chunk-index bits the mode permutes (0 for NONE)."""
    if swizzle not in _BITS:
        raise InvalidArgumentError(parameter, swizzle.short, "is a Blackwell swizzle mode, which the model does not "
                                   "cover (it is validated, not modelled)", "use 'none', '32B', '64B' or '128B'")
    return _BITS[swizzle]


def _offsets(offset):
    """An int, or an integer numpy array (lists and tuples become one), all >= 0."""
    if is_int(offset):
        return as_int("offset", offset, 0, (1 << 62) - 1, "pass a byte offset >= 0")
    if isinstance(offset, (list, tuple)):
        if not all(is_int(v) for v in offset):
            bad = next(v for v in offset if not is_int(v))
            raise InvalidArgumentError("offset", bad, "must hold integer byte offsets", "pass whole numbers >= 0")
        offset = np.asarray(offset, dtype=np.int64)
    if not isinstance(offset, np.ndarray) or offset.dtype.kind not in "iu":
        raise InvalidArgumentError("offset", offset if not isinstance(offset, np.ndarray) else f"{offset.dtype} array",
                                   "must be an integer byte offset or an integer numpy array of them",
                                   "pass e.g. 256 or numpy.arange(1024)")
    if offset.size and int(offset.min()) < 0:
        raise InvalidArgumentError("offset", int(offset.min()), "byte offsets must be >= 0",
                                   "offsets count bytes from the 1024-byte-aligned start of shared memory")
    return offset


def swizzle_offset(offset, swizzle: Swizzle | str):
    """Byte offset(s) after the swizzle permutation; works on ints and numpy arrays. It is an involution."""
    bits = swizzle_bits(Swizzle.parse(swizzle, "swizzle"))
    offset = _offsets(offset)
    if bits == 0:
        return offset
    mask = (1 << bits) - 1
    return offset ^ (((offset >> 7) & mask) << 4)


def swizzle_pattern(swizzle: Swizzle | str, rows: int | None = None) -> np.ndarray:
    """Chunk map: entry [r, c] is the 16-byte chunk position where logical chunk c of row r lands."""
    sw = Swizzle.parse(swizzle, "swizzle")
    swizzle_bits(sw)
    span = sw.span or 128
    if rows is None:
        rows = 8 * (128 // span if sw.span else 1)
    rows = as_int("rows", rows, 1, MAX_PATTERN_ROWS, f"show 1..{MAX_PATTERN_ROWS} rows (the pattern repeats every "
                  "8 rows of the span)")
    chunks = span // 16
    r = np.arange(rows)[:, None]
    c = np.arange(chunks)[None, :]
    logical = r * span + c * 16
    return (swizzle_offset(logical, sw) - r * span) // 16
