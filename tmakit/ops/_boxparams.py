"""BoxParams bytes (docs/CONTRACTS.md) for a 2-D box over an array TMA cannot describe.

The cp.async box load walks any byte strides, so ops such as transpose use it on arrays whose row pitch is
not a multiple of 16 (where no tensor map can be encoded, hence no ``TensorMap.box_params()``). The layout
is the contract's: little endian, 160 bytes, innermost first.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..errors import LaunchError
from ..tensormap.tensor_map import BOX_PARAMS_SIZE as SIZE
from ..tensormap.tensor_map import pack_box_params as _pack  # one definition of the byte layout


@dataclass(frozen=True)
class PackedBoxParams:
    """A by-value kernel parameter for TMAKIT_BOX_SOURCE on the cp.async path."""

    data: bytes

    def __kernel_param__(self, nbytes: int) -> bytes:
        if nbytes != SIZE:
            raise LaunchError(f"BoxParams is {SIZE} bytes but the kernel parameter is {nbytes}: the kernel was "
                              "compiled for the TMA path (128-byte descriptor); compile it with TMAKIT_FORCE_CP_ASYNC")
        return self.data


def pack_box_params(address: int, dims: Sequence[int], strides: Sequence[int], box: Sequence[int], elem_size: int,
                    dtype: int, swizzle: int = 0, oob_nan: bool = False, l2_promotion: int = 0) -> PackedBoxParams:
    """dims/strides/box innermost first; strides[0] is the element size (bytes), like the driver's list + 1."""
    return PackedBoxParams(_pack(address, dims, strides, box, [1] * len(dims), elem_size, swizzle, 0,
                                 int(bool(oob_nan)), dtype, l2_promotion))
