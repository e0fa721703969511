"""``transpose(dst, src)``: dst (C x R) = src (R x C)^T for 1/2/4/8-byte elements (cuda_src/transpose.cu).

The source is read in 128-byte-wide boxes with the 128B swizzle through the one-source box load. TMA can
only describe it when its base is 16-byte aligned and its row pitch a multiple of 16 bytes: otherwise
``backend="auto"`` uses the cp.async path (which walks any pitch; logged and recorded on the result) and an
explicit ``backend="tma"`` refuses.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from ..backend import Backend, BackendChoice, choose_backend
from ..dtypes import dtype_from_any
from ..errors import InvalidArgumentError
from . import _checks
from ._boxparams import pack_box_params
from ._kernels import kernel, sm_count

log = logging.getLogger("tmakit")

_TILE_ROWS = 64
_ROW_BYTES = 128  # = the 128B swizzle span: conflict-light column reads
_SWIZZLE_128B = 3
_THREADS = 256
_STAGES = 2


@dataclass(frozen=True)
class TransposeResult:
    backend: BackendChoice
    reason: str  # why this backend ran (e.g. the TMA rule the source broke under "auto")


def _tma_rule_broken(ptr: int, pitch: int) -> str:
    if ptr % 16:
        return f"its address 0x{ptr:x} is not 16-byte aligned"
    if pitch % 16:
        return f"its row pitch of {pitch} bytes is not a multiple of 16"
    return ""


def transpose(dst: Any, src: Any, *, backend: Any = "auto", stream: Any = None) -> TransposeResult:
    """``dst = src.T`` for contiguous 2-D device arrays; asynchronous on ``stream``."""
    d, s = _checks.view(dst, "dst"), _checks.view(src, "src")
    if len(s.shape) != 2:
        raise InvalidArgumentError("src", f"shape {s.shape}", "must be 2-D", "reshape it to (rows, cols)")
    if d.shape != s.shape[::-1]:
        raise InvalidArgumentError("dst", f"shape {d.shape}", f"must be {s.shape[::-1]} (src {s.shape} transposed)",
                                   "allocate dst with the reversed shape")
    _checks.require_same_dtype(d, s)
    _checks.require_same_device(d, s)
    _checks.require_contiguous(d, "dst")
    _checks.require_contiguous(s, "src")
    _checks.require_disjoint(d, s)
    esize = s.itemsize
    if esize not in (1, 2, 4, 8):
        raise InvalidArgumentError("src", s.dtype_name, "must have 1, 2, 4 or 8-byte elements", "view it as such an integer type")
    choice = choose_backend(backend, device=s.device)
    rows, cols = s.shape
    reason = choice.reason
    if rows * cols == 0:
        return TransposeResult(choice, "empty")
    broken = _tma_rule_broken(s.ptr, cols * esize)
    if choice.backend is Backend.TMA and broken:
        if choice.source != "auto":
            raise InvalidArgumentError("src", f"array of shape {s.shape} ({s.dtype_name})",
                                       f"cannot be described by a TMA tensor map: {broken}",
                                       'use backend="auto" or "cp.async" (any pitch), or pad the rows to 16 bytes')
        choice = choose_backend("cp.async", device=s.device)
        reason = f"TMA cannot describe src ({broken}); using the cp.async path"
        log.info("tmakit.ops.transpose: %s", reason)
    tile_cols = _ROW_BYTES // esize
    dtype = dtype_from_any({1: "uint8", 2: "uint16", 4: "uint32", 8: "uint64"}[esize])
    if choice.backend is Backend.TMA:
        from ..tensormap import describe_tensor

        source = describe_tensor(src, box=(_TILE_ROWS, tile_cols), swizzle="128B", oob_fill="zero")
    else:
        source = pack_box_params(s.ptr, (cols, rows), (esize, cols * esize), (tile_cols, _TILE_ROWS), esize, int(dtype),
                                 swizzle=_SWIZZLE_128B)
    stage = -(-_TILE_ROWS * _ROW_BYTES // 1024) * 1024
    tiles = -(-rows // _TILE_ROWS) * -(-cols // tile_cols)
    grid = max(1, min(tiles, sm_count(s.device) * 8))
    k = kernel("transpose.cu", "tmakit_transpose", choice, s.device)
    k(source, d.ptr, rows, cols, esize, _TILE_ROWS, tile_cols, _SWIZZLE_128B, grid=(grid, 1, 1),
      block=(_THREADS, 1, 1), shared_mem=_STAGES * stage + 1024, stream=stream)
    return TransposeResult(choice, reason)
