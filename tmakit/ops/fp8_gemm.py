"""FP8 GEMM with block scales (DeepGEMM's layout): ``out = (A * scale_a) @ (B * scale_b).T`` in bf16.

``plan = plan_fp8_gemm(a, b, scale_a, scale_b, out=None, *, stages=None, cluster=None, group_m=8, ...)``:

- a: (M, K) e4m3 (``torch.float8_e4m3fn``, or its bytes as uint8), row-major; b: (N, K) e4m3, K contiguous (a
  ``torch.nn.Linear`` weight); K a multiple of 16 (16-byte rows for the tensor maps).
- scale_a: (M, ceil(K / 128)) float32, one scale per row and 128 of K, stored column-major (M contiguous, the
  column pitch a multiple of 16 bytes: DeepGEMM's "TMA-aligned" layout; ``scale_a.T.contiguous().T`` of a padded
  buffer); it reaches shared memory by TMA, one (1, 128) box per stage beside A's and B's.
- scale_b: (ceil(N / 128), ceil(K / 128)) float32, one scale per 128 x 128 block of B, row-major.
- out: (M, N) bf16.

The kernel is cuda_src/gemm.cu built with TMAKIT_GEMM_FP8: the persistent TMA + wgmma kernel with e4m3 k32 wgmma,
128 of K per stage, 128 x 128 tiles, and fp32 promotion: each k-block's product goes to a fresh accumulator, which
is added into the tile's with the row's scale times the block's (so the block scales apply exactly, and the
tensor cores' limited-precision fp8 accumulation never spans more than 128 of K); two such accumulators alternate,
so one block is promoted while the next one's wgmma run. ``cluster`` 2 (the default where A has more than one tile
row) pairs CTAs on vertically adjacent tiles that multicast B's tile (each loads half), halving B's L2 reads.
"""
from __future__ import annotations

from typing import Any

from ..arrays import ArrayView
from ..backend import Backend, choose_backend
from ..errors import InvalidArgumentError, UnsupportedDeviceError
from ..tensormap import describe_tensor
from . import _checks
from ._kernels import kernel, sm_count
from .gemm import (BLOCK_M, L2_PROMOTION, _empty, _rows, check_config, default_config, persistent_grid,
                   shared_mem_limit)

FP8 = ("float8_e4m3fn", "uint8")
SCALE_BLOCK = 128


