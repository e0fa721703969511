"""Attention forward over packed sequences of different lengths (``flash_attn_varlen_func``'s layout).

``plan = plan_attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, out=None, *, causal=False, ...)``:

- q: (total_q, H, D), the sequences' query rows packed one after another; k, v: (total_k, H_kv, D), H_kv dividing H
  (grouped-query heads as in ``plan_attention``); bf16 or fp16, C-contiguous, D = 64, 128 or 256.
- cu_seqlens_q / cu_seqlens_k: (B + 1,) int32 on the GPU, the sequences' starting rows and the total last; read on
  the device (no host synchronisation). ``max_seqlen_q``: at least the longest query sequence (it sizes the grid;
  the rows of a longer one are not computed).
- out: q's shape and dtype; lse: (H, total_q) float32. Causal masking is top-left aligned within each sequence.

Two launches per call, both TMA (sm_90), from attention.cu built with TMAKIT_ATTN_VARLEN: ``tmakit_attention_varlen_maps`` builds each sequence's four tensor maps on
the device (copies of the packed tensors' maps whose sequence dimension ends at the sequence's last row:
``tensormap.replace``, ``tensormap.cp_fenceproxy``) into a workspace the plan owns, so the TMA fills past a
sequence's end and clips the output's stores there; then the attention kernel, one block per (query block, head,
sequence), reads its sequence's maps (``fence.proxy.tensormap::generic.acquire``) and leaves at once when its query
block starts past the sequence.
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
                        _empty_like, attention_tensor_maps, lse_buffer, tma_plan_config)


def _packed(v: ArrayView, name: str) -> ArrayView:
    """A (rows, heads, D) tensor as the (1, rows, heads, D) "bshd" view the attention maps describe."""
    if len(v.shape) != 3:
        raise InvalidArgumentError(name, f"shape {v.shape}", "must be 3-D (total rows, heads, head dim)",
                                   "pack the sequences' rows: torch.cat(per_sequence, 0)")
    _checks.require_contiguous(v, name)
    rows, heads, d = v.shape
    return ArrayView(v.ptr, (1, rows, heads, d), (rows * v.strides[0],) + tuple(v.strides), v.dtype_name, v.itemsize,
                     v.device, v.owner)


def _check_inputs(q: Any, k: Any, v: Any, cu_q: Any, cu_k: Any, out: Any) -> tuple:
    qv, kv, vv = (_checks.view(a, n) for a, n in ((q, "q"), (k, "k"), (v, "v")))
    for view, name in ((qv, "q"), (kv, "k"), (vv, "v")):
        if view.dtype_name not in DTYPES or view.dtype_name != qv.dtype_name:
            raise InvalidArgumentError(name, f"dtype {view.dtype_name}", "must be bfloat16 or float16, q, k and v alike",
                                       "convert them to one 16-bit dtype")
        if view.device != qv.device:
            raise InvalidArgumentError(name, f"array on device {view.device}", f"must be on q's device ({qv.device})",
                                       "move it to q's device")
    q4, k4, v4 = _packed(qv, "q"), _packed(kv, "k"), _packed(vv, "v")
    _, tq, h, d = q4.shape
    _, tk, hk, dk = k4.shape
    if d not in HEAD_DIMS or dk != d or hk < 1 or h % hk or v4.shape != k4.shape or min(tq, tk, h) < 1:
        raise InvalidArgumentError("k", f"shape {kv.shape} (q {qv.shape}, v {vv.shape})",
                                   f"must be (total_k, H_kv, {d}) with H_kv dividing q's {h} heads, v alike, and a head "
                                   f"dim in {HEAD_DIMS}", "pass k and v packed like q, with H % H_kv == 0")
    cus = []
    for arr, name in ((cu_q, "cu_seqlens_q"), (cu_k, "cu_seqlens_k")):
        cv = _checks.view(arr, name)
        if cv.dtype_name != "int32" or len(cv.shape) != 1 or cv.shape[0] < 2 or cv.device != qv.device or (
                cv.strides[0] != 4):
            raise InvalidArgumentError(name, f"{cv.dtype_name} array of shape {cv.shape} on device {cv.device}",
                                       "must be contiguous int32 of shape (B + 1,) on q's device: each sequence's "
                                       "first row, then the total", "pass torch.tensor([0, *lengths]).cumsum(0).int()")
        cus.append(cv)
    if cus[0].shape != cus[1].shape:
        raise InvalidArgumentError("cu_seqlens_k", f"shape {cus[1].shape}", f"must match cu_seqlens_q's {cus[0].shape} "
                                   "(one entry per sequence and the total)", "pass both for the same batch")
    ov = out_like_q(out, qv)
    if ov is not None and ov.device != qv.device:
        raise InvalidArgumentError("out", f"array on device {ov.device}", f"must be on q's device ({qv.device})",
                                   "allocate out like q")
    return qv, kv, vv, cus[0], cus[1], ov, (cus[0].shape[0] - 1, h, hk, tq, tk, d)


class VarlenAttentionPlan(DeviceMapsPlan):
    """A prepared variable-length attention: ``plan()`` reruns both launches (with whatever cu_seqlens hold now);
    returns ``(out, lse)``."""

    def __init__(self, cfg: Any, choice: Any, dims: tuple, max_seqlen_q: int, causal: bool, scale: float, out: Any,
                 lse: Any, device: int, stream: Any, checked: bool | str | None):
        self.config, self.backend, self.causal, self.scale = cfg, choice, causal, scale
        self.batch, self.heads, self.kv_heads, self.total_q, self.total_k, self.head_dim = dims
        self.max_seqlen_q, self.out, self.lse, self.device, self._stream = max_seqlen_q, out, lse, device, stream
        cfg = self.config = self.q_slots_config(None, sm_count(device))
        defines = {**cfg.defines, "TMAKIT_ATTN_VARLEN": 1}
        self._kernel = kernel("attention.cu", cfg.entry, choice, device, **defines)
        self._maps_kernel = kernel("attention.cu", "tmakit_attention_varlen_maps", choice, device, **defines)
        self._maps_workspace = DeviceArray.zeros((4 * self.batch, 128), "uint8", device=device)
        self._counter = tile_counter(device)
        self._checked = checked

    @property
    def _query_rows(self) -> int:
        return self.max_seqlen_q  # the work tiles cover the longest sequence

    @property
    def packed(self) -> bool:
        return False  # packed sequences' query rows are not one per sequence: no grouped-query packing

    def _bind(self, q: ArrayView, k: ArrayView, v: ArrayView, cu_q: ArrayView, cu_k: ArrayView, o: ArrayView) -> None:
        cfg = self.config
        self._operands = (q, k, v, cu_q, cu_k, o)  # the views own their arrays while the plan lives
        views = [_packed(x, n) for x, n in ((q, "q"), (k, "k"), (v, "v"), (o, "out"))]
        self.maps = attention_tensor_maps(*views, cfg, "bshd")
        lse_ptr = _checks.view(self.lse, "lse").ptr
        self._build = self._maps_kernel.bind(*self.maps, cu_q.ptr, cu_k.ptr, self.total_q, self.total_k,
                                             self._maps_workspace.ptr, grid=(self.batch, 1, 1), block=(32, 1, 1),
                                             stream=self._stream, pdl=True,
                                             checked=False)  # waits before it reads or writes
        args = (*self.maps, lse_ptr, self.heads, self.total_q, self.total_k, self.scale * math.log2(math.e),
                int(self.causal), self.heads // self.kv_heads, cu_q.ptr, cu_k.ptr, self._maps_workspace.ptr,
                0, 0, 0, 0, *persistent_args(self.tiles, self._counter), 1, 0, 0)  # no key splits
        # pdl: its launch and prologue overlap the maps kernel, whose output it waits for (griddepcontrol.wait)
        self._launch = self._kernel.bind(*args, grid=self.grid, block=(cfg.threads, 1, 1), shared_mem=cfg.shared_mem,
                                         stream=self._stream, pdl=True, checked=self._checked)


def plan_attention_varlen(q: Any, k: Any, v: Any, cu_seqlens_q: Any, cu_seqlens_k: Any, max_seqlen_q: int,
                          out: Any = None, *, causal: bool = False, scale: float | None = None, lse: Any = None,
                          backend: Any = "auto", block_n: int | None = None, stages: int | None = None,
                          q_slots: int | None = None, stream: Any = None,
                          checked: bool | str | None = None) -> VarlenAttentionPlan:
    """Check the arguments, compile the variant and bind both launches (not run). ``q_slots``: as
    ``plan_attention``'s."""
    qv, kv, vv, cq, ck, ov, dims = _check_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k, out)
    batch, h, hk, tq, tk, d = dims
    if isinstance(max_seqlen_q, bool) or not isinstance(max_seqlen_q, int) or not 1 <= max_seqlen_q <= tq:
        raise InvalidArgumentError("max_seqlen_q", max_seqlen_q, f"must be an int in [1, {tq}] (q's rows), at least "
                                   "the longest query sequence", "pass max(lengths) of the query sequences")
    views = [(qv, "q"), (kv, "k"), (vv, "v")] + ([(ov, "out")] if ov is not None else [])
    choice, cfg, scale = tma_plan_config("variable-length attention builds each sequence's tensor maps on the device "
                                         "(tensormap.replace)", causal, scale, d, views, backend, block_n=block_n,
                                         stages=stages, sq=max_seqlen_q, q_slots=q_slots)
    if batch > 65535 or h > 65535:
        raise InvalidArgumentError("cu_seqlens_q", f"{batch} sequences, {h} heads", "must be at most 65535 each",
                                   "split the batch")
    out = out if out is not None else _empty_like(q, qv.shape, False)
    lse, lv = lse_buffer(q, lse, (h, tq), qv.device)
    ov = ov or _checks.view(out, "out")
    _checks.refuse_overlap([("out", ov), ("lse", lv)], [("q", qv), ("k", kv), ("v", vv), ("cu_seqlens_q", cq),
                                                        ("cu_seqlens_k", ck)])
    plan = VarlenAttentionPlan(cfg, choice, dims, max_seqlen_q, causal, scale, out, lse, qv.device, stream,
                               checked)
    plan._bind(qv, kv, vv, cq, ck, ov)
    return plan


def attention_varlen(q: Any, k: Any, v: Any, cu_seqlens_q: Any, cu_seqlens_k: Any, max_seqlen_q: int,
                     out: Any = None, **options: Any) -> tuple[Any, Any]:
    """Plan and run once; returns ``(out, lse)``. Synchronous: the plan's map workspace is freed after the launch."""
    plan = plan_attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, out, **options)
    result = plan()
    plan.close()  # waits for the launches
    return result


__all__ = ["VarlenAttentionPlan", "attention_varlen", "plan_attention_varlen"]
