"""An FP8 GEMM with block scales from Python: tmakit.ops.plan_fp8_gemm (e4m3, DeepGEMM's per-128 scale layout).

A (M, K) and B (N, K) are e4m3; each row of A has a scale per 128 of K and each 128 x 128 block of B one scale. The
kernel reads A and B through uint8 tensor maps (128 of K is one 128-byte swizzled row), loads the tile's 128 row
scales of A beside them by TMA (a (1, 128) box of the scales stored K-block by K-block), multiplies each k-block with
e4m3 k32 wgmma into a fresh fp32 accumulator and adds it into the tile's with the two scales: the block scales apply
exactly, and the tensor cores' fp8 accumulation never spans more than 128 of K.

It shows the maps and the stage layout; with a GPU it quantizes random data, runs the plan, checks it against a
float32 product of the dequantized operands (--check) and times it beside torch._scaled_mm with row-wise scales
(--bench).

    python examples/fp8_gemm.py --shape 8192,8192,8192 --check --bench

Without a GPU (or without torch) it explains, compiles the fp8 kernel for sm_90a and exits 0.
"""
from __future__ import annotations

import argparse
import statistics

import tmakit


def parse_shape(text: str) -> tuple[int, int, int]:
    try:
        m, n, k = (int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shape wants M,N,K (three integers), got {text!r}") from None
    if min(m, n, k) < 1 or k % 16:
        raise argparse.ArgumentTypeError(f"--shape: dimensions at least 1 and K a multiple of 16, got {text!r}")
    return m, n, k


def explain(m: int, n: int, k: int) -> None:
    kb = -(-k // 128)
    a = tmakit.describe_tensor(shape=(m, k), dtype="e4m3", box=(128, 128), swizzle="128B", encode=False)
    cluster = 2 if m > 128 else 1  # plan_fp8_gemm's default: CTA pairs on vertically adjacent tiles share B's
    b = tmakit.describe_tensor(shape=(n, k), dtype="e4m3", box=(128 // cluster, 128), swizzle="128B", encode=False)
    sa = tmakit.describe_tensor(shape=(kb, m), dtype="float32", box=(1, 128), encode=False)
    for name, tm in (("A (M, K) e4m3", a), ("B (N, K) e4m3", b), ("A's scales (K/128, M) fp32", sa)):
        print(f"map {name}: shape {tm.shape} box {tm.box_shape} swizzle {tm.swizzle.name}, {tm.box_bytes} bytes a box")
    if cluster > 1:
        print(f"B: each CTA of a {cluster}-CTA cluster loads {128 // cluster} of the tile's 128 rows and multicasts "
              "them to both, so each stage still receives the whole B tile")
    b_stage = b.box_bytes * cluster
    print(f"a stage: A {a.box_bytes} + B {b_stage} + row scales {sa.box_bytes} bytes (expect_tx "
          f"{a.box_bytes + b_stage + sa.box_bytes}), padded to 33 KiB; B's scale: one float per tile and k-block")
    print("promotion: two fp32 partial accumulators alternate, so one k-block is scaled into the tile's accumulator "
          "while the next one's wgmma run")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", type=parse_shape, default=(4096, 4096, 4096), help="M,N,K (default 4096,4096,4096)")
    p.add_argument("--check", action="store_true", help="compare with a float32 product of the dequantized operands")
    p.add_argument("--bench", action="store_true", help="time it beside torch._scaled_mm (row-wise scales)")
    args = p.parse_args(argv)
    m, n, k = args.shape
    explain(m, n, k)
    try:
        tmakit.device_limits(0)
        import torch
    except (tmakit.UnsupportedDeviceError, ImportError) as why:
        paper = tmakit.ops.describe_gemm(m, n, k, arch="sm_90", backend="tma", block_n=128, cluster=2 if m > 128 else 1,
                                         splits=1, block_m=128)  # the fp8 kernel's tiles are 128 rows
        code = tmakit.compile_cuda(paper.source, arch=paper.compile_arch, defines={**paper.defines, "TMAKIT_GEMM_FP8": 1})
        print(f"compiled the fp8 {paper.config.entry} for {paper.compile_arch}: {len(code.code)} bytes of cubin")
        missing = "no CUDA GPU here" if isinstance(why, tmakit.UnsupportedDeviceError) else "no torch here"
        print(f"fp8_gemm: {missing} (the example's tensors are torch's): explained and compiled; nothing launched")
        return 0

    kb, nb = -(-k // 128), -(-n // 128)
    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn)
    scale_a = torch.empty(kb, -(-m // 4) * 4, device="cuda").T[:m]  # (M, K/128), M contiguous: TMA-aligned columns
    scale_a.copy_(torch.rand(m, kb, device="cuda") + 0.5)
    scale_b = torch.rand(nb, kb, device="cuda") + 0.5
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    plan = tmakit.ops.plan_fp8_gemm(a, b, scale_a, scale_b, out)
    print(f"plan: tile 128 x 128 x 128, {plan.config.stages} stages, cluster {plan.config.cluster}, "
          f"grid {plan.grid}, "
          f"{plan.config.shared_mem // 1024} KiB shared memory")
    plan()
    torch.cuda.synchronize()
    if args.check:
        rows = torch.linspace(0, m - 1, min(m, 512), device="cuda").long()
        a_deq = a[rows].float() * scale_a[rows].repeat_interleave(128, 1)[:, :k]
        b_deq = b.float() * scale_b.repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)[:, :k]
        ref = a_deq @ b_deq.T
        err = ((out[rows].float() - ref).abs().max() / ref.abs().max()).item()
        ok = err <= 1e-2  # NaN compares false: an unwritten tile fails
        print(f"check: max |out - ref| / max |ref| = {err:.3g} ({'ok' if ok else 'FAILED'}, tolerance 0.01)")
        if not ok:
            return 1
    if args.bench:
        row_a, row_b = torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5
        bt = b.T
        peer = lambda: torch._scaled_mm(a, bt, scale_a=row_a, scale_b=row_b, out_dtype=torch.bfloat16)  # noqa: E731

        def ms(fn, reps=20):
            with tmakit.timed() as t:
                for _ in range(reps):
                    fn()
            return t.ms / reps

        for fn in (plan, peer):
            ms(fn, 3)
        ours, theirs = [], []
        for _ in range(7):  # interleaved rounds
            ours.append(ms(plan))
            theirs.append(ms(peer))
        t, tp = statistics.median(ours), statistics.median(theirs)
        print(f"bench: tmakit {plan.flops / t / 1e9:.0f} TFLOP/s, torch._scaled_mm {plan.flops / tp / 1e9:.0f} "
              f"TFLOP/s: {tp / t:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
