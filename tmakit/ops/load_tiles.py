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
from ..device import device_limits
from ..device_array import DeviceArray
from ..dtypes import DataType
from ..errors import InvalidArgumentError, TmakitError, UnsupportedDeviceError
from ..tensormap import describe_tensor  # before layout: tmakit.layout imports tmakit.tensormap's enums
from ..layout.tma_model import box_geometry, check_box_start
from . import _checks
from ._kernels import kernel
from ._plan import Plan, repoint

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


class LoadTilesPlan(Plan):
    """Prepared box loads: ``plan()`` loads the boxes again (synchronous; fresh images), ``plan(array)`` loads
    them from another array of the same geometry (the tensor map re-pointed). It holds the coordinates and the
    image buffer on the device until ``close()`` (or garbage collection)."""

    op, names = "load_tiles", ("array",)

    def __init__(self, tm: Any, view: Any, choice: BackendChoice, coords: np.ndarray, geo: Any, align: int,
                 checked: bool | str | None = None) -> None:
        device = int(tm.device)
        _driver.ensure_context(device)
        n = len(coords)
        padded = np.zeros((n, 5), dtype=np.int32)
        padded[:, :tm.rank] = coords[:, ::-1]  # numpy order -> innermost first
        self._coords = DeviceArray.from_host(padded, device=device)
        self._out = DeviceArray.empty((n, geo.smem_bytes), np.uint8, device=device)
        self._tm, self._geo, self._at, self._choice = tm, geo, coords, choice
        k = kernel("tile_load.cu", "tmakit_tile_load", choice, device)
        args = (tm, self._coords.ptr, np.int32(n), np.int32(tm.rank), np.uint32(geo.box_bytes),
                np.uint32(geo.smem_bytes), np.uint32(align), np.uint32(POISON), self._out.ptr)
        super().__init__(None, (view,) if view is not None else (), k, args, checked=checked,
                         grid=(min(n, _MAX_BLOCKS), 1, 1), block=(_THREADS, 1, 1), shared_mem=geo.smem_bytes + align)

    @property
    def backend(self) -> BackendChoice:
        return self._choice

    def _repoint(self, buffers: Any) -> None:
        if not self._views:  # a TensorMap that names no array: only its shape and dtype can be checked
            v = _checks.view(buffers[0], "array") if len(buffers) == 1 else None
            if v is None or v.shape != self._tm.shape or v.itemsize != self._geo.elem_size:
                raise InvalidArgumentError("array", v and f"array of shape {v.shape}", f"must be one array of the "
                                           f"tensor map's shape {self._tm.shape}", "make a new plan for it")
            self._views = (v,)
        super()._repoint(buffers)

    def _retarget(self, views: tuple) -> None:
        self._tm = repoint(self._tm, views[0])
        self._update(0, self._tm)

    def __call__(self, *buffers: Any) -> LoadTilesResult:
        if buffers:
            self._repoint(buffers)
        self._out.fill(POISON)  # a byte the kernel failed to write cannot pass for a right one
        self._launch()
        _driver.call("cuCtxSynchronize")
        return LoadTilesResult(self._out.to_host(), self._at, self._tm, self._choice, self._geo.box_bytes,
                               self._geo.row_pitch)

    def close(self) -> None:
        self._coords.close()
        self._out.close()

    def __enter__(self) -> "LoadTilesPlan":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def plan_load_tiles(tensor_map_or_array: Any, coords: Any, *, box: Any = None, backend: Any = "auto",
                    checked: bool | str | None = None, **describe_kwargs: Any) -> LoadTilesPlan:
    """Prepare loading the box at each of ``coords`` (shape (n, rank), numpy order) on the GPU.

    ``tensor_map_or_array`` is a TensorMap, or a device array described with ``box`` (numpy order) and
    ``describe_kwargs`` (swizzle=, oob_fill=, element_strides=, ...). ``backend`` is "auto", "tma" or
    "cp.async"; the one that runs is ``plan.backend``. ``checked=True``: the hang doctor's bounded waits
    (``HangError``; docs/DEBUGGING.md).
    """
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
    align = int(tm.smem_alignment)
    limit = device_limits(device).smem_per_block_optin
    if geo.smem_bytes + align > limit:
        raise InvalidArgumentError("box", tuple(reversed(tm.box)), f"needs {geo.smem_bytes + align} bytes of shared "
                                   f"memory; the GPU offers {limit} per block", "load a smaller box")
    owner = tensor_map_or_array if tm is not tensor_map_or_array else getattr(tm, "owner", None)
    try:
        view = _checks.view(owner, "array") if owner is not None else None
    except TmakitError:  # an owner that is no array view (then plan(array) checks shape and dtype only)
        view = None
    return LoadTilesPlan(tm, view, choice, at, geo, align, checked)


def load_tiles(tensor_map_or_array: Any, coords: Any, *, box: Any = None, backend: Any = "auto",
               **describe_kwargs: Any) -> LoadTilesResult:
    """Load the box at each of ``coords`` (shape (n, rank), numpy order) on the GPU once; return the images
    (``plan_load_tiles(...)()``, its buffers freed after). Synchronous."""
    with plan_load_tiles(tensor_map_or_array, coords, box=box, backend=backend, **describe_kwargs) as plan:
        return plan()
