"""Paged-KV attention: tmakit.ops.plan_attention_paged beside a loop of per-sequence SDPA calls (on contiguous
copies of each sequence's keys, made before timing: the loop's best case) and beside tmakit's dense kernel at equal
total tokens, in the same run. Writes benchmarks/results/attention_paged.json / .md.

A problem: B sequences of log-normal lengths in a cache of shuffled pages (16 to 128 keys a page), H heads (K/V
with H or H / 4), D 128, bf16; decode (one query per sequence) or causal prefill (as many queries as the longest
sequence). Each row: medians of CUDA-event timings of back-to-back calls queued behind a GPU spin, interleaved
round by round; TFLOP/s = 4 H D (query, key) pairs / time; "x loop": the SDPA loop's time over ours; "x dense":
our TFLOP/s over the dense kernel's on B sequences of the mean length. Every output is checked against the SDPA
loop first.

    python benchmarks/attention_paged.py [--rounds N] [--sweep N] [--seed S] [--out DIR] [--name NAME]
"""
from __future__ import annotations

import math
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._common import torch_with_gpu, write_results  # noqa: E402
from benchmarks._sweep import (checked_arguments, interleaved_medians, log_uniform, loop_and_dense,  # noqa: E402
                              measure_all, sweep_arguments)

TOLERANCE = 2e-2
D = 128
# (label, B, mean keys, H, H_kv, page size, decode)
SHAPES = [
    ("decode B64 mean 4096 p16", 64, 4096, 32, 8, 16, True),
    ("decode B32 mean 8192 p64", 32, 8192, 32, 32, 64, True),
    ("decode B128 mean 1024 p16", 128, 1024, 16, 4, 16, True),
    ("prefill B8 mean 2048 p64", 8, 2048, 16, 16, 64, False),
    ("prefill B4 mean 4096 p128 gqa", 4, 4096, 32, 8, 128, False),
]


