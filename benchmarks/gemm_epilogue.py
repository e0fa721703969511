"""GEMM with beta != 0 or an fp32 output: tmakit.ops.plan_gemm beside torch.addmm(c, a, b, beta=, out_dtype=) like
for like (same inputs, same beta, same output dtype, C read and written in place) in the same run. Writes
benchmarks/results/gemm_epilogue.json and .md.

Each row: medians of CUDA-event timings of back-to-back launches queued behind a GPU spin, the two interleaved
round by round; TFLOP/s = 2 M N K / time; tmakit's output checked first against a float32 reference on a fresh C.

Beside the named problems, a sweep of --sweep random ones (default 40) from --seed: M, N, K log-uniform in
[256, 16384], multiples of 8, bf16 or fp16 inputs, beta 0.5 or 1 (fp32 or 16-bit out) or 0 (fp32 out), B K-major.

    python benchmarks/gemm_epilogue.py [--rounds N] [--sweep N] [--seed S] [--out DIR] [--name NAME]
"""
from __future__ import annotations

import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._common import gemm_tile_label, torch_with_gpu, write_results  # noqa: E402
from benchmarks._sweep import (checked_arguments, interleaved_medians, log_uniform, measure_all,  # noqa: E402
                              summary, sweep_arguments)

TOLERANCE = {"float32": 1e-4, "bfloat16": 8e-3, "float16": 2e-3}
# (label, M, N, K, input dtype, beta, output dtype)
SHAPES = [("8192^3", 8192, 8192, 8192, "bfloat16", 0.5, "float32"),
          ("8192^3", 8192, 8192, 8192, "bfloat16", 0.0, "float32"),
          ("8192^3", 8192, 8192, 8192, "bfloat16", 0.5, "bfloat16"),
          ("4096^3", 4096, 4096, 4096, "bfloat16", 0.5, "float32"),
          ("8192x8192x1024", 8192, 8192, 1024, "bfloat16", 0.5, "float32"),
          ("8192x8192x1024", 8192, 8192, 1024, "bfloat16", 0.0, "float32"),
          ("3000x5000x7000", 3000, 5000, 7000, "float16", 1.0, "float16")]


def sweep_shapes(seed: int, count: int) -> list[tuple]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        m, n, k = (log_uniform(rng, 256, 16384, 8) for _ in range(3))
        dtype = rng.choice(("bfloat16", "float16"))
        beta, odt = rng.choice(((0.5, "float32"), (1.0, "float32"), (0.0, "float32"), (0.5, dtype), (1.0, dtype)))
        out.append((f"{m}x{n}x{k}", m, n, k, dtype, beta, odt))
    return out


def measure(shape: tuple, rounds: int) -> dict:
    import torch

    from tmakit.ops import plan_gemm

    label, m, n, k, dtype, beta, odt = shape
    tin, tout = getattr(torch, dtype), getattr(torch, odt)
    a = torch.randn(m, k, device="cuda", dtype=tin)
    b = torch.randn(n, k, device="cuda", dtype=tin)
    c0 = torch.randn(m, n, device="cuda", dtype=tout)
    c = c0.clone()
    plan = plan_gemm(a, b, c, beta=beta, out_dtype=odt if odt == "float32" and dtype != "float32" else None)
    plan()
    ref = a.float() @ b.float().T + beta * c0.float()
    err = ((c.float() - ref).abs().max() / ref.abs().max()).nan_to_num(float("inf")).item()
    del ref
    cp = c0.clone()
    bt = b.T
    kw = {"out_dtype": tout} if tout != tin else {}
    peer = lambda: torch.addmm(cp, a, bt, beta=beta, out=cp, **kw)  # noqa: E731
    flops = 2.0 * m * n * k
    t, tp = interleaved_medians((plan, peer), torch, max(1, min(50, int(5e12 / flops))), rounds, warmup=2)
    return {"shape": label, "M": m, "N": n, "K": k, "dtype": dtype, "beta": beta, "out": odt,
            "tile": gemm_tile_label(plan),
            "ms": round(t, 4), "TFLOP/s": round(flops / t / 1e9, 1), "addmm TFLOP/s": round(flops / tp / 1e9, 1),
            "x addmm": round(tp / t, 3), "max rel err": float(f"{err:.3g}"), "tolerance": TOLERANCE[odt]}


def main(argv: list[str] | None = None) -> int:
    args = checked_arguments(sweep_arguments(__doc__.splitlines()[0], "gemm_epilogue", 40), argv)
    torch = torch_with_gpu("benchmarks/gemm_epilogue.py", "torch.addmm")
    if torch is None:
        return 0
    sweep = sweep_shapes(args.seed, args.sweep)
    print(f"sweep: {len(sweep)} problems from seed {args.seed}", flush=True)

    def run(shape):
        row = measure(shape, args.rounds)
        row["err/tol"] = round(row["max rel err"] / row["tolerance"], 3)
        return row
    rows = measure_all([(s, "named") for s in SHAPES] + [(s, "sweep") for s in sweep], run, "err/tol", 1.0,
                       ("shape", "dtype", "beta", "out", "tile", "TFLOP/s", "addmm TFLOP/s", "x addmm", "max rel err"),
                       "GEMM epilogues")
    swept = summary(args.seed, [(f"{r['shape']} {r['dtype']} beta {r['beta']} {r['out']}", r["x addmm"])
                                for r in rows if r["set"] == "sweep"])
    print(f"sweep: min {swept['min']}, geomean {swept['geomean']}, worst {swept['worst']}")
    notes = ["FLOPs = 2 M N K; medians of interleaved rounds queued behind a GPU spin",
             "peer: torch.addmm(c, a, b.T, beta=beta, out=c[, out_dtype=torch.float32]) on the same tensors",
             f"sweep: {swept['count']} problems from seed {args.seed} (M, N, K log-uniform in [256, 16384], multiples "
             f"of 8; beta and output dtype drawn): min {swept['min']}, geomean {swept['geomean']} x torch.addmm",
             "ok: max rel err within the output dtype's tolerance against a float32 reference on a fresh C"]
    write_results(args.name, "GEMM epilogues: tmakit (beta, fp32 out) vs torch.addmm", rows, notes, args.out,
                  extra={"sweep": swept})
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
