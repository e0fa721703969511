"""High-level ops on device arrays with an automatic, recorded backend ("tma" on sm_90, else "cp.async").

Each op has a plan (a prepared launch: ``plan()`` runs it again, ``plan(*buffers)`` on new buffers of the same
geometry) and a one-shot convenience (plan + run once):

- ``plan_load_tiles`` / ``load_tiles``: real box loads -> shared-memory images (to check against ``tmakit.layout``)
- ``plan_copy`` / ``copy``: device-to-device copy through shared memory
- ``plan_transpose`` / ``transpose``: 2-D transpose for 1/2/4/8-byte elements
- ``plan_gemm`` / ``gemm``: C = alpha A @ B (+ beta C) (TMA + wgmma warp-specialized on sm_90, cp.async + mma.sync)
- ``plan_fp8_gemm``: e4m3 A and B with per-128 block scales (DeepGEMM's layout), bf16 out (sm_90)
- ``plan_grouped_gemm`` / ``grouped_gemm``: one GEMM per group of packed rows, group ends read on the device (sm_90)
- ``plan_all_gather_gemm``: concat(row shards on this GPU and its peers) @ B, the shards pulled by TMA under the GEMM
- ``plan_gemm_reduce_scatter``: a partial product reduce-added into each rank's output chunk by TMA (sm_90)
- ``symmetric_views``: one view per rank of a torch symmetric-memory tensor (one process per GPU)
- ``plan_attention`` / ``attention``: attention forward (TMA ring + wgmma on sm_90, cp.async + mma.sync)
- ``plan_attention_varlen`` / ``attention_varlen``: packed sequences of different lengths, maps built per sequence on the GPU
- ``plan_attention_paged`` / ``attention_paged``: K/V from a paged cache through a block table (prefill and decode)
- ``ptx_tile_copy``: the hand-written PTX ring copies (ptx/), run and checked like the rest
- ``edit_tensormaps``: tensor maps built on the GPU with tensormap.replace, and a box loaded through each
- ``describe_gemm``, ``describe_attention``, ``describe_transpose``: what those plans decide, without a GPU

The one-shot ops keep the plans they make, by geometry (``_plan_cache``: a bounded cache; a seen geometry
re-points its plan); ``clear_plan_cache()`` drops them, ``plan_cache_info()`` counts them.
"""
from __future__ import annotations

from ._plan import Plan
from ._plan_cache import clear_plan_cache, plan_cache_info
from .all_gather_gemm import AllGatherGemmPlan, plan_all_gather_gemm
from .attention import AttentionPlan, attention, plan_attention
from .attention_paged import PagedAttentionPlan, attention_paged, plan_attention_paged
from .attention_varlen import VarlenAttentionPlan, attention_varlen, plan_attention_varlen
from .copy import CopyPlan, CopyResult, copy, plan_copy
from .fp8_gemm import Fp8GemmPlan, plan_fp8_gemm
from .gemm import GemmPlan, gemm, plan_gemm
from .gemm_reduce_scatter import GemmReduceScatterPlan, plan_gemm_reduce_scatter
from .grouped_gemm import GroupedGemmPlan, grouped_gemm, plan_grouped_gemm
from .load_tiles import LoadTilesPlan, LoadTilesResult, load_tiles, plan_load_tiles
from .planning import AttentionDescription, GemmDescription, OpDescription, describe_attention, describe_gemm, describe_transpose
from .ptx_tile_copy import PtxTileCopyResult, ptx_tile_copy
from .symmetric import symmetric_views
from .tensormap_edit import TensorMapEdit, TensorMapEditResult, edit_tensormaps
from .transpose import TilePlan, TransposePlan, TransposeResult, plan_transpose, transpose

__all__ = ["AllGatherGemmPlan", "AttentionDescription", "AttentionPlan", "CopyPlan", "CopyResult", "Fp8GemmPlan", "GemmDescription", "GemmPlan", "GemmReduceScatterPlan", "GroupedGemmPlan", "LoadTilesPlan",
           "LoadTilesResult", "OpDescription", "PagedAttentionPlan", "Plan", "PtxTileCopyResult", "TensorMapEdit", "TensorMapEditResult", "TilePlan", "TransposePlan",
           "TransposeResult", "VarlenAttentionPlan", "attention", "attention_paged", "attention_varlen", "clear_plan_cache", "copy", "describe_attention", "describe_gemm",
           "describe_transpose", "edit_tensormaps", "gemm", "grouped_gemm",
           "load_tiles", "plan_all_gather_gemm", "plan_attention", "plan_attention_paged", "plan_attention_varlen", "plan_cache_info", "plan_copy", "plan_fp8_gemm", "plan_gemm", "plan_gemm_reduce_scatter", "plan_grouped_gemm", "plan_load_tiles",
           "plan_transpose", "ptx_tile_copy", "symmetric_views", "transpose"]
