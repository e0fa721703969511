"""Attention forward: tmakit.ops.attention (TMA ring + wgmma, and the cp.async + mma.sync twin) beside torch's
scaled_dot_product_attention in the same run. Writes benchmarks/results/attention.json and .md.

Each row: medians of CUDA-event timings of back-to-back launches after warm-up, queued behind a GPU spin (the
GPU time of the calls, not the host's time to issue them), tmakit and SDPA interleaved
round by round; TFLOP/s = 4 B H Sq Sk D / time (half for causal); the output's relative error against SDPA's.
Q, K and V of the main shape are 64 MiB each, beyond the 50 MB L2.

Beside the named shapes, a sweep of --sweep random cases (default 40) drawn from --seed (printed and written into
the results): S log-uniform in [128, 32768], B and H log-uniform in [1, 32] (B shrunk until a call is at most
1.5e12 FLOPs), D in {64, 128, 256}, causal or not, bf16; every output is checked against SDPA before it is timed
(a wrong one fails the run). A head dim tmakit refuses (256) is a row marked unsupported, counted apart from the
geometric mean and named in the summary.

    python benchmarks/attention.py [--quick] [--out DIR] [--rounds N] [--sweep N] [--seed S]
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._common import time_ms, torch_with_gpu, write_results  # noqa: E402
from benchmarks._sweep import log_uniform, summary  # noqa: E402

TOLERANCE = 2e-2  # relative (Frobenius) error of the output against SDPA's
MAX_FLOPS = 1.5e12

# (label, backend, B, H, S, D, causal, dtype[, layout[, K/V heads]])
SHAPES = [
    ("main", "tma", 4, 16, 4096, 128, False, "bfloat16"),
    ("main", "tma", 4, 16, 4096, 128, True, "bfloat16"),
    ("main", "cp.async", 4, 16, 4096, 128, False, "bfloat16"),
    ("main", "cp.async", 4, 16, 4096, 128, True, "bfloat16"),
    ("d64", "tma", 4, 16, 4096, 64, False, "bfloat16"),
    ("d64", "tma", 4, 16, 4096, 64, True, "bfloat16"),
    ("s1000", "tma", 4, 16, 1000, 128, False, "bfloat16"),
    ("s1000", "tma", 4, 16, 1000, 128, True, "bfloat16"),
    ("s16384", "tma", 1, 16, 16384, 128, False, "bfloat16"),
    ("s16384", "tma", 1, 16, 16384, 128, True, "bfloat16"),
    ("s16384", "cp.async", 1, 16, 16384, 128, False, "bfloat16"),
    ("fp16", "tma", 4, 16, 4096, 128, False, "float16"),
    ("bshd", "tma", 4, 16, 4096, 128, False, "bfloat16", "bshd"),
    ("bshd", "tma", 4, 16, 4096, 128, True, "bfloat16", "bshd"),
    # grouped-query and multi-query heads (the last entry: K/V heads), beside SDPA with enable_gqa=True
    ("gqa", "tma", 4, 32, 4096, 128, False, "bfloat16", "bhsd", 8),
    ("gqa", "tma", 4, 32, 4096, 128, True, "bfloat16", "bhsd", 8),
    ("gqa d64", "tma", 8, 32, 2048, 64, True, "bfloat16", "bhsd", 4),
    ("mqa", "tma", 4, 16, 4096, 128, False, "bfloat16", "bshd", 1),
]
# --tune: the main shape with other tile plans (label, backend, plan keyword arguments)
TUNE = [
    ("main stages=3", "tma", 128, {"stages": 3}),
    ("d64 stages=2", "tma", 64, {"stages": 2}),
    ("main warp_rows=16 block_n=128", "cp.async", 128, {"warp_rows": 16, "block_n": 128}),
    ("main stages=3", "cp.async", 128, {"stages": 3}),
    ("main block_n=32", "cp.async", 128, {"block_n": 32}),
]


def sweep_shapes(seed: int, count: int) -> list[tuple]:
    """``count`` random cases in SHAPES' form, from ``seed``."""
    rng = random.Random(seed)
    shapes = []
    for _ in range(count):
        s, b, h = log_uniform(rng, 128, 32768), log_uniform(rng, 1, 32), log_uniform(rng, 1, 32)
        d, causal = rng.choice((64, 128, 256)), rng.random() < 0.5
        while b > 1 and 4.0 * b * h * s * s * d > MAX_FLOPS:
            b -= 1
        while h > 1 and 4.0 * b * h * s * s * d > MAX_FLOPS:
            h -= 1
        shapes.append((f"B{b} H{h} S{s} D{d}", "tma", b, h, s, d, causal, "bfloat16"))
    return shapes


