"""What an op's plan would decide, without a GPU: ``describe_gemm``, ``describe_attention``, ``describe_transpose``.

Each takes the problem (shapes, dtype) and a target architecture (``arch=``, default sm_90, as a GPU reports
it) and runs the same functions the op's plan runs on a GPU (backend choice, tile plan against the
architecture's shared-memory limit from ``tmakit.device_limits``, tensor maps, the transpose's path decision) on
buffers as a fresh allocation would place them (256-byte aligned, rows padded to 16 bytes where the op needs
it). The answer is the decision the GPU makes for buffers placed like that; the examples print it where there
is no GPU.
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import _driver
from .._sequences import is_sequence
from ..arch import Arch
from ..arrays import ArrayView
from ..backend import Backend, BackendChoice, choose_backend
from ..device import DeviceLimits, device_limits
from ..dtypes import DataType, dtype_from_any
from ..errors import InvalidArgumentError
from ..tensormap.enums import L2Promotion
from . import attention as _attention  # the modules (tmakit.ops.gemm, .attention, .transpose name functions)
from . import gemm as _gemm
from . import transpose as _transpose

_DEFAULT_ARCH = "sm_90"  # as a GPU reports it (the compile target is sm_90a: OpDescription.compile_arch)
_attention, _gemm, _transpose = (sys.modules[f"{__package__}.{m}"] for m in ("attention", "gemm", "transpose"))


def _positive(name: str, value: Any, lo: int = 1, example: int = 4096) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__") or int(value.__index__()) < lo:
        raise InvalidArgumentError(name, value, f"must be an int >= {lo}", f"pass e.g. {name}={example}")
    return int(value.__index__())


def _half(dtype: Any) -> str:
    """bfloat16 or float16 from any name tmakit accepts."""
    name = {DataType.BFLOAT16: "bfloat16", DataType.FLOAT16: "float16"}.get(dtype_from_any(dtype, "dtype"))
    if name is None:
        raise InvalidArgumentError("dtype", dtype, "must be bfloat16 or float16", "pass dtype='bf16' or 'fp16'")
    return name


def _view(shape: tuple[int, ...], itemsize: int, dtype_name: str, pitch_align: int = 1, address: int = 0) -> ArrayView:
    """A buffer as a fresh allocation holds it: row-major, rows padded to ``pitch_align`` bytes, no device."""
    strides, acc = [], itemsize
    for i, dim in enumerate(reversed(shape)):
        strides.append(acc)
        acc *= dim
        if i == 0:
            acc = -(-acc // pitch_align) * pitch_align
    return ArrayView(address, tuple(shape), tuple(reversed(strides)), dtype_name, itemsize, 0)  # "device 0": never
    # touched (maps are described with encode=False for the target arch)


@dataclass(frozen=True)
class OpDescription:
    """What a plan would compile and lay out, decided without a GPU."""

    backend: BackendChoice  # the engine, for which architecture, and why
    limits: DeviceLimits  # the planning table the tile plan was fitted to
    config: Any  # the op's tile plan (GemmConfig, AttentionConfig)
    maps: tuple  # the tensor maps of the TMA kernel (not encoded); () on the cp.async path
    source: str  # the kernel source under cuda_src/
    defines: dict  # the compile-time parameters of that variant

    @property
    def compile_arch(self) -> Arch:
        """The target the op compiles for on such a GPU (its arch-specific variant from sm_90 on)."""
        return self.backend.arch.with_accelerated()


@dataclass(frozen=True)
class GemmDescription(OpDescription):
    @property
    def tile(self) -> tuple[int, int, int]:
        """(BM, BN, BK) of one output tile and one k-step."""
        return self.config.block_m, self.config.block_n, _gemm.BLOCK_K

    @property
    def a_stage_bytes(self) -> int:
        """Bytes of A in one ring stage (B's tile follows it)."""
        return self.config.block_m * _gemm.BLOCK_K * 2

    @property
    def expect_tx(self) -> int:
        """Bytes each CTA's barrier expects per stage: the whole A tile and the whole B tile, whichever part of them
        arrives by a peer's multicast (N-major B in whole 64-column slabs)."""
        return self.a_stage_bytes + self.config.b_rows * 128


def _sm_count(arch: Arch) -> int | None:
    """GPU 0's SM count when it is of ``arch``; else the usual count of the architecture's TMA parts."""
    if _driver.gpu_available():
        limits = device_limits(0)
        if (limits.arch.major, limits.arch.minor) == (arch.major, arch.minor) and limits.sm_count:
            return limits.sm_count
    return 132 if arch.major == 9 else None


def describe_gemm(m: int, n: int, k: int, *, dtype: Any = "bfloat16", b_major: str = "k", out_dtype: str | None = None,
                  arch: Any = _DEFAULT_ARCH, backend: Any = "auto", block_n: int | None = None,
                  stages: int | None = None, cluster: int | None = None, group_m: int = 8,
                  splits: int | None = None, sms: int | None = None, beta: float = 0.0,
                  tail_rows: int | None = None, block_m: int | None = None,
                  multicast: str | None = None, swap_ab: bool | None = None) -> GemmDescription:
    """What ``plan_gemm`` decides for an (m, k) x B -> (m, n) product on ``arch``: backend, tile plan (fitted to the
    architecture's shared memory; BN, the cluster, split-K and ``config.tail_rows`` chosen for ``sms`` SMs), the
    three TMA maps (C's: the fp32 workspace of the splits when split-K is chosen), the kernel variant. ``sms``
    None: GPU 0's count when it is of ``arch``, else 132 on sm_90 (the H100 SXM and the H200). ``beta``
    (checked; the plan is the same for any beta), ``tail_rows``, ``multicast`` and ``swap_ab`` as ``plan_gemm``'s
    (swapped, the A and B maps are of the caller's B and A)."""
    m, n, k = _positive("m", m), _positive("n", n), _positive("k", k)
    if not isinstance(beta, (int, float)) or isinstance(beta, bool) or not math.isfinite(beta):
        raise InvalidArgumentError("beta", beta, "must be a finite number", "pass beta=0.0")
    name = _half(dtype)
    b_kmajor = _gemm._parse_b_major(b_major)
    if out_dtype is not None and out_dtype not in _gemm.OUT_DTYPES:
        raise InvalidArgumentError("out_dtype", out_dtype, f"must be one of {_gemm.OUT_DTYPES}", "leave it out for a's dtype")
    odt = out_dtype or name
    choice = choose_backend(backend, arch=arch)
    limit = _gemm.shared_mem_limit(choice.arch, None)
    cfg_sms = _positive("sms", sms) if sms is not None else _sm_count(choice.arch)
    cfg, _ = _gemm.choose_plan(choice.backend, m, n, k, cfg_sms, limit, bf16=name == "bfloat16", b_kmajor=b_kmajor,
                               out_f32=odt == "float32", block_n=block_n, stages=stages, cluster=cluster,
                               group_m=group_m, splits=splits, block_m=block_m,
                               multicast_a=_gemm.parse_multicast(multicast), tail_rows=tail_rows, swap_ab=swap_ab)
    maps: tuple = ()
    if choice.backend is Backend.TMA:
        a = _view((m, k), 2, name, 16)
        b = _view((n, k) if b_kmajor else (k, n), 2, name, 16)
        c = _view((m, n), 4 if odt == "float32" else 2, odt, 16)
        if cfg.splits > 1:  # the kernel stores into the splits' fp32 workspace; a second kernel sums it into C
            c = _gemm.split_workspace_view(0, cfg.splits, m, n, -(-n // 4) * 4, 0)
        maps = _gemm.gemm_tensor_maps(*((b, a) if cfg.swap_ab else (a, b)), c, cfg, encode=False, arch=choice.arch)
    return GemmDescription(choice, device_limits(arch=choice.arch), cfg, maps, "gemm.cu",
                           {**choice.defines, **cfg.defines})


@dataclass(frozen=True)
class AttentionDescription(OpDescription):
    packed: bool = False  # decode's grouped-query packing (the query heads of a K/V head as one tile's rows)
    kv_splits: int | None = 1  # key splits (flash-decoding) on the architecture's SMs; None where unknown


def describe_attention(batch: int, heads: int, seqlen: int, head_dim: int, *, kv_seqlen: int | None = None,
                       kv_heads: int | None = None, causal: bool = False, dtype: Any = "bfloat16",
                       layout: str = "bhsd", arch: Any = _DEFAULT_ARCH, backend: Any = "auto",
                       block_n: int | None = None, stages: int | None = None, warps: int | None = None,
                       warp_rows: int | None = None, sms: int | None = None,
                       q_slots: int | None = None) -> AttentionDescription:
    """What ``plan_attention`` decides for contiguous q (and k, v of ``kv_seqlen`` keys and ``kv_heads`` heads, a
    divisor of ``heads``) on ``arch``: backend, tile plan and shared memory per stage (fitted to the
    architecture), the four TMA maps, the kernel variant, whether a decode packs its grouped query heads and how
    many ranges the keys are split into on ``sms`` SMs (default: GPU 0's count when it is of ``arch``, else the
    usual count of the architecture's TMA parts, as ``describe_gemm``; None before sm_90). ``q_slots``: as
    ``plan_attention``'s (left out, the plan's rule by its work tiles on those SMs)."""
    b, h, sq = _positive("batch", batch), _positive("heads", heads), _positive("seqlen", seqlen)
    hkv = _positive("kv_heads", kv_heads) if kv_heads is not None else h
    if h % hkv:
        raise InvalidArgumentError("kv_heads", hkv, f"must divide heads ({h}): each K/V head serves heads / kv_heads "
                                   "query heads", f"pass a divisor of {h}")
    d = _positive("head_dim", head_dim)
    sk = _positive("kv_seqlen", kv_seqlen) if kv_seqlen is not None else sq
    sms = _positive("sms", sms, example=132) if sms is not None else None  # a GPU's SM count
    if not isinstance(causal, bool):
        raise InvalidArgumentError("causal", causal, "must be True or False", "pass causal=True for a causal mask")
    name = _half(dtype)
    layout = _attention._parse_layout(layout)
    choice = choose_backend(backend, arch=arch)
    limits = device_limits(arch=choice.arch)
    limit = limits.smem_per_block_optin
    if choice.backend is Backend.TMA:
        sms = sms or _sm_count(choice.arch)
    cfg = _attention.default_config(choice.backend, d, name == "bfloat16", causal=causal, block_n=block_n,
                                    stages=stages, warps=warps, warp_rows=warp_rows, shared_mem_limit=limit,
                                    shared_mem_per_sm=limits.smem_per_sm, sq=sq, bh=b * h if sk == sq else None,
                                    sms=sms, q_slots=q_slots)
    _attention.check_config(cfg, limit)
    work = _attention.TileGeometry(cfg, b, h, hkv, sq, causal)  # the plans' own tile decisions
    packed = work.packed
    splits: int | None = 1
    maps: tuple = ()
    if choice.backend is Backend.TMA:
        splits = work.splits_for(sk, sms) if sms else None
        if sms:
            cfg = work.config = work.q_slots_config(sk, sms)

        def tensor(s: int, heads: int) -> ArrayView:
            return _attention._bhsd_view(_view((b, heads, s, d) if layout == "bhsd" else (b, s, heads, d), 2, name),
                                         layout)

        q = (_attention.query_heads_as_rows(_view((b, h, sq, d) if layout == "bhsd" else (b, sq, h, d), 2, name),
                                            layout, hkv) if packed else tensor(sq, h))
        maps = _attention.attention_tensor_maps(q, tensor(sk, hkv), tensor(sk, hkv), q, cfg, "bhsd", encode=False,
                                                arch=choice.arch)
    return AttentionDescription(choice, limits, cfg, maps, "attention.cu", {**choice.defines, **cfg.defines},
                                packed=packed, kv_splits=splits)


def describe_transpose(shape: Any, dtype: Any, *, arch: Any = _DEFAULT_ARCH, backend: Any = "auto",
                       src_offset: int = 0, dst_offset: int = 0, tile_plan: Any = None, align_sectors: bool = True,
                       l2_promotion: Any = "auto", source_row_classes: bool = True) -> "_transpose.TransposeResult":
    """The ``TransposeResult`` ``plan_transpose`` records for a contiguous ``shape`` (rows, cols) source of
    ``dtype`` and its (cols, rows) destination on ``arch``: the path (TMA, with source row classes or plain dst
    stores where a pitch needs them, or cp.async), the tiles, the sector plan. ``src_offset`` / ``dst_offset``:
    bytes past a 256-byte aligned allocation where each buffer starts (the decisions read the addresses)."""
    dims = tuple(shape) if is_sequence(shape) else ()
    if len(dims) != 2:
        raise InvalidArgumentError("shape", shape, "must be (rows, cols)", "pass e.g. shape=(8192, 8192)")
    rows, cols = _positive("shape[0]", dims[0], 0), _positive("shape[1]", dims[1], 0)
    try:
        np_dtype = np.dtype(dtype)
    except TypeError:
        np_dtype = np.dtype(DataType.parse(dtype, "dtype").numpy_dtype)
    if np_dtype.itemsize not in (1, 2, 4, 8):
        raise InvalidArgumentError("dtype", dtype, "must have 1, 2, 4 or 8-byte elements", "use e.g. 'float16'")
    src_offset, dst_offset = _positive("src_offset", src_offset, 0), _positive("dst_offset", dst_offset, 0)
    if max(rows, cols) > _transpose._MAX_EXTENT:
        raise InvalidArgumentError("shape", shape, f"each dimension must be at most {_transpose._MAX_EXTENT}",
                                   "transpose it in pieces of fewer rows")
    promotion = None if isinstance(l2_promotion, str) and l2_promotion.lower() == "auto" else \
        L2Promotion.parse(l2_promotion, "l2_promotion")
    if tile_plan is not None and not isinstance(tile_plan, _transpose.TilePlan):
        raise InvalidArgumentError("tile_plan", tile_plan, "must be a tmakit.ops.TilePlan or None", "leave it out")
    if not isinstance(source_row_classes, bool) or not isinstance(align_sectors, bool):
        raise InvalidArgumentError("source_row_classes" if not isinstance(source_row_classes, bool) else "align_sectors",
                                   source_row_classes if not isinstance(source_row_classes, bool) else align_sectors,
                                   "must be True or False", "pass True (the default)")
    choice = choose_backend(backend, arch=arch)
    if rows * cols == 0:
        return _transpose.TransposeResult(choice, "empty")
    size = np_dtype.itemsize
    src = _view((rows, cols), size, np_dtype.name, address=src_offset)
    dst = _view((cols, rows), size, np_dtype.name, address=dst_offset)
    limit = device_limits(arch=choice.arch).smem_per_block_optin
    result, _, _ = _transpose.decide_transpose(dst, src, choice, limit, tile_plan=tile_plan, align_sectors=align_sectors,
                                               promotion=promotion, source_row_classes=source_row_classes,
                                               arch=choice.arch)
    return result


__all__ = ["AttentionDescription", "GemmDescription", "OpDescription", "describe_attention", "describe_gemm", "describe_transpose"]
