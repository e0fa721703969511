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


@pytest.mark.parametrize("entry", ["tma:256", "tma:256:two:4096:none", "cp.async:256:1:4096:none:on:many"])
def test_transpose_stages_refuses_a_malformed_variant(entry):
    done = _run(BENCHMARKS / "experiments" / "transpose_stages.py", "--variants", entry)
    assert done.returncode == 2
    assert f"--variants '{entry}'" in done.stderr and "each entry is backend:rows:stages:run_bytes:l2" in done.stderr


def test_transpose_stages_parses_every_variant_form():
    sys.path.insert(0, str(BENCHMARKS / "experiments"))
    sys.path.insert(0, str(BENCHMARKS))
    try:
        from transpose_stages import parse_variant
    finally:
        del sys.path[:2]
    assert parse_variant("tma:256:2:4096:none") == ("tma", 256, 2, 4096, "none", "on", 256, 1, "np")
    assert parse_variant("cp.async:128:4:65536:none:off:512:2:p") == ("cp.async", 128, 4, 65536, "none", "off", 512, 2, "p")
    assert parse_variant("triton") == ("triton", 0, 0, 0, "", "", 0, 0, "")
    assert parse_variant("triton:256:128:4") == ("triton", 256, 128, 4, "", "", 0, 0, "")
