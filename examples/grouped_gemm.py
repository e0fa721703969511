"""A mixture-of-experts grouped GEMM whose output map is re-pointed on the GPU: tmakit.ops.plan_grouped_gemm.

Tokens routed to G experts are packed in expert order (a: tokens x K), the experts' weights stacked (b: G x N x K),
and the group ends sit in an int32 tensor on the GPU, read by the kernel (no host synchronisation). The kernel walks
every group's tiles; for B the group is one more TMA coordinate, and for C each consumer warpgroup edits a copy of
C's map so its rows end at its group's end (tensormap.replace), publishes it (tensormap.cp_fenceproxy) and stores
through it, so the TMA clips the rows of a tile that belong to the next expert.

It shows the maps, the one replace step per group and the bytes the model says it leaves; with a GPU it builds one
group's map on the GPU beside a host encode, then runs the grouped GEMM, checks it against a float32 product per
expert (--check) and times it beside torch._grouped_mm (--bench; fp16: a loop of torch.matmul).

    python examples/grouped_gemm.py --experts 64 --tokens 32768 --n 2048 --k 7168 --check --bench

Without a GPU (or without torch) it explains, compiles the grouped kernel for sm_90a and exits 0.
"""
from __future__ import annotations

import argparse
import random
import statistics

import tmakit

DTYPES = {"bf16": "bfloat16", "fp16": "float16"}


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"wants a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"wants a positive integer, got {text!r}")
    return value


def shares(rng: random.Random, g: int, tokens: int) -> list[int]:
    """Uneven token counts per expert (skewed: some experts get none), summing to ``tokens``."""
    w = [rng.gammavariate(0.3, 1.0) for _ in range(g)]
    sizes = [int(tokens * x / sum(w)) for x in w]
    sizes[0] += tokens - sum(sizes)
    return sizes


