"""``describe_im2col``: an im2col tensor map for an N(D)HWC array, on the same path as ``describe_tensor``
(``describe.source`` reads the array, ``rules.check_im2col`` checks every rule, ``describe.finish`` encodes);
``encode_im2col``: its driver-order twin for a raw address (as ``encode_tiled`` is ``describe_tensor``'s)."""
from __future__ import annotations

from typing import Any, Sequence

from .. import _driver
from ..dtypes import DataType
from ..errors import InvalidArgumentError
from . import rules
from .suggest import tensor_map_error
from .describe import check_encode_flag, finish, parse_swizzle, resolve_arch, source, split_strides
from .enums import Interleave, L2Promotion, OOBFill, Swizzle
from .spec import Im2colSpec, int_sequence, positive_ints, to_driver_order
from .tensor_map import TensorMap


def describe_im2col(array: Any = None, *, pixels_per_column: int, channels_per_pixel: int | None = None,
                    lower_corner: Sequence[int] | None = None, upper_corner: Sequence[int] | None = None,
                    shape: Sequence[int] | None = None, dtype: Any = None, strides: Sequence[int] | None = None,
                    swizzle: Any = "auto", oob_fill: Any = "zero", l2_promotion: Any = "none",
                    interleave: Any = "none", element_strides: Sequence[int] | None = None, arch: Any = None,
                    encode: bool = True) -> TensorMap:
    """An im2col tensor map for an N(D)HWC array (numpy order: N, [D,] H, W, C).

    ``lower_corner``/``upper_corner`` are the bounding-box offsets of the spatial dims in numpy order
    ([D,] H, W): lower relative to the first pixel, upper relative to the last (a 3x3 convolution with
    padding 1 uses lower=(-1, -1), upper=(-1, -1)). ``channels_per_pixel`` defaults to all channels.
    The returned TensorMap holds ``array``.
    """
    encode = check_encode_flag(encode)
    view, dt, shp, st = source(array, shape, dtype, strides)
    if not 3 <= len(shp) <= 5:
        raise InvalidArgumentError("shape", shp, "im2col needs a 3-D to 5-D N(D)HWC tensor", "reshape to N, H, W, C")
    spatial = len(shp) - 2
    lower = tuple(int_sequence("lower_corner", lower_corner if lower_corner is not None else (0,) * spatial))
    upper = tuple(int_sequence("upper_corner", upper_corner if upper_corner is not None else (0,) * spatial))
    channels = int_sequence("channels_per_pixel", [channels_per_pixel if channels_per_pixel is not None else shp[-1]])[0]
    pixels_per_column = int_sequence("pixels_per_column", [pixels_per_column])[0]
    il = Interleave.parse(interleave, "interleave")
    sw, reason = parse_swizzle(swizzle, channels * dt.size, il)
    es_np = positive_ints("element_strides", element_strides, len(shp)) if element_strides is not None else (1,) * len(shp)
    spec = Im2colSpec(dt, view.ptr if view is not None else 0, to_driver_order(shp), split_strides(dt, shp, st, "strides"),
                      to_driver_order(lower), to_driver_order(upper), channels, pixels_per_column,
                      to_driver_order(es_np), il, sw, L2Promotion.parse(l2_promotion, "l2_promotion"),
                      OOBFill.parse(oob_fill, "oob_fill"))
    device = view.device if view is not None else None
    resolved = resolve_arch(arch, device)
    violations = rules.check_spec(spec, resolved)
    if violations:
        gpu = (device, spec.address) if encode and device is not None else None
        raise tensor_map_error(spec, resolved, violations, order="numpy", auto_swizzle=reason.startswith("auto"),
                               driver_at=gpu)
    return finish(spec, resolved, device, encode, reason, array)


def encode_im2col(dtype: Any, address: int, dims: Sequence[int], strides: Sequence[int],
                  lower_corner: Sequence[int], upper_corner: Sequence[int], channels_per_pixel: int,
                  pixels_per_column: int, element_strides: Sequence[int] | None = None, *, swizzle: Any = "none",
                  oob_fill: Any = "zero", l2_promotion: Any = "none", interleave: Any = "none",
                  device: int | None = 0, arch: Any = None, encode: bool = True, owner: Any = None) -> TensorMap:
    """Driver-order twin of ``describe_im2col`` for a raw address (dims, strides, corners and element strides
    innermost first: C, W, [H, [D,]] N; byte strides of dims 1..rank-1). Every rule is checked, then the driver
    encodes it. The map holds ``owner`` when given; otherwise the caller owns the memory at ``address``."""
    encode = check_encode_flag(encode)
    dt = DataType.parse(dtype, "dtype") if not isinstance(dtype, DataType) else dtype
    if isinstance(address, bool) or not hasattr(address, "__index__") or not 0 <= int(address) < 1 << 64:
        raise InvalidArgumentError("address", address, "must be a 64-bit unsigned device address",
                                   "pass array.data_ptr()")
    dims_ = tuple(int_sequence("dims", dims))
    es = tuple(int_sequence("element_strides", element_strides)) if element_strides is not None else (1,) * len(dims_)
    spec = Im2colSpec(dt, int(address), dims_, tuple(int_sequence("strides", strides)),
                      tuple(int_sequence("lower_corner", lower_corner)),
                      tuple(int_sequence("upper_corner", upper_corner)),
                      int_sequence("channels_per_pixel", [channels_per_pixel])[0],
                      int_sequence("pixels_per_column", [pixels_per_column])[0], es,
                      Interleave.parse(interleave, "interleave"), Swizzle.parse(swizzle, "swizzle"),
                      L2Promotion.parse(l2_promotion, "l2_promotion"), OOBFill.parse(oob_fill, "oob_fill"))
    on_gpu = encode and device is not None and _driver.gpu_available()
    resolved = resolve_arch(arch, device if on_gpu else None)
    violations = rules.check_spec(spec, resolved)
    if violations:
        raise tensor_map_error(spec, resolved, violations, order="driver",
                               driver_at=(device, int(address)) if on_gpu else None)
    return finish(spec, resolved, device, on_gpu, "as requested", owner)
