"""The examples run as a user runs them: from tmakit built as a wheel and installed, in a folder outside the
repository, on the public API only.

``--help`` answers; bad arguments are argparse errors (exit 2); on a machine without a GPU (CUDA_VISIBLE_DEVICES
hides any) each does what it can and exits 0 saying so; on a GPU, with a small size and ``--check`` where the
example has it, each launches and checks its results.
"""
from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tmakit

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted(p.name for p in (ROOT / "examples").glob("*.py"))
SMALL = {"describe_and_load.py": ["--rows", "200", "--cols", "256"],
         "tma_copy_transpose.py": ["--rows", "1040", "--cols", "528", "--repeats", "2"],
         "async_memcpy_overlap.py": ["--gib", "0.0625", "--chunk-mib", "4"],
         "gemm.py": ["--shape", "1000,4097,520", "--check"],
         "attention.py": ["--batch", "1", "--heads", "2", "--kv-heads", "1", "--seqlen", "1000", "--check"],
         "grouped_gemm.py": ["--experts", "5", "--tokens", "1000", "--n", "264", "--k", "200", "--check"],
         "fp8_gemm.py": ["--shape", "1000,520,1040", "--check"],
         "multi_gpu.py": ["--shape", "300,520,264", "--check", "--bench", "--rounds", "1"]}
CHECKED = {"describe_and_load.py": "every byte matches the CPU model", "tma_copy_transpose.py": "results checked:",
           "async_memcpy_overlap.py": "overlapped end-to-end", "gemm.py": "(ok, tolerance", "attention.py": "check: PASSED",
           "grouped_gemm.py": "(ok, tolerance", "fp8_gemm.py": "(ok, tolerance", "multi_gpu.py": "(ok, tolerance"}
BAD = {"describe_and_load.py": ["--cols", "1023"], "tma_copy_transpose.py": ["--dtype", "complex128"],
       "async_memcpy_overlap.py": ["--gib", "-1"], "gemm.py": ["--shape", "1,2"], "attention.py": ["--seqlen", "0"],
       "grouped_gemm.py": ["--experts", "0"], "fp8_gemm.py": ["--shape", "64,64,60"], "multi_gpu.py": ["--shape", "64,64,60"]}


@pytest.fixture(scope="module")
def installed(tmp_path_factory, built_wheel) -> dict:
    """tmakit from its wheel in a folder outside the repository (this interpreter supplies the dependencies),
    and a second folder holding copies of the examples to run them from."""
    base = tmp_path_factory.mktemp("installed")
    site, run = base / "site", base / "run"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(built_wheel)],
                   check=True, capture_output=True, timeout=300)
    run.mkdir()
    for name in EXAMPLES:
        shutil.copy(ROOT / "examples" / name, run / name)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TMAKIT_SOURCE_DIR")}
    env["PYTHONPATH"] = str(site)
    where = subprocess.run([sys.executable, "-c", "import tmakit; print(tmakit.__file__, tmakit.source_dirs()[0])"],
                           capture_output=True, text=True, env=env, cwd=run, check=True).stdout.split()
    assert all(Path(p).resolve().is_relative_to(site.resolve()) for p in where), where  # the wheel's, not the checkout
    return {"env": env, "run": run}


def _run(installed: dict, name: str, *argv: str, gpu: bool = True) -> subprocess.CompletedProcess:
    env = dict(installed["env"])
    if not gpu:
        env["CUDA_VISIBLE_DEVICES"] = ""
    return subprocess.run([sys.executable, name, *argv], capture_output=True, text=True, timeout=600, env=env,
                          cwd=installed["run"])


def test_every_example_has_a_small_size_and_a_bad_argument():
    assert set(EXAMPLES) == set(SMALL) == set(BAD) == set(CHECKED)


