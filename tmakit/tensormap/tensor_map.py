"""``TensorMap``: an encoded (or, without a GPU, validated) descriptor with everything a kernel needs.

A TensorMap holds the array it describes (``owner``), so the memory outlives every use of the map; maps
built from a raw address (``encode_tiled``, ``with_address(int)``) hold nothing and say so in their repr.
``with_address`` re-points a copy of the descriptor at another buffer of the same geometry
(``cuTensorMapReplaceAddress``, through ``encode.replace_address``). ``__kernel_param__`` hands the 128
descriptor bytes (or the 160-byte BoxParams block) to the argument packer in ``tmakit/launch_args.py``.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

from .. import _driver
from ..arch import Arch
from ..arrays import view_if_array
from ..dtypes import DataType, dtype_from_any
from ..errors import CudaDriverError, InvalidArgumentError, LaunchError
from ..layout.im2col import im2col_geometry
from ..layout.tma_model import box_geometry
from .encode import DESCRIPTOR_SIZE, descriptor_bytes, replace_address
from .enums import Interleave, Swizzle
from .render import render_tensor_map
from .spec import Im2colSpec, TiledSpec

BOX_PARAMS_SIZE = 160
# Element types that only name a bit width: a map of one of them may be re-pointed at any array of that size.
_BITS_ONLY = frozenset({DataType.UINT8, DataType.UINT16, DataType.UINT32, DataType.UINT64, DataType.TFLOAT32,
                        DataType.TFLOAT32_FTZ, DataType.FLOAT32_FTZ})
_PACKED16 = frozenset({DataType.U4X16_ALIGN16B, DataType.U6X16_ALIGN16B})
_IL_B32 = Interleave.B32  # a module constant: an Enum class attribute costs a metaclass lookup
_ARRAY_DTYPES = DataType._names()  # array element-type names ("bfloat16", ...) -> DataType


def address_alignment(dtype: DataType, interleave: Interleave) -> int:
    """The global-address alignment a map needs: 32 B with interleave 32B or a 16-byte-aligned packed type."""
    return 32 if (interleave is Interleave.B32 or dtype in _PACKED16) else 16
_BOX_PARAMS = struct.Struct("<Q5Q5Q5I5I7I4x")  # tmakit::BoxParams (cuda_src/tmakit/types.cuh), 1 reserved word
assert _BOX_PARAMS.size == BOX_PARAMS_SIZE


def pack_box_params(address: int, dims: Any, strides: Any, box: Any, element_strides: Any, elem_size: int,
                    swizzle: int, interleave: int, oob_nan: int, dtype: int, l2_promotion: int = 0) -> bytes:
    """The 160-byte tmakit::BoxParams block; sequences innermost first, ``strides`` starting with the element
    size (the driver's globalStrides with dim 0 prepended). Unused ranks are padded as the device code expects."""
    rank = len(dims)
    pad = 5 - rank
    return _BOX_PARAMS.pack(int(address), *map(int, dims), *[1] * pad, *map(int, strides), *[0] * pad,
                            *map(int, box), *[1] * pad, *map(int, element_strides), *[1] * pad, rank, int(elem_size),
                            int(swizzle), int(interleave), int(oob_nan), int(dtype), int(l2_promotion))


@dataclass(eq=False, slots=True, weakref_slot=True)  # slots: cheaper to build on describe's per-call path
class TensorMap:
    """A tensor map for one tensor: its parameters (both orders), sizes, and the 128-byte descriptor.

    ``descriptor`` is None where no driver encode was possible (no GPU, or a GPU below sm_90); the object
    then still carries the parameters the cp.async fallback needs (``box_params()``). The encoded descriptor is
    held as the driver gave it (a CUtensorMap, or 128 bytes; the first ``with_address`` keeps the bytes it
    reads, so a re-pointing loop copies only); ``descriptor`` reads its bytes.
    """

    spec: TiledSpec | Im2colSpec
    arch: Arch
    device: int | None
    _descriptor: Any  # the driver's CUtensorMap, 128 bytes, or None
    swizzle_reason: str = ""
    owner: Any = field(default=None, repr=False)  # keeps the described array alive; None: caller-owned memory

    # ---- parameters ------------------------------------------------------------------------------
    @property
    def mode(self) -> str:
        return "tiled" if isinstance(self.spec, TiledSpec) else "im2col"

    @property
    def dtype(self):
        return self.spec.dtype

    @property
    def rank(self) -> int:
        return self.spec.rank

    @property
    def address(self) -> int:
        return self.spec.address

    @property
    def dims(self) -> tuple[int, ...]:
        return self.spec.dims

    @property
    def strides(self) -> tuple[int, ...]:
        return self.spec.strides

    @property
    def element_strides(self) -> tuple[int, ...]:
        return self.spec.element_strides

    @property
    def box(self) -> tuple[int, ...]:
        if isinstance(self.spec, TiledSpec):
            return self.spec.box
        return (self.spec.channels_per_pixel, self.spec.pixels_per_column)

    @property
    def swizzle(self) -> Swizzle:
        return self.spec.swizzle

    @property
    def interleave(self) -> Interleave:
        return self.spec.interleave

    @property
    def l2_promotion(self):
        return self.spec.l2_promotion

    @property
    def oob_fill(self):
        return self.spec.oob_fill

    @property
    def shape(self) -> tuple[int, ...]:
        """The tensor's shape in numpy order."""
        return tuple(reversed(self.dims))

    @property
    def box_shape(self) -> tuple[int, ...]:
        """The box in numpy order."""
        return tuple(reversed(self.box))

    @property
    def descriptor(self) -> bytes | None:
        """The 128 descriptor bytes (a CUtensorMap kernel parameter), or None when not encoded."""
        d = self._descriptor
        return d if d is None or type(d) is bytes else descriptor_bytes(d)

    @property
    def encoded(self) -> bool:
        return self._descriptor is not None

    @property
    def not_encoded_reason(self) -> str | None:
        """Why there is no descriptor (None when there is one). Not being encoded says nothing about the path a
        GPU would take: a kernel launched with the map on an sm_90 GPU gets it encoded there."""
        if self.encoded:
            return None
        if self.device is None:
            return (f"described by shape, not from a device array: nothing to encode here (parameters checked for "
                    f"{self.arch.sm}; describe the array on an sm_90+ GPU for the descriptor)")
        return f"encode=False was asked (parameters checked for {self.arch.sm})"

    # ---- sizes -----------------------------------------------------------------------------------
    @property
    def geometry(self):
        if self.mode != "tiled":
            raise NotImplementedError("the shared-memory geometry is modelled for tiled tensor maps only")
        return box_geometry(self.spec)

    @property
    def box_bytes(self) -> int:
        """Bytes one box load writes = the count for mbarrier.arrive.expect_tx."""
        if self.mode == "im2col":
            return self.spec.channels_per_pixel * self.spec.pixels_per_column * self.dtype.size
        return self.geometry.box_bytes

    @property
    def smem_bytes(self) -> int:
        """Shared memory one box occupies, including the row padding a swizzle adds."""
        if self.mode == "im2col":  # rows narrower than the swizzle span are padded to it (measured on the H100)
            return im2col_geometry(self.spec).smem_bytes
        return self.geometry.smem_bytes

    @property
    def smem_alignment(self) -> int:
        """Alignment the shared-memory destination needs: 1024/512/256 B for 128B/64B/32B swizzle, else 128."""
        return self.swizzle.alignment

    # ---- re-pointing -----------------------------------------------------------------------------
    def with_address(self, target: Any) -> "TensorMap":
        """A TensorMap of the same geometry for another buffer: an array (checked: device, dtype, shape and
        strides must match this map; the new map keeps it alive) or a raw device address (caller-owned). The
        descriptor is a re-pointed copy (cuTensorMapReplaceAddress); without one, only the spec moves."""
        spec = self.spec
        if type(target) is int:  # a raw address, the cheapest form
            address, device, owner = target, self.device, None
            if not 0 <= target < 1 << 64:
                raise InvalidArgumentError("array_or_ptr", target, "must be a 64-bit unsigned device address",
                                           "pass array.data_ptr()")
        elif (view := view_if_array(target, "array")) is not None:
            self._check_same_geometry(view)
            address, device, owner = view[0], view[5], target  # ptr, device: by index, cheaper than by name
        elif isinstance(target, bool) or not hasattr(target, "__index__"):
            raise InvalidArgumentError("array_or_ptr", target, "must be a device array or an integer device address",
                                       "pass a torch/cupy/tmakit array of this map's geometry, or array.data_ptr()")
        else:  # numpy integers and other int-likes
            return self.with_address(int(target.__index__()))
        if address & 15 or (address & 31 and (spec.interleave is _IL_B32 or spec.dtype in _PACKED16)):
            need = address_alignment(spec.dtype, spec.interleave)
            raise InvalidArgumentError("address", hex(address), f"must be {need}-byte aligned for this map",
                                       f"start the buffer at a {need}-byte boundary")
        descriptor = self._descriptor
        if descriptor is not None:
            if type(descriptor) is not bytes:  # held from now on as its 128 bytes (the same value, read once):
                descriptor = self._descriptor = descriptor_bytes(descriptor)  # a re-pointing loop copies only
            try:
                descriptor = replace_address(descriptor, address)
            except CudaDriverError:  # e.g. a thread with no current context: once more in the map's device's
                with _driver.context_for(self.device or 0):
                    descriptor = replace_address(descriptor, address)
        return TensorMap(spec.at(address), self.arch, device, descriptor, self.swizzle_reason, owner)

    def _check_same_geometry(self, view: Any) -> None:
        """``view`` (numpy order) must have this map's device, element type, shape and byte strides."""
        spec = self.spec
        _, shape, strides, dtype_name, itemsize, device, _ = view  # unpacked at once (each field is a look-up)
        if self.device is not None and device != self.device:
            raise InvalidArgumentError("array", f"array on device {device}", f"must be on device {self.device}, "
                                       "where this map was encoded", "describe the array on its own device")
        dtype = spec.dtype
        if dtype not in _BITS_ONLY or itemsize != dtype.size:
            if (_ARRAY_DTYPES.get(dtype_name) or dtype_from_any(dtype_name, "array")) is not dtype:
                raise InvalidArgumentError("array", f"dtype {dtype_name}", f"must match the map's dtype "
                                           f"{dtype.short}", "describe the array anew (describe_tensor)")
        if shape[::-1] != spec.dims:
            raise InvalidArgumentError("array", f"shape {shape}", f"must match the map's shape {self.shape}",
                                       "describe the array anew (describe_tensor)")
        if strides[-2::-1] != spec.strides or (shape[-1] != 1 and strides[-1] != itemsize):
            expected = tuple(reversed(spec.strides)) + (itemsize,)
            raise InvalidArgumentError("array", f"strides {strides} (bytes)", f"must match the map's strides "
                                       f"{expected} (bytes, numpy order)", "make it contiguous or describe it anew")

    # ---- kernel parameters -----------------------------------------------------------------------
    def box_params(self) -> bytes:
        """The 160-byte ``tmakit::BoxParams`` block the cp.async fallback takes (docs/CONTRACTS.md)."""
        if self.mode != "tiled":
            raise InvalidArgumentError("tensor_map", "an im2col map", "has no cp.async form: the one-source twin "
                                       "(BoxParams) expresses tiled boxes only; an im2col load walks pixels inside the "
                                       "TMA unit", "load it with TMA (sm_90, tmakit.ops.modes.load_im2col)")
        return pack_box_params(self.address, self.dims, (self.dtype.size,) + tuple(self.strides), self.box,
                               self.element_strides, self.dtype.size, int(self.swizzle), int(self.interleave),
                               int(self.oob_fill), int(self.dtype), int(self.l2_promotion))

    def __kernel_param__(self, nbytes: int) -> bytes:
        """Bytes for a by-value kernel parameter: 128 -> the CUtensorMap, 160 -> BoxParams."""
        if nbytes == DESCRIPTOR_SIZE:
            d = self._descriptor  # what ``descriptor`` reads, without the property call (a launch packs this)
            if type(d) is bytes:
                return d
            if d is not None:
                return descriptor_bytes(d)
            raise LaunchError(
                f"this TensorMap has no encoded descriptor (arch {self.arch.sm}, device {self.device}); a kernel "
                "taking a CUtensorMap needs sm_90+ and a GPU: compile the kernel's cp.async variant instead")
        if nbytes == BOX_PARAMS_SIZE:
            return self.box_params()
        raise LaunchError(f"a TensorMap can fill a 128-byte CUtensorMap or a 160-byte tmakit::BoxParams parameter, "
                          f"not a {nbytes}-byte one")

    # ---- presentation ----------------------------------------------------------------------------
    def to_dict(self) -> dict:
        d: dict[str, Any] = {
            "mode": self.mode, "dtype": self.dtype.short, "element_size": self.dtype.size, "rank": self.rank,
            "address": hex(self.address), "device": self.device, "arch": self.arch.sm,
            "shape": list(self.shape), "dims": list(self.dims), "strides_bytes": list(self.strides),
            "box_shape": list(self.box_shape), "box": list(self.box), "element_strides": list(self.element_strides),
            "interleave": self.interleave.short, "swizzle": self.swizzle.short, "swizzle_reason": self.swizzle_reason,
            "l2_promotion": self.l2_promotion.short, "oob_fill": self.oob_fill.short,
            "box_bytes": self.box_bytes, "smem_bytes": self.smem_bytes, "smem_alignment": self.smem_alignment,
            "encoded": self.encoded, "not_encoded_reason": self.not_encoded_reason,
            "descriptor": self.descriptor.hex() if self.descriptor else None,
        }
        if isinstance(self.spec, Im2colSpec):
            d.update(lower_corner=list(self.spec.lower_corner), upper_corner=list(self.spec.upper_corner),
                     channels_per_pixel=self.spec.channels_per_pixel, pixels_per_column=self.spec.pixels_per_column)
        return d

    @property
    def caller_owns_memory(self) -> bool:
        """True for maps of a raw address (``encode_tiled``, ``with_address(int)``): nothing keeps it alive."""
        return self.owner is None and self.address != 0

    def __repr__(self) -> str:
        enc = "encoded" if self.encoded else "not encoded"
        if self.owner is not None:
            memory = f"holds its {type(self.owner).__name__}"
        elif self.address:
            memory = f"raw address {hex(self.address)}: the caller owns the memory and keeps it alive"
        else:
            memory = "no memory (described by shape)"
        return (f"TensorMap({self.mode}, {self.dtype.short}, shape={self.shape}, box={self.box_shape}, "
                f"swizzle={self.swizzle.short}, oob={self.oob_fill.short}, box_bytes={self.box_bytes}, "
                f"smem={self.smem_bytes}B@{self.smem_alignment}, {enc}, {memory})")

    def __rich__(self):
        return render_tensor_map(self)
