"""Grouped GEMM for mixture-of-experts: ``out[rows of g] = alpha * a[rows of g] @ B_g`` for every group g.

``plan = plan_grouped_gemm(a, b, offs, out=None, *, b_major="k", alpha=1.0, out_dtype=None, ...)``:

- a: (M, K), the groups' rows packed one after another (row-major, bf16 or fp16).
- b: (G, N, K) with ``b_major="k"`` (each expert's weight as ``torch.nn.Linear`` stores it) or (G, K, N) with
  ``b_major="n"``; one map of rank 3 whose outermost coordinate is the group.
- offs: (G,) int32 on the device, each group's row end (cumulative sizes, ``torch._grouped_mm``'s ``offs``). The
  kernel reads it (no host synchronisation, so the plan replays under a CUDA graph and with new offsets in
  place); unchecked values are clamped: each end to [the previous end, M], a decreasing end an empty group.
- out: (M, N) in a's dtype or float32 (``out_dtype``); rows past the last end are not written.

The kernel is cuda_src/gemm.cu built with TMAKIT_GEMM_GROUPED: the dense persistent kernel whose tile sequence runs
over every group's tiles (their count summed on the device from ``offs``), B's loads one coordinate deeper, and a C
map per group made on the device: each consumer warpgroup edits a copy of C's map so its rows end at the group's
end (``tensormap.replace``, the TMA then clips the tile's rows that belong to the next group), publishes it to its
slot of a workspace the plan owns (``tensormap.cp_fenceproxy``) and stores through it. TMA only (sm_90).
"""
from __future__ import annotations

import math
from typing import Any

from ..arrays import ArrayView
from ..backend import Backend, choose_backend
from ..device_array import DeviceArray
from ..errors import InvalidArgumentError, UnsupportedDeviceError
from ..tensormap import describe_tensor
from . import _checks
from ._kernels import kernel, sm_count
from ._plan import wait_for_stream
from ._plan_cache import cached
from .gemm import (BLOCK_K, BLOCK_M, DTYPES, L2_PROMOTION, NO_MAP, OUT_DTYPES, _empty, _parse_b_major, _rows,
                   check_config, default_config, shared_mem_limit)

MAX_GROUPS = 1024


def _check_b(bv: ArrayView, b_kmajor: bool, K: int, dtype: str) -> tuple[int, int]:
    if bv.dtype_name != dtype:
        raise InvalidArgumentError("b", f"dtype {bv.dtype_name}", f"must match a's dtype ({dtype})",
                                   "convert a and b to one dtype")
    if len(bv.shape) != 3 or min(bv.shape) < 1:
        raise InvalidArgumentError("b", f"shape {bv.shape}", "must be 3-D: (G, N, K) with b_major='k', (G, K, N) "
                                   "with b_major='n'", "stack the experts' weights: torch.stack(weights)")
    G, r, c = bv.shape
    N, Kb = (r, c) if b_kmajor else (c, r)
    if Kb != K:
        want = f"(G, N, {K})" if b_kmajor else f"(G, {K}, N)"
        raise InvalidArgumentError("b", f"shape {bv.shape}", f"must be {want} with b_major="
                                   f"{'k' if b_kmajor else 'n'!r} (a has K = {K})",
                                   "pass the other b_major, or b transposed in its last two dimensions")
    if bv.strides[2] != bv.itemsize or bv.strides[1] % 16 or bv.strides[0] % 16 or bv.ptr % 16 or \
            bv.strides[1] < c * bv.itemsize or bv.strides[0] < r * bv.strides[1]:
        raise InvalidArgumentError("b", f"byte strides {bv.strides}", "must be row-major with 16-byte multiples "
                                   "between rows and between groups (TMA's rule for a tensor map)",
                                   "pass b.contiguous()")
    return G, N


