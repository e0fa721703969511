"""Kernel parameter lists read from PTX ``.entry`` declarations (no GPU needed). Packing arguments into the
parameter buffer is ``launch_args.py``.

NVRTC gives PTX next to every cubin it builds, and hand-written kernels are PTX, so the PTX entry list is
the one signature source that works on a machine without a driver. On a GPU, ``cuFuncGetParamInfo`` gives
the authoritative offsets and sizes; ``merge_driver_layout`` checks the two agree and keeps PTX's names/types.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Sequence

from .errors import LaunchError

# PTX fundamental types -> size in bytes (PTX ISA "Fundamental Types").
_PTX_SIZES = {"8": 1, "16": 2, "32": 4, "64": 8}
_SCALAR = re.compile(r"\.(u|s|b|f)(8|16|32|64)$")


@dataclass(frozen=True)
class ParamInfo:
    """One kernel parameter: where it lives in the parameter buffer and, when known, what it is."""

    index: int
    offset: int  # bytes from the start of the parameter space
    size: int  # bytes
    name: str = ""  # PTX name ("k_param_0"), "" when only the driver layout is known
    ptx_type: str = ""  # ".u64", ".f32", ".b8[128]" ...; "" when unknown
    align: int = 1

    @property
    def kind(self) -> str:
        """'int', 'float', 'bytes' (a by-value struct) or 'unknown' (driver layout only)."""
        if not self.ptx_type:
            return "unknown"
        if "[" in self.ptx_type:
            return "bytes"
        return "float" if self.ptx_type.startswith(".f") else "int"

    @property
    def signed(self) -> bool:
        return self.ptx_type.startswith(".s")

    def describe(self) -> str:
        label = self.name or f"#{self.index}"
        kind = f" {self.ptx_type}" if self.ptx_type else ""
        return f"param {self.index} ({label}{kind}, {self.size} bytes at offset {self.offset})"


_ENTRY = re.compile(r"\.entry\s+([A-Za-z_$%][\w$%]*)\s*\((.*?)\)", re.S)
# ".param .align 64 .b8 k_param_3[128]" / ".param .u64 .ptr .global .align 1 k_param_0" / ".param .u32 k_param_1"
_PARAM = re.compile(r"\.param\s+(?P<body>[^,]*?)\s*(?P<name>[A-Za-z_$%][\w$%]*)\s*(?:\[(?P<count>\d+)\])?\s*$")


def _strip_comments(ptx: str) -> str:
    ptx = re.sub(r"/\*.*?\*/", " ", ptx, flags=re.S)
    return re.sub(r"//[^\n]*", "", ptx)


def _parse_param(index: int, text: str, offset: int) -> ParamInfo:
    m = _PARAM.match(text.strip())
    if not m:
        raise LaunchError(f"cannot read PTX parameter {index}: {text.strip()!r}")
    words = m.group("body").split()
    explicit_align = 0
    if ".align" in words:
        explicit_align = int(words[words.index(".align") + 1])
    scalar = next((w for w in words if _SCALAR.match(w)), None)
    if scalar is None:
        raise LaunchError(f"PTX parameter {index} ({m.group('name')}) has no type: {text.strip()!r}")
    elem = _PTX_SIZES[_SCALAR.match(scalar).group(2)]
    count = int(m.group("count")) if m.group("count") else 0
    size = elem * count if count else elem
    # ".ptr .align N" on a pointer parameter describes the pointee, not the parameter (PTX ISA "Kernel
    # Function Parameter Attributes"), so only arrays take the explicit alignment.
    align = max(elem, explicit_align) if count else elem
    offset = (offset + align - 1) // align * align
    ptx_type = f"{scalar}[{count}]" if count else scalar
    return ParamInfo(index, offset, size, m.group("name"), ptx_type, align)


def parse_ptx_entries(ptx: str) -> dict[str, list[ParamInfo]]:
    """``{entry name: [ParamInfo, ...]}`` for every ``.entry`` in the PTX text, in declaration order."""
    entries: dict[str, list[ParamInfo]] = {}
    for m in _ENTRY.finditer(_strip_comments(ptx)):
        params, offset = [], 0
        body = m.group(2).strip()
        for i, piece in enumerate(p for p in body.split(",") if p.strip()) if body else ():
            info = _parse_param(i, piece, offset)
            params.append(info)
            offset = info.offset + info.size
        entries[m.group(1)] = params
    return entries


def ptx_targets(ptx: str) -> list[str]:
    """The ``.target`` architectures of a PTX text (``["sm_90a"]``)."""
    m = re.search(r"^\s*\.target\s+([^\n]+)", _strip_comments(ptx), re.M)
    if not m:
        return []
    return [t.strip() for t in m.group(1).split(",") if t.strip().startswith(("sm_", "compute_"))]


def merge_driver_layout(ptx_params: Sequence[ParamInfo] | None, layout: Sequence[tuple[int, int]],
                        kernel: str) -> list[ParamInfo]:
    """Combine the driver's (offset, size) list with the PTX names/types; they must agree on count and sizes.

    Offsets are not compared: on sm_90 cuFuncGetParamInfo reports a 64-byte-aligned CUtensorMap parameter
    at offset 48 where the PTX puts it at 64 (measured on an H100, driver 13.0), and launches through a
    kernelParams pointer array never use offsets.
    """
    if not ptx_params:
        return [ParamInfo(i, off, size) for i, (off, size) in enumerate(layout)]
    if len(ptx_params) != len(layout) or any(p.size != d[1] for p, d in zip(ptx_params, layout)):
        raise LaunchError(
            f"kernel {kernel}: the PTX parameter list {[(p.offset, p.size) for p in ptx_params]} disagrees with "
            f"the driver's {list(map(tuple, layout))}; the code object and its PTX come from different builds "
            "(clear the cache: TMAKIT_CACHE=0 or delete TMAKIT_CACHE_DIR)"
        )
    return [replace(p) for p in ptx_params]
