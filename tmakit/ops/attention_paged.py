"""Attention forward over a paged KV cache (``flash_attn_with_kvcache``'s layout), for prefill and decode.

``plan = plan_attention_paged(q, k_cache, v_cache, block_table, seqlens_k, out=None, *, causal=False, ...)``:

- q: (B, Sq, H, D) (decode: Sq = 1), bf16 or fp16, C-contiguous, D = 64, 128 or 256. A decode without a mask
  packs the query heads of each K/V head into one tile's rows (``attention.packs_query_heads``).
- k_cache, v_cache: (pages, page_size, H_kv, D), H_kv dividing H; page_size 16, 32, 64 or 128 keys (at most the
  plan's key block).
- block_table: (B, max_pages) int32, sequence b's i-th page id; seqlens_k: (B,) int32, its keys. Both are read on
  the device (no host synchronisation). Lengths are clamped to the table (max_pages * page_size); a page id
  outside the cache reads as zeros.
- out: q's shape and dtype; lse: (B, H, Sq) float32. Causal masking is top-left aligned (query i sees keys 0..i).

Two launches per call, both TMA (sm_90), from attention.cu built with TMAKIT_ATTN_PAGED: ``tmakit_attention_paged_maps``
builds, per sequence, the maps of its last page (copies of the cache maps whose rows end at its last key:
``tensormap.replace``) into a workspace the plan owns; the attention kernel loads each key block page by page (a
box per page at its id in the table), the last page through those maps and pages past the end out of bounds, so
the TMA fills with zeros whatever stale values the cache holds there.
"""
from __future__ import annotations

import math
from typing import Any

from ..arrays import ArrayView
from ..device_array import DeviceArray
from ..errors import InvalidArgumentError
from . import _checks
from ._kernels import kernel, sm_count
from .attention import (DTYPES, HEAD_DIMS, DeviceMapsPlan, persistent_args, tile_counter, out_like_q,
                        _bhsd_view, _empty_like, _tile_map, lse_buffer, query_heads_as_rows, tma_plan_config)

PAGE_SIZES = (16, 32, 64, 128)


def _check_inputs(q: Any, k: Any, v: Any, table: Any, lens: Any, out: Any) -> tuple:
    qv, kv, vv = (_checks.view(a, n) for a, n in ((q, "q"), (k, "k_cache"), (v, "v_cache")))
    for view, name in ((qv, "q"), (kv, "k_cache"), (vv, "v_cache")):
        if len(view.shape) != 4:
            raise InvalidArgumentError(name, f"shape {view.shape}", "must be 4-D: q (B, Sq, H, D), the caches "
                                       "(pages, page_size, H_kv, D)", "reshape it")
        _checks.require_contiguous(view, name)
        if view.dtype_name not in DTYPES or view.dtype_name != qv.dtype_name:
            raise InvalidArgumentError(name, f"dtype {view.dtype_name}", "must be bfloat16 or float16, q and the "
                                       "caches alike", "convert them to one 16-bit dtype")
        if view.device != qv.device:
            raise InvalidArgumentError(name, f"array on device {view.device}", f"must be on q's device ({qv.device})",
                                       "move it to q's device")
    b, sq, h, d = qv.shape
    pages, page_size, hk, dk = kv.shape
    if d not in HEAD_DIMS or dk != d or hk < 1 or h % hk or vv.shape != kv.shape or min(b, sq, pages) < 1:
        raise InvalidArgumentError("k_cache", f"shape {kv.shape} (q {qv.shape}, v_cache {vv.shape})",
                                   f"must be (pages, page_size, H_kv, {d}) with H_kv dividing q's {h} heads, v_cache "
                                   f"alike, and a head dim in {HEAD_DIMS}", "pass caches of q's head dim")
    if page_size not in PAGE_SIZES:
        raise InvalidArgumentError("k_cache", f"page size {page_size}", f"must be one of {PAGE_SIZES} (whole 8-row "
                                   "swizzle groups, a divisor of the key block)", "allocate the cache with 16-key pages")
    tv, lv = _checks.view(table, "block_table"), _checks.view(lens, "seqlens_k")
    if tv.dtype_name != "int32" or len(tv.shape) != 2 or tv.shape[0] != b or not tv.is_c_contiguous or \
            tv.device != qv.device:
        raise InvalidArgumentError("block_table", f"{tv.dtype_name} array of shape {tv.shape}",
                                   f"must be contiguous int32 of shape ({b}, max_pages) on q's device",
                                   "pass the page ids of each sequence, padded with any value")
    if lv.dtype_name != "int32" or lv.shape != (b,) or not lv.is_c_contiguous or lv.device != qv.device:
        raise InvalidArgumentError("seqlens_k", f"{lv.dtype_name} array of shape {lv.shape}",
                                   f"must be contiguous int32 of shape ({b},) on q's device", "pass each sequence's keys")
    ov = out_like_q(out, qv)
    if ov is not None and ov.device != qv.device:
        raise InvalidArgumentError("out", f"array on device {ov.device}", f"must be on q's device ({qv.device})",
                                   "allocate out like q")
    return qv, kv, vv, tv, lv, ov, (b, sq, h, hk, d, pages, page_size, tv.shape[1])