class GroupedGemmPlan:
    """A prepared grouped GEMM launch. ``plan()`` reruns it (with whatever ``offs`` holds now); ``plan(a, b, offs,
    out)`` re-points it to new buffers of the same shapes. Returns the output."""

    def __init__(self, cfg: Any, choice: Any, dims: tuple[int, int, int, int], alpha: float, out: Any, device: int,
                 stream: Any, checked: bool | str | None):
        self.config, self.backend = cfg, choice
        self.m, self.n, self.k, self.groups = dims
        self.alpha, self.out, self.device, self._stream, self._checked = alpha, out, device, stream, checked
        self._kernel = kernel("gemm.cu", cfg.entry, choice, device, **cfg.defines)
        self._c_maps = DeviceArray.zeros((2 * self.grid[0], 128), "uint8", device=device)  # one per warpgroup
        self.maps: tuple = ()

    @property
    def grid(self) -> tuple[int, int, int]:
        # The groups' sizes are on the device: at most ceil(M / 128) + G tile rows in all.
        bound = (-(-self.m // BLOCK_M) + self.groups) * -(-self.n // self.config.block_n)
        return (max(1, min(bound, sm_count(self.device))), 1, 1)

    def flops(self, rows: int | None = None) -> float:
        """2 * rows * N * K for ``rows`` grouped rows (default: all M)."""
        return 2.0 * (self.m if rows is None else rows) * self.n * self.k

    def _bind(self, a: ArrayView, b: ArrayView, offs: ArrayView, c: ArrayView) -> None:
        cfg = self.config
        self._operands = (a, b, offs, c)  # the views own their arrays while the plan lives
        kw = dict(swizzle="128B", oob_fill="zero")
        box_b = (1, cfg.block_n, BLOCK_K) if cfg.b_kmajor else (1, BLOCK_K, 64)
        self.maps = (describe_tensor(a, box=(BLOCK_M, BLOCK_K), l2_promotion=L2_PROMOTION, **kw),
                     describe_tensor(b, box=box_b, l2_promotion=L2_PROMOTION, **kw),
                     describe_tensor(c, box=(64, 128 // c.itemsize), **kw))
        ldc = c.strides[0] // c.itemsize if self.m > 1 else self.n
        args = (*self.maps, c.ptr, self.m, self.n, self.k, ldc, float(self.alpha), 0.0, cfg.group_m, 1, 0,
                offs.ptr, self.groups, self._c_maps.ptr, NO_MAP, 0, 0)
        self._launch = self._kernel.bind(*args, grid=self.grid, block=(cfg.threads, 1, 1), shared_mem=cfg.shared_mem,
                                         stream=self._stream, checked=self._checked, pdl=True)

    def __call__(self, a: Any = None, b: Any = None, offs: Any = None, out: Any = None) -> Any:
        if a is not None or b is not None or offs is not None or out is not None:
            if a is None or b is None or offs is None:
                raise InvalidArgumentError("a, b, offs", "partly given", "re-pointing a plan needs a, b and offs "
                                           "(and out)", "call plan() for the same buffers or plan(a, b, offs[, out])")
            out_dtype = "float32" if self.config.out_f32 else None
            av, bv, ov, cv, dims = _check_inputs(a, b, offs, out, self.config.b_kmajor, out_dtype)
            if dims != (self.m, self.n, self.k, self.groups) or (av.dtype_name == "bfloat16") != self.config.bf16 \
                    or av.device != self.device:
                raise InvalidArgumentError("a", f"shape {av.shape} ({av.dtype_name}) on device {av.device}, b "
                                           f"{bv.shape}", "must have the geometry and device the plan was made for",
                                           "make a new plan with plan_grouped_gemm")
            plan_out = "float32" if self.config.out_f32 else av.dtype_name
            if cv is not None and cv.dtype_name != plan_out:  # the kernel was compiled for one output type
                raise InvalidArgumentError("out", f"dtype {cv.dtype_name}", f"must be the plan's output dtype "
                                           f"({plan_out})", "make a new plan with plan_grouped_gemm for it")
            self.out = out if out is not None else _empty(a, (self.m, self.n), out_dtype or av.dtype_name)
            self._bind(av, bv, ov, cv or _checks.view(self.out, "out"))
        self._launch()
        return self.out

    def close(self) -> None:
        """Free the map workspace once the plan's launches are done (the stream is synchronised first)."""
        wait_for_stream(self._stream)
        self._c_maps.close()


def _check_inputs(a: Any, b: Any, offs: Any, out: Any, b_kmajor: bool, out_dtype: str | None) -> tuple:
    av = _checks.view(a, "a")
    if av.dtype_name not in DTYPES:
        raise InvalidArgumentError("a", f"dtype {av.dtype_name}", "must be bfloat16 or float16",
                                   "convert it (tensor.to(torch.bfloat16))")
    M, K, _ = _rows(av, "a")
    bv = _checks.view(b, "b")
    if bv.device != av.device:
        raise InvalidArgumentError("b", f"array on device {bv.device}", f"must be on a's device ({av.device})",
                                   "move it to a's device")
    G, N = _check_b(bv, b_kmajor, K, av.dtype_name)
    ov = _checks.view(offs, "offs")
    if ov.dtype_name != "int32" or ov.shape != (G,) or (G > 1 and ov.strides[0] != 4) or ov.device != av.device:
        raise InvalidArgumentError("offs", f"{ov.dtype_name} array of shape {ov.shape} on device {ov.device}",
                                   f"must be int32 of shape ({G},) (one row end per group of b), contiguous, on a's "
                                   f"device ({av.device})", "pass torch.cumsum(sizes, 0, dtype=torch.int32)")
    if G > MAX_GROUPS:
        raise InvalidArgumentError("b", f"{G} groups", f"must be at most {MAX_GROUPS} (the groups' tables live in "
                                   "shared memory)", "split the groups into several calls")
    cv = None
    if out is not None:
        cv = _checks.view(out, "out")
        want = out_dtype or cv.dtype_name
        if cv.shape != (M, N) or cv.dtype_name != want or cv.dtype_name not in OUT_DTYPES or (
                cv.dtype_name != "float32" and cv.dtype_name != av.dtype_name) or cv.device != av.device:
            raise InvalidArgumentError("out", f"shape {cv.shape}, dtype {cv.dtype_name}, device {cv.device}",
                                       f"must be ({M}, {N}) in a's dtype ({av.dtype_name}) or float32, on a's device",
                                       "allocate out as (M, N)")
        _rows(cv, "out")
        _checks.refuse_overlap([("out", cv)], [("a", av), ("b", bv), ("offs", ov)])
    return av, bv, ov, cv, (M, N, K, G)


def plan_grouped_gemm(a: Any, b: Any, offs: Any, out: Any = None, *, b_major: str = "k", alpha: float = 1.0,
                      out_dtype: str | None = None, block_n: int | None = None, stages: int | None = None,
                      group_m: int = 8, backend: Any = "auto", stream: Any = None,
                      checked: bool | str | None = None) -> GroupedGemmPlan:
    """Check the arguments, compile the grouped variant and bind one launch (not run). ``block_n`` left out is
    chosen for the whole of M by ``choose_tile``; ``checked=True``: the hang doctor's bounded waits."""
    b_kmajor = _parse_b_major(b_major)
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or not math.isfinite(alpha):
        raise InvalidArgumentError("alpha", alpha, "must be a finite number", "pass alpha=1.0")
    if out_dtype is not None and out_dtype not in OUT_DTYPES:
        raise InvalidArgumentError("out_dtype", out_dtype, f"must be one of {OUT_DTYPES}", "leave it out for a's dtype")
    av, bv, ov, cv, dims = _check_inputs(a, b, offs, out, b_kmajor, out_dtype)
    M, N, K, G = dims
    choice = choose_backend(backend, device=av.device)
    if choice.backend is not Backend.TMA:
        raise UnsupportedDeviceError("the grouped GEMM re-points its output map on the device (tensormap.replace)",
                                     required="sm_90 (backend 'tma')", actual=choice.arch)
    odt = out_dtype or (cv.dtype_name if cv is not None else av.dtype_name)
    limit = shared_mem_limit(choice.arch, av.device)
    cfg = default_config(choice.backend, bf16=av.dtype_name == "bfloat16", b_kmajor=b_kmajor,
                         out_f32=odt == "float32", block_n=block_n, stages=stages, cluster=1, group_m=group_m,
                         shared_mem_limit=limit, m=M, n=N, sms=sm_count(av.device), splits=1, groups=G)
    check_config(cfg, limit, K)
    result = out if out is not None else _empty(a, (M, N), odt)
    plan = GroupedGemmPlan(cfg, choice, dims, float(alpha), result, av.device, stream, checked)
    plan._bind(av, bv, ov, cv or _checks.view(result, "out"))
    return plan


def grouped_gemm(a: Any, b: Any, offs: Any, out: Any = None, **options: Any) -> Any:
    """Plan and run once; returns the output (asynchronous on the plan's stream). A geometry seen before re-points
    the plan made then (``tmakit.ops._plan_cache``), which also keeps its map workspace alive while the launch runs."""
    rest = {k: v for k, v in options.items() if k != "stream"}
    return cached("grouped_gemm", ("a", "b", "offs", "out"), (a, b, offs, out), options.get("stream"), rest,
                  lambda: plan_grouped_gemm(a, b, offs, out, **options), lambda plan, views: plan(a, b, offs, out))


__all__ = ["GroupedGemmPlan", "MAX_GROUPS", "grouped_gemm", "plan_grouped_gemm"]
