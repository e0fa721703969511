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
    python examples/attention.py --varlen --batch 16 --seqlen 4096 --check --bench
    python examples/attention.py --paged 16 --batch 64 --seqlen 4096 --kv-heads 4 --check --bench  # decode
"""
from __future__ import annotations

import argparse
import math
import random
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
    p.add_argument("--varlen", action="store_true",
                   help="--batch sequences of random lengths up to --seqlen, packed (plan_attention_varlen)")
    p.add_argument("--paged", type=int, default=None, metavar="PAGE",
                   help="K/V in a paged cache of PAGE-key pages (16, 32, 64 or 128) read through a block table "
                        "(plan_attention_paged): decode, or causal prefill with --causal")
    p.add_argument("--check", action="store_true", help="compare with SDPA and a float32 reference")
    p.add_argument("--bench", action="store_true", help="time it beside SDPA")
    args = p.parse_args(argv)
    for name in ("batch", "heads", "kv_heads", "seqlen", "kv_seqlen"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            p.error(f"argument --{name.replace('_', '-')}: must be at least 1")
    if args.kv_heads is not None and args.heads % args.kv_heads:
        p.error(f"argument --kv-heads: must divide --heads ({args.heads})")
    if args.paged is not None and args.paged not in (16, 32, 64, 128):
        p.error("argument --paged: must be 16, 32, 64 or 128 keys a page")
    if args.varlen and args.paged is not None:
        p.error("argument --paged: not with --varlen (one mode at a time)")
    if (args.varlen or args.paged) and args.layout != "bhsd":
        p.error("--varlen and --paged take their own layouts: (rows, heads, D) packed; (pages, page, heads, D)")
    return args


def packed(args: argparse.Namespace, torch, F) -> int:
    """--varlen / --paged: sequences of different lengths, their maps built on the GPU, checked against SDPA per
    sequence and timed beside a loop of it."""
    rng = random.Random(0)
    hkv = args.kv_heads or args.heads
    tdt = getattr(torch, args.dtype)
    gqa = {"enable_gqa": True} if hkv != args.heads else {}
    lens = [rng.randint(max(1, args.seqlen // 4), args.seqlen) for _ in range(args.batch)]
    if args.varlen:
        total = sum(lens)
        q = torch.randn(total, args.heads, args.dim, device="cuda", dtype=tdt)
        k, v = (torch.randn(total, hkv, args.dim, device="cuda", dtype=tdt) for _ in range(2))
        cu = torch.tensor([0] + lens, device="cuda").cumsum(0).to(torch.int32)
        plan = tmakit.ops.plan_attention_varlen(q, k, v, cu, cu, max(lens), causal=args.causal)
        starts = [0] + cu.tolist()[1:-1]
        seqs = [(q[s:s + n].transpose(0, 1)[None], k[s:s + n].transpose(0, 1)[None], v[s:s + n].transpose(0, 1)[None])
                for s, n in zip(starts, lens)]
        outputs = lambda o: [o[s:s + n].transpose(0, 1)[None] for s, n in zip(starts, lens)]  # noqa: E731
        causal = args.causal
        print(f"varlen: {args.batch} sequences of {min(lens)}..{max(lens)} rows packed ({total}); each sequence's "
              "q/k/v/o maps end at its last row, built on the GPU before the attention launch")
    else:
        page = args.paged
        need = [-(-n // page) for n in lens]
        ids = list(range(sum(need)))
        rng.shuffle(ids)
        k_cache, v_cache = (torch.randn(len(ids), page, hkv, args.dim, device="cuda", dtype=tdt) for _ in range(2))
        table = torch.zeros(args.batch, max(need), dtype=torch.int32)
        for s, n in enumerate(need):
            table[s, :n] = torch.tensor([ids.pop() for _ in range(n)], dtype=torch.int32)
        causal = args.causal
        sq = max(lens) if causal else 1
        q = torch.randn(args.batch, sq, args.heads, args.dim, device="cuda", dtype=tdt)
        plan = tmakit.ops.plan_attention_paged(q, k_cache, v_cache, table.cuda(),
                                               torch.tensor(lens, dtype=torch.int32, device="cuda"), causal=causal)
        seqs = []
        for s, n in enumerate(lens):
            pids = table[s, :need[s]].long().cuda()
            ks, vs = (c[pids].reshape(-1, hkv, args.dim)[:n].transpose(0, 1)[None] for c in (k_cache, v_cache))
            seqs.append((q[s:s + 1].transpose(1, 2), ks, vs))
        outputs = lambda o: [o[s:s + 1].transpose(1, 2) for s in range(args.batch)]  # noqa: E731
        print(f"paged: {args.batch} sequences of {min(lens)}..{max(lens)} keys in {len(table.flatten())} table slots "
              f"of {page}-key pages; {'causal prefill' if causal else 'decode'}; each sequence's last page read "
              "through a map built on the GPU")
    out, _ = plan()
    torch.cuda.synchronize()
    ok = True
    if args.check:
        refs = [F.scaled_dot_product_attention(qs, ks, vs, is_causal=causal, **gqa) for qs, ks, vs in seqs]
        num = sum((g.float() - r.float()).norm().item() ** 2 for g, r in zip(outputs(out), refs))
        den = sum(r.float().norm().item() ** 2 for r in refs)
        err = math.sqrt(num / den)
        ok = err < 2e-2
        print(f"relative error vs SDPA per sequence: {err:.3g}")
        print("check:", "PASSED" if ok else "FAILED")
    if args.bench:
        loop = lambda: [F.scaled_dot_product_attention(qs, ks, vs, is_causal=causal, **gqa)  # noqa: E731
                        for qs, ks, vs in seqs]

        def ms(fn, n=10):
            with tmakit.timed() as t:
                for _ in range(n):
                    fn()
            return t.ms / n

        for fn in (plan, loop):
            ms(fn, 3)
        ours = statistics.median(ms(plan) for _ in range(7))
        theirs = statistics.median(ms(loop) for _ in range(7))
        print(f"tmakit {ours:.3f} ms, a loop of SDPA {theirs:.3f} ms: {theirs / ours:.2f}x")
    return 0 if ok else 1


def describe(args: argparse.Namespace, arch: object, backend: str) -> tmakit.ops.AttentionDescription:
    return tmakit.ops.describe_attention(args.batch, args.heads, args.seqlen, args.dim, kv_seqlen=args.kv_seqlen,
                                         kv_heads=args.kv_heads, causal=args.causal, dtype=args.dtype,
                                         layout=args.layout, arch=arch, backend=backend)


def show_plan(plan: tmakit.ops.AttentionDescription, args: argparse.Namespace) -> None:
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
    if plan.packed:
        print(f"  decode: the {args.heads // args.kv_heads} query heads of each K/V head are one tile's rows "
              "(q and out seen as (B, H_kv, group, D))")
    if plan.kv_splits != 1:
        print(f"  keys split into {plan.kv_splits or 'a per-GPU number of'} ranges (few tiles, few query rows), "
              "then combined by tmakit_attention_combine")
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
            if args.backend in ("auto", backend) and not (args.varlen or args.paged):
                show_plan(describe(args, arch, backend), args)
        if args.varlen or args.paged:
            paper = describe(args, "sm_90", "tma")
            mode = "TMAKIT_ATTN_VARLEN" if args.varlen else "TMAKIT_ATTN_PAGED"
            code = tmakit.compile_cuda(paper.source, arch=paper.compile_arch, defines={**paper.defines, mode: 1})
            print(f"{'varlen' if args.varlen else 'paged'}: compiled {code.entry_names()} for {paper.compile_arch} "
                  f"({mode}); a first kernel builds each sequence's maps on the GPU (tensormap.replace)")
        missing = "no CUDA GPU here" if isinstance(why, tmakit.UnsupportedDeviceError) else "no torch here"
        print(f"\nattention: {missing} (the example's tensors are torch's): compiled and showed the maps and "
              "budgets; nothing launched")
        return 0
    from tmakit.ops import plan_attention

    if args.varlen or args.paged:
        return packed(args, torch, F)
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
