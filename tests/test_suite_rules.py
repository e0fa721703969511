"""The tests themselves: none passes by not testing.

Read from the test files' syntax trees: no test returns early (a test that returns on old hardware counts as
passed), every skip says why, every marker is one pytest or pyproject.toml declares (a misspelt GPU marker would
run a GPU test on CPU), and the GPU-requirement switch in conftest.py turns skips into an error.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
FILES = sorted(TESTS.glob("test_*.py"))
BUILTIN_MARKS = {"parametrize", "skip", "skipif", "xfail", "usefixtures", "filterwarnings"}


def _declared_marks() -> set[str]:
    text = (TESTS.parent / "pyproject.toml").read_text()
    block = text.split("markers = [", 1)[1].split("]", 1)[0]
    return {line.strip().strip('",').split(":")[0] for line in block.splitlines() if ":" in line}


def _tests(tree: ast.Module):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            yield node


def _own_nodes(function: ast.AST):
    """The nodes of ``function``'s body, not of functions or lambdas defined inside it."""
    stack = list(ast.iter_child_nodes(function))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def _is_call_to(node: ast.AST, dotted: str) -> bool:
    return isinstance(node, ast.Call) and ast.unparse(node.func) == dotted


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_no_test_returns_early(path):
    tree = ast.parse(path.read_text())
    early = [f"{t.name}:{n.lineno}" for t in _tests(tree) for n in _own_nodes(t) if isinstance(n, ast.Return)]
    assert early == [], f"{path.name}: tests that return (a return counts as a pass): {early}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_skip_says_why(path):
    tree = ast.parse(path.read_text())
    silent = []
    for node in ast.walk(tree):
        if _is_call_to(node, "pytest.skip") and not (node.args or any(k.arg == "reason" for k in node.keywords)):
            silent.append(node.lineno)
        if _is_call_to(node, "pytest.mark.skipif") and not any(k.arg == "reason" for k in node.keywords):
            silent.append(node.lineno)
    assert silent == [], f"{path.name}: skips without a reason at lines {silent}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_markers_are_declared(path):
    known = BUILTIN_MARKS | _declared_marks()
    used = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and \
                ast.unparse(node.value) == "pytest.mark":
            used.add(node.attr)
    assert used <= known, f"{path.name}: unknown markers {sorted(used - known)} (declare them in pyproject.toml)"


def test_the_gpu_markers_are_declared():
    assert {"requires_gpu", "requires_sm90", "requires_sm80"} <= _declared_marks()


def test_requiring_a_gpu_that_is_not_there_is_an_error(tmp_path):
    """With TMAKIT_TEST_REQUIRE_GPU set, a run where the GPU tests would skip fails instead."""
    import os

    (tmp_path / "test_probe.py").write_text("import pytest\n\n@pytest.mark.requires_gpu\ndef test_gpu():\n    pass\n")
    (tmp_path / "conftest.py").write_text((TESTS / "conftest.py").read_text())
    env = {**os.environ, "TMAKIT_TEST_NO_GPU": "1", "TMAKIT_TEST_REQUIRE_GPU": "1"}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert run.returncode != 0 and "GPU tests would all skip" in run.stdout + run.stderr, run.stdout[-2000:]
    env.pop("TMAKIT_TEST_REQUIRE_GPU")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(tmp_path)],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert run.returncode == 0 and "1 skipped" in run.stdout and "TMAKIT_TEST_NO_GPU is set" in run.stdout, run.stdout
