"""Argument checks shared by the layout model, the CLI and the suggestion search.

Each helper takes the parameter's public name and raises ``InvalidArgumentError`` naming it, its value, the rule
and a fix. Integers may be Python or numpy integers (anything with ``__index__``); bools, floats, strings and None
are refused, never truncated or coerced.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .._sequences import is_sequence
from ..errors import InvalidArgumentError


def is_int(value: Any) -> bool:
    """True for Python and numpy integers (``__index__``), False for bools (also numpy's)."""
    return not isinstance(value, (bool, np.bool_)) and hasattr(value, "__index__") and not isinstance(value, np.ndarray)


def as_int(parameter: str, value: Any, lo: int | None = None, hi: int | None = None, fix: str = "") -> int:
    """``value`` as an int in [lo, hi] (either bound optional)."""
    if not is_int(value):
        raise InvalidArgumentError(parameter, value, f"must be an integer, not {type(value).__name__}",
                                   fix or "pass a whole number (floats are not truncated, strings not parsed)")
    out = int(value.__index__())
    if (lo is not None and out < lo) or (hi is not None and out > hi):
        span = (f"between {lo} and {hi}" if lo is not None and hi is not None else
                f">= {lo}" if lo is not None else f"<= {hi}")
        raise InvalidArgumentError(parameter, out, f"must be {span}", fix or f"use a value {span}")
    return out


def as_ints(parameter: str, values: Any, lo: int | None = None, hi: int | None = None,
            length: int | None = None, fix: str = "") -> tuple[int, ...]:
    """A sequence (list, tuple, generator, numpy array) of ints, each in [lo, hi], naming ``parameter[i]``."""
    if not is_sequence(values):
        raise InvalidArgumentError(parameter, values, "must be a sequence of integers (not a mapping, set or text)",
                                   fix or f"pass e.g. {parameter}=[0, 0]")
    items = list(values)
    out = tuple(as_int(f"{parameter}[{i}]", v, lo, hi, fix) for i, v in enumerate(items))
    if length is not None and len(out) != length:
        raise InvalidArgumentError(parameter, out, f"needs {length} entries, not {len(out)}",
                                   fix or f"give {length} values")
    return out


def as_byte_array(parameter: str, value: Any) -> np.ndarray:
    """A flat uint8 view of a numpy array or bytes-like object (its bytes, never a value cast)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return np.frombuffer(value, dtype=np.uint8)
    if not isinstance(value, np.ndarray):
        raise InvalidArgumentError(parameter, type(value).__name__, "must be a numpy array (or bytes)",
                                   "pass numpy.asarray(...) of the tensor's bytes")
    if value.dtype.hasobject:
        raise InvalidArgumentError(parameter, str(value.dtype), "holds Python objects, not bytes",
                                   "pass a numeric numpy array")
    return np.ascontiguousarray(value).reshape(-1).view(np.uint8)