def measure(shape, rounds: int, plan_kwargs: dict, label: str | None = None) -> dict:
    import torch
    import torch.nn.functional as F

    from tmakit.ops import plan_attention

    label_override = label
    label, backend, b, h, s, d, causal, dtype = shape[:8]
    layout = shape[8] if len(shape) > 8 else "bhsd"
    hkv = shape[9] if len(shape) > 9 else h
    tdt = getattr(torch, dtype)

    def dims(heads: int) -> tuple:
        return (b, heads, s, d) if layout == "bhsd" else (b, s, heads, d)
    q, k, v = (torch.randn(dims(x), device="cuda", dtype=tdt) for x in (h, hkv, hkv))
    poisoned = torch.full_like(q, float("nan"))  # a tile the kernel skips shows
    plan = plan_attention(q, k, v, poisoned, causal=causal, backend=backend, layout=layout, **plan_kwargs)
    out, _ = plan()
    # SDPA takes (B, H, S, D): a bshd tensor goes in as its transposed view, as a caller would pass it
    qh, kh, vh = (x.transpose(1, 2) for x in (q, k, v)) if layout == "bshd" else (q, k, v)
    gqa = {"enable_gqa": True} if hkv != h else {}
    ref = F.scaled_dot_product_attention(qh, kh, vh, is_causal=causal, **gqa)
    torch.cuda.synchronize()
    out_h = out.transpose(1, 2) if layout == "bshd" else out
    err = ((out_h.float() - ref.float()).norm() / ref.float().norm()).item()
    sdpa = lambda: F.scaled_dot_product_attention(qh, kh, vh, is_causal=causal, **gqa)  # noqa: E731
    flops = plan.flops
    launches = max(1, min(20, int(2e12 / flops)))  # ~ a few ms per sample
    for fn in (plan, sdpa):
        time_ms(fn, torch, launches, queue_ahead=True)
    ours, theirs = [], []
    for _ in range(rounds):
        ours.append(time_ms(plan, torch, launches, queue_ahead=True))
        theirs.append(time_ms(sdpa, torch, launches, queue_ahead=True))
    t, ts = statistics.median(ours), statistics.median(theirs)
    spread = (max(ours) - min(ours)) / t
    return {"shape": label_override or label, "backend": backend, "layout": layout, "B": b, "H": h, "H_kv": hkv,
            "S": s, "D": d,
            "causal": causal, "dtype": dtype,
            "ms": round(t, 4), "TFLOP/s": round(flops / t / 1e9, 1), "SDPA TFLOP/s": round(flops / ts / 1e9, 1),
            "x SDPA": round(ts / t, 3), "spread": round(spread, 3), "rel err vs SDPA": float(f"{err:.3g}")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the main shape only")
    parser.add_argument("--rounds", type=int, default=10, help="interleaved timing rounds (median)")
    parser.add_argument("--out", default=None, help="also copy the results files here")
    parser.add_argument("--name", default="attention", help="results file stem (benchmarks/results/NAME.json)")
    parser.add_argument("--stages", type=int, default=None, help="K/V ring depth (tuning)")
    parser.add_argument("--block-n", type=int, default=None, help="keys per stage (tuning)")
    parser.add_argument("--tune", action="store_true", help="also the main shape with other tile plans")
    parser.add_argument("--sweep", type=int, default=40, help="random cases beside the named ones (default 40)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sweep (default 0)")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.sweep < 0:
        parser.error("--sweep must be at least 0")
    torch = torch_with_gpu("benchmarks/attention.py", "the SDPA peer")
    if torch is None:
        return 0
    from tmakit import TmakitError

    kwargs = {k: v for k, v in (("stages", args.stages), ("block_n", args.block_n)) if v is not None}
    sweep = [] if args.quick else sweep_shapes(args.seed, args.sweep)
    print(f"sweep: {len(sweep)} cases from seed {args.seed}", flush=True)
    rows, unsupported = [], []
    from rich.progress import Progress

    todo = [(s, "named") for s in (SHAPES[:4] if args.quick else SHAPES)] + [(s, "sweep") for s in sweep]
    with Progress(transient=True) as progress:
        task = progress.add_task("attention cases", total=len(todo))
        for shape, kind in todo:
            progress.advance(task)
            try:
                row = {"set": kind, **measure(shape, args.rounds, kwargs if shape[1] == "tma" else {})}
            except TmakitError as exc:  # a head dim the kernel does not take: said, not hidden
                unsupported.append(f"{shape[0]}{' causal' if shape[6] else ''}")
                progress.console.print(f"unsupported: {shape[0]}: {str(exc).splitlines()[0][:100]}")
                continue
            row["ok"] = row["rel err vs SDPA"] <= TOLERANCE
            progress.console.print({k: row[k] for k in ("shape", "backend", "causal", "TFLOP/s", "SDPA TFLOP/s",
                                                        "x SDPA", "rel err vs SDPA", "ok")})
            rows.append(row)
    for label, backend, d, kw in TUNE if args.tune else []:
        for causal in (False, True):
            row = {"set": "named", **measure((label, backend, 4, 16, 4096, d, causal, "bfloat16"), args.rounds, kw,
                                             label)}
            row["ok"] = row["rel err vs SDPA"] <= TOLERANCE
            print({k: row[k] for k in ("shape", "backend", "causal", "TFLOP/s", "x SDPA")}, flush=True)
            rows.append(row)
    swept = summary(args.seed, [(f"{r['shape']}{' causal' if r['causal'] else ''}", r["x SDPA"])
                                for r in rows if r["set"] == "sweep"])
    swept["unsupported"] = unsupported
    print(f"sweep: min {swept['min']}, geomean {swept['geomean']}, worst {swept['worst']}, "
          f"unsupported {len(unsupported)}: {unsupported}")
    notes = ["FLOPs = 4 B H Sq Sk D, half with the causal mask; medians of interleaved rounds of back-to-back launches",
             "SDPA = torch.nn.functional.scaled_dot_product_attention (its default backend choice) on the same tensors",
             "cp.async rows: the sm_80 path (cp.async ring + ldmatrix + mma.sync) forced on this GPU",
             f"sweep: {swept['count']} timed cases from seed {args.seed}: min {swept['min']}, geomean "
             f"{swept['geomean']} x SDPA; {len(unsupported)} unsupported (not timed): {', '.join(unsupported) or 'none'}",
             f"ok: relative error vs SDPA <= {TOLERANCE}"]
    write_results(args.name, "Attention forward: tmakit vs torch SDPA", rows, notes, args.out, extra={"sweep": swept})
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
