"""Tensor maps: enums, spec (driver-order parameters), rules (the checker), encode (the driver calls),
tensor_map (``TensorMap``), describe (``describe_tensor``, ``encode_tiled``), im2col (``describe_im2col``, ``encode_im2col``).
``corpus`` (the driver-truth corpus generator) is tooling: nothing here imports it."""
from .describe import describe_tensor, encode_tiled
from .enums import Interleave, L2Promotion, OOBFill, Swizzle
from .im2col import describe_im2col, encode_im2col
from .rules import Violation
from .spec import Im2colSpec, TiledSpec
from .suggest import check_im2col, check_tiled
from .tensor_map import TensorMap

__all__ = ["describe_tensor", "describe_im2col", "encode_tiled", "encode_im2col", "check_tiled", "check_im2col",
           "Violation", "TensorMap", "TiledSpec", "Im2colSpec", "Swizzle", "Interleave", "L2Promotion", "OOBFill"]
