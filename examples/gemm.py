"""A TMA-fed tensor-core GEMM from Python: C = alpha * A @ B (+ beta * C) with tmakit.ops.plan_gemm.

Builds the tensor maps with describe_tensor, shows them and the wgmma descriptors of one ring stage (which
shared-memory bytes each k16 slice reads), compiles cuda_src/gemm.cu for both engines, launches the plan, checks it
against a float32 reference (--check) and times it beside torch.matmul / cuBLAS (--bench).

    python examples/gemm.py --shape 4096,4096,4096 --dtype bf16 --b-major k --check --bench
    python examples/gemm.py --backend cp.async --check          # the sm_80 twin, forced on sm_90

Without a GPU it compiles both backends, explains the maps and descriptors, and exits 0.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tmakit  # noqa: E402
from tmakit.arrays import ArrayView  # noqa: E402
from tmakit.backend import Backend  # noqa: E402
from tmakit.ops.gemm import BLOCK_K, BLOCK_M, default_config, gemm_tensor_maps  # noqa: E402

DTYPES = {"bf16": "bfloat16", "bfloat16": "bfloat16", "fp16": "float16", "f16": "float16", "float16": "float16"}


def parse_shape(text: str) -> tuple[int, int, int]:
    try:
        m, n, k = (int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shape wants M,N,K (three integers), got {text!r}") from None
    if min(m, n, k) < 1:
        raise argparse.ArgumentTypeError(f"--shape: every dimension must be at least 1, got {text!r}")
    return m, n, k


def explain(m: int, n: int, k: int, dtype: str, b_major: str) -> None:
    """The maps and descriptors of the tma plan, on paper (no GPU needed)."""
    cfg = default_config(Backend.TMA, bf16=dtype == "bfloat16", b_kmajor=b_major == "k")
    pitch = lambda cols: -(-cols // 8) * 8 * 2  # noqa: E731  (16-byte rows)
    a = ArrayView(0, (m, k), (pitch(k), 2), dtype, 2, 0)
    b = ArrayView(0, (n, k) if b_major == "k" else (k, n), (pitch(k) if b_major == "k" else pitch(n), 2), dtype, 2, 0)
    c = ArrayView(0, (m, n), (pitch(n), 2), dtype, 2, 0)
    ta, tb, tc = gemm_tensor_maps(a, b, c, cfg, encode=False)
    print(f"tile plan: {BLOCK_M} x {cfg.block_n} x {BLOCK_K}, {cfg.stages} stages of {cfg.stage_bytes // 1024} KiB, "
          f"cluster {cfg.cluster} (B multicast), {cfg.shared_mem // 1024} KiB shared memory, {cfg.threads} threads")
    for name, tm in (("A", ta), ("B", tb), ("C", tc)):
        print(f"  map {name}: shape {tm.shape} box {tm.box_shape} swizzle {tm.swizzle.name} box_bytes {tm.box_bytes}")
    print(f"  expect_tx per stage and CTA: A box {ta.box_bytes} + B tile {cfg.block_n * BLOCK_K * 2} = "
          f"{ta.box_bytes + cfg.block_n * BLOCK_K * 2} bytes")
    print("wgmma descriptors of stage 0 (stage at shared address 0x0; consumer 0's A rows):")
    for d in tmakit.wgmma_descriptors(ta, "A", "K", stage_address=0):
        print(f"  A k-slice {d.k_slice}: {d}")
    b_at = BLOCK_M * BLOCK_K * 2
    for d in tmakit.wgmma_descriptors(tb, "B", "K" if b_major == "k" else "MN", stage_address=b_at, mn=cfg.block_n):
        print(f"  B k-slice {d.k_slice}: {d}")
    bad = tmakit.check_wgmma_descriptor(ta, "A", "K", [d.value + 6 * d.k_slice for d in tmakit.wgmma_descriptors(ta, "A", "K", stage_address=0)],
                                        stage_address=0)
    print(f"a descriptor advanced by 128 bytes per k-slice instead of 32 is caught before launch:\n  {bad[0]}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", type=parse_shape, default=(4096, 4096, 4096), help="M,N,K (default 4096,4096,4096)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    p.add_argument("--b-major", choices=("k", "n"), default="k", help='"k": b is (N, K); "n": b is (K, N)')
    p.add_argument("--backend", default="auto", help='"auto", "tma" or "cp.async"')
    p.add_argument("--check", action="store_true", help="compare with a float32 product")
    p.add_argument("--bench", action="store_true", help="time it beside torch.matmul (cuBLAS)")
    args = p.parse_args(argv)
    m, n, k = args.shape
    dtype = DTYPES[args.dtype]
    explain(m, n, k, dtype, args.b_major)

    try:
        import torch
        gpu = torch.cuda.is_available()
    except ImportError:
        gpu = False
    if not gpu:
        for backend, arch in ((Backend.TMA, "sm_90a"), (Backend.CP_ASYNC, "sm_80")):
            cfg = default_config(backend, bf16=dtype == "bfloat16", b_kmajor=args.b_major == "k",
                                 shared_mem_limit=232448 if arch == "sm_90a" else 166912)
            code = tmakit.compile_cuda("gemm.cu", arch=arch, defines={**backend.defines, **cfg.defines})
            print(f"compiled {cfg.entry} for {arch}: {len(code.code)} bytes of cubin")
        print("no CUDA GPU here (or no torch): compiled both backends and explained the maps; nothing launched")
        return 0

    tdt = getattr(torch, dtype)
    pad = lambda r, c: torch.randn(r, -(-c // 8) * 8, device="cuda", dtype=tdt)[:, :c]  # noqa: E731
    a = pad(m, k)
    b = pad(n, k) if args.b_major == "k" else pad(k, n)
    c = pad(m, n)
    plan = tmakit.ops.plan_gemm(a, b, c, b_major=args.b_major, backend=args.backend)
    print(f"backend: {plan.backend}; grid {plan.grid}, block {plan.config.threads}")
    plan()
    torch.cuda.synchronize()
    bm = b.T if args.b_major == "k" else b
    if args.check:
        ref = a.float() @ bm.float()
        err = ((c.float() - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()
        tol = 1e-2 if dtype == "bfloat16" else 2e-3
        print(f"check: max |C - ref| / max |ref| = {err:.3g} ({'ok' if err <= tol else 'FAILED'}, tolerance {tol})")
        if err > tol:
            return 1
    if args.bench:
        out = torch.empty(m, n, device="cuda", dtype=tdt)
        cublas = lambda: torch.matmul(a, bm, out=out)  # noqa: E731

        def ms(fn, reps=20):  # GPU time per call: events around reps calls on the default stream
            with tmakit.timed() as t:
                for _ in range(reps):
                    fn()
            return t.ms / reps

        for fn in (plan, cublas):
            ms(fn, 5)
        ours = statistics.median(ms(plan) for _ in range(7))
        theirs = statistics.median(ms(cublas) for _ in range(7))
        f = 2.0 * m * n * k
        print(f"tmakit {f / ours / 1e9:.1f} TFLOP/s, torch.matmul {f / theirs / 1e9:.1f} TFLOP/s "
              f"({theirs / ours:.2f}x cuBLAS)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