@pytest.mark.parametrize("name", EXAMPLES)
def test_examples_use_only_the_public_api(name):
    """No private module, no ops internals, no sys.path edits: only names tmakit and tmakit.ops export."""
    tree = ast.parse((ROOT / "examples" / name).read_text())
    public = {"tmakit": set(tmakit.__all__), "tmakit.ops": set(tmakit.ops.__all__)}
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bad += [a.name for a in node.names if a.name.startswith("tmakit") and a.name not in public]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tmakit"):
            if node.module not in public:
                bad.append(node.module)
            else:
                bad += [f"{node.module}.{a.name}" for a in node.names if a.name not in public[node.module]]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "tmakit":
            if node.attr not in public["tmakit"]:
                bad.append(f"tmakit.{node.attr}")
        elif isinstance(node, ast.Attribute) and ast.unparse(node.value) == "tmakit.ops":
            if node.attr not in public["tmakit.ops"]:
                bad.append(f"tmakit.ops.{node.attr}")
        elif isinstance(node, ast.Attribute) and ast.unparse(node) == "sys.path":
            bad.append("sys.path")
    assert bad == [], f"{name} reaches past the public API: {sorted(set(bad))}"


@pytest.mark.parametrize("name", EXAMPLES)
def test_help(installed, name):
    done = _run(installed, name, "--help", gpu=False)
    assert done.returncode == 0 and done.stdout.startswith("usage:"), done.stderr


@pytest.mark.parametrize("name", EXAMPLES)
def test_bad_arguments_are_usage_errors(installed, name):
    done = _run(installed, name, *BAD[name], gpu=False)
    assert done.returncode == 2 and "error:" in done.stderr and "Traceback" not in done.stderr, done.stderr


@pytest.mark.parametrize("name", EXAMPLES)
def test_without_a_gpu_exits_0_with_a_message(installed, name):
    done = _run(installed, name, *SMALL[name], gpu=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no CUDA GPU here" in done.stdout and "Traceback" not in done.stderr, done.stdout + done.stderr


def test_without_a_gpu_the_transpose_example_names_the_path_the_gpu_takes(installed):
    """10007 x 10009 fp16: both pitches are odd; on sm_90 the plan reads the source through TMA row classes
    (what tmakit.ops.describe_transpose, the plan's own decision, says)."""
    done = _run(installed, "tma_copy_transpose.py", "--rows", "10007", "--cols", "10009", "--dtype", "float16",
                gpu=False)
    result = tmakit.ops.describe_transpose((10007, 10009), "float16", arch="sm_90")
    assert result.backend.name == "tma" and "8 row classes" in result.reason
    assert done.returncode == 0 and "the tma path" in done.stdout and "8 row classes" in done.stdout, done.stdout


def _on_the_gpu(installed, name):
    done = _run(installed, name, *SMALL[name])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no CUDA GPU" not in done.stdout and "no torch" not in done.stdout and "WRONG" not in done.stdout, done.stdout
    assert CHECKED[name] in done.stdout, done.stdout  # the example checked its results (torch is there for the peers)


@pytest.mark.requires_gpu
@pytest.mark.parametrize("name", [n for n in EXAMPLES if n != "multi_gpu.py"])
def test_on_the_gpu(installed, name):
    _on_the_gpu(installed, name)


@pytest.mark.requires_2gpus
def test_multi_gpu_example_on_two_gpus(installed):
    _on_the_gpu(installed, "multi_gpu.py")


@pytest.mark.requires_sm90
@pytest.mark.parametrize("mode", [["--varlen", "--causal"], ["--paged", "16"], ["--paged", "64", "--causal"]],
                         ids=["varlen", "paged-decode", "paged-prefill"])
def test_attention_example_packed_modes_on_the_gpu(installed, mode):
    done = _run(installed, "attention.py", "--batch", "3", "--heads", "4", "--kv-heads", "2", "--seqlen", "700",
                "--check", *mode)
    assert done.returncode == 0 and "check: PASSED" in done.stdout, done.stdout + done.stderr

