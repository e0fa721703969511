"""A TMA-fed tensor-core GEMM from Python: C = alpha * A @ B (+ beta * C) with tmakit.ops.plan_gemm.

Shows what the plan decides (``tmakit.ops.describe_gemm``: the tile plan fitted to the GPU's shared memory, the
three tensor maps), the wgmma descriptors of one ring stage (which shared-memory bytes each k16 slice reads) and
a wrong one caught before launch, the compiled kernel, then (with a GPU and torch) the plan launched, checked
against a float32 product (--check) and timed beside torch.matmul / cuBLAS (--bench).

    python examples/gemm.py --shape 4096,4096,4096 --dtype bf16 --b-major k --check --bench
    python examples/gemm.py --backend cp.async --check          # the sm_80 twin, forced on sm_90

Without a GPU (or without torch) it explains and compiles both backends for sm_90a / sm_80 and exits 0.
"""
from __future__ import annotations

import argparse
import statistics
import sys

import tmakit

DTYPES = {"bf16": "bfloat16", "bfloat16": "bfloat16", "fp16": "float16", "f16": "float16", "float16": "float16"}


def parse_shape(text: str) -> tuple[int, int, int]:
    try:
        m, n, k = (int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shape wants M,N,K (three integers), got {text!r}") from None
    if min(m, n, k) < 1:
        raise argparse.ArgumentTypeError(f"--shape: every dimension must be at least 1, got {text!r}")
    return m, n, k


def explain(plan: tmakit.ops.GemmDescription) -> None:
    """The maps and descriptors of a tma plan, on paper (no GPU needed)."""
    cfg = plan.config
    bm, bn, bk = plan.tile
    shared = "A" if cfg.multicast_a else "B"
    print(f"tile plan on {plan.backend.arch}: {bm} x {bn} x {bk}, {cfg.stages} stages of {cfg.stage_bytes // 1024} KiB, "
          f"{f'clusters of {cfg.cluster} ({shared} multicast)' if cfg.cluster > 1 else 'no cluster'}, {cfg.shared_mem // 1024} KiB shared memory of "
          f"{plan.limits.smem_per_block_optin // 1024} KiB, {cfg.threads} threads")
    if not plan.maps:
        print("  cp.async path: no tensor maps; every thread copies 16-byte chunks into the same swizzled stages")
        return
    a_map, b_map, c_map = plan.maps
    if cfg.swap_ab:  # C^T = B^T A^T: the caller's B fills the kernel's A stages, A its B stages; C stored transposed
        print("  swapped operands: the tiles are C^T's (rows along N, block_n along M); the kernel's A is the "
              "caller's B, its B the caller's A")
    names = ("A (the caller's B)", "B (the caller's A)") if cfg.swap_ab else ("A", "B")
    for name, tm in ((names[0], a_map), (names[1], b_map), ("C", c_map)):
        print(f"  map {name}: shape {tm.shape} box {tm.box_shape} swizzle {tm.swizzle.name} box_bytes {tm.box_bytes}")
    a_bytes = plan.a_stage_bytes  # the whole A tile: one box, or where the pair shares A two (its own and its peer's)
    print(f"  expect_tx per stage and CTA: A tile {a_bytes} + B tile {plan.expect_tx - a_bytes} = {plan.expect_tx} bytes"
          f"{' (A in two boxes, one from each CTA of the pair)' if cfg.multicast_a else ''}")
    print("wgmma descriptors of stage 0 (stage at shared address 0x0; consumer 0's A rows):")
    a_major = "K" if cfg.a_kmajor else "MN"
    for d in tmakit.wgmma_descriptors(a_map, "A", a_major, stage_address=0):
        print(f"  A k-slice {d.k_slice}: {d}")
    b_major = "K" if cfg.b_kmajor else "MN"
    for d in tmakit.wgmma_descriptors(b_map, "B", b_major, stage_address=plan.a_stage_bytes, mn=cfg.block_n):
        print(f"  B k-slice {d.k_slice}: {d}")
    wrong = [d.value + 6 * d.k_slice for d in tmakit.wgmma_descriptors(a_map, "A", a_major, stage_address=0)]
    bad = tmakit.check_wgmma_descriptor(a_map, "A", a_major, wrong, stage_address=0)
    print(f"a descriptor 96 bytes further on each k-slice (K-major: 128 a slice, not 32) is caught before launch:"
          f"\n  {bad[0]}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", type=parse_shape, default=(4096, 4096, 4096), help="M,N,K (default 4096,4096,4096)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    p.add_argument("--b-major", choices=("k", "n"), default="k", help='"k": b is (N, K); "n": b is (K, N)')
    p.add_argument("--backend", default="auto", choices=("auto", "tma", "cp.async"))
    p.add_argument("--check", action="store_true", help="compare with a float32 product")
    p.add_argument("--bench", action="store_true", help="time it beside torch.matmul (cuBLAS)")
    args = p.parse_args(argv)
    m, n, k = args.shape
    dtype = DTYPES[args.dtype]

    try:
        gpu = tmakit.device_limits(0)
        import torch
    except (tmakit.UnsupportedDeviceError, ImportError) as why:
        backends = ("tma", "cp.async") if args.backend == "auto" else (args.backend,)
        for backend, arch in (("tma", "sm_90"), ("cp.async", "sm_80")):
            if backend not in backends:
                continue
            plan = tmakit.ops.describe_gemm(m, n, k, dtype=dtype, b_major=args.b_major, arch=arch, backend=backend)
            explain(plan)
            code = tmakit.compile_cuda(plan.source, arch=plan.compile_arch, defines=plan.defines)
            print(f"compiled {plan.config.entry} for {plan.compile_arch}: {len(code.code)} bytes of cubin\n")
        missing = "no CUDA GPU here" if isinstance(why, tmakit.UnsupportedDeviceError) else "no torch here"
        print(f"gemm: {missing} (the example's tensors are torch's): explained and compiled; nothing launched")
        return 0

    tdt = getattr(torch, dtype)
    pad = lambda r, c: torch.randn(r, -(-c // 8) * 8, device="cuda", dtype=tdt)[:, :c]  # noqa: E731
    a = pad(m, k)
    b = pad(n, k) if args.b_major == "k" else pad(k, n)
    c = pad(m, n)
    c.fill_(float("nan"))  # poisoned: a tile the kernel leaves unwritten fails the check
    plan = tmakit.ops.plan_gemm(a, b, c, b_major=args.b_major, backend=args.backend)
    print(f"{gpu.name}: backend {plan.backend}; grid {plan.grid}, block {plan.config.threads}")
    # what describe_gemm says without a GPU is what the plan decided here (where the planning table knows the arch)
    paper = tmakit.ops.describe_gemm(m, n, k, dtype=dtype, b_major=args.b_major, arch=gpu.arch, backend=args.backend)
    explain(paper)
    if paper.config != plan.config:
        print(f"WRONG: describe_gemm planned {paper.config}, the GPU's plan is {plan.config}")
        return 1
    plan()
    torch.cuda.synchronize()
    bm = b.T if args.b_major == "k" else b
    if args.check:
        ref = a.float() @ bm.float()
        err = ((c.float() - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()
        tol = 1e-2 if dtype == "bfloat16" else 2e-3
        ok = err <= tol  # NaN compares false: an unwritten tile fails
        print(f"check: max |C - ref| / max |ref| = {err:.3g} ({'ok' if ok else 'FAILED'}, tolerance {tol})")
        if not ok:
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
