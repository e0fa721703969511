"""The benchmark scripts refuse bad arguments before any GPU work, naming the argument and the rule."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _run(script: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(script), *argv], capture_output=True, text=True, timeout=60)


def test_copy_bandwidth_refuses_a_batch_below_one():
    done = _run(BENCHMARKS / "copy_bandwidth.py", "--batch", "0")
    assert done.returncode == 2
    assert "argument --batch: 0 is below 1" in done.stderr and "use 1 to time single calls" in done.stderr


@pytest.mark.parametrize("script", sorted(p.name for p in BENCHMARKS.glob("*.py") if not p.name.startswith("_")
                                          and p.name != "sanitize_driver.py"))
def test_every_benchmark_explains_itself(script):
    done = _run(BENCHMARKS / script, "--help")
    assert done.returncode == 0 and done.stdout.startswith("usage:"), done.stderr


def test_compile_times_measures_cold_and_warm_compiles_as_json():
    import json

    done = subprocess.run([sys.executable, str(BENCHMARKS / "compile_times.py"), "--only", "tile_load tma", "--json",
                           "--warm-repeats", "1"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)["rows"]  # stdout is the JSON alone (progress goes to stderr)
    assert (row["source"], row["arch"]) == ("tile_load.cu", "sm_90a") and row["cubin_kib"] > 0
    assert 0 < row["warm_ms"] < row["cold_s"] * 1000
    done = _run(BENCHMARKS / "compile_times.py", "--only", "no such variant")
    assert done.returncode == 2 and "matches no variant" in done.stderr


def test_sweeps_draw_reproducible_shapes_and_summarise_them():
    import random

    sys.path.insert(0, str(BENCHMARKS.parent))
    from benchmarks import gemm
    from benchmarks._sweep import log_uniform, summary

    rng = random.Random(3)
    values = [log_uniform(rng, 256, 16384, 8) for _ in range(500)]
    assert all(256 <= v <= 16384 and v % 8 == 0 for v in values)
    assert sum(v < 2048 for v in values) > 100 and sum(v > 4096 for v in values) > 100  # log-uniform: both ends
    assert gemm.sweep_shapes(5, 40) == gemm.sweep_shapes(5, 40) != gemm.sweep_shapes(6, 40)
    assert len(gemm.sweep_shapes(5, 40)) == 40
    s = summary(5, [("a", 0.5), ("b", 2.0), ("c", 1.0)], worst=2)
    assert s == {"seed": 5, "count": 3, "min": 0.5, "geomean": 1.0, "worst": [["a", 0.5], ["c", 1.0]]}


@pytest.mark.parametrize("script", ["gemm.py", "attention.py", "copy_bandwidth.py"])
def test_sweeps_refuse_a_negative_count(script):
    done = _run(BENCHMARKS / script, "--sweep", "-1")
    assert done.returncode == 2 and "--sweep must be at least 0" in done.stderr
