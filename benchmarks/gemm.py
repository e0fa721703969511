"""GEMM: tmakit.ops.gemm (TMA + wgmma warp-specialized kernel, and the cp.async + mma.sync twin) beside
torch.matmul (cuBLAS) in the same run. Writes benchmarks/results/gemm.json and .md.

Each row: medians of CUDA-event timings of back-to-back launches after warm-up, queued behind a GPU spin (the
GPU time of the calls, not the host's time to issue them), tmakit and cuBLAS interleaved round
by round; TFLOP/s = 2 M N K / time; the output's max error against a float32 product, relative to its largest
entry. Operands of the main shape (8192^3 bf16) are 128 MiB each, beyond the 50 MB L2.

Beside the named shapes, a sweep of --sweep random shapes (default 40) drawn from --seed (printed and written into
the results): M, N, K log-uniform in [256, 16384], multiples of 8, bf16 or fp16, B K- or N-major; every output
is checked against a float32 product before it is timed (a wrong one fails the run); the results give the sweep's
minimum, geometric mean and worst five ratios.

    python benchmarks/gemm.py [--quick] [--out DIR] [--rounds N] [--tune] [--sweep N] [--seed S]
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._common import gemm_tile_label, time_ms, torch_with_gpu, write_results  # noqa: E402
from benchmarks._sweep import log_uniform, summary  # noqa: E402

TOLERANCE = 2e-2  # max |error| / max |reference| of a 16-bit output with fp32 accumulation


def _beside_usual(m: int, n: int, k: int, dtype: str, b_major: str, usual: int) -> list[tuple]:
    """A skinny output's default plan (a narrow width) and the usual width it replaces (clusters of 2, unsplit)."""
    label = f"skinny {m}x{n}x{k}"
    return [(label, "tma", m, n, k, dtype, b_major, {}),
            (f"{label} block_n={usual}", "tma", m, n, k, dtype, b_major, {"block_n": usual, "cluster": 2, "splits": 1})]


# (label, backend, M, N, K, dtype, b_major, plan keyword arguments)
SHAPES = [
    ("8192^3", "tma", 8192, 8192, 8192, "bfloat16", "k", {}),
    ("8192^3", "tma", 8192, 8192, 8192, "bfloat16", "n", {}),
    ("4096^3", "tma", 4096, 4096, 4096, "bfloat16", "k", {}),
    ("8192x8192x1024", "tma", 8192, 8192, 1024, "bfloat16", "k", {}),
    ("2048x16384x4096", "tma", 2048, 16384, 4096, "bfloat16", "k", {}),
    ("1000x4097x2048", "tma", 1000, 4097, 2048, "bfloat16", "k", {}),
    ("4096^3 fp16", "tma", 4096, 4096, 4096, "float16", "k", {}),
    ("8192^3 fp16", "tma", 8192, 8192, 8192, "float16", "k", {}),
    ("8192^3", "cp.async", 8192, 8192, 8192, "bfloat16", "k", {}),
    ("8192^3", "cp.async", 8192, 8192, 8192, "bfloat16", "n", {}),
    # decode-like: M <= 128, B (the bytes that bound it) larger than the L2
    ("decode 1x8192x8192", "tma", 1, 8192, 8192, "bfloat16", "k", {}),
    ("decode 8x4096x14336", "tma", 8, 4096, 14336, "bfloat16", "k", {}),
    ("decode 16x14336x4096", "tma", 16, 14336, 4096, "bfloat16", "n", {}),
    ("decode 64x8192x8192", "tma", 64, 8192, 8192, "float16", "k", {}),
    ("decode 128x8192x28672", "tma", 128, 8192, 28672, "bfloat16", "k", {}),
    # skinny outputs whose chosen width is narrow (gemm.py's narrow_width), each beside the usual width it replaces
    *_beside_usual(16096, 776, 2368, "float16", "k", 256),
    *_beside_usual(3288, 1040, 1760, "bfloat16", "k", 256),
    *_beside_usual(14368, 272, 1952, "float16", "k", 192),
    *_beside_usual(10240, 888, 3696, "bfloat16", "n", 256),
    *_beside_usual(14256, 328, 4264, "bfloat16", "n", 128),
]
# --tune: the main shape with other plans
TUNE = [
    ("8192^3 cluster=1", "tma", 8192, 8192, 8192, "bfloat16", "k", {"cluster": 1}),
    ("8192^3 stages=3", "tma", 8192, 8192, 8192, "bfloat16", "k", {"stages": 3}),
    ("8192^3 group_m=4", "tma", 8192, 8192, 8192, "bfloat16", "k", {"group_m": 4}),
    ("8192^3 group_m=16", "tma", 8192, 8192, 8192, "bfloat16", "k", {"group_m": 16}),
    ("8192^3 block_n=128", "tma", 8192, 8192, 8192, "bfloat16", "k", {"block_n": 128}),
    ("8192^3 cp.async block_n=128 stages=3", "cp.async", 8192, 8192, 8192, "bfloat16", "k", {"block_n": 128, "stages": 3}),
    ("8192^3 cp.async stages=3", "cp.async", 8192, 8192, 8192, "bfloat16", "k", {"stages": 3}),
]


