"""Tensor maps: enums, spec (driver-order parameters), rules (the checker), encode (the driver calls),
tensor_map (``TensorMap``), describe (``describe_tensor``, ``encode_tiled``), im2col (``describe_im2col``, ``encode_im2col``),
device_edit (``tensormap_replace_steps``, ``apply_tensormap_replace``: maps edited on the GPU, modelled).
``corpus`` (the driver-truth corpus generator) is tooling: nothing here imports it."""
from .describe import describe_tensor, encode_tiled
from .device_edit import ReplaceStep, apply_tensormap_replace, tensormap_replace_steps
from .enums import Interleave, L2Promotion, OOBFill, Swizzle
from .im2col import describe_im2col, encode_im2col
from .rules import Violation
from .spec import Im2colSpec, TiledSpec
from .suggest import check_im2col, check_tiled
from .tensor_map import TensorMap

__all__ = ["describe_tensor", "describe_im2col", "encode_tiled", "encode_im2col", "check_tiled", "check_im2col",
           "Violation", "TensorMap", "ReplaceStep", "apply_tensormap_replace", "tensormap_replace_steps", "TiledSpec", "Im2colSpec", "Swizzle", "Interleave", "L2Promotion", "OOBFill"]
