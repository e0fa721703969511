"""``load_tiles``: run real box loads (TMA, or the cp.async twin) and return the shared-memory images.

It is the hardware side of ``tmakit.layout.tma_load_image``: one block per coordinate set loads the box with
the one-source primitive (cuda_src/tmakit/box_load.cuh) and dumps its shared-memory footprint.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import _driver
from ..backend import BackendChoice, choose_backend
from ..dtypes import DataType
from ..errors import InvalidArgumentError, UnsupportedDeviceError
from ._kernels import kernel

POISON = 0xA5  # footprint bytes no load writes (swizzle padding) read back as this
_THREADS = 128
_MAX_BLOCKS = 4096
# Types whose elements TMA rewrites in flight (tf32 rounding, tmakit.layout.tma_model._convert); the cp.async
# path copies bits. FLOAT32_FTZ is copied unchanged by TMA (measured), so both paths agree on it.
_CONVERTING = (DataType.TFLOAT32, DataType.TFLOAT32_FTZ)


@dataclass(frozen=True)
class LoadTilesResult:
    """``images[i]`` is the shared-memory footprint after loading the box at ``coords[i]`` (numpy order)."""

    images: np.ndarray  # uint8 [n, image_bytes]
    coords: np.ndarray  # int64 [n, rank], numpy order
    tensor_map: Any
    backend: BackendChoice
    box_bytes: int  # data bytes per box (the expect_tx count)
    row_pitch: int  # bytes per shared-memory row (rows narrower than a swizzle span are padded to it)

    @property
    def backend_name(self) -> str:
        return self.backend.name

    def typed(self) -> np.ndarray:
        """Images as elements, shape [n, outer box counts (numpy order)..., row_pitch / elem_size].

        This is the raw shared-memory order: with a swizzle, 16-byte chunks are still permuted.
        """
        from ..layout.tma_model import box_geometry

        geo = box_geometry(self.tensor_map)
        dtype = np.dtype(self.tensor_map.dtype.numpy_dtype)
        outer = tuple(reversed(geo.counts[1:]))
        return self.images.view(dtype).reshape((len(self.images),) + outer + (geo.row_pitch // dtype.itemsize,))


def _as_tensor_map(source: Any, box: Any, describe_kwargs: dict) -> Any:
    if hasattr(source, "box_params") and hasattr(source, "descriptor"):
        if box is not None or describe_kwargs:
            raise InvalidArgumentError("box", box, "cannot be given with a TensorMap (it already has a box)",
                                       "pass the array instead, or drop box/describe options")
        return source
    if box is None:
        raise InvalidArgumentError("box", None, "is required when the first argument is an array",
                                   "pass box=(rows, cols) in numpy order, or a TensorMap from tmakit.describe_tensor")
    from ..tensormap import describe_tensor

    return describe_tensor(source, box=box, **describe_kwargs)


def _coords(coords: Any, rank: int) -> np.ndarray:
    arr = np.asarray(coords)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[1] != rank or arr.shape[0] == 0 or not np.issubdtype(arr.dtype, np.integer):
        raise InvalidArgumentError("coords", f"array of shape {arr.shape} and dtype {arr.dtype}",
                                   f"must be integers of shape (n, {rank}) with n >= 1 (numpy order, outermost first)",
                                   f"pass e.g. [[0] * {rank}]")
    arr = arr.astype(np.int64)
    if arr.min() < -2**31 or arr.max() >= 2**31:
        raise InvalidArgumentError("coords", f"range [{arr.min()}, {arr.max()}]", "must fit in int32 (TMA coordinates are .s32)",
                                   "use coordinates in [-2**31, 2**31)")
    return arr


def load_tiles(tensor_map_or_array: Any, coords: Any, *, box: Any = None, backend: Any = "auto",
               **describe_kwargs: Any) -> LoadTilesResult:
    """Load the box at each of ``coords`` (shape (n, rank), numpy order) on the GPU; return the images.

    ``tensor_map_or_array`` is a TensorMap, or a device array described with ``box`` (numpy order) and
    ``describe_kwargs`` (swizzle=, oob_fill=, element_strides=, ...). ``backend`` is "auto", "tma" or
    "cp.async"; the one that ran is ``result.backend``. Synchronous.
    """
    from ..device_array import DeviceArray
    from ..layout.tma_model import box_geometry, check_box_start
    from ..tensormap.enums import Interleave

    tm = _as_tensor_map(tensor_map_or_array, box, describe_kwargs)
    if getattr(tm, "mode", "tiled") != "tiled":
        raise InvalidArgumentError("tensor_map", "an im2col map", "is not a tiled map: load_tiles issues tile loads",
                                   "use tmakit.ops.modes.load_im2col for an im2col map")
    at = _coords(coords, tm.rank)
    if tm.device is None:
        raise InvalidArgumentError("tensor_map", repr(tm), "describes no device array (it was built from shape/dtype)",
                                   "describe a device array: tmakit.describe_tensor(array, box=...)")
    device = int(tm.device)
    choice = choose_backend(backend, device=device)
    if choice.name == "tma" and tm.descriptor is None:
        raise UnsupportedDeviceError("this TensorMap has no encoded descriptor, so TMA cannot load it",
                                     required="sm_90 descriptor", actual=choice.arch)
    if choice.name == "cp.async" and DataType.parse(tm.dtype) in _CONVERTING:
        raise InvalidArgumentError("backend", "cp.async", f"cannot load {DataType.parse(tm.dtype).short}: TMA rounds "
                                   "these elements to tf32 on the way and cp.async copies bits",
                                   'use backend="tma", or describe the tensor as float32')
    geo = box_geometry(tm)
    for row in at:
        try:
            check_box_start(geo, row[::-1])
        except ValueError as exc:
            raise InvalidArgumentError("coords", row.tolist(), str(exc), "round the innermost coordinate") from None
    image_bytes = geo.smem_bytes
    align = int(tm.smem_alignment)
    limit = _driver.device_attribute("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", device)
    if image_bytes + align > limit:
        raise InvalidArgumentError("box", tuple(reversed(tm.box)), f"needs {image_bytes + align} bytes of shared memory; "
                                   f"the GPU offers {limit} per block", "load a smaller box")
    _driver.ensure_context(device)
    n = len(at)
    padded = np.zeros((n, 5), dtype=np.int32)
    padded[:, :tm.rank] = at[:, ::-1]  # numpy order -> innermost first
    with DeviceArray.from_host(padded, device=device) as dcoords, \
            DeviceArray.empty((n, image_bytes), np.uint8, device=device) as out:
        out.fill(POISON)  # a byte the kernel failed to write cannot pass for a right one
        k = kernel("tile_load.cu", "tmakit_tile_load", choice, device)
        k(tm, dcoords.ptr, np.int32(n), np.int32(tm.rank), np.uint32(geo.box_bytes), np.uint32(image_bytes),
          np.uint32(align), np.uint32(POISON), out.ptr, grid=(min(n, _MAX_BLOCKS), 1, 1), block=(_THREADS, 1, 1),
          shared_mem=image_bytes + align)
        _driver.call("cuCtxSynchronize")
        images = out.to_host()
    return LoadTilesResult(images, at, tm, choice, geo.box_bytes, geo.row_pitch)
