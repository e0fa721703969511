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
