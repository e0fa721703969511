"""Grouped GEMM for mixture-of-experts: tmakit.ops.grouped_gemm beside torch._grouped_mm (bf16) and a Python loop
of torch.matmul (fp16, where torch has no grouped kernel) in the same run. Writes benchmarks/results/grouped_gemm.json
and .md.

A problem: G experts, each with an (N, K) weight (B stacked (G, N, K), K-major, torch.nn.Linear's layout) and an
uneven share of the tokens (some experts get none), the tokens' rows packed in expert order, group ends in an
int32 tensor on the GPU. Each row: medians of CUDA-event timings of back-to-back launches queued behind a GPU spin,
tmakit and the peer interleaved round by round; TFLOP/s = 2 (tokens) N K / time; every output is checked against a
float32 product per group on a NaN-poisoned buffer before it is timed (a wrong one fails the run).

Beside the named problems, a sweep of --sweep random problems (default 40) drawn from --seed: G in {8, 64, 128},
N and K in {2048, 4096, 7168}, tokens log-uniform in [8 G, 65536], shares from a Dirichlet(0.3) draw (skewed,
zeros included); the results give the sweep's minimum, geometric mean and worst five ratios.

    python benchmarks/grouped_gemm.py [--rounds N] [--sweep N] [--seed S] [--out DIR] [--name NAME]
"""
from __future__ import annotations

import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._common import torch_with_gpu, write_results  # noqa: E402
from benchmarks._sweep import (checked_arguments, interleaved_medians, log_uniform, measure_all,  # noqa: E402
                              summary, sweep_arguments)

TOLERANCE = 2e-2
# (label, G, N, K, tokens, dtype)
SHAPES = [
    ("G8 N4096 K7168", 8, 4096, 7168, 16384, "bfloat16"),
    ("G8 N7168 K2048", 8, 7168, 2048, 16384, "bfloat16"),
    ("G64 N2048 K7168", 64, 2048, 7168, 32768, "bfloat16"),
    ("G64 N7168 K2048", 64, 7168, 2048, 32768, "bfloat16"),
    ("G128 N4096 K2048", 128, 4096, 2048, 32768, "bfloat16"),
    ("G128 N2048 K4096 few tokens", 128, 2048, 4096, 4096, "bfloat16"),
    ("G8 N4096 K4096 fp16", 8, 4096, 4096, 16384, "float16"),
    ("G64 N2048 K7168 fp16", 64, 2048, 7168, 32768, "float16"),
]


def shares(rng: random.Random, g: int, tokens: int) -> list[int]:
    """Uneven token counts of ``g`` experts summing to ``tokens`` (a Dirichlet(0.3) draw: skewed, zeros likely)."""
    w = [rng.gammavariate(0.3, 1.0) for _ in range(g)]
    total = sum(w) or 1.0
    sizes = [int(tokens * x / total) for x in w]
    sizes[max(range(g), key=lambda i: w[i])] += tokens - sum(sizes)
    return sizes


def sweep_shapes(seed: int, count: int) -> list[tuple]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        g = rng.choice((8, 64, 128))
        n, k = rng.choice((2048, 4096, 7168)), rng.choice((2048, 4096, 7168))
        tokens = log_uniform(rng, 8 * g, 65536, 8)
        out.append((f"G{g} N{n} K{k} T{tokens}", g, n, k, tokens, "bfloat16"))
    return out


