"""``tmakit.lint``: check a TMA kernel (.cu or .ptx) against the tensor maps it is launched with.

A ``.cu`` source is compiled with NVRTC (``tmakit.compile_cuda``: tmakit's include directories, the disk cache)
with ``-lineinfo``, so every finding names its source line; a ``.ptx`` is read as it is. Maps bind to kernel
parameters by their C name (read from the kernel's declaration in the source), their PTX name, or their index.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any, Mapping

from ..errors import InvalidArgumentError
from .check import lint_ptx
from .report import LintReport

_ATTRIBUTES = re.compile(r"__(?:launch_bounds|cluster_dims|maxnreg|grid_constant)__\s*(\([^)]*\))?")
_SIG = re.compile(r"__global__[^(;{]*?\b([A-Za-z_]\w*)\s*\(", re.S)


def c_parameter_names(source: str, entry: str | None) -> list[str]:
    """The C names of a kernel's parameters, in order, from its declaration (empty when it cannot be read)."""
    source = _ATTRIBUTES.sub(" ", source)
    for m in _SIG.finditer(source):
        if entry is not None and m.group(1) != entry:
            continue
        depth, i = 1, m.end()
        while i < len(source) and depth:
            depth += {"(": 1, ")": -1}.get(source[i], 0)
            i += 1
        body = source[m.end():i - 1]
        names, depth, cur = [], 0, []
        for ch in body + ",":
            if ch in "(<[":
                depth += 1
            elif ch in ")>]":
                depth -= 1
            if ch == "," and depth == 0:
                words = re.findall(r"[A-Za-z_]\w*", "".join(cur).split("=")[0])
                names.append(words[-1] if words else "")
                cur = []
            else:
                cur.append(ch)
        return [n for n in names] if body.strip() else []
    return []


def _is_ptx(text: str) -> bool:
    return re.search(r"^\s*\.version\s", text, re.M) is not None


def lint(source: Any, *, entry: str | None = None, maps: Mapping[Any, Any] | None = None, arch: Any = "sm_90a",
         cluster: Any = None, defines: Mapping[str, Any] | None = None) -> LintReport:
    """Lint a kernel: ``source`` is a .cu or .ptx path, a file under cuda_src/ or ptx/, CUDA or PTX text, or a
    ``CompiledKernelCode``. ``maps`` binds TensorMaps to parameters ({"a": tmap} by C name, PTX name or index);
    ``cluster`` is the launch's cluster shape. Returns a ``LintReport`` (``.errors``, ``.warnings``, ``.notes``,
    ``.to_json()``)."""
    from ..arch import Arch
    from ..build import compile_cuda, source_dirs
    from ..build.code import CompiledKernelCode

    target = Arch.parse(arch)
    if isinstance(source, CompiledKernelCode):
        return lint_ptx(source.ptx, entry=entry, maps=maps, arch=target.sm, cluster=cluster, source=source.name)
    text, name, path = _read(source, source_dirs())
    if _is_ptx(text):
        return lint_ptx(text, entry=entry, maps=maps, arch=target.sm, cluster=cluster, source=name)
    code = compile_cuda(path if path is not None else text, arch=target, defines=defines, options=["-lineinfo"],
                        name=name if path is None else None)
    return lint_ptx(code.ptx, entry=entry, maps=maps, arch=target.sm, cluster=cluster,
                    c_params=c_parameter_names(text, entry), source=name)


def _read(source: Any, dirs: tuple[Path, Path]) -> tuple[str, str, Path | None]:
    if isinstance(source, Path) or (isinstance(source, str) and "\n" not in source
                                    and source.endswith((".cu", ".ptx", ".cuh"))):
        path = Path(source)
        folder = dirs[1] if str(source).endswith(".ptx") else dirs[0]
        for candidate in ([path] if path.is_absolute() else [Path.cwd() / path, folder / path]):
            if candidate.is_file():
                return candidate.read_text(), candidate.name, candidate.resolve()
        raise InvalidArgumentError("source", str(source), "is not a file", "pass a .cu or .ptx path, or the source text")
    if not isinstance(source, str) or not source.strip():
        raise InvalidArgumentError("source", source, "is empty or not text", "pass a .cu/.ptx path or the text")
    return source, "kernel.ptx" if _is_ptx(source) else "kernel.cu", None


def parse_map_argument(text: str) -> tuple[str, dict[str, Any]]:
    """'a=shape=(4096, 4096), dtype="bf16", box=(64, 64)' -> ('a', {keyword arguments of describe_tensor})."""
    name, sep, rest = text.partition("=")
    name = name.strip()
    if not sep or not re.fullmatch(r"[A-Za-z_]\w*|\d+", name):
        raise InvalidArgumentError("--map", text, "must be PARAM=\"describe_tensor keyword arguments\"",
                                   "--map a=\"shape=(4096, 4096), dtype='bf16', box=(64, 64)\"")
    try:
        call = ast.parse(f"f({rest})", mode="eval").body
        if not isinstance(call, ast.Call) or call.args:
            raise ValueError("positional arguments")
        kwargs = {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords if kw.arg}
    except (SyntaxError, ValueError) as exc:
        raise InvalidArgumentError("--map", text, f"its arguments are not Python keyword literals ({exc})",
                                   "--map a=\"shape=(4096, 4096), dtype='bf16', box=(64, 64), swizzle='128B'\"") from None
    return name, kwargs


def describe_map(kwargs: dict[str, Any], arch: Any = "sm_90a") -> Any:
    """A TensorMap (not encoded: no GPU needed) from describe_tensor / describe_im2col keyword arguments."""
    from ..tensormap import describe_im2col, describe_tensor

    args = {"arch": arch, **kwargs, "encode": False}
    if "pixels_per_column" in args:
        return describe_im2col(**args)
    return describe_tensor(**args)