def explain(sizes: list[int], n: int, k: int, dtype: str) -> None:
    tokens, g = sum(sizes), len(sizes)
    a = tmakit.describe_tensor(shape=(tokens, k), dtype=dtype, box=(128, 64), swizzle="128B", encode=False)
    b = tmakit.describe_tensor(shape=(g, n, k), dtype=dtype, box=(1, 256, 64), swizzle="128B", encode=False)
    c = tmakit.describe_tensor(shape=(tokens, n), dtype=dtype, box=(64, 64), swizzle="128B", encode=False)
    for name, tm in (("A (tokens, K)", a), ("B (G, N, K)", b), ("C (tokens, N)", c)):
        print(f"map {name}: shape {tm.shape} box {tm.box_shape} swizzle {tm.swizzle.name}")
    first = next(i for i, s in enumerate(sizes) if s)
    end = sum(sizes[:first + 1])
    group_c = tmakit.describe_tensor(shape=(end, n), dtype=dtype, box=(64, 64), swizzle="128B", encode=False)
    steps = tmakit.tensormap_replace_steps(group_c, since=c)
    print(f"expert {first} ({sizes[first]} tokens, rows {end - sizes[first]}..{end - 1}): C's map with its rows "
          f"ending at {end}, {len(steps)} replace step from the template:")
    for s in steps:
        print(f"  {s.ptx}")
    built = tmakit.apply_tensormap_replace(None, tmakit.tensormap_replace_steps(group_c))
    print(f"  from 128 zero bytes instead: {len(tmakit.tensormap_replace_steps(group_c))} steps, descriptor "
          f"{built[:16].hex()}... (the model's bytes)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--experts", type=positive, default=8, help="G, the experts (default 8)")
    p.add_argument("--tokens", type=positive, default=8192, help="rows routed in all (default 8192)")
    p.add_argument("--n", type=positive, default=4096, help="N, each expert's output features (default 4096)")
    p.add_argument("--k", type=positive, default=4096, help="K, the input features (default 4096)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    p.add_argument("--seed", type=int, default=0, help="the token shares' seed")
    p.add_argument("--check", action="store_true", help="compare with a float32 product per expert")
    p.add_argument("--bench", action="store_true", help="time it beside torch._grouped_mm (fp16: a matmul loop)")
    args = p.parse_args(argv)
    if args.k % 8 or args.n % 8:
        p.error("--n and --k must be multiples of 8 (16-byte rows for the tensor maps)")
    dtype = DTYPES[args.dtype]
    sizes = shares(random.Random(args.seed), args.experts, args.tokens)
    explain(sizes, args.n, args.k, dtype)

    try:
        tmakit.device_limits(0)
        import torch
    except (tmakit.UnsupportedDeviceError, ImportError) as why:
        paper = tmakit.ops.describe_gemm(args.tokens, args.n, args.k, dtype=dtype, arch="sm_90", backend="tma",
                                         cluster=1, block_m=128)  # the grouped kernel's tiles are 128 rows
        code = tmakit.compile_cuda(paper.source, arch=paper.compile_arch,
                                   defines={**paper.defines, "TMAKIT_GEMM_GROUPED": 1})
        print(f"compiled the grouped {paper.config.entry} for {paper.compile_arch}: {len(code.code)} bytes of cubin")
        missing = "no CUDA GPU here" if isinstance(why, tmakit.UnsupportedDeviceError) else "no torch here"
        print(f"grouped_gemm: {missing} (the example's tensors are torch's): explained and compiled; nothing launched")
        return 0

    tdt = getattr(torch, dtype)
    a = torch.randn(args.tokens, args.k, device="cuda", dtype=tdt)
    w = torch.randn(args.experts, args.n, args.k, device="cuda", dtype=tdt)
    offs = torch.tensor(sizes, device="cuda").cumsum(0).to(torch.int32)
    out = torch.full((args.tokens, args.n), float("nan"), device="cuda", dtype=tdt)

    # One expert's C map, built on the GPU by the same steps, beside a host encode of it.
    first = next(i for i, s in enumerate(sizes) if s)
    end = sum(sizes[:first + 1])
    template = tmakit.describe_tensor(out, box=(64, 64), swizzle="128B")
    target = tmakit.describe_tensor(out[:end], box=(64, 64), swizzle="128B")
    built = tmakit.ops.edit_tensormaps([tmakit.ops.TensorMapEdit(target, base=template, coords=(end - 1, 0))])[0]
    same = built.descriptor == target.descriptor and built.matches_model
    print(f"expert {first}'s C map built on the GPU: {'equal to' if same else 'WRONG: not'} the host encode and the "
          f"model; a box loaded through it ({len(built.image)} bytes)")
    if not same:
        return 1

    plan = tmakit.ops.plan_grouped_gemm(a, w, offs, out)
    cfg = plan.config
    print(f"plan: tile 128 x {cfg.block_n} x 64, {cfg.stages} stages, grid {plan.grid}, {cfg.shared_mem // 1024} KiB "
          f"shared memory; {sizes.count(0)} of {args.experts} experts without tokens")
    plan()
    torch.cuda.synchronize()
    if args.check:
        ref = torch.empty(args.tokens, args.n, device="cuda")
        start = 0
        for i, s in enumerate(sizes):
            ref[start:start + s] = a[start:start + s].float() @ w[i].float().T
            start += s
        err = ((out.float() - ref).abs().max() / ref.abs().max()).item()
        tol = 1e-2 if dtype == "bfloat16" else 2e-3
        ok = err <= tol  # NaN compares false: a row left unwritten fails
        print(f"check: max |out - ref| / max |ref| = {err:.3g} ({'ok' if ok else 'FAILED'}, tolerance {tol})")
        if not ok:
            return 1
    if args.bench:
        if dtype == "bfloat16":
            wt = w.transpose(-2, -1)
            name, peer = "torch._grouped_mm", (lambda: torch._grouped_mm(a, wt, offs=offs))
        else:
            starts = [sum(sizes[:i]) for i in range(args.experts)]
            peer_out = torch.empty_like(out)

            def loop():
                for i, (s0, s) in enumerate(zip(starts, sizes)):
                    if s:
                        torch.matmul(a[s0:s0 + s], w[i].T, out=peer_out[s0:s0 + s])
            name, peer = "a loop of torch.matmul", loop

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
        flops = 2.0 * args.tokens * args.n * args.k
        print(f"bench: tmakit {flops / t / 1e9:.0f} TFLOP/s, {name} {flops / tp / 1e9:.0f} TFLOP/s: {tp / t:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
