"""Run the TMA modes besides the tile load on the GPU and return what they wrote (cuda_src/tma_modes.cu,
tma_prefetch.cu, tile_store.cu).

Each function is the hardware side of a CPU model in ``tmakit.layout``:

- ``load_im2col``      -> ``im2col_load_image``     (im2col loads; TMA only)
- ``multicast_load``   -> ``tma_load_image``        (one load delivered to several CTAs of a cluster; TMA only)
- ``reduce_add_tiles`` -> ``tma_reduce_add``        (cp.reduce.async.bulk.tensor .add; TMA only)
- ``prefetch_load``    -> ``tma_load_image``        (L2 prefetch of the box, then its load; both backends)
- ``store_tiles``      -> ``tma_store``             (tile stores; both backends, cuda_src/tile_store.cu)

Coordinates here are in DRIVER order (innermost first), the order of the PTX instruction's operands, like the
CPU models they are checked against. The cp.async twin (box_load.cuh) cannot express im2col, multicast or a
reduction: those refuse ``backend="cp.async"`` (and a pre-sm_90 GPU) with an error before any launch.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .. import _driver
from ..backend import BackendChoice, choose_backend
from ..device import device_limits
from ..device_array import DeviceArray
from ..errors import InvalidArgumentError, UnsupportedDeviceError
from ..layout.im2col import check_im2col_start, im2col_geometry
from ..layout.tma_model import box_geometry, check_box_start, check_store_start
from ..layout.tma_reduce import REDUCE_ADD_TYPES
from ._kernels import kernel
from .load_tiles import _CONVERTING

POISON = 0xA5
_THREADS = 128
_WHY = {
    "im2col": "an im2col load walks pixels through the descriptor's bounding box inside the TMA unit; the "
              "one-source cp.async twin (box_load.cuh) only expresses tiled boxes",
    "multicast": "a multicast writes one load into the shared memory of several CTAs of a cluster; cp.async "
                 "copies into the issuing CTA only",
    "reduce-add": "cp.reduce.async.bulk.tensor adds in the memory system; the cp.async twin has no reducing store",
}


def require_tma(mode: str, choice: BackendChoice) -> None:
    """Refuse a mode the chosen backend cannot express (before any launch)."""
    if choice.name != "tma":
        raise InvalidArgumentError("backend", choice.name, f"cannot run the {mode} mode: {_WHY[mode]}",
                                   'use backend="tma" on an sm_90 GPU, or a tiled load/store')


def _choice(tm: Any, backend: Any) -> tuple[BackendChoice, int]:
    device = getattr(tm, "device", None)
    if device is None:
        raise InvalidArgumentError("tensor_map", repr(tm), "describes no device memory (no device)",
                                   "describe a device array, or encode a raw address with a device")
    return choose_backend(backend, device=int(device)), int(device)


def _coords(name: str, coords: Any, rank: int, width: int = 5) -> np.ndarray:
    arr = np.asarray(coords)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[1] != rank or arr.shape[0] == 0 or not np.issubdtype(arr.dtype, np.integer):
        raise InvalidArgumentError(name, f"array of shape {arr.shape} and dtype {arr.dtype}",
                                   f"must be integers of shape (n, {rank}), n >= 1 (driver order, innermost first)",
                                   f"pass e.g. [[0] * {rank}]")
    if arr.min() < -2**31 or arr.max() >= 2**31:
        raise InvalidArgumentError(name, f"range [{arr.min()}, {arr.max()}]", "must fit in int32", "use smaller values")
    out = np.zeros((arr.shape[0], width), dtype=np.int32)
    out[:, :rank] = arr
    return out


def _shared_limit(device: int, need: int, what: Any) -> None:
    limit = device_limits(device).smem_per_block_optin
    if need > limit:
        raise InvalidArgumentError("tensor_map", what, f"needs {need} bytes of shared memory; the GPU offers {limit}",
                                   "use a smaller box")


def _stored_boxes(tm: Any, coords: Any, images: Any, device: int) -> tuple[np.ndarray, np.ndarray, Any, int]:
    """The checked inputs of a store or reduce-add: coordinates, one image row per box, the box geometry, the
    shared-memory alignment (the GPU's context made current)."""
    at = _coords("coords", coords, tm.rank)
    for row in at:
        check_store_start(row[:tm.rank])
    geo = box_geometry(tm)
    img = np.ascontiguousarray(images, dtype=np.uint8).reshape(len(at), -1)
    if img.shape[1] != geo.smem_bytes:
        raise InvalidArgumentError("images", img.shape, f"needs {geo.smem_bytes} bytes per box", "pass [n, smem_bytes]")
    align = int(tm.smem_alignment)
    _shared_limit(device, geo.smem_bytes + align, tm.box)
    _driver.ensure_context(device)
    return at, img, geo, align


def load_im2col(tm: Any, coords: Any, offsets: Any, *, backend: Any = "auto") -> np.ndarray:
    """Run one im2col load per row of ``coords`` ((n, rank), driver order: c, w[, h[, d]], n) with the im2col
    ``offsets`` ((n, rank-2), W first); return the shared-memory images, uint8 [n, smem_bytes]. Bytes the load
    leaves untouched read back as ``POISON``. Compare with ``tmakit.layout.im2col_load_image``. A filter base
    (w, h, d) outside the map's bounding box is refused before the launch (``check_im2col_start``)."""
    choice, device = _choice(tm, backend)
    require_tma("im2col", choice)
    if getattr(tm, "mode", "im2col") != "im2col" or getattr(tm, "descriptor", None) is None:
        raise InvalidArgumentError("tensor_map", repr(tm), "must be an encoded im2col TensorMap",
                                   "use tmakit.describe_im2col(device_array, ...) or tmakit.encode_im2col")
    rank = len(tm.dims)
    at = _coords("coords", coords, rank)
    off = _coords("offsets", offsets, rank - 2, 3)
    if len(off) != len(at):
        raise InvalidArgumentError("offsets", len(off), f"needs one row per coordinate row ({len(at)})", "pass n rows")
    for row in at:  # a filter base outside the bounding box faults the GPU (and loses the context)
        check_im2col_start(tm, row[:rank].tolist())
    geo = im2col_geometry(tm)
    align = int(tm.smem_alignment)
    _shared_limit(device, geo.smem_bytes + align, (geo.pixels, geo.channels))
    _driver.ensure_context(device)
    n = len(at)
    with DeviceArray.from_host(at, device=device) as dc, DeviceArray.from_host(off, device=device) as do, \
            DeviceArray.empty((n, geo.smem_bytes), np.uint8, device=device) as out:
        out.fill(POISON)
        k = kernel("tma_modes.cu", "tmakit_im2col_load", choice, device)
        k(tm, dc.ptr, do.ptr, np.int32(n), np.int32(rank), np.uint32(geo.box_bytes), np.uint32(geo.smem_bytes),
          np.uint32(align), np.uint32(POISON), out.ptr, grid=(n, 1, 1), block=(_THREADS, 1, 1),
          shared_mem=geo.smem_bytes + align)
        _driver.call("cuCtxSynchronize")
        return out.to_host()


def multicast_load(tm: Any, coords: Any, masks: Any, *, cluster_size: int, backend: Any = "auto") -> np.ndarray:
    """For each row of ``coords`` (driver order), CTA 0 of a cluster of ``cluster_size`` CTAs multicasts the tile
    box to the CTAs set in ``masks[i]``; return every CTA's shared-memory image, uint8 [n, cluster_size,
    smem_bytes] (CTAs outside the mask keep ``POISON``)."""
    choice, device = _choice(tm, backend)
    require_tma("multicast", choice)
    if isinstance(cluster_size, bool) or not isinstance(cluster_size, (int, np.integer)) or not 1 <= cluster_size <= 8:
        raise InvalidArgumentError("cluster_size", cluster_size, "must be an int in 1..8 (portable cluster size)",
                                   "use 2 or 4")
    at = _coords("coords", coords, tm.rank)
    m = np.asarray(masks).ravel()
    if len(m) != len(at) or not np.issubdtype(m.dtype, np.integer) or m.min() < 1 or m.max() >= (1 << cluster_size):
        raise InvalidArgumentError("masks", m.tolist()[:8], f"needs one non-zero CTA mask below 2**{cluster_size} per "
                                   "coordinate row", f"pass e.g. [{(1 << cluster_size) - 1}] * n")
    geo = box_geometry(tm)
    align = int(tm.smem_alignment)
    _shared_limit(device, geo.smem_bytes + align, tm.box)
    _driver.ensure_context(device)
    n = len(at)
    with DeviceArray.from_host(at, device=device) as dc, DeviceArray.from_host(m.astype(np.int32), device=device) as dm, \
            DeviceArray.empty((n, cluster_size, geo.smem_bytes), np.uint8, device=device) as out:
        out.fill(POISON)
        k = kernel("tma_modes.cu", "tmakit_multicast_load", choice, device)
        k(tm, dc.ptr, dm.ptr, np.int32(n), np.int32(tm.rank), np.uint32(geo.box_bytes), np.uint32(geo.smem_bytes),
          np.uint32(align), np.uint32(POISON), out.ptr, grid=(n * cluster_size, 1, 1), block=(_THREADS, 1, 1),
          shared_mem=geo.smem_bytes + align, cluster=(cluster_size, 1, 1))
        _driver.call("cuCtxSynchronize")
        return out.to_host()


def reduce_add_tiles(tm: Any, coords: Any, images: Any, *, backend: Any = "auto") -> None:
    """Reduce-add ``images[i]`` (uint8 [n, smem_bytes], the layout a load writes) into the box at ``coords[i]``
    (driver order) of the tensor ``tm`` describes, on the device, synchronously. Boxes must not overlap."""
    choice, device = _choice(tm, backend)
    require_tma("reduce-add", choice)
    if tm.dtype not in REDUCE_ADD_TYPES:
        raise InvalidArgumentError("tensor_map.dtype", tm.dtype.short, "has no reduce-add (PTX .add takes u32, s32, "
                                   "u64, f32, f16, bf16)", "describe the tensor as one of those types")
    at, img, geo, align = _stored_boxes(tm, coords, images, device)
    with DeviceArray.from_host(at, device=device) as dc, DeviceArray.from_host(img, device=device) as di:
        k = kernel("tma_modes.cu", "tmakit_reduce_add", choice, device)
        k(tm, dc.ptr, np.int32(len(at)), np.int32(tm.rank), np.uint32(geo.smem_bytes), np.uint32(align), di.ptr,
          grid=(len(at), 1, 1), block=(_THREADS, 1, 1), shared_mem=geo.smem_bytes + align)
        _driver.call("cuCtxSynchronize")


def store_tiles(tm: Any, coords: Any, images: Any, *, backend: Any = "auto") -> BackendChoice:
    """Store ``images[i]`` (uint8 [n, smem_bytes]) to the box at ``coords[i]`` (driver order) with the one-source
    box store (TMA store on sm_90, cp.async-path stores otherwise); synchronous. Boxes must not overlap."""
    choice, device = _choice(tm, backend)
    if choice.name == "tma" and tm.descriptor is None:
        raise UnsupportedDeviceError("this TensorMap has no encoded descriptor", required="sm_90 descriptor",
                                     actual=choice.arch)
    at, img, geo, align = _stored_boxes(tm, coords, images, device)
    with DeviceArray.from_host(at, device=device) as dc, DeviceArray.from_host(img, device=device) as di:
        k = kernel("tile_store.cu", "tmakit_tile_store", choice, device)
        k(tm, dc.ptr, np.int32(len(at)), np.int32(tm.rank), np.uint32(geo.box_bytes), np.uint32(geo.smem_bytes),
          np.uint32(align), di.ptr, grid=(len(at), 1, 1), block=(_THREADS, 1, 1), shared_mem=geo.smem_bytes + align)
        _driver.call("cuCtxSynchronize")
    return choice


def prefetch_load(tm: Any, coords: Any, *, backend: Any = "auto") -> np.ndarray:
    """Prefetch each box at ``coords`` (driver order) into L2, then load it; return the images, uint8
    [n, smem_bytes] (the cp.async backend has no tensor prefetch and only loads)."""
    choice, device = _choice(tm, backend)
    if choice.name == "tma" and tm.descriptor is None:
        raise UnsupportedDeviceError("this TensorMap has no encoded descriptor", required="sm_90 descriptor",
                                     actual=choice.arch)
    if choice.name == "cp.async" and tm.dtype in _CONVERTING:
        raise InvalidArgumentError("backend", "cp.async", f"cannot load {tm.dtype.short}: TMA rounds these elements "
                                   "to tf32 on the way and cp.async copies bits", 'use backend="tma", or float32')
    at = _coords("coords", coords, tm.rank)
    geo = box_geometry(tm)
    for row in at:
        check_box_start(geo, row[:tm.rank])
    align = int(tm.smem_alignment)
    _shared_limit(device, geo.smem_bytes + align, tm.box)
    _driver.ensure_context(device)
    n = len(at)
    with DeviceArray.from_host(at, device=device) as dc, \
            DeviceArray.empty((n, geo.smem_bytes), np.uint8, device=device) as out:
        out.fill(POISON)
        k = kernel("tma_prefetch.cu", "tmakit_prefetch_load", choice, device)
        k(tm, dc.ptr, np.int32(n), np.int32(tm.rank), np.uint32(geo.box_bytes), np.uint32(geo.smem_bytes),
          np.uint32(align), np.uint32(POISON), out.ptr, grid=(n, 1, 1), block=(_THREADS, 1, 1),
          shared_mem=geo.smem_bytes + align)
        _driver.call("cuCtxSynchronize")
        return out.to_host()
