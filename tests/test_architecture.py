"""The layout shows the architecture: tmakit's import graph has no cycle, and only the driver layer touches
``cuda.bindings.driver``.

Every module under tmakit/ is parsed with ``ast``; every import statement counts, at module level or inside
a function (a function-local import does not hide a cycle here), and inside ``if TYPE_CHECKING:`` too.
"""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "tmakit"
DRIVER_IMPORTERS = {"tmakit._driver", "tmakit.tensormap.encode"}  # the driver layer and the tensor-map encoder


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> tuple[set[str], set[str]]:
    """(tmakit modules imported, external modules imported) by the module ``name``."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    internal, external = set(), set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                (internal if alias.name in modules else external).add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target not in modules and not target.startswith("tmakit"):
                external.add(target)
                external.update(f"{target}.{alias.name}" for alias in node.names)
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                internal.add(sub if sub in modules else target)
    internal.discard(name)
    return internal, external


def _graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    modules = _modules()
    graph, externals = {}, {}
    for name, path in modules.items():
        graph[name], externals[name] = _imports(name, path, modules)
    return graph, externals


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_import_graph_is_read():
    graph, _ = _graph()
    assert len(graph) > 30
    assert "tmakit.tensormap.rules" in graph["tmakit.tensormap.describe"]
    assert "tmakit._driver" in graph["tmakit.launch"]


def test_no_import_cycles():
    graph, _ = _graph()
    cycle = _find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_only_the_driver_layer_imports_cuda_bindings_driver():
    _, externals = _graph()
    importers = {name for name, ext in externals.items() if "cuda.bindings.driver" in ext}
    assert importers <= DRIVER_IMPORTERS, f"cuda.bindings.driver imported by {sorted(importers - DRIVER_IMPORTERS)}"
    assert "tmakit._driver" in importers


def test_no_compiled_extension_and_no_corpus_in_the_core():
    assert not list(PACKAGE.rglob("*.c")) and not (PACKAGE / "_hotpath.py").exists()
    graph, _ = _graph()
    users = {name for name, deps in graph.items() if "tmakit.tensormap.corpus" in deps}
    assert users <= {"tmakit.cli"}, f"the corpus generator is tooling; imported by {sorted(users)}"


def test_one_array_adapter_reads_array_objects():
    """Only arrays.py (the adapter) calls torch's tensor API or reads __cuda_array_interface__ (the ops, owned
    and planned separately, are left out)."""
    readers = set()
    for name, path in _modules().items():
        if name.startswith("tmakit.ops"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("data_ptr", "element_size", "get_device"):
                readers.add(name)
            if isinstance(node, ast.Constant) and node.value == "__cuda_array_interface__" or (
                    isinstance(node, ast.Attribute) and node.attr == "__cuda_array_interface__"
                    and not isinstance(node.ctx, ast.Store)):
                readers.add(name)
    assert readers <= {"tmakit.arrays", "tmakit.device_array"}, sorted(readers)


def test_one_stream_adapter():
    """Only streams.py reads stream objects (``__cuda_stream__``, ``.cuda_stream``)."""
    readers = set()
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in ("__cuda_stream__", "cuda_stream") or (
                    isinstance(node, ast.Attribute) and node.attr == "__cuda_stream__"):
                readers.add(name)
    assert readers <= {"tmakit.streams"}, sorted(readers)


def test_contracts_name_every_module():
    """docs/CONTRACTS.md says it names every module of tmakit/: each one's path, or its name in backticks."""
    import re

    tokens = set(re.findall(r"`([^`]+)`", (PACKAGE.parent / "docs" / "CONTRACTS.md").read_text()))
    missing = []
    for name, path in _modules().items():
        stem = path.stem
        if stem in ("__init__", "__main__"):
            continue
        rel = str(path.relative_to(PACKAGE.parent))
        if not any(t == rel or t == stem or t == f"{stem}.py" or re.match(rf"{re.escape(stem)}\b", t)
                   for t in tokens):
            missing.append(rel)
    assert missing == [], f"docs/CONTRACTS.md does not name {missing}"
