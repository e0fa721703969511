"""Every python block in README.md and docs/*.md runs as pasted, in a fresh namespace of its own.

A block whose first line is ``# requires: gpu`` (or ``sm90``, ``sm80``, and/or ``torch``) runs under the matching
markers, and skips with the reason where torch is not installed; the rest run on the CPU, here and in CI.
README.md and docs/CONTRACTS.md quote no measured figure (they point to docs/PERFORMANCE.md, which is generated).
"""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.M | re.S)
_REQUIRES = re.compile(r"#\s*requires:\s*([\w ,]+)$")
MARKS = {"gpu": pytest.mark.requires_gpu, "sm90": pytest.mark.requires_sm90, "sm80": pytest.mark.requires_sm80,
         "torch": pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                     reason="the block uses torch, which is not installed here")}


def _blocks() -> list:
    cases = []
    for path in DOCS:
        text = path.read_text()
        for match in _BLOCK.finditer(text):
            code = match.group(1)
            line = text.count("\n", 0, match.start()) + 2
            need = _REQUIRES.match(code.splitlines()[0]) if code.strip() else None
            wants = need.group(1).replace(",", " ").split() if need else []
            unknown = [w for w in wants if w not in MARKS]
            if unknown:
                raise ValueError(f"{path.name}:{line}: unknown requirement {unknown} (use {sorted(MARKS)})")
            marks = [MARKS[w] for w in wants]
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


def test_blocks_that_import_torch_say_so():
    """A block that needs torch is marked ``# requires: ... torch``, so that it skips, saying why, without it."""
    unmarked = [p.id for p in _blocks() if re.search(r"^\s*import torch|^\s*import .*\btorch\b", p.values[2], re.M)
                and "torch" not in (_REQUIRES.match(p.values[2].splitlines()[0]) or [None, ""])[1]]
    assert unmarked == [], unmarked


# a measured figure: a ratio (0.98x; not a rule such as ">= 2x"), a rate, or a time (a threshold "over 2 s" is none)
_FIGURE = re.compile(r"(?<!>= )\b\d+(\.\d+)?(-\d+(\.\d+)?)?x\b(?!\d)|\d\s*(TFLOP/s|GB/s|GiB/s)|"
                     r"\b\d+(\.\d+)?(-\d+(\.\d+)?)?\s?(us|µs|ms)\b|\b\d+(\.\d+)?-\d+(\.\d+)? s\b")


@pytest.mark.parametrize("name", ["README.md", "docs/CONTRACTS.md"])
def test_the_readme_and_contracts_quote_no_measured_figure(name):
    text = (ROOT / name).read_text()
    found = [m.group(0) for m in _FIGURE.finditer(text)]
    assert found == [], f"{name} quotes measured figures {found}: put them in benchmarks/results/ (docs/PERFORMANCE.md)"
    assert "docs/PERFORMANCE.md" in text or "PERFORMANCE.md" in text


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


def test_performance_md_is_what_the_results_make():
    """docs/PERFORMANCE.md is benchmarks/make_performance_md.py's output from benchmarks/results/*.json: a figure
    changes with its results file only (rerun the script after a benchmark)."""
    import importlib.util as util

    spec = util.spec_from_file_location("make_performance_md", ROOT / "benchmarks" / "make_performance_md.py")
    module = util.module_from_spec(spec)
    spec.loader.exec_module(module)
    page = module.build()
    assert (ROOT / "docs" / "PERFORMANCE.md").read_text() == page, \
        "docs/PERFORMANCE.md is stale: run python benchmarks/make_performance_md.py"
    assert "{{" not in page and "Device NVIDIA" in page


def test_the_performance_page_refuses_what_it_cannot_fill(tmp_path):
    import importlib.util as util
    import shutil

    spec = util.spec_from_file_location("make_performance_md", ROOT / "benchmarks" / "make_performance_md.py")
    module = util.module_from_spec(spec)
    spec.loader.exec_module(module)
    results = tmp_path / "results"
    shutil.copytree(ROOT / "benchmarks" / "results", results)
    template = tmp_path / "template.md"
    template.write_text("{{gemm.table}}\n{{gemm.no_such_part}}\n")
    with pytest.raises(SystemExit, match=r"asks for \{\{gemm.no_such_part\}\}, which no results file gives"):
        module.build(results, template)
    (results / "gemm.json").unlink()
    with pytest.raises(SystemExit, match=r"gemm.json is missing"):
        module.build(results, template)
    shutil.copy(ROOT / "benchmarks" / "results" / "gemm.json", results)
    for name in module.OPTIONAL:  # an optional section without its file says how to measure it, and nothing else
        (results / f"{name}.json").unlink(missing_ok=True)
        template.write_text(f"a {{{{{name}.run}}}} b\n{{{{{name}.table}}}}\n")
        page = module.build(results, template)
        script = module.OPTIONAL[name][0]
        assert f"a  b\nNo run recorded yet: `PYTHONPATH=. python benchmarks/{script}" in page, page
