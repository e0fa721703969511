"""The examples run as a user runs them: ``--help``; on a machine without a GPU (CUDA_VISIBLE_DEVICES hides any)
they do what they can and exit 0 with a message; on a GPU, with a small size, they check their results."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted(p.name for p in (ROOT / "examples").glob("*.py"))
SMALL = {"describe_and_load.py": ["--rows", "200", "--cols", "256"],
         "tma_copy_transpose.py": ["--rows", "1040", "--cols", "528", "--repeats", "2"],
         "async_memcpy_overlap.py": ["--gib", "0.0625", "--chunk-mib", "4"],
         "gemm.py": ["--shape", "1000,4097,520", "--check"],
         "attention.py": ["--batch", "1", "--heads", "2", "--seqlen", "1000", "--check"]}


def _run(name: str, *argv: str, gpu: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    if not gpu:
        env["CUDA_VISIBLE_DEVICES"] = ""
    return subprocess.run([sys.executable, str(ROOT / "examples" / name), *argv], capture_output=True, text=True,
                          timeout=300, env=env, cwd=ROOT)


def test_every_example_has_a_small_size():
    assert set(EXAMPLES) == set(SMALL)


@pytest.mark.parametrize("name", EXAMPLES)
def test_help(name):
    done = _run(name, "--help", gpu=False)
    assert done.returncode == 0 and done.stdout.startswith("usage:"), done.stderr


@pytest.mark.parametrize("name", EXAMPLES)
def test_without_a_gpu_exits_0_with_a_message(name):
    done = _run(name, *SMALL[name], gpu=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no CUDA GPU here" in done.stdout, done.stdout


@pytest.mark.requires_gpu
@pytest.mark.parametrize("name", EXAMPLES)
def test_on_the_gpu(name):
    done = _run(name, *SMALL[name])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no CUDA GPU" not in done.stdout and "WRONG" not in done.stdout, done.stdout
