"""Seeded random shapes beside a benchmark's named ones, and their summary: min, geomean, worst cases.

A ratio that holds only on a benchmark's own shapes is not a result; each benchmark draws its sweep from a seed it
prints (and writes into its results file), checks every output before timing it, and reports the sweep's minimum,
geometric mean and worst cases.
"""
from __future__ import annotations

import math
import random


def log_uniform(rng: random.Random, lo: int, hi: int, multiple: int = 1) -> int:
    """An integer in [lo, hi], log-uniform (small and large sizes equally likely), a multiple of ``multiple``."""
    value = math.exp(rng.uniform(math.log(lo), math.log(hi)))
    return max(lo, min(hi, int(round(value / multiple)) * multiple))


def summary(seed: int, ratios: list[tuple[str, float]], worst: int = 5) -> dict:
    """{"seed", "count", "min", "geomean", "worst": [[label, ratio], ...]} of a sweep's (label, ratio) pairs."""
    if not ratios:
        return {"seed": seed, "count": 0, "min": None, "geomean": None, "worst": []}
    values = [r for _, r in ratios]
    geomean = math.exp(sum(math.log(v) for v in values) / len(values))
    ranked = sorted(ratios, key=lambda lr: lr[1])[:worst]
    return {"seed": seed, "count": len(values), "min": round(min(values), 3), "geomean": round(geomean, 3),
            "worst": [[label, round(r, 3)] for label, r in ranked]}


def sweep_arguments(description: str, name: str, sweep: int, rounds: int = 10):
    """The argument parser every sweep benchmark shares: --rounds, --out, --name, --sweep, --seed."""
    import argparse

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--rounds", type=int, default=rounds, help="interleaved timing rounds (median)")
    parser.add_argument("--out", default=None, help="also copy the results files here")
    parser.add_argument("--name", default=name, help=f"results file stem (default {name})")
    parser.add_argument("--sweep", type=int, default=sweep, help=f"random problems beside the named ones (default {sweep})")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sweep (default 0)")
    return parser


def checked_arguments(parser, argv):
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.sweep < 0:
        parser.error("--sweep must be at least 0")
    return args


def interleaved_medians(fns, torch, launches: int, rounds: int, warmup: int = 1) -> list[float]:
    """Median GPU milliseconds per call of each function, in interleaved rounds after ``warmup`` rounds."""
    import statistics

    from benchmarks._common import time_ms

    for fn in fns:
        for _ in range(warmup):
            time_ms(fn, torch, launches, queue_ahead=True)
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            times[i].append(time_ms(fn, torch, launches, queue_ahead=True))
    return [statistics.median(t) for t in times]


def measure_all(todo, measure, error_key: str, tolerance: float, shown: tuple[str, ...], what: str) -> list[dict]:
    """Run ``measure(shape)`` for each (shape, set) of ``todo`` under a progress bar; each row gets "set" and "ok"
    (its ``error_key`` at most ``tolerance``) and is printed by the ``shown`` keys."""
    from rich.progress import Progress

    rows = []
    with Progress(transient=True) as progress:
        task = progress.add_task(what, total=len(todo))
        for shape, kind in todo:
            row = {"set": kind, **measure(shape)}
            row["ok"] = row[error_key] <= tolerance
            progress.console.print({key: row[key] for key in shown + ("ok",)})
            rows.append(row)
            progress.advance(task)
    return rows


def loop_and_dense(seed: int, rows: list[dict]) -> tuple[dict, dict]:
    """The sweep's summaries against the per-sequence loop ("x loop") and the dense kernel ("x dense"), printed."""
    swept = summary(seed, [(r["shape"], r["x loop"]) for r in rows if r["set"] == "sweep"])
    dense = summary(seed, [(r["shape"], r["x dense"]) for r in rows if r["set"] == "sweep"])
    print(f"sweep vs loop: min {swept['min']}, geomean {swept['geomean']}; vs dense: min {dense['min']}, "
          f"geomean {dense['geomean']}")
    return swept, dense

