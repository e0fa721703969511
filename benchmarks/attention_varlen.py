"""Variable-length attention: tmakit.ops.attention_varlen beside a loop of per-sequence SDPA calls and beside
tmakit's dense kernel at equal total tokens, in the same run. Writes benchmarks/results/attention_varlen.json / .md.

A problem: B sequences of uneven lengths (log-normal around a mean, at least 16 rows) packed one after another,
H heads (K/V with H or H / 4 heads), D 128, causal or not, bf16. Each row: medians of CUDA-event timings of
back-to-back calls queued behind a GPU spin, the three interleaved round by round; TFLOP/s = 4 H D sum(Lq Lk)
(causal: the sum of each row's visible keys) / time; "x loop": the loop of torch SDPA calls' time over ours;
"x dense": our TFLOP/s over the dense kernel's on B sequences of the mean length (the same total tokens); "fill vs
dense": the share of the (query, key) pairs the tiles compute that are in use, over the dense problem's (from the
lengths alone: what "x dense" would be at equal speed per computed tile). Every output is checked against SDPA per
sequence before it is timed (a wrong one fails the run).

Beside the named problems, a sweep of --sweep random problems (default 24) from --seed: B log-uniform in [2, 64],
mean length log-uniform in [128, 8192] (at most 64k tokens), H in {8, 16, 32}, grouped-query or not, causal or not.

    python benchmarks/attention_varlen.py [--rounds N] [--sweep N] [--seed S] [--out DIR] [--name NAME]
"""
from __future__ import annotations

import math
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._common import torch_with_gpu, write_results  # noqa: E402
from benchmarks._sweep import (checked_arguments, interleaved_medians, log_uniform, loop_and_dense,  # noqa: E402
                              measure_all, summary, sweep_arguments)

TOLERANCE = 2e-2
D = 128
# (label, B, mean length, H, H_kv, causal)
SHAPES = [
    ("B16 mean 2048", 16, 2048, 16, 16, False),
    ("B16 mean 2048 causal", 16, 2048, 16, 16, True),
    ("B64 mean 512 causal", 64, 512, 16, 16, True),
    ("B8 mean 4096 gqa", 8, 4096, 32, 8, False),
    ("B32 mean 256", 32, 256, 16, 16, False),
]


def lengths(rng: random.Random, b: int, mean: int) -> list[int]:
    return [max(16, int(mean * math.exp(rng.gauss(0.0, 0.6)))) for _ in range(b)]


