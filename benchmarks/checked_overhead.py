"""What a checked launch costs: the hang doctor's twin (bounded mbarrier waits) beside the same plan unchecked, in
the same run. Writes benchmarks/results/checked_overhead.json and .md.

Each row: GEMM 8192^3 bf16 (B K-major) or attention B4 H16 S4096 D128 bf16 (plain and causal), three plans on the
same operands: unchecked, ``checked="deferred"`` (launches never wait; the records are checked as they come back)
and ``checked=True`` (each launch waits for its record); medians of CUDA-event timings of back-to-back launches
after warm-up (about 30 ms of launches per sample, so the host's first call is not what is timed), the three
interleaved round by round in an order shuffled each round (seeded: no mode always follows another);
overhead = the median over rounds of checked / unchecked of the same round, - 1 (pairs within a round cancel the
clock drift between rounds; goal <= 3% for the deferred launch, the one meant to stay on). The outputs must agree
bit for bit (the twin only bounds the waits).

    python benchmarks/checked_overhead.py [--rounds N] [--out DIR] [--name NAME]
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._common import time_ms, torch_with_gpu, write_results  # noqa: E402

GOAL = 0.03


MODES = {"unchecked": False, "deferred": "deferred", "each launch waits": True}


def _plans(torch, case: str):
    """({mode: plan}, {mode: output}, flops) for one case, on the same fresh random operands."""
    from tmakit.ops import plan_attention, plan_gemm

    if case == "gemm 8192^3":
        a, b = (torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        outs = {m: torch.empty(8192, 8192, device="cuda", dtype=torch.bfloat16) for m in MODES}
        plans = {m: plan_gemm(a, b, outs[m], b_major="k", checked=flag) for m, flag in MODES.items()}
        return plans, outs, 2.0 * 8192**3
    causal = case.endswith("causal")
    q, k, v = (torch.randn(4, 16, 4096, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    outs = {m: torch.empty_like(q) for m in MODES}
    plans = {m: plan_attention(q, k, v, outs[m], causal=causal, checked=flag) for m, flag in MODES.items()}
    return plans, outs, plans["unchecked"].flops


def measure(torch, case: str, rounds: int, rng: random.Random) -> list[dict]:
    import tmakit

    plans, outs, flops = _plans(torch, case)
    for plan in plans.values():
        plan()
    torch.cuda.synchronize()
    tmakit.check_hangs()
    same = all(bool(torch.equal(outs["unchecked"], o)) for o in outs.values())
    launches = max(1, min(50, int(3e13 / flops)))  # a loop of ~30 ms: the host keeps ahead, as in a real loop
    for plan in plans.values():
        for _ in range(3):
            time_ms(plan, torch, launches)
    times: dict[str, list[float]] = {m: [] for m in MODES}
    order = list(plans)
    for _ in range(rounds):
        rng.shuffle(order)
        for m in order:
            times[m].append(time_ms(plans[m], torch, launches))
    tmakit.check_hangs()  # a hang in a timed deferred launch would raise here
    base = statistics.median(times["unchecked"])
    rows = []
    for m in list(MODES)[1:]:
        t = statistics.median(times[m])
        overhead = statistics.median(c / u for c, u in zip(times[m], times["unchecked"])) - 1
        goal = ("met" if overhead <= GOAL else f"MISSED (> {GOAL:.0%})") if m == "deferred" else "-"
        rows.append({"case": case, "mode": m, "unchecked ms": round(base, 4), "checked ms": round(t, 4),
                     "unchecked TFLOP/s": round(flops / base / 1e9, 1), "overhead": round(overhead, 4),
                     "goal": goal, "same output": same})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40, help="interleaved timing rounds (median)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the order of the modes in each round")
    parser.add_argument("--out", default=None, help="also copy the results files here")
    parser.add_argument("--name", default="checked_overhead", help="results file stem (benchmarks/results/NAME)")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    torch = torch_with_gpu("benchmarks/checked_overhead.py", "its operands")
    if torch is None:
        return 0
    from rich.console import Console

    rows, rng = [], random.Random(args.seed)
    print(f"seed {args.seed}")
    with Console(stderr=True).status("timing checked and unchecked launches") as status:
        for case in ("gemm 8192^3", "attention main", "attention main causal"):
            status.update(f"timing {case}")
            rows += measure(torch, case, args.rounds, rng)
    notes = ["checked: plans made with checked='deferred' (launches never wait) and checked=True (each launch waits "
             "for its record): the hang doctor's twin, every mbarrier wait bounded (tmakit.doctor.instrument); "
             "unchecked: checked=False; same operands, interleaved rounds in a shuffled order (seed "
             f"{args.seed}), {args.rounds} rounds; overhead: median of the per-round ratios",
             f"goal: overhead <= {GOAL:.0%} for the deferred launch; same output: every output equal bit for bit"]
    write_results(args.name, "Checked launches: the hang doctor's overhead", rows, notes, args.out)
    return 0 if all(r["same output"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