class PagedAttentionPlan(DeviceMapsPlan):
    """A prepared paged-cache attention: ``plan()`` reruns both launches (with whatever the block table and the
    lengths hold now); returns ``(out, lse)``."""

    def __init__(self, cfg: Any, choice: Any, dims: tuple, causal: bool, scale: float, out: Any, lse: Any,
                 device: int, stream: Any, checked: bool | str | None):
        self.config, self.backend, self.causal, self.scale = cfg, choice, causal, scale
        (self.batch, self.sq, self.heads, self.kv_heads, self.head_dim, self.pages, self.page_size,
         self.max_pages) = dims
        self.out, self.lse, self.device, self._stream, self._checked = out, lse, device, stream, checked
        cfg = self.config = self.q_slots_config(self.max_pages * self.page_size, sm_count(device))
        defines = {**cfg.defines, "TMAKIT_ATTN_PAGED": 1}
        self._kernel = kernel("attention.cu", cfg.entry, choice, device, **defines)
        self._maps_kernel = kernel("attention.cu", "tmakit_attention_paged_maps", choice, device, **defines)
        # 2 maps a sequence, then the order the launch walks the sequences in (B ints, the longest first)
        self._maps_workspace = DeviceArray.zeros((2 * self.batch + -(-self.batch // 32), 128), "uint8",
                                                 device=device)
        self._counter = tile_counter(device)
        # split by the table's capacity: a sequence of fewer key blocks than splits leaves some splits empty (their
        # lse -inf: weight 0 in the combine)
        self.split_keys(self.max_pages * self.page_size,
                        lambda entry: kernel("attention.cu", entry, choice, device, **defines))

    def _bind(self, q: ArrayView, k: ArrayView, v: ArrayView, table: ArrayView, lens: ArrayView, o: ArrayView) -> None:
        cfg = self.config
        self._operands = (q, k, v, table, lens, o)  # the views own their arrays while the plan lives
        # packed decode (``packs_query_heads``): q and out as (B, H_kv, H / H_kv, D), the query heads as rows
        q4, o4 = ((query_heads_as_rows(x, "bshd", self.kv_heads) for x in (q, o)) if self.packed
                  else (_bhsd_view(x, "bshd") for x in (q, o)))
        qm = _tile_map(q4, cfg.block_m, oob_fill="zero")
        om = _tile_map(o4, 64, oob_fill="zero")
        # the caches as (pages, H_kv, page_size, D): one box is one page of one head's 64-column slab
        km = _tile_map(_bhsd_view(k, "bshd"), self.page_size, oob_fill="zero")
        vm = _tile_map(_bhsd_view(v, "bshd"), self.page_size, oob_fill="zero")
        self.maps = (qm, km, vm, om)
        self._build = self._maps_kernel.bind(km, vm, lens.ptr, self.page_size, self.max_pages,
                                             self._maps_workspace.ptr,
                                             grid=(self.batch, 1, 1), block=(32, 1, 1), stream=self._stream,
                                             pdl=True, checked=False)  # waits before it reads or writes
        lse_ptr = _checks.view(self.lse, "lse").ptr
        heads, rows, group = self.kernel_geometry()
        args = (*self.maps, lse_ptr, heads, rows, self.max_pages * self.page_size,
                self.scale * math.log2(math.e), int(self.causal), group, 0, lens.ptr,
                self._maps_workspace.ptr, table.ptr, self.page_size, self.max_pages, self.pages,
                *persistent_args(self.tiles, self._counter), *self.split_args())
        self._combine = self.bind_combine(o4, lse_ptr, self._stream)
        # pdl: its launch and prologue overlap the maps kernel, whose output it waits for (griddepcontrol.wait)
        self._launch = self._kernel.bind(*args, grid=self.grid, block=(cfg.threads, 1, 1), shared_mem=cfg.shared_mem,
                                         stream=self._stream, pdl=True, checked=self._checked)


def plan_attention_paged(q: Any, k_cache: Any, v_cache: Any, block_table: Any, seqlens_k: Any, out: Any = None, *,
                         causal: bool = False, scale: float | None = None, lse: Any = None, backend: Any = "auto",
                         stages: int | None = None, q_slots: int | None = None, stream: Any = None,
                         checked: bool | str | None = None) -> PagedAttentionPlan:
    """Check the arguments, compile the variant and bind both launches (not run). ``q_slots``: as
    ``plan_attention``'s."""
    qv, kv, vv, tv, lv, ov, dims = _check_inputs(q, k_cache, v_cache, block_table, seqlens_k, out)
    b, sq, h, hk, d, pages, page_size, max_pages = dims
    views = [(qv, "q"), (kv, "k_cache"), (vv, "v_cache")] + ([(ov, "out")] if ov is not None else [])
    choice, cfg, scale = tma_plan_config("paged attention reads the cache page by page through TMA boxes and "
                                         "device-built maps", causal, scale, d, views, backend, stages=stages,
                                         sq=sq, q_slots=q_slots)
    if cfg.block_n % page_size:
        raise InvalidArgumentError("k_cache", f"page size {page_size}", f"must divide the key block of head dim {d} "
                                   f"({cfg.block_n} keys)", f"use pages of at most {cfg.block_n} keys")
    if b > 65535 or h > 65535:
        raise InvalidArgumentError("block_table", f"shape {tv.shape}", "needs at most 65535 sequences and heads",
                                   "split the batch")
    if max_pages * page_size >= 2**31:
        raise InvalidArgumentError("block_table", f"shape {tv.shape}", f"addresses {max_pages * page_size} keys a "
                                   "sequence; at most 2^31 - 1 fit the kernel's int coordinates", "use fewer pages")
    out = out if out is not None else _empty_like(q, qv.shape, False)
    lse, lsev = lse_buffer(q, lse, (b, h, sq), qv.device)
    ov = ov or _checks.view(out, "out")
    _checks.refuse_overlap([("out", ov), ("lse", lsev)], [("q", qv), ("k_cache", kv), ("v_cache", vv),
                                                          ("block_table", tv), ("seqlens_k", lv)])
    plan = PagedAttentionPlan(cfg, choice, dims, causal, scale, out, lse, qv.device, stream, checked)
    plan._bind(qv, kv, vv, tv, lv, ov)
    return plan


def attention_paged(q: Any, k_cache: Any, v_cache: Any, block_table: Any, seqlens_k: Any, out: Any = None,
                    **options: Any) -> tuple[Any, Any]:
    """Plan and run once; returns ``(out, lse)``. Synchronous: the plan's map workspace is freed after the launch."""
    plan = plan_attention_paged(q, k_cache, v_cache, block_table, seqlens_k, out, **options)
    result = plan()
    plan.close()  # waits for the launches
    return result


__all__ = ["PAGE_SIZES", "PagedAttentionPlan", "attention_paged", "plan_attention_paged"]
