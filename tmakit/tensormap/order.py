"""Violations in the caller's order: the one translation from the driver's indices to numpy's.

The rule checker works in driver order (index 0 = innermost, ``dims``, byte ``strides`` of dims 1..rank-1).
Numpy-order APIs (``describe_tensor``, ``describe_im2col``, the CLI) report ``box[0]`` as the outermost entry and
``shape``/``strides`` as the caller passed them; driver-order APIs (``check_tiled``, ``check_im2col``,
``encode_tiled``) keep the checker's indices. Every error says which order it uses (``ORDER_NOTE``).
"""
from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, Sequence

ORDER_NOTE = {"numpy": "numpy order: index 0 = outermost", "driver": "driver order: index 0 = innermost"}
_INDEXED = re.compile(r"(?<![A-Za-z_])(element_strides|lower_corner|upper_corner|box|dims|strides)\[(\d+)\]")
_NUMPY_NAME = {"dims": "shape"}


def base_name(parameter: str) -> str:
    """``box[1]`` -> ``box``."""
    return parameter.split("[", 1)[0]


def _numpy_index(name: str, index: int, rank: int) -> int:
    if name == "strides":  # driver strides[i] is the stride of dim i + 1 = numpy axis rank - 2 - i
        return rank - 2 - index
    if name in ("lower_corner", "upper_corner"):
        return rank - 3 - index
    return rank - 1 - index


def numpy_text(text: str, rank: int) -> str:
    """Driver-order indexed names in ``text`` rewritten in numpy order (``dims[0]`` -> ``shape[rank-1]``)."""
    def sub(m: re.Match) -> str:
        name, index = m.group(1), int(m.group(2))
        return f"{_NUMPY_NAME.get(name, name)}[{_numpy_index(name, index, rank)}]"
    return _INDEXED.sub(sub, text)


def to_caller_order(violations: Sequence[Any], spec: Any, order: str) -> list[Any]:
    """``violations`` (driver order) as the caller of a ``order`` ("numpy" or "driver") API names them."""
    if order == "driver":
        return list(violations)
    if order != "numpy":
        raise ValueError(f"order must be 'numpy' or 'driver', not {order!r}")
    rank = spec.rank
    out = []
    for v in violations:
        value = v.value
        if v.parameter in ("box", "dims", "strides", "element_strides", "lower_corner", "upper_corner") and \
                isinstance(value, (list, tuple)):
            value = type(value)(reversed(value))
        parameter = _NUMPY_NAME.get(v.parameter, v.parameter) if "[" not in v.parameter else numpy_text(v.parameter, rank)
        out.append(replace(v, parameter=parameter, value=value, message=numpy_text(v.message, rank),
                           fix=numpy_text(v.fix, rank)))
    return out