def _check_inputs(a: Any, b: Any, scale_a: Any, scale_b: Any, out: Any) -> tuple:
    av, bv = _checks.view(a, "a"), _checks.view(b, "b")
    for view, name in ((av, "a"), (bv, "b")):
        if view.dtype_name not in FP8:
            raise InvalidArgumentError(name, f"dtype {view.dtype_name}", "must be float8_e4m3fn (or its bytes as "
                                       "uint8)", "quantize it: (x / scale).to(torch.float8_e4m3fn)")
    if bv.device != av.device:
        raise InvalidArgumentError("b", f"array on device {bv.device}", f"must be on a's device ({av.device})",
                                   "move it to a's device")
    M, K, _ = _rows(av, "a")
    N, Kb, _ = _rows(bv, "b")
    if Kb != K:
        raise InvalidArgumentError("b", f"shape {bv.shape}", f"must be (N, {K}): B stored K-major, as a Linear "
                                   f"weight (a is {av.shape})", "pass b with K contiguous: b.T.contiguous().T")
    kb, nb = -(-K // SCALE_BLOCK), -(-N // SCALE_BLOCK)
    sa = _checks.view(scale_a, "scale_a")
    if sa.dtype_name != "float32" or sa.shape != (M, kb) or sa.device != av.device or (M > 1 and sa.strides[0] != 4) \
            or (kb > 1 and (sa.strides[1] % 16 or sa.strides[1] < M * 4)) or sa.ptr % 16:
        raise InvalidArgumentError("scale_a", f"{sa.dtype_name} array of shape {sa.shape}, byte strides {sa.strides}",
                                   f"must be float32 ({M}, {kb}) stored column-major (M contiguous, columns 16-byte "
                                   "aligned) on a's device: DeepGEMM's TMA-aligned layout",
                                   f"pass torch.empty({kb}, {-(-M // 4) * 4}).T[:{M}] filled with the scales")
    sb = _checks.view(scale_b, "scale_b")
    if sb.dtype_name != "float32" or sb.shape != (nb, kb) or not sb.is_c_contiguous or sb.device != av.device:
        raise InvalidArgumentError("scale_b", f"{sb.dtype_name} array of shape {sb.shape}",
                                   f"must be contiguous float32 ({nb}, {kb}) on a's device: one scale per 128 x 128 "
                                   "block of B", "pass the block scales row-major")
    ov = None
    if out is not None:
        ov = _checks.view(out, "out")
        if ov.shape != (M, N) or ov.dtype_name != "bfloat16" or ov.device != av.device:
            raise InvalidArgumentError("out", f"shape {ov.shape}, dtype {ov.dtype_name}",
                                       f"must be ({M}, {N}) bfloat16 on a's device", "allocate out as (M, N) bf16")
        _rows(ov, "out")
        _checks.refuse_overlap([("out", ov)], [("a", av), ("b", bv), ("scale_a", sa), ("scale_b", sb)])
    return av, bv, sa, sb, ov, (M, N, K)


class Fp8GemmPlan:
    """A prepared FP8 block-scaled GEMM launch: ``plan()`` reruns it; returns the output."""

    def __init__(self, cfg: Any, choice: Any, dims: tuple[int, int, int], out: Any, device: int, stream: Any,
                 checked: bool | str | None):
        self.config, self.backend = cfg, choice
        self.m, self.n, self.k = dims
        self.out, self.device, self._stream, self._checked = out, device, stream, checked
        self._kernel = kernel("gemm.cu", cfg.entry, choice, device, **cfg.defines)

    @property
    def grid(self) -> tuple[int, int, int]:
        return persistent_grid(self.m, self.n, self.config, sm_count(self.device))

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k

    def _bind(self, a: ArrayView, b: ArrayView, sa: ArrayView, sb: ArrayView, c: ArrayView) -> None:
        cfg = self.config
        self._operands = (a, b, sa, sb, c)  # the views own their arrays while the plan lives
        kw = dict(swizzle="128B", oob_fill="zero")
        ta = describe_tensor(a, box=(BLOCK_M, 128), l2_promotion=L2_PROMOTION, **kw)
        tb = describe_tensor(b, box=(cfg.block_n // cfg.cluster, 128), l2_promotion=L2_PROMOTION, **kw)  # a CTA's share
        tc = describe_tensor(c, box=(64, 64), **kw)
        # scale_a as the (K / 128, M) row-major array it is in memory: a box is one k-block's 128 row scales
        kb = -(-self.k // SCALE_BLOCK)
        pitch = sa.strides[1] if kb > 1 else -(-self.m * 4 // 16) * 16  # one row: any 16-byte pitch
        sa_rows = ArrayView(sa.ptr, (kb, self.m), (pitch, 4), "float32", 4, sa.device, sa.owner)
        tsa = describe_tensor(sa_rows, box=(1, BLOCK_M), oob_fill="zero")
        self.maps = (ta, tb, tc, tsa)
        ldc = c.strides[0] // c.itemsize if self.m > 1 else self.n
        args = (ta, tb, tc, c.ptr, self.m, self.n, self.k, ldc, 1.0, 0.0, cfg.group_m, 1, 0, 0, 0, 0, tsa, sb.ptr, kb)
        self._launch = self._kernel.bind(*args, grid=self.grid, block=(cfg.threads, 1, 1), shared_mem=cfg.shared_mem,
                                         stream=self._stream, checked=self._checked, pdl=True,
                                         cluster=(cfg.cluster, 1, 1) if cfg.cluster > 1 else None)

    def __call__(self) -> Any:
        self._launch()
        return self.out


def plan_fp8_gemm(a: Any, b: Any, scale_a: Any, scale_b: Any, out: Any = None, *, stages: int | None = None,
                  cluster: int | None = None, group_m: int = 8, backend: Any = "auto", stream: Any = None,
                  checked: bool | str | None = None) -> Fp8GemmPlan:
    """Check the arguments, compile the fp8 variant and bind one launch (not run)."""
    av, bv, sa, sb, ov, dims = _check_inputs(a, b, scale_a, scale_b, out)
    choice = choose_backend(backend, device=av.device)
    if choice.backend is not Backend.TMA:
        raise UnsupportedDeviceError("e4m3 wgmma and TMA-loaded scales are sm_90", required="sm_90 (backend 'tma')",
                                     actual=choice.arch)
    limit = shared_mem_limit(choice.arch, av.device)
    if cluster is None:
        cluster = 2 if dims[0] > BLOCK_M else 1  # one tile row: nobody to share B with
    cfg = default_config(choice.backend, bf16=True, b_kmajor=True, block_n=128, cluster=cluster, stages=stages,
                         group_m=group_m, shared_mem_limit=limit, splits=1, fp8=True)
    check_config(cfg, limit, dims[2])
    result = out if out is not None else _empty(a, dims[:2], "bfloat16")
    plan = Fp8GemmPlan(cfg, choice, dims, result, av.device, stream, checked)
    plan._bind(av, bv, sa, sb, ov or _checks.view(result, "out"))
    return plan


__all__ = ["Fp8GemmPlan", "plan_fp8_gemm"]
