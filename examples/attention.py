"""Attention forward through tmakit: O = softmax(scale * Q K^T [+ causal]) V on a TMA K/V ring with wgmma (sm_90),
or its cp.async + ldmatrix + mma.sync twin (sm_80+, or --backend cp.async).

What it shows: what the plan decides (``tmakit.ops.describe_attention``): the 4-D (B, H, S, D) tensor maps the
kernel reads Q, K, V and writes O through (whatever the memory layout), the shared-memory budget per ring stage
fitted to the GPU, the compiled kernel; then (with a GPU and torch) a check against torch's
scaled_dot_product_attention and a float32 reference, and TFLOP/s beside SDPA in the same run.
Without a GPU (or without torch) it compiles both backends for sm_90a / sm_80, prints the maps and budgets, and
exits 0.

    python examples/attention.py --batch 4 --heads 16 --seqlen 4096 --dim 128 --causal --check --bench
    python examples/attention.py --heads 32 --kv-heads 8 --check --bench      # grouped-query heads
"""
from __future__ import annotations

import argparse
import math
import statistics

import tmakit


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=None,
                   help="K/V heads, a divisor of --heads (grouped-query attention; 1: multi-query)")
    p.add_argument("--seqlen", type=int, default=4096, help="query and key length")
    p.add_argument("--kv-seqlen", type=int, default=None, help="key length when it differs from --seqlen")
    p.add_argument("--dim", type=int, default=128, choices=(64, 128, 256), help="head dim")
    p.add_argument("--causal", action="store_true", help="top-left aligned causal mask (as SDPA's is_causal)")
    p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"))
    p.add_argument("--layout", default="bhsd", choices=("bhsd", "bshd"))
    p.add_argument("--backend", default="auto", choices=("auto", "tma", "cp.async"))
    p.add_argument("--check", action="store_true", help="compare with SDPA and a float32 reference")
    p.add_argument("--bench", action="store_true", help="time it beside SDPA")
    args = p.parse_args(argv)
    for name in ("batch", "heads", "kv_heads", "seqlen", "kv_seqlen"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            p.error(f"argument --{name.replace('_', '-')}: must be at least 1")
    if args.kv_heads is not None and args.heads % args.kv_heads:
        p.error(f"argument --kv-heads: must divide --heads ({args.heads})")
    return args


def describe(args: argparse.Namespace, arch: object, backend: str) -> tmakit.ops.OpDescription:
    return tmakit.ops.describe_attention(args.batch, args.heads, args.seqlen, args.dim, kv_seqlen=args.kv_seqlen,
                                         kv_heads=args.kv_heads, dtype=args.dtype, layout=args.layout, arch=arch, backend=backend)


def show_plan(plan: tmakit.ops.OpDescription, args: argparse.Namespace) -> None:
    """The variant's tile plan, shared-memory budget, maps and compile (no GPU needed)."""
    cfg = plan.config
    print(f"\n== backend {plan.backend}, compiled for {plan.compile_arch}: {cfg.entry}")
    for line in cfg.budget_lines():
        print("  " + line)
    print(f"  limit per block on {plan.backend.arch}: {plan.limits.smem_per_block_optin / 1024:.1f} KiB")
    for name, tm in zip("QKVO", plan.maps):
        strides = tuple(reversed((tm.dtype.size,) + tm.strides))
        print(f"  {name} map: (B, H, S, D) {tm.shape}, byte strides {strides} ({args.layout}), box {tm.box_shape}, "
              f"swizzle {tm.swizzle.name}, {tm.box_bytes} bytes per box")
    if not plan.maps:
        print("  cp.async path: each thread copies 16-byte chunks into the same 128B-swizzled slabs of 64 columns")
    code = tmakit.compile_cuda(plan.source, arch=plan.compile_arch, defines=plan.defines)
    print(f"  compiled: {len(code.code)} bytes of cubin, entries {code.entry_names()}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        gpu = tmakit.device_limits(0)
        import torch
        import torch.nn.functional as F
    except (tmakit.UnsupportedDeviceError, ImportError) as why:
        for backend, arch in (("tma", "sm_90"), ("cp.async", "sm_80")):
            if args.backend in ("auto", backend):
                show_plan(describe(args, arch, backend), args)
        missing = "no CUDA GPU here" if isinstance(why, tmakit.UnsupportedDeviceError) else "no torch here"
        print(f"\nattention: {missing} (the example's tensors are torch's): compiled and showed the maps and "
              "budgets; nothing launched")
        return 0
    from tmakit.ops import plan_attention

    paper = describe(args, gpu.arch, args.backend)  # what the plan below decides, said without the GPU
    show_plan(paper, args)
    tdt = getattr(torch, args.dtype)
    sq, sk = args.seqlen, args.kv_seqlen or args.seqlen

    hkv = args.kv_heads or args.heads
    gqa = {"enable_gqa": True} if hkv != args.heads else {}  # SDPA's grouped-query heads

    def make(s: int, heads: int):
        shape = (args.batch, heads, s, args.dim) if args.layout == "bhsd" else (args.batch, s, heads, args.dim)
        return torch.randn(shape, device="cuda", dtype=tdt)

    q, k, v = make(sq, args.heads), make(sk, hkv), make(sk, hkv)
    plan = plan_attention(q, k, v, causal=args.causal, layout=args.layout, backend=args.backend)
    print(f"\n{gpu.name}: backend {plan.backend}; grid {plan.grid}, {plan.config.threads} threads, "
          f"{plan.config.shared_mem} bytes of shared memory")
    if plan.config != paper.config:
        print(f"WRONG: describe_attention planned {paper.config}, the GPU's plan is {plan.config}")
        return 1
    out, lse = plan()
    torch.cuda.synchronize()
    ok = True
    if args.check:
        t = (lambda x: x.transpose(1, 2)) if args.layout == "bshd" else (lambda x: x)  # noqa: E731
        qh, kh, vh = t(q), t(k), t(v)
        ref = F.scaled_dot_product_attention(qh, kh, vh, is_causal=args.causal, **gqa)
        kh, vh = kh.repeat_interleave(args.heads // hkv, 1), vh.repeat_interleave(args.heads // hkv, 1)
        s = torch.matmul(qh.float(), kh.float().transpose(-1, -2)) / math.sqrt(args.dim) if sq * sk <= 2**26 else None
        err_sdpa = ((t(out).float() - ref.float()).norm() / ref.float().norm()).item()
        print(f"relative error vs SDPA: {err_sdpa:.3g}")
        ok = err_sdpa < 2e-2 and not torch.isnan(out).any().item()
        if s is not None:
            if args.causal:
                s = s.masked_fill(torch.ones(sq, sk, dtype=torch.bool, device="cuda").triu(1), float("-inf"))
            ref32 = torch.matmul(torch.softmax(s, -1), vh.float())
            err32 = ((t(out).float() - ref32).norm() / ref32.norm()).item()
            lse_err = (lse - torch.logsumexp(s, -1)).abs().max().item()
            print(f"relative error vs float32 reference: {err32:.3g}; lse max abs error {lse_err:.3g}")
            ok = ok and err32 < 2e-2 and lse_err < 1e-2
        else:
            print("(float32 reference skipped: Sq x Sk > 2^26)")
        print("check:", "PASSED" if ok else "FAILED")
    if args.bench:
        sdpa = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=args.causal, **gqa)  # noqa: E731
        if args.layout == "bshd":
            qh, kh, vh = (x.transpose(1, 2) for x in (q, k, v))
            sdpa = lambda: F.scaled_dot_product_attention(qh, kh, vh, is_causal=args.causal, **gqa)  # noqa: E731

        def ms(fn, n=10):  # GPU time per call: events around n calls on the default stream
            with tmakit.timed() as t:
                for _ in range(n):
                    fn()
            return t.ms / n

        for fn in (plan, sdpa):
            ms(fn, 3)
        ours = statistics.median(ms(plan) for _ in range(7))
        theirs = statistics.median(ms(sdpa) for _ in range(7))
        print(f"tmakit {plan.flops / ours / 1e9:.1f} TFLOP/s ({ours:.3f} ms), SDPA {plan.flops / theirs / 1e9:.1f} "
              f"TFLOP/s ({theirs:.3f} ms): {theirs / ours:.2f}x SDPA")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