def sweep_shapes(seed: int, count: int) -> list[tuple]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        decode = rng.random() < 0.5
        b = log_uniform(rng, 4, 128) if decode else log_uniform(rng, 1, 16)
        mean = log_uniform(rng, 256, 16384) if decode else log_uniform(rng, 256, 4096)
        h = rng.choice((16, 32))
        hkv = rng.choice((h, h // 4))
        page = rng.choice((16, 32, 64, 128))
        out.append((f"{'decode' if decode else 'prefill'} B{b} mean {mean} H{h}/{hkv} p{page}", b, mean, h, hkv, page,
                    decode))
    return out


def measure(shape: tuple, rounds: int, rng: random.Random) -> dict:
    import torch
    import torch.nn.functional as F

    from tmakit.ops import plan_attention, plan_attention_paged

    label, b, mean, h, hkv, page, decode = shape
    lens = [max(1, int(mean * math.exp(rng.gauss(0.0, 0.5)))) for _ in range(b)]
    need = [-(-n // page) for n in lens]
    pages = sum(need)
    ids = list(range(pages))
    rng.shuffle(ids)
    max_pages = max(need)
    table = torch.zeros(b, max_pages, dtype=torch.int32)
    k_cache = torch.randn(pages, page, hkv, D, device="cuda", dtype=torch.bfloat16)
    v_cache = torch.randn_like(k_cache)
    at = 0
    for s, n in enumerate(need):
        table[s, :n] = torch.tensor(ids[at:at + n], dtype=torch.int32)
        at += n
    table = table.cuda()
    lens_t = torch.tensor(lens, dtype=torch.int32, device="cuda")
    sq = 1 if decode else max(lens)
    causal = not decode
    q = torch.randn(b, sq, h, D, device="cuda", dtype=torch.bfloat16)
    out = torch.full_like(q, float("nan"))
    plan = plan_attention_paged(q, k_cache, v_cache, table, lens_t, out, causal=causal)
    plan()
    gqa = {"enable_gqa": True} if hkv != h else {}
    seqs = []
    for s, n in enumerate(lens):
        pids = table[s, :need[s]].long()
        ks = k_cache[pids].reshape(-1, hkv, D)[:n].transpose(0, 1)[None].contiguous()
        vs = v_cache[pids].reshape(-1, hkv, D)[:n].transpose(0, 1)[None].contiguous()
        seqs.append((q[s:s + 1].transpose(1, 2), ks, vs))

    def loop():
        return [F.scaled_dot_product_attention(qs, ks, vs, is_causal=causal, **gqa) for qs, ks, vs in seqs]

    refs = loop()
    torch.cuda.synchronize()
    num = den = 0.0
    for s, r in enumerate(refs):
        got = out[s:s + 1].transpose(1, 2).float()
        num += (got - r.float()).norm().item() ** 2
        den += r.float().norm().item() ** 2
    err = math.sqrt(num / den) if den else float("inf")
    if math.isnan(err):
        err = float("inf")
    mean_len = sum(lens) // b
    sqd = 1 if decode else mean_len
    qd = torch.randn(b, h, sqd, D, device="cuda", dtype=torch.bfloat16)
    kd = torch.randn(b, hkv, mean_len, D, device="cuda", dtype=torch.bfloat16)
    vd = torch.randn_like(kd)
    dense = plan_attention(qd, kd, vd, causal=causal)

    def pairs(queries: int, keys: int) -> int:
        if not causal:
            return queries * keys
        return sum(min(i + 1, keys) for i in range(queries))
    flops = 4.0 * h * D * sum(pairs(sq, n) for n in lens)
    dense_flops = 4.0 * h * D * b * pairs(sqd, mean_len)
    t, tl, td = interleaved_medians((plan, loop, dense), torch, max(1, min(50, int(5e11 / flops))), rounds)
    return {"shape": label, "B": b, "H": h, "H_kv": hkv, "page": page, "decode": decode, "keys": sum(lens),
            "ms": round(t, 4), "TFLOP/s": round(flops / t / 1e9, 2), "loop TFLOP/s": round(flops / tl / 1e9, 2),
            "dense TFLOP/s": round(dense_flops / td / 1e9, 2), "x loop": round(tl / t, 3),
            "x dense": round((flops / t) / (dense_flops / td), 3), "rel err vs SDPA": float(f"{err:.3g}")}


def main(argv: list[str] | None = None) -> int:
    args = checked_arguments(sweep_arguments(__doc__.splitlines()[0], "attention_paged", 16, rounds=7), argv)
    torch = torch_with_gpu("benchmarks/attention_paged.py", "the SDPA loop")
    if torch is None:
        return 0
    sweep = sweep_shapes(args.seed, args.sweep)
    print(f"sweep: {len(sweep)} problems from seed {args.seed}", flush=True)
    rng = random.Random(args.seed)
    rows = measure_all([(s, "named") for s in SHAPES] + [(s, "sweep") for s in sweep],
                       lambda shape: measure(shape, args.rounds, rng), "rel err vs SDPA", TOLERANCE,
                       ("shape", "keys", "TFLOP/s", "loop TFLOP/s", "dense TFLOP/s", "x loop", "x dense", "rel err vs SDPA"),
                       "paged attention problems")
    swept, dense = loop_and_dense(args.seed, rows)
    notes = ["FLOPs = 4 H D (query, key) pairs (causal prefill: each query's visible keys); medians of interleaved "
             "rounds queued behind a GPU spin",
             "loop: torch SDPA per sequence on contiguous copies of its keys (made before timing); dense: tmakit's "
             "plan_attention on B sequences of the mean length",
             f"sweep: {swept['count']} problems from seed {args.seed}: x loop min {swept['min']}, geomean "
             f"{swept['geomean']}; x dense min {dense['min']}, geomean {dense['geomean']}",
             f"ok: relative error <= {TOLERANCE} against the SDPA loop"]
    write_results(args.name, "Paged-KV attention: tmakit vs a loop of SDPA and vs the dense kernel", rows, notes,
                  args.out, extra={"sweep": swept, "sweep_vs_dense": dense})
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
