"""FP8 GEMM: tmakit.ops.plan_fp8_gemm (e4m3, per-128 block scales, fp32 promotion, bf16 out) beside
torch._scaled_mm (cuBLASLt, row-wise scales) in the same run. Writes benchmarks/results/fp8_gemm.json and .md.

Each row: medians of CUDA-event timings of back-to-back launches queued behind a GPU spin, the two interleaved
round by round; TFLOP/s = 2 M N K / time; tmakit's output checked against a float32 product of the dequantized
operands (block scales) and the peer's against the same product of its row-wise scaled operands, each on a fresh
buffer before timing.

Beside the named shapes, a sweep of --sweep random shapes (default 16) from --seed: M, N, K log-uniform in
[4096, 16384], multiples of 128.

    python benchmarks/fp8_gemm.py [--rounds N] [--sweep N] [--seed S] [--out DIR] [--name NAME]
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
SHAPES = [("8192^3", 8192, 8192, 8192), ("4096^3", 4096, 4096, 4096), ("16384x8192x8192", 16384, 8192, 8192),
          ("4096x16384x8192", 4096, 16384, 8192)]


def sweep_shapes(seed: int, count: int) -> list[tuple]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        m, n, k = (log_uniform(rng, 4096, 16384, 128) for _ in range(3))
        out.append((f"{m}x{n}x{k}", m, n, k))
    return out


def measure(shape: tuple, rounds: int) -> dict:
    import torch

    from tmakit.ops import plan_fp8_gemm

    label, m, n, k = shape
    kb, nb = k // 128, n // 128
    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn)
    sa = torch.empty(kb, m, device="cuda").T  # (M, K/128), M contiguous
    sa.copy_(torch.rand(m, kb, device="cuda") + 0.5)
    sb = torch.rand(nb, kb, device="cuda") + 0.5
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    plan = plan_fp8_gemm(a, b, sa, sb, out)
    plan()
    # check on a 512-row slice (the full float32 product is large): rows spread over the output
    rows = torch.linspace(0, m - 1, 512, device="cuda").long()
    a_deq = a[rows].float() * sa[rows].repeat_interleave(128, 1)
    b_deq = b.float() * sb.repeat_interleave(128, 0).repeat_interleave(128, 1)
    ref = a_deq @ b_deq.T
    err = ((out[rows].float() - ref).abs().max() / ref.abs().max()).nan_to_num(float("inf")).item()
    del b_deq
    row_a = torch.rand(m, 1, device="cuda") + 0.5
    row_b = torch.rand(1, n, device="cuda") + 0.5
    peer_out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    bt = b.T
    peer = lambda: torch._scaled_mm(a, bt, scale_a=row_a, scale_b=row_b, out_dtype=torch.bfloat16,  # noqa: E731
                                    out=peer_out)
    peer()
    peer_ref = (a[rows].float() * row_a[rows]) @ (b.float() * row_b.T).T
    peer_err = ((peer_out[rows].float() - peer_ref).abs().max() / peer_ref.abs().max()).item()
    flops = 2.0 * m * n * k
    t, tp = interleaved_medians((plan, peer), torch, max(1, min(50, int(1e13 / flops))), rounds, warmup=3)
    return {"shape": label, "M": m, "N": n, "K": k, "tile": f"128x128x128 s{plan.config.stages}", "ms": round(t, 4),
            "TFLOP/s": round(flops / t / 1e9, 1), "_scaled_mm TFLOP/s": round(flops / tp / 1e9, 1),
            "x _scaled_mm": round(tp / t, 3),
            "max rel err": float(f"{err:.3g}"), "peer max rel err": float(f"{peer_err:.3g}")}


def main(argv: list[str] | None = None) -> int:
    args = checked_arguments(sweep_arguments(__doc__.splitlines()[0], "fp8_gemm", 16, rounds=10), argv)
    torch = torch_with_gpu("benchmarks/fp8_gemm.py", "torch._scaled_mm")
    if torch is None:
        return 0
    sweep = sweep_shapes(args.seed, args.sweep)
    print(f"sweep: {len(sweep)} shapes from seed {args.seed}", flush=True)
    rows = measure_all([(s, "named") for s in SHAPES] + [(s, "sweep") for s in sweep],
                       lambda shape: measure(shape, args.rounds), "max rel err", TOLERANCE,
                       ("shape", "tile", "TFLOP/s", "_scaled_mm TFLOP/s", "x _scaled_mm", "max rel err"),
                       "fp8 GEMM shapes")
    swept = summary(args.seed, [(r["shape"], r["x _scaled_mm"]) for r in rows if r["set"] == "sweep"])
    print(f"sweep: min {swept['min']}, geomean {swept['geomean']}, worst {swept['worst']}")
    notes = ["FLOPs = 2 M N K; medians of interleaved rounds queued behind a GPU spin",
             "tmakit: e4m3 A and B, per-128 block scales (A 1 x 128 by TMA, B 128 x 128), fp32 promotion every 128 "
             "of K, bf16 out; peer: torch._scaled_mm with row-wise scales (cuBLASLt), bf16 out",
             f"sweep: {swept['count']} shapes from seed {args.seed} (M, N, K log-uniform in [4096, 16384], multiples "
             f"of 128): min {swept['min']}, geomean {swept['geomean']} x torch._scaled_mm",
             f"ok: max rel err <= {TOLERANCE} against a float32 product of the dequantized operands (512 rows)"]
    write_results(args.name, "FP8 GEMM: tmakit (block scales) vs torch._scaled_mm (row-wise)", rows, notes, args.out,
                  extra={"sweep": swept})
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
