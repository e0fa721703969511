"""Every python block in README.md and docs/*.md runs as pasted, in a fresh namespace of its own.

A block whose first line is ``# requires: gpu`` (or ``sm90``, ``sm80``) runs under the matching marker; the rest
run on the CPU, here and in CI.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.M | re.S)
_REQUIRES = re.compile(r"#\s*requires:\s*(\w+)")
MARKS = {"gpu": pytest.mark.requires_gpu, "sm90": pytest.mark.requires_sm90, "sm80": pytest.mark.requires_sm80}


def _blocks() -> list:
    cases = []
    for path in DOCS:
        text = path.read_text()
        for match in _BLOCK.finditer(text):
            code = match.group(1)
            line = text.count("\n", 0, match.start()) + 2
            need = _REQUIRES.match(code.splitlines()[0]) if code.strip() else None
            if need and need.group(1) not in MARKS:
                raise ValueError(f"{path.name}:{line}: unknown requirement {need.group(1)!r} (use {sorted(MARKS)})")
            marks = [MARKS[need.group(1)]] if need else []
            cases.append(pytest.param(path, line, code, id=f"{path.name}:{line}", marks=marks))
    return cases


def test_the_readme_has_blocks_of_both_kinds_and_fits_150_lines():
    blocks = [p for p in _blocks() if p.values[0].name == "README.md"]
    assert any(not p.marks for p in blocks) and any(p.marks for p in blocks)
    assert len((ROOT / "README.md").read_text().splitlines()) <= 150


@pytest.mark.parametrize("path, line, code", _blocks())
def test_block_runs_as_pasted(path: Path, line: int, code: str, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # a block must not depend on the repository being the working directory
    exec(compile(code, f"{path.name}:{line}", "exec"), {"__name__": "__docs__"})


def test_every_test_the_docs_name_exists():
    """A doc that cites ``tests/test_x.py::test_name`` (or ``::test_other`` after it) names a test that is there."""
    cited = []
    for path in DOCS:
        for match in re.finditer(r"`(tests/test_\w+\.py)::(\w+)`((?:,\s*`::\w+`)*)", path.read_text()):
            names = [match.group(2)] + re.findall(r"`::(\w+)`", match.group(3))
            cited += [(path.name, match.group(1), name) for name in names]
    assert cited, "the docs cite no test"
    missing = [c for c in cited if not re.search(rf"^def {c[2]}\(", (ROOT / c[1]).read_text(), re.M)]
    assert missing == [], missing