def measure(shape: tuple, rounds: int, rng: random.Random) -> dict:
    import torch

    from tmakit.ops import plan_grouped_gemm

    label, g, n, k, tokens, dtype = shape
    tdt = getattr(torch, dtype)
    sizes = shares(rng, g, tokens)
    offs = torch.tensor(sizes, device="cuda").cumsum(0).to(torch.int32)
    a = torch.randn(tokens, k, device="cuda", dtype=tdt)
    w = torch.randn(g, n, k, device="cuda", dtype=tdt)
    out = torch.full((tokens, n), float("nan"), device="cuda", dtype=tdt)
    plan = plan_grouped_gemm(a, w, offs, out)
    plan()
    ref = torch.empty(tokens, n, device="cuda")
    start = 0
    for i, s in enumerate(sizes):
        ref[start:start + s] = a[start:start + s].float() @ w[i].float().T
        start += s
    torch.cuda.synchronize()
    err = ((out.float() - ref).abs().max() / ref.abs().max()).nan_to_num(float("inf")).item()
    del ref
    if dtype == "bfloat16":
        wt = w.transpose(-2, -1)  # torch._grouped_mm's B: (G, K, N) with K contiguous, the same bytes
        peer_name = "torch._grouped_mm"
        peer = lambda: torch._grouped_mm(a, wt, offs=offs)  # noqa: E731
    else:
        bounds = [(sum(sizes[:i]), sizes[i]) for i in range(g)]
        peer_out = torch.empty(tokens, n, device="cuda", dtype=tdt)
        peer_name = "loop of torch.matmul"

        def peer():
            for i, (s0, s) in enumerate(bounds):
                if s:
                    torch.matmul(a[s0:s0 + s], w[i].T, out=peer_out[s0:s0 + s])
    flops = 2.0 * tokens * n * k
    t, tp = interleaved_medians((plan, peer), torch, max(1, min(50, int(2e12 / flops))), rounds, warmup=3)
    cfg = plan.config
    return {"shape": label, "G": g, "N": n, "K": k, "tokens": tokens, "empty groups": sizes.count(0), "dtype": dtype,
            "tile": f"128x{cfg.block_n}x64 s{cfg.stages}", "peer": peer_name, "ms": round(t, 4),
            "TFLOP/s": round(flops / t / 1e9, 1), "peer TFLOP/s": round(flops / tp / 1e9, 1),
            "x peer": round(tp / t, 3), "max rel err": float(f"{err:.3g}")}


def main(argv: list[str] | None = None) -> int:
    args = checked_arguments(sweep_arguments(__doc__.splitlines()[0], "grouped_gemm", 40), argv)
    torch = torch_with_gpu("benchmarks/grouped_gemm.py", "torch._grouped_mm")
    if torch is None:
        return 0
    sweep = sweep_shapes(args.seed, args.sweep)
    print(f"sweep: {len(sweep)} problems from seed {args.seed}", flush=True)
    rng = random.Random(args.seed)
    rows = measure_all([(s, "named") for s in SHAPES] + [(s, "sweep") for s in sweep],
                       lambda shape: measure(shape, args.rounds, rng), "max rel err", TOLERANCE,
                       ("shape", "tile", "peer", "TFLOP/s", "peer TFLOP/s", "x peer", "max rel err"),
                       "grouped GEMM problems")
    swept = summary(args.seed, [(r["shape"], r["x peer"]) for r in rows if r["set"] == "sweep"])
    print(f"sweep: min {swept['min']}, geomean {swept['geomean']}, worst {swept['worst']}")
    notes = ["FLOPs = 2 tokens N K; medians of interleaved rounds of back-to-back launches after warm-up, queued "
             "behind a GPU spin",
             "bf16 peer: torch._grouped_mm(a, w.transpose(-2, -1), offs=offs) on the same bytes; fp16 peer: a "
             "Python loop of torch.matmul over the non-empty experts",
             f"sweep: {swept['count']} problems from seed {args.seed} (G in {{8, 64, 128}}, N, K in {{2048, 4096, "
             f"7168}}, tokens log-uniform in [8 G, 65536], Dirichlet(0.3) shares): min {swept['min']}, geomean "
             f"{swept['geomean']} x torch._grouped_mm",
             f"ok: max rel err <= {TOLERANCE} against a float32 product per group, on a NaN-poisoned output"]
    write_results(args.name, "Grouped GEMM: tmakit vs torch._grouped_mm", rows, notes, args.out,
                  extra={"sweep": swept})
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
