"""What a sequence is at the public API: an ordered iterable of values (tuple, list, numpy array, generator).

Text, bytes, mappings and sets are iterable too, but are refused where a sequence belongs: a mapping would give
its keys silently ({64: 0, 32: 1} read as (64, 32)) and a set has no order.
"""
from __future__ import annotations

from collections.abc import Mapping, Set
from typing import Any


def is_sequence(values: Any) -> bool:
    return hasattr(values, "__iter__") and not isinstance(values, (str, bytes, bytearray, Mapping, Set))
