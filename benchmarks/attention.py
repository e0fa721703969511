"""Attention forward: tmakit.ops.attention (TMA ring + wgmma, and the cp.async + mma.sync twin) beside torch's
scaled_dot_product_attention in the same run. Writes benchmarks/results/attention.json and .md.

Each row: medians of CUDA-event timings of back-to-back launches after warm-up, tmakit and SDPA interleaved
round by round; TFLOP/s = 4 B H Sq Sk D / time (half for causal); the output's relative error against SDPA's.
Q, K and V of the main shape are 64 MiB each, beyond the 50 MB L2.

    python benchmarks/attention.py [--quick] [--out DIR] [--rounds N]
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._common import time_ms, torch_with_gpu, write_results  # noqa: E402

# (label, backend, B, H, S, D, causal, dtype)
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
    ("fp16", "tma", 4, 16, 4096, 128, False, "float16"),
    ("bshd", "tma", 4, 16, 4096, 128, False, "bfloat16", "bshd"),
    ("bshd", "tma", 4, 16, 4096, 128, True, "bfloat16", "bshd"),
]
# --tune: the main shape with other tile plans (label, backend, plan keyword arguments)
TUNE = [
    ("main stages=3", "tma", 128, {"stages": 3}),
    ("d64 stages=2", "tma", 64, {"stages": 2}),
    ("main warps=4", "cp.async", 128, {"warps": 4}),
    ("main block_n=64", "cp.async", 128, {"block_n": 64}),
]


def measure(shape, rounds: int, plan_kwargs: dict, label: str | None = None) -> dict:
    import torch
    import torch.nn.functional as F

    from tmakit.ops import plan_attention

    label_override = label
    label, backend, b, h, s, d, causal, dtype = shape[:8]
    layout = shape[8] if len(shape) > 8 else "bhsd"
    tdt = getattr(torch, dtype)
    dims = (b, h, s, d) if layout == "bhsd" else (b, s, h, d)
    q, k, v = (torch.randn(dims, device="cuda", dtype=tdt) for _ in range(3))
    plan = plan_attention(q, k, v, causal=causal, backend=backend, layout=layout, **plan_kwargs)
    out, _ = plan()
    # SDPA takes (B, H, S, D): a bshd tensor goes in as its transposed view, as a caller would pass it
    qh, kh, vh = (x.transpose(1, 2) for x in (q, k, v)) if layout == "bshd" else (q, k, v)
    ref = F.scaled_dot_product_attention(qh, kh, vh, is_causal=causal)
    torch.cuda.synchronize()
    out_h = out.transpose(1, 2) if layout == "bshd" else out
    err = ((out_h.float() - ref.float()).norm() / ref.float().norm()).item()
    sdpa = lambda: F.scaled_dot_product_attention(qh, kh, vh, is_causal=causal)  # noqa: E731
    flops = plan.flops
    launches = max(1, min(20, int(2e12 / flops)))  # ~ a few ms per sample
    for fn in (plan, sdpa):
        time_ms(fn, torch, launches)
    ours, theirs = [], []
    for _ in range(rounds):
        ours.append(time_ms(plan, torch, launches))
        theirs.append(time_ms(sdpa, torch, launches))
    t, ts = statistics.median(ours), statistics.median(theirs)
    spread = (max(ours) - min(ours)) / t
    return {"shape": label_override or label, "backend": backend, "layout": layout, "B": b, "H": h, "S": s, "D": d,
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
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    torch = torch_with_gpu("benchmarks/attention.py", "the SDPA peer")
    if torch is None:
        return 0
    kwargs = {k: v for k, v in (("stages", args.stages), ("block_n", args.block_n)) if v is not None}
    rows = []
    for shape in SHAPES[:4] if args.quick else SHAPES:
        row = measure(shape, args.rounds, kwargs if shape[1] == "tma" else {})
        print({k: row[k] for k in ("shape", "backend", "causal", "TFLOP/s", "SDPA TFLOP/s", "x SDPA", "rel err vs SDPA")},
              flush=True)
        rows.append(row)
    for label, backend, d, kw in TUNE if args.tune else []:
        for causal in (False, True):
            row = measure((label, backend, 4, 16, 4096, d, causal, "bfloat16"), args.rounds, kw, label)
            print({k: row[k] for k in ("shape", "backend", "causal", "TFLOP/s", "x SDPA")}, flush=True)
            rows.append(row)
    notes = ["FLOPs = 4 B H Sq Sk D, half with the causal mask; medians of interleaved rounds of back-to-back launches",
             "SDPA = torch.nn.functional.scaled_dot_product_attention (its default backend choice) on the same tensors",
             "cp.async rows: the sm_80 path (cp.async ring + ldmatrix + mma.sync) forced on this GPU"]
    write_results(args.name, "Attention forward: tmakit vs torch SDPA", rows, notes, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