def tile_fill(lens: list[int], causal: bool, block_m: int, block_n: int) -> float:
    """The share of the (query, key) pairs a kernel of block_m x block_n tiles computes that are in use: each
    sequence its own query tiles, each tile its keys in blocks of block_n (causal: up to its last row's)."""
    used = computed = 0
    for n in lens:
        used += n * (n + 1) // 2 if causal else n * n
        for i in range(-(-n // block_m)):
            keys = min(n, (i + 1) * block_m) if causal else n
            computed += block_m * block_n * -(-keys // block_n)
    return used / computed


def sweep_shapes(seed: int, count: int) -> list[tuple]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        b = log_uniform(rng, 2, 64)
        mean = min(log_uniform(rng, 128, 8192), 65536 // b)
        h = rng.choice((8, 16, 32))
        hkv = rng.choice((h, max(1, h // 4)))
        causal = rng.random() < 0.5
        out.append((f"B{b} mean {mean} H{h}/{hkv}{' causal' if causal else ''}", b, mean, h, hkv, causal))
    return out


def measure(shape: tuple, rounds: int, rng: random.Random) -> dict:
    import torch
    import torch.nn.functional as F

    from tmakit.ops import plan_attention, plan_attention_varlen

    label, b, mean, h, hkv, causal = shape
    lens = lengths(rng, b, mean)
    total = sum(lens)
    q = torch.randn(total, h, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(total, hkv, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(total, hkv, D, device="cuda", dtype=torch.bfloat16)
    cu = torch.tensor([0] + lens, device="cuda").cumsum(0).to(torch.int32)
    starts = [0]
    for n in lens:
        starts.append(starts[-1] + n)
    out = torch.full_like(q, float("nan"))
    plan = plan_attention_varlen(q, k, v, cu, cu, max(lens), out, causal=causal)
    plan()
    gqa = {"enable_gqa": True} if hkv != h else {}
    views = [(q[s:e].transpose(0, 1)[None], k[s:e].transpose(0, 1)[None], v[s:e].transpose(0, 1)[None])
             for s, e in zip(starts[:-1], starts[1:])]

    def loop():
        return [F.scaled_dot_product_attention(qs, ks, vs, is_causal=causal, **gqa) for qs, ks, vs in views]

    refs = loop()
    torch.cuda.synchronize()
    num = den = 0.0
    for (s, e), r in zip(zip(starts[:-1], starts[1:]), refs):
        got = out[s:e].transpose(0, 1)[None].float()
        num += (got - r.float()).norm().item() ** 2
        den += r.float().norm().item() ** 2
    err = math.sqrt(num / den) if den else float("inf")
    if math.isnan(err):
        err = float("inf")
    # the dense kernel on the same total tokens: B sequences of the mean length
    sd = total // b
    qd = torch.randn(b, h, sd, D, device="cuda", dtype=torch.bfloat16)
    kd = torch.randn(b, hkv, sd, D, device="cuda", dtype=torch.bfloat16)
    vd = torch.randn(b, hkv, sd, D, device="cuda", dtype=torch.bfloat16)
    dense = plan_attention(qd, kd, vd, causal=causal)
    pairs = sum(n * (n + 1) // 2 if causal else n * n for n in lens)
    flops = 4.0 * h * D * pairs
    dense_flops = 4.0 * h * D * b * (sd * (sd + 1) // 2 if causal else sd * sd)
    t, tl, td = interleaved_medians((plan, loop, dense), torch, max(1, min(20, int(1e12 / flops))), rounds)
    # the tiles' fill against the dense problem's: "x dense" at equal speed per computed tile
    fill = (tile_fill(lens, causal, plan.config.block_m, plan.config.block_n)
            / tile_fill([sd] * b, causal, dense.config.block_m, dense.config.block_n))
    x_dense = (flops / t) / (dense_flops / td)
    return {"shape": label, "B": b, "H": h, "H_kv": hkv, "D": D, "causal": causal, "tokens": total,
            "shortest": min(lens), "longest": max(lens), "ms": round(t, 4), "TFLOP/s": round(flops / t / 1e9, 1),
            "loop TFLOP/s": round(flops / tl / 1e9, 1), "dense TFLOP/s": round(dense_flops / td / 1e9, 1),
            "x loop": round(tl / t, 3), "x dense": round(x_dense, 3), "fill vs dense": round(fill, 3),
            "x dense per tile": round(x_dense / fill, 3), "rel err vs SDPA": float(f"{err:.3g}")}


def main(argv: list[str] | None = None) -> int:
    args = checked_arguments(sweep_arguments(__doc__.splitlines()[0], "attention_varlen", 24, rounds=7), argv)
    torch = torch_with_gpu("benchmarks/attention_varlen.py", "the SDPA loop")
    if torch is None:
        return 0
    sweep = sweep_shapes(args.seed, args.sweep)
    print(f"sweep: {len(sweep)} problems from seed {args.seed}", flush=True)
    rng = random.Random(args.seed)
    rows = measure_all([(s, "named") for s in SHAPES] + [(s, "sweep") for s in sweep],
                       lambda shape: measure(shape, args.rounds, rng), "rel err vs SDPA", TOLERANCE,
                       ("shape", "tokens", "TFLOP/s", "loop TFLOP/s", "dense TFLOP/s", "x loop", "x dense",
                        "fill vs dense", "rel err vs SDPA"),
                       "varlen attention problems")
    swept, dense = loop_and_dense(args.seed, rows)
    per_tile = summary(args.seed, [(r["shape"], r["x dense per tile"]) for r in rows if r["set"] == "sweep"])
    notes = ["FLOPs = 4 H D sum over sequences of Lq Lk (causal: of each row's visible keys); medians of "
             "interleaved rounds queued behind a GPU spin",
             "loop: torch SDPA per sequence (enable_gqa where K/V have fewer heads); dense: tmakit's plan_attention "
             "on B sequences of the mean length",
             f"sweep: {swept['count']} problems from seed {args.seed}: x loop min {swept['min']}, geomean "
             f"{swept['geomean']}; x dense min {dense['min']}, geomean {dense['geomean']}",
             "fill vs dense: the share of the (query, key) pairs computed by the kernel's tiles that are in use "
             "(each sequence its own tiles), over the dense problem's; x dense per tile = x dense / fill vs dense: "
             f"{per_tile['count']} sweep problems, min {per_tile['min']}, geomean {per_tile['geomean']}",
             f"ok: relative error <= {TOLERANCE} against SDPA per sequence"]
    write_results(args.name, "Variable-length attention: tmakit vs a loop of SDPA and vs the dense kernel", rows,
                  notes, args.out, extra={"sweep": swept, "sweep_vs_dense": dense, "sweep_vs_dense_per_tile": per_tile})
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
