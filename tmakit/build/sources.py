"""Where kernel sources live, how a ``source`` argument is resolved, and which headers a source includes.

The header scan feeds the cache key: a kernel must recompile when any ``#include "..."`` it reaches changes,
so every quoted or angled include that resolves inside our include directories is hashed, transitively.
"""
from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import InvalidArgumentError

_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)


_PACKAGED = Path(__file__).resolve().parents[1] / "_sources"  # where a wheel puts cuda_src/ and ptx/
_REPOSITORY = Path(__file__).resolve().parents[2]  # a source checkout (or an editable install)


def source_dirs() -> tuple[Path, Path]:
    """``(cuda_src, ptx)``: under ``TMAKIT_SOURCE_DIR`` when it is set, else the installed package's copy
    (``tmakit/_sources/``, mapped from the repository's top-level folders by pyproject.toml), else the
    repository's top-level ``cuda_src/`` and ``ptx/``."""
    root = os.environ.get("TMAKIT_SOURCE_DIR")
    if root:
        base = Path(root).expanduser().resolve()
    elif (_PACKAGED / "cuda_src").is_dir():
        base = _PACKAGED
    else:
        base = _REPOSITORY
    return base / "cuda_src", base / "ptx"


@dataclass(frozen=True)
class Source:
    text: str
    name: str  # what NVRTC/ptxas messages call it
    path: Path | None  # None for source given as text


def resolve_source(source: str | Path, folder: Path, suffix: str, parameter: str = "source") -> Source:
    """A file under ``folder`` ("tile_load.cu"), a path, or the source text itself."""
    if isinstance(source, Path) or ("\n" not in str(source) and str(source).endswith(suffix)):
        path = Path(source)
        candidates = [path] if path.is_absolute() else [folder / path, Path.cwd() / path]
        for candidate in candidates:
            if candidate.is_file():
                return Source(candidate.read_text(), candidate.name, candidate.resolve())
        known = sorted(p.name for p in folder.glob(f"*{suffix}")) if folder.is_dir() else []
        raise InvalidArgumentError(parameter, str(source), f"is not a file under {folder} nor a path",
                                   f"use one of {known}" if known else "pass the source text or an existing path")
    if not isinstance(source, str) or not source.strip():
        raise InvalidArgumentError(parameter, source, "is empty or not text", "pass a file name, a Path or source text")
    return Source(source, "", None)


def included_headers(text: str, include_dirs: list[Path], origin: Path | None) -> list[tuple[str, str]]:
    """``[(path, content), ...]`` of every header reachable from ``text`` inside ``include_dirs``, sorted.

    Headers outside them (the CUDA toolkit's) are covered by the NVRTC version in the cache key instead.
    """
    found: dict[Path, str] = {}
    pending = [(text, origin.parent if origin else None)]
    while pending:
        body, here = pending.pop()
        for name in _INCLUDE.findall(body):
            for folder in ([here] if here else []) + include_dirs:
                candidate = (folder / name).resolve()
                if candidate.is_file():
                    if candidate not in found:
                        found[candidate] = candidate.read_text()
                        pending.append((found[candidate], candidate.parent))
                    break
    return sorted((str(p), content) for p, content in found.items())


@functools.lru_cache(maxsize=1)
def cuda_include_dirs() -> tuple[str, ...]:
    """CUDA toolkit header folders NVRTC may need (the NVRTC wheel ships none); empty when none is installed.

    Kernels are written not to need the runtime headers, so a missing toolkit is not an error here; a kernel
    that does need them fails with NVRTC's "cannot open source file" in its CompileError.
    """
    dirs: list[str] = []
    try:
        from cuda import pathfinder

        for lib in ("cudart", "cccl"):
            try:
                found = pathfinder.find_nvidia_header_directory(lib)
            except Exception:  # noqa: BLE001 - a library the finder does not know is just absent
                found = None
            if found and found not in dirs:
                dirs.append(str(found))
    except ImportError:
        pass
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    if not dirs and Path(home, "include", "cuda_runtime.h").is_file():
        dirs.append(str(Path(home, "include")))
    return tuple(dirs)
