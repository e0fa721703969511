"""Tensor-map parameters as a frozen value, and the one helper that converts numpy order to driver order."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence

from .._sequences import is_sequence
from ..dtypes import DataType
from ..errors import InvalidArgumentError
from .enums import Interleave, L2Promotion, OOBFill, Swizzle


def to_driver_order(values: Sequence[int]) -> tuple[int, ...]:
    """Numpy order (outermost first) -> driver order (innermost first). The only place order flips."""
    return tuple(int(v) for v in reversed(tuple(values)))


class _SpecMixin:
    dims: tuple[int, ...]

    @property
    def rank(self) -> int:
        return len(self.dims)

    def replace(self, **changes: Any):
        return replace(self, **changes)

    def at(self, address: int):
        """This spec at another address (a copy; cheaper than ``replace``: it is on with_address's path)."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.__dict__["address"] = address
        return new


@dataclass(frozen=True)
class TiledSpec(_SpecMixin):
    """Everything cuTensorMapEncodeTiled takes, in driver order and units."""

    dtype: DataType
    address: int
    dims: tuple[int, ...]
    strides: tuple[int, ...]  # bytes, dims 1..rank-1
    box: tuple[int, ...]
    element_strides: tuple[int, ...]
    interleave: Interleave = Interleave.NONE
    swizzle: Swizzle = Swizzle.NONE
    l2_promotion: L2Promotion = L2Promotion.NONE
    oob_fill: OOBFill = OOBFill.NONE

    def encode_args(self) -> tuple:
        return (int(self.dtype), self.address, self.dims, self.strides, self.box, self.element_strides,
                int(self.interleave), int(self.swizzle), int(self.l2_promotion), int(self.oob_fill))

    @classmethod
    def checked(cls, dtype: DataType, address: int, dims: tuple, strides: tuple, box: tuple, element_strides: tuple,
                interleave: Interleave, swizzle: Swizzle, l2_promotion: L2Promotion, oob_fill: OOBFill) -> "TiledSpec":
        """A spec from values already parsed and checked (describe_tensor's path: the frozen dataclass's own
        ``__init__`` sets each field through ``object.__setattr__``, a third of the cost of building it)."""
        new = object.__new__(cls)
        new.__dict__.update(dtype=dtype, address=address, dims=dims, strides=strides, box=box,
                            element_strides=element_strides, interleave=interleave, swizzle=swizzle,
                            l2_promotion=l2_promotion, oob_fill=oob_fill)
        return new


@dataclass(frozen=True)
class Im2colSpec(_SpecMixin):
    """Everything cuTensorMapEncodeIm2col takes, in driver order and units."""

    dtype: DataType
    address: int
    dims: tuple[int, ...]
    strides: tuple[int, ...]
    lower_corner: tuple[int, ...]
    upper_corner: tuple[int, ...]
    channels_per_pixel: int
    pixels_per_column: int
    element_strides: tuple[int, ...]
    interleave: Interleave = Interleave.NONE
    swizzle: Swizzle = Swizzle.NONE
    l2_promotion: L2Promotion = L2Promotion.NONE
    oob_fill: OOBFill = OOBFill.NONE

    def encode_args(self) -> tuple:
        return (int(self.dtype), self.address, self.dims, self.strides, self.lower_corner, self.upper_corner,
                self.channels_per_pixel, self.pixels_per_column, self.element_strides, int(self.interleave),
                int(self.swizzle), int(self.l2_promotion), int(self.oob_fill))


def int_sequence(name: str, values: Any) -> list[int]:
    """A sequence of integers (bools and floats refused), naming the parameter and the entry on error."""
    if not is_sequence(values):
        raise InvalidArgumentError(name, values, "must be a sequence of integers (a tuple or list; not a mapping, set "
                                   "or text)", f"pass e.g. {name}=[64, 64]")
    out = []
    for i, v in enumerate(values):
        if isinstance(v, bool) or not hasattr(v, "__index__"):
            raise InvalidArgumentError(f"{name}[{i}]", v, "must be an integer", "pass whole numbers")
        out.append(int(v.__index__()))
    return out


def positive_ints(name: str, values: Any, length: int | None = None) -> tuple[int, ...]:
    """Validate a user-given sequence of non-negative ints (numpy order), naming the parameter on error."""
    if isinstance(values, int) and not isinstance(values, bool):
        values = (values,)
    out = int_sequence(name, values)
    for i, v in enumerate(out):
        if v < 0:
            raise InvalidArgumentError(f"{name}[{i}]", v, "must not be negative (numpy order: index 0 = outermost)",
                                       "sizes and strides are >= 0")
    if length is not None and len(out) != length:
        raise InvalidArgumentError(name, tuple(out), f"needs {length} entries (one per dimension, outermost first)",
                                   f"give {length} values")
    return tuple(out)
