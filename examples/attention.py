"""Attention forward through tmakit: O = softmax(scale * Q K^T [+ causal]) V on a TMA K/V ring with wgmma (sm_90),
or its cp.async + ldmatrix + mma.sync twin (sm_80+, or --backend cp.async).

What it shows: the 4-D (B, H, S, D) tensor maps the kernel reads Q, K, V and writes O through (whatever the memory
layout), the shared-memory budget per ring stage, the compiled kernel, a check against torch's
scaled_dot_product_attention and a float32 reference, and TFLOP/s beside SDPA in the same run.
Without a GPU it compiles both backends, prints the maps and budgets, and exits 0.

    python examples/attention.py --batch 4 --heads 16 --seqlen 4096 --dim 128 --causal --check --bench
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tmakit  # noqa: E402
from tmakit.backend import Backend  # noqa: E402

attention_module = __import__("importlib").import_module("tmakit.ops.attention")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--seqlen", type=int, default=4096, help="query and key length")
    p.add_argument("--kv-seqlen", type=int, default=None, help="key length when it differs from --seqlen")
    p.add_argument("--dim", type=int, default=128, choices=(64, 128), help="head dim")
    p.add_argument("--causal", action="store_true", help="top-left aligned causal mask (as SDPA's is_causal)")
    p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"))
    p.add_argument("--layout", default="bhsd", choices=("bhsd", "bshd"))
    p.add_argument("--backend", default="auto", choices=("auto", "tma", "cp.async"))
    p.add_argument("--check", action="store_true", help="compare with SDPA and a float32 reference")
    p.add_argument("--bench", action="store_true", help="time it beside SDPA")
    args = p.parse_args(argv)
    for name in ("batch", "heads", "seqlen"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1")
    return args


def show_plan(backend: Backend, args: argparse.Namespace, arch: str) -> None:
    """The variant's tile plan, shared-memory budget, maps and compile, for `arch` (no GPU needed)."""
    limit = attention_module.shared_mem_limit(tmakit.Arch.parse(arch), None)
    cfg = attention_module.default_config(backend, args.dim, args.dtype == "bfloat16", shared_mem_limit=limit)
    print(f"\n== backend {backend.value}, compiled for {arch}: {cfg.entry}")
    for line in cfg.budget_lines():
        print("  " + line)
    print(f"  limit per block on {arch}: {limit / 1024:.1f} KiB")
    sk = args.kv_seqlen or args.seqlen
    if backend is Backend.TMA:
        for name, s, rows in (("Q", args.seqlen, cfg.block_m), ("K", sk, cfg.block_n), ("V", sk, cfg.block_n),
                              ("O", args.seqlen, cfg.block_m // 2)):
            shape = (args.batch, args.heads, s, args.dim)
            el = 2
            if args.layout == "bhsd":
                strides = (args.heads * s * args.dim * el, s * args.dim * el, args.dim * el, el)
            else:
                strides = (s * args.heads * args.dim * el, args.dim * el, args.heads * args.dim * el, el)
            tm = tmakit.describe_tensor(shape=shape, dtype=args.dtype, strides=strides, box=(1, 1, rows, 64),
                                        swizzle="128B", encode=False)
            print(f"  {name} map: (B, H, S, D) {shape}, byte strides {strides} ({args.layout}), box {tm.box_shape}, "
                  f"swizzle {tm.swizzle.short}, {tm.box_bytes} bytes per box")
    else:
        print("  cp.async path: each thread copies 16-byte chunks into the same 128B-swizzled slabs of 64 columns")
    code = tmakit.compile_cuda("attention.cu", arch=arch, defines={**backend.defines, **cfg.defines})
    print(f"  compiled: {len(code.code)} bytes of cubin, entries {code.entry_names()}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from tmakit import _driver

    if not _driver.gpu_available():
        for backend, arch in ((Backend.TMA, "sm_90a"), (Backend.CP_ASYNC, "sm_80")):
            show_plan(backend, args, arch)
        print("\nno CUDA GPU here: compiled both backends and showed the maps and budgets; nothing launched")
        return 0
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("this example uses torch for its tensors and the SDPA peer; install torch to run it")
        return 0
    from tmakit.ops import plan_attention

    choice = tmakit.choose_backend(args.backend)
    show_plan(choice.backend, args, choice.arch.with_accelerated().sm if choice.backend is Backend.TMA else "sm_80")
    tdt = getattr(torch, args.dtype)
    sq, sk = args.seqlen, args.kv_seqlen or args.seqlen

    def make(s: int):
        shape = (args.batch, args.heads, s, args.dim) if args.layout == "bhsd" else (args.batch, s, args.heads, args.dim)
        return torch.randn(shape, device="cuda", dtype=tdt)

    q, k, v = make(sq), make(sk), make(sk)
    plan = plan_attention(q, k, v, causal=args.causal, layout=args.layout, backend=args.backend)
    print(f"\nbackend: {plan.backend}; grid {plan.grid}, {plan.config.threads} threads, "
          f"{plan.config.shared_mem} bytes of shared memory")
    out, lse = plan()
    torch.cuda.synchronize()
    ok = True
    if args.check:
        t = (lambda x: x.transpose(1, 2)) if args.layout == "bshd" else (lambda x: x)  # noqa: E731
        qh, kh, vh = t(q), t(k), t(v)
        ref = F.scaled_dot_product_attention(qh, kh, vh, is_causal=args.causal)
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
        sdpa = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=args.causal)  # noqa: E731
        if args.layout == "bshd":
            qh, kh, vh = (x.transpose(1, 2) for x in (q, k, v))
            sdpa = lambda: F.scaled_dot_product_attention(qh, kh, vh, is_causal=args.causal)  # noqa: E731

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
