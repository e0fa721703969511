"""High-level ops on device arrays with an automatic, recorded backend ("tma" on sm_90, else "cp.async").

- ``load_tiles``: real box loads -> shared-memory images (to check against ``tmakit.layout``)
- ``copy``: device-to-device copy through shared memory
- ``transpose``: 2-D transpose for 1/2/4/8-byte elements
- ``attention`` / ``plan_attention``: attention forward (TMA ring + wgmma on sm_90, cp.async + mma.sync)
- ``gemm`` / ``plan_gemm``: C = alpha A @ B (+ beta C) (TMA + wgmma warp-specialized on sm_90, cp.async + mma.sync)
- ``ptx_tile_copy``: the hand-written PTX ring copies (ptx/), run and checked like the rest
"""
from __future__ import annotations

from .attention import AttentionPlan, attention, plan_attention
from .copy import CopyResult, copy
from .gemm import GemmPlan, gemm, plan_gemm
from .load_tiles import LoadTilesResult, load_tiles
from .ptx_tile_copy import PtxTileCopyResult, ptx_tile_copy
from .transpose import TransposeResult, transpose

__all__ = ["AttentionPlan", "attention", "plan_attention", "CopyResult", "GemmPlan", "gemm", "plan_gemm", "LoadTilesResult", "PtxTileCopyResult", "TransposeResult", "copy", "load_tiles", "ptx_tile_copy",
           "transpose"]
