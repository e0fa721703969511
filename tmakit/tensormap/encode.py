"""The tensor-map encoder: the one place (besides ``_driver``) that calls ``cuTensorMapEncode*`` and
``cuTensorMapReplaceAddress``.

``encode_*_raw`` return the driver's verdict without raising (the driver-truth corpus needs verdicts);
``encode_spec`` returns the driver's CUtensorMap or None when the driver refuses; ``replace_address`` re-points
a copy of a descriptor; ``descriptor_bytes`` reads a CUtensorMap's 128 bytes. Parameters are in driver order and units.
"""
from __future__ import annotations

import ctypes
from typing import Any, Sequence

from .. import _driver
from .spec import Im2colSpec, TiledSpec

DESCRIPTOR_SIZE = 128


_TABLES: list = []  # the driver's enum members and small cuuint32_t values, built once: constants, not a cache


def _tables(drv: Any) -> tuple:
    if not _TABLES:
        enums = tuple({int(m): m for m in getattr(drv, name)} for name in (
            "CUtensorMapDataType", "CUtensorMapInterleave", "CUtensorMapSwizzle", "CUtensorMapL2promotion",
            "CUtensorMapFloatOOBfill"))
        _TABLES.append(enums + (tuple(drv.cuuint32_t(v) for v in range(257)),))
    return _TABLES[0]


def _args(drv: Any, dtype: int, interleave: int, swizzle: int, l2: int, oob: int) -> tuple:
    """The five enum arguments as the driver's members (a value the driver has no member for goes to its
    constructor, which raises as cuda.bindings does)."""
    t = _TABLES[0] if _TABLES else _tables(drv)
    dt, il, sw, l2p, of = t[0].get(dtype), t[1].get(interleave), t[2].get(swizzle), t[3].get(l2), t[4].get(oob)
    if dt is None or il is None or sw is None or l2p is None or of is None:
        return (drv.CUtensorMapDataType(dtype), drv.CUtensorMapInterleave(interleave), drv.CUtensorMapSwizzle(swizzle),
                drv.CUtensorMapL2promotion(l2), drv.CUtensorMapFloatOOBfill(oob))
    return dt, il, sw, l2p, of


def _u32_list(drv: Any, values: Sequence[int]) -> list:
    small = _tables(drv)[5]
    return [small[v] if type(v) is int and 0 <= v <= 256 else drv.cuuint32_t(v) for v in values]


def _strides_arg(drv: Any, dims: Sequence[int], strides: Sequence[int]) -> list:
    """The strides list; for rank 1 one unused entry, because cuda-bindings turns an empty list into NULL and
    the driver rejects a NULL globalStrides even when it would read no entry of it."""
    values = list(strides) if (strides or len(dims) != 1) else [16]
    return [drv.cuuint64_t(s) for s in values]


def encode_tiled_raw(dtype: int, address: int, dims: Sequence[int], strides: Sequence[int], box: Sequence[int],
                     element_strides: Sequence[int], interleave: int, swizzle: int, l2: int, oob: int) -> tuple[Any, Any]:
    """``(CUresult, CUtensorMap)`` straight from the driver (a context must exist on this thread)."""
    drv = _driver.driver()
    dt, il, sw, l2p, of = _args(drv, dtype, interleave, swizzle, l2, oob)
    u64 = drv.cuuint64_t  # cuda-bindings 13.3 refuses plain ints in these lists
    return drv.cuTensorMapEncodeTiled(dt, len(dims), address, [u64(d) for d in dims], _strides_arg(drv, dims, strides),
                                      _u32_list(drv, box), _u32_list(drv, element_strides), il, sw, l2p, of)


def encode_im2col_raw(dtype: int, address: int, dims: Sequence[int], strides: Sequence[int],
                      lower_corner: Sequence[int], upper_corner: Sequence[int], channels_per_pixel: int,
                      pixels_per_column: int, element_strides: Sequence[int], interleave: int, swizzle: int, l2: int,
                      oob: int) -> tuple[Any, Any]:
    drv = _driver.driver()
    dt, il, sw, l2p, of = _args(drv, dtype, interleave, swizzle, l2, oob)
    u64, u32 = drv.cuuint64_t, drv.cuuint32_t
    return drv.cuTensorMapEncodeIm2col(dt, len(dims), address, [u64(d) for d in dims], _strides_arg(drv, dims, strides),
                                       [int(v) for v in lower_corner], [int(v) for v in upper_corner],
                                       u32(channels_per_pixel), u32(pixels_per_column),
                                       [u32(e) for e in element_strides], il, sw, l2p, of)


def raw_encoder(spec: TiledSpec | Im2colSpec) -> Any:
    """The raw encode function for the spec's mode (takes ``*spec.encode_args()``)."""
    return encode_tiled_raw if isinstance(spec, TiledSpec) else encode_im2col_raw


_DESCRIPTOR = ctypes.c_char * DESCRIPTOR_SIZE  # a CUtensorMap's memory as ctypes sees it (.raw: its bytes)


def descriptor_bytes(tensor_map: Any) -> bytes:
    """The 128 opaque bytes of a ``CUtensorMap`` (``.raw`` of a ctypes view: a third of ``string_at``'s cost)."""
    return _DESCRIPTOR.from_address(tensor_map.getPtr()).raw


def encode_spec(spec: TiledSpec | Im2colSpec) -> tuple[Any, Any]:
    """``(CUresult, the driver's CUtensorMap or None)`` for a spec; a context of the address's device must be
    current. The map's 128 bytes are read only when asked for (``descriptor_bytes``)."""
    if type(spec) is TiledSpec:
        err, tmap = encode_tiled_raw(spec.dtype, spec.address, spec.dims, spec.strides, spec.box, spec.element_strides,
                                     spec.interleave, spec.swizzle, spec.l2_promotion, spec.oob_fill)
    else:
        err, tmap = encode_im2col_raw(*spec.encode_args())
    return err, (tmap if int(err) == 0 else None)


def encode_tiled(*args: Any) -> bytes:
    return descriptor_bytes(_driver.check("cuTensorMapEncodeTiled", encode_tiled_raw(*args)))


def encode_im2col(*args: Any) -> bytes:
    return descriptor_bytes(_driver.check("cuTensorMapEncodeIm2col", encode_im2col_raw(*args)))


def replace_address(descriptor: Any, address: int) -> Any:
    """A copy of ``descriptor`` (128 bytes or a driver CUtensorMap, never written) pointing at ``address``, as a
    driver CUtensorMap (cuTensorMapReplaceAddress on a fresh one). Raises ``CudaDriverError`` when the driver
    refuses."""
    drv = _driver.bindings()
    tmap = drv.CUtensorMap()
    # ctypes' .raw setter copies the 128 bytes at a third of ctypes.memmove's cost (a foreign-function call)
    _DESCRIPTOR.from_address(tmap.getPtr()).raw = (
        descriptor if type(descriptor) is bytes else _DESCRIPTOR.from_address(descriptor.getPtr()).raw)
    result = drv.cuTensorMapReplaceAddress(tmap, address)
    if result[0]:
        _driver.check("cuTensorMapReplaceAddress", result)
    return tmap