def _padded(torch, rows: int, cols: int, dtype):
    """(rows, cols) with rows padded to 16 bytes: a view when cols is not a multiple of 8."""
    pitch = -(-cols // 8) * 8
    buf = torch.randn(rows, pitch, device="cuda", dtype=dtype)
    return buf[:, :cols]


def sweep_shapes(seed: int, count: int) -> list[tuple]:
    """``count`` random problems in SHAPES' form, from ``seed``."""
    rng = random.Random(seed)
    shapes = []
    for _ in range(count):
        m, n, k = (log_uniform(rng, 256, 16384, 8) for _ in range(3))
        dtype, major = rng.choice(("bfloat16", "float16")), rng.choice("kn")
        shapes.append((f"{m}x{n}x{k}", "tma", m, n, k, dtype, major, {}))
    return shapes


def measure(shape, rounds: int) -> dict:
    import torch

    from tmakit.ops import plan_gemm

    label, backend, m, n, k, dtype, b_major, kw = shape
    tdt = getattr(torch, dtype)
    a = _padded(torch, m, k, tdt)
    b = _padded(torch, n, k, tdt) if b_major == "k" else _padded(torch, k, n, tdt)
    c = _padded(torch, m, n, tdt)
    c.fill_(float("nan"))  # poisoned: a tile the kernel skips shows
    plan = plan_gemm(a, b, c, b_major=b_major, backend=backend, **kw)
    plan()
    bm = b.T if b_major == "k" else b
    ref = a.float() @ bm.float()
    torch.cuda.synchronize()
    err = ((c.float() - ref).abs().max() / ref.abs().max()).nan_to_num(float("inf")).item()
    del ref
    # cuBLAS on aligned operands: N (and K) rounded up to 8 elements, B zero-padded, contiguous: the peer at its
    # best on the same product (a few columns more work for it where N is odd)
    n8, k8 = -(-n // 8) * 8, -(-k // 8) * 8
    ac = torch.zeros(m, k8, device="cuda", dtype=tdt)
    ac[:, :k] = a
    bpad = torch.zeros(n8, k8, device="cuda", dtype=tdt) if b_major == "k" else torch.zeros(k8, n8, device="cuda", dtype=tdt)
    bpad[:b.shape[0], :b.shape[1]] = b
    bc = bpad.T if b_major == "k" else bpad
    cub = torch.empty(m, n8, device="cuda", dtype=tdt)
    cublas = lambda: torch.matmul(ac, bc, out=cub)  # noqa: E731
    flops = 2.0 * m * n * k
    launches = max(1, min(50, int(5e12 / flops)))
    for fn in (plan, cublas):
        for _ in range(3):
            time_ms(fn, torch, launches, queue_ahead=True)
    ours, theirs = [], []
    for _ in range(rounds):
        ours.append(time_ms(plan, torch, launches, queue_ahead=True))
        theirs.append(time_ms(cublas, torch, launches, queue_ahead=True))
    t, tc = statistics.median(ours), statistics.median(theirs)
    return {"shape": label, "backend": backend, "M": m, "N": n, "K": k, "dtype": dtype, "b_major": b_major,
            "tile": gemm_tile_label(plan), "ms": round(t, 4),
            "TFLOP/s": round(flops / t / 1e9, 1), "cuBLAS TFLOP/s": round(flops / tc / 1e9, 1),
            "x cuBLAS": round(tc / t, 3), "spread": round((max(ours) - min(ours)) / t, 3),
            "max rel err": float(f"{err:.3g}")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the 8192^3 rows only")
    parser.add_argument("--rounds", type=int, default=10, help="interleaved timing rounds (median)")
    parser.add_argument("--out", default=None, help="also copy the results files here")
    parser.add_argument("--name", default="gemm", help="results file stem (benchmarks/results/NAME.json)")
    parser.add_argument("--tune", action="store_true", help="also the main shape with other tile plans")
    parser.add_argument("--sweep", type=int, default=40, help="random shapes beside the named ones (default 40)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sweep (default 0)")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.sweep < 0:
        parser.error("--sweep must be at least 0")
    torch = torch_with_gpu("benchmarks/gemm.py", "the cuBLAS peer")
    if torch is None:
        return 0
    shapes = [s for s in SHAPES if s[0] == "8192^3"] if args.quick else list(SHAPES)
    sweep = [] if args.quick else sweep_shapes(args.seed, args.sweep)
    print(f"sweep: {len(sweep)} shapes from seed {args.seed}", flush=True)
    rows = []
    from rich.progress import Progress

    todo = [(s, "named") for s in shapes + (TUNE if args.tune else [])] + [(s, "sweep") for s in sweep]
    with Progress(transient=True) as progress:
        task = progress.add_task("GEMM shapes", total=len(todo))
        for shape, kind in todo:
            row = {"set": kind, **measure(shape, args.rounds)}
            row["ok"] = row["max rel err"] <= TOLERANCE
            progress.console.print({k: row[k] for k in ("shape", "backend", "b_major", "tile", "TFLOP/s",
                                                        "cuBLAS TFLOP/s", "x cuBLAS", "max rel err", "ok")})
            rows.append(row)
            progress.advance(task)
    swept = summary(args.seed, [(f"{r['shape']} {r['dtype']} B {r['b_major']}", r["x cuBLAS"])
                                for r in rows if r["set"] == "sweep"])
    print(f"sweep: min {swept['min']}, geomean {swept['geomean']}, worst {swept['worst']}")
    notes = ["FLOPs = 2 M N K; medians of interleaved rounds of back-to-back launches after warm-up",
             "cuBLAS = torch.matmul(a, b, out=) on the same values (b_major n: b; k: b.T, cuBLAS's TN case)",
             "cp.async rows: the sm_80 path (cp.async ring + ldmatrix + mma.sync) forced on this GPU",
             "decode rows: M <= 128, B larger than the L2",
             "1000x4097x2048: tmakit's operands are row-padded views (4097 is not a multiple of 8 elements); cuBLAS "
             "runs on aligned operands (N and K rounded up to 8, B zero-padded, a 1000 x 4104 output)",
             f"sweep: {swept['count']} shapes from seed {args.seed} (M, N, K log-uniform in [256, 16384], multiples of 8, "
             f"bf16/fp16, B K- or N-major): min {swept['min']}, geomean {swept['geomean']} x cuBLAS",
             f"ok: max rel err <= {TOLERANCE} on a NaN-poisoned output"]
    write_results(args.name, "GEMM: tmakit vs cuBLAS (torch.matmul)", rows, notes, args.out, extra={"sweep": swept})
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
