"""Tensor maps: enums, the rule checker, the encoder and ``describe_tensor``."""
from .describe import clear_cache, describe_im2col, describe_tensor, encode_tiled
from .enums import Interleave, L2Promotion, OOBFill, Swizzle
from .rules import Violation, check_im2col, check_tiled
from .spec import Im2colSpec, TiledSpec
from .tensor_map import TensorMap

__all__ = ["describe_tensor", "describe_im2col", "encode_tiled", "clear_cache", "check_tiled", "check_im2col",
           "Violation", "TensorMap", "TiledSpec", "Im2colSpec", "Swizzle", "Interleave", "L2Promotion", "OOBFill"]
