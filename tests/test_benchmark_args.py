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
