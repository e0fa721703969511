"""``describe_im2col``: an im2col tensor map for an N(D)HWC array, on the same path as ``describe_tensor``
(``describe.source`` reads the array, ``rules.check_im2col`` checks every rule, ``describe.finish`` encodes)."""
from __future__ import annotations

from typing import Any, Sequence

from ..errors import InvalidArgumentError
from . import rules
from .suggest import tensor_map_error
from .describe import check_encode_flag, finish, parse_swizzle, resolve_arch, source, split_strides
from .enums import Interleave, L2Promotion, OOBFill
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
