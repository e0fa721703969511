"""``ptx_tile_copy(dst, src)``: the hand-written PTX ring copies (ptx/tile_copy_sm90.ptx, tile_copy_sm80.ptx).

A 2-D copy through shared memory: on "tma" a 4-stage ring of mbarrier-guarded TMA loads and TMA stores driven
by one thread per block; on "cp.async" its sm_80 twin (per-thread 16-byte slots, cp.async + wait_group). It
exists to run and check the hand-written PTX; ``copy`` is the general-purpose op. Both paths need 16-byte
aligned rows (base address and row pitch multiples of 16 bytes).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from ..backend import BackendChoice, choose_backend
from ..build import load_module
from ..errors import InvalidArgumentError
from ..tensormap import describe_tensor
from . import _checks
from ._kernels import sm_count

_STAGES = 4
_TILE_ROWS = 32
_TILE_BYTES_WIDE = 256  # bytes per box row on the TMA path
_CP_TILE_ROWS, _CP_TILE_BYTES = 8, 256  # fixed by the sm_80 PTX (128 threads x 16 bytes)


@dataclass(frozen=True)
class PtxTileCopyResult:
    backend: BackendChoice


@functools.lru_cache(maxsize=None)
def _ptx_kernel(file: str, entry: str, device: int) -> Any:
    return load_module(file, device=device).kernel(entry)


def ptx_tile_copy(dst: Any, src: Any, *, backend: Any = "auto", stream: Any = None) -> PtxTileCopyResult:
    """``dst[...] = src`` for contiguous 2-D device arrays of one shape and dtype with 16-byte aligned rows."""
    d, s = _checks.view(dst, "dst"), _checks.view(src, "src")
    if len(s.shape) != 2 or d.shape != s.shape:
        raise InvalidArgumentError("dst", f"shape {d.shape}", f"must equal src's shape {s.shape}, and both be 2-D",
                                   "pass two (rows, cols) arrays of one shape")
    _checks.require_same_dtype(d, s)
    _checks.require_same_device(d, s)
    _checks.require_contiguous(d, "dst")
    _checks.require_contiguous(s, "src")
    _checks.refuse_overlap([("dst", d)], [("src", s)])
    rows, cols = s.shape
    pitch = cols * s.itemsize
    for name, v in (("src", s), ("dst", d)):
        if v.ptr % 16 or pitch % 16:
            raise InvalidArgumentError(name, f"array at 0x{v.ptr:x} with row pitch {pitch} bytes",
                                       "needs a 16-byte aligned base and a row pitch that is a multiple of 16 bytes",
                                       "use tmakit.ops.copy, which copies any contiguous array")
    choice = choose_backend(backend, device=s.device)
    if rows * cols == 0:
        return PtxTileCopyResult(choice)
    if choice.name == "tma":
        box = (_TILE_ROWS, _TILE_BYTES_WIDE // s.itemsize)
        tm_src = describe_tensor(src, box=box, swizzle="none")
        tm_dst = describe_tensor(dst, box=box, swizzle="none")
        box_bytes = _TILE_ROWS * _TILE_BYTES_WIDE
        tiles_x = -(-cols // box[1])
        tiles = tiles_x * -(-rows // _TILE_ROWS)
        k = _ptx_kernel("tile_copy_sm90.ptx", "tmakit_tile_copy_tma", s.device)
        k(tm_src, tm_dst, tiles_x, tiles, box[1], _TILE_ROWS, box_bytes, box_bytes,
          grid=(max(1, min(tiles, sm_count(s.device) * 4)), 1, 1), block=(32, 1, 1),
          shared_mem=_STAGES * box_bytes, stream=stream)
    else:
        tiles_x = -(-pitch // _CP_TILE_BYTES)
        tiles = tiles_x * -(-rows // _CP_TILE_ROWS)
        k = _ptx_kernel("tile_copy_sm80.ptx", "tmakit_tile_copy_cp_async", s.device)
        k(d.ptr, s.ptr, pitch, pitch, rows, tiles_x, tiles, grid=(max(1, min(tiles, sm_count(s.device) * 8)), 1, 1),
          block=(128, 1, 1), stream=stream)
    return PtxTileCopyResult(choice)
