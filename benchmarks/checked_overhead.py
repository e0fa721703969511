"""What a checked launch costs: the hang doctor's twin (bounded mbarrier waits, ``checked=True``) beside the same
plan unchecked, in the same run. Writes benchmarks/results/checked_overhead.json and .md.

Each row: GEMM 8192^3 bf16 (B K-major) or attention B4 H16 S4096 D128 bf16 (plain and causal), one plan of each
kind on the same operands, medians of CUDA-event timings of back-to-back launches after warm-up, unchecked and
checked interleaved round by round; overhead = checked / unchecked - 1 (goal <= 3%). The two outputs must agree
bit for bit (the twin only adds the bounded waits).

    python benchmarks/checked_overhead.py [--rounds N] [--out DIR] [--name NAME]
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._common import time_ms, torch_with_gpu, write_results  # noqa: E402

GOAL = 0.03


def _plans(torch, case: str):
    """(unchecked, checked, outputs, flops) for one case, on the same fresh random operands."""
    from tmakit.ops import plan_attention, plan_gemm

    if case == "gemm 8192^3":
        a, b = (torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        outs = [torch.empty(8192, 8192, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
        plans = [plan_gemm(a, b, c, b_major="k", checked=flag) for c, flag in zip(outs, (False, True))]
        return plans, outs, 2.0 * 8192**3
    causal = case.endswith("causal")
    q, k, v = (torch.randn(4, 16, 4096, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    outs = [torch.empty_like(q) for _ in range(2)]
    plans = [plan_attention(q, k, v, o, causal=causal, checked=flag) for o, flag in zip(outs, (False, True))]
    return plans, outs, plans[0].flops


def measure(torch, case: str, rounds: int) -> dict:
    (plain, checked), outs, flops = _plans(torch, case)
    plain(), checked()
    torch.cuda.synchronize()
    same = bool(torch.equal(outs[0], outs[1]))
    launches = max(1, min(20, int(5e12 / flops)))
    for fn in (plain, checked):
        for _ in range(3):
            time_ms(fn, torch, launches)
    a, b = [], []
    for _ in range(rounds):
        a.append(time_ms(plain, torch, launches))
        b.append(time_ms(checked, torch, launches))
    t, tc = statistics.median(a), statistics.median(b)
    overhead = tc / t - 1
    return {"case": case, "unchecked ms": round(t, 4), "checked ms": round(tc, 4),
            "unchecked TFLOP/s": round(flops / t / 1e9, 1), "overhead": round(overhead, 4),
            "goal": "met" if overhead <= GOAL else f"MISSED (> {GOAL:.0%})", "same output": same}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="interleaved timing rounds (median)")
    parser.add_argument("--out", default=None, help="also copy the results files here")
    parser.add_argument("--name", default="checked_overhead", help="results file stem (benchmarks/results/NAME)")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    torch = torch_with_gpu("benchmarks/checked_overhead.py", "its operands")
    if torch is None:
        return 0
    from rich.console import Console

    rows = []
    with Console(stderr=True).status("timing checked and unchecked launches") as status:
        for case in ("gemm 8192^3", "attention main", "attention main causal"):
            status.update(f"timing {case}")
            rows.append(measure(torch, case, args.rounds))
    notes = ["checked: the plan made with checked=True (the hang doctor's twin: every mbarrier wait bounded, "
             "tmakit.doctor.instrument); unchecked: checked=False; same operands, interleaved rounds",
             f"goal: overhead <= {GOAL:.0%}; same output: the two outputs equal bit for bit"]
    write_results(args.name, "Checked launches: the hang doctor's overhead", rows, notes, args.out)
    return 0 if all(r["same output"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
