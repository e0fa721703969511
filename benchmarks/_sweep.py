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
