"""Turn tmakit's compile arguments into a ``cuda.core.ProgramOptions``.

cuda.core takes typed fields rather than raw flags, so the familiar NVRTC spellings users pass in
``options=`` are mapped here, one table, and anything else is refused by name (never silently dropped).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..arch import Arch
from .._sequences import is_sequence
from ..errors import InvalidArgumentError

_TRUE = {"true": True, "1": True, "false": False, "0": False}


def _flag(field: str) -> Callable[[str], tuple[str, Any]]:
    return lambda _value: (field, True)


def _boolean(field: str) -> Callable[[str], tuple[str, Any]]:
    def parse(value: str) -> tuple[str, Any]:
        if value.lower() not in _TRUE:
            raise InvalidArgumentError("options", f"--{field}={value}", "takes true or false", f"--{field}=true")
        return field, _TRUE[value.lower()]
    return parse


# spelling (without leading dashes, '_' and '-' equivalent) -> parser of the text after '='
_OPTIONS: dict[str, Callable[[str], tuple[str, Any]]] = {
    "lineinfo": _flag("lineinfo"), "generate-line-info": _flag("lineinfo"),
    "g": _flag("debug"), "device-debug": _flag("debug"),
    "use-fast-math": _flag("use_fast_math"),
    "restrict": _flag("restrict"), "w": _flag("disable_warnings"), "disable-warnings": _flag("disable_warnings"),
    "extra-device-vectorization": _flag("extra_device_vectorization"),
    "device-int128": _flag("device_int128"),
    "maxrregcount": lambda v: ("max_register_count", int(v)),
    "ftz": _boolean("ftz"), "prec-div": _boolean("prec_div"), "prec-sqrt": _boolean("prec_sqrt"),
    "fmad": _boolean("fma"),
    "std": lambda v: ("std", v),
    "diag-suppress": lambda v: ("diag_suppress", [int(x) for x in v.split(",")]),
    "xptxas": lambda v: ("ptxas_options", v.split(",")), "ptxas-options": lambda v: ("ptxas_options", v.split(",")),
}


def _macro(text: str) -> tuple[str, str]:
    name, _, value = text.partition("=")
    if not re.fullmatch(r"[A-Za-z_]\w*", name):
        raise InvalidArgumentError("defines", name, "is not a C identifier", "use names like TILE_M")
    return name, value if value else "1"


def program_options(arch: Arch, include_dirs: Sequence[Path | str], defines: Mapping[str, Any] | None,
                    options: Sequence[str], name: str) -> Any:
    """A ProgramOptions for NVRTC: -std=c++17, the include dirs, the defines, then the user's flags."""
    from cuda.core import ProgramOptions

    fields: dict[str, Any] = {"std": "c++17", "ptxas_options": []}
    if defines is not None and not isinstance(defines, Mapping):
        raise InvalidArgumentError("defines", defines, "must be a mapping of macro name -> value", "defines={'TILE_M': 64}")
    for k, v in (defines or {}).items():
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise InvalidArgumentError("defines", {k: v}, "macro values must be strings or numbers", "defines={'TILE_M': 64}")
    if not isinstance(name, str):
        raise InvalidArgumentError("name", name, "must be a string (the program's name in logs)", "name='my_kernel.cu'")
    if not isinstance(options, str) and not is_sequence(options):
        raise InvalidArgumentError("options", options, "must be a sequence of flags (not a mapping or set)",
                                   "options=['-lineinfo']")
    macros = [_macro(f"{k}={v}") for k, v in sorted((defines or {}).items(), key=lambda kv: str(kv[0]))]
    includes = [str(d) for d in include_dirs]
    if isinstance(options, str):
        raise InvalidArgumentError("options", options, "must be a sequence of flags, not one string",
                                   f"options=[{options!r}]")
    for raw in options:
        text = str(raw).strip()
        if text.startswith("-D"):
            macros.append(_macro(text[2:]))
            continue
        if text.startswith("-I"):
            includes.append(text[2:])
            continue
        key, _, value = text.lstrip("-").partition("=")
        key = key.replace("_", "-").lower()
        parser = _OPTIONS.get(key)
        if parser is None or not text.startswith("-"):
            raise InvalidArgumentError("options", raw, "is not an NVRTC flag tmakit passes through cuda.core",
                                       f"use -D/-I or one of: {', '.join('--' + k for k in sorted(_OPTIONS))}")
        try:
            field, parsed = parser(value)
        except ValueError as exc:
            raise InvalidArgumentError("options", raw, f"has a bad value ({exc})", "e.g. --maxrregcount=64") from exc
        if field == "ptxas_options":
            fields[field] = fields[field] + parsed
        else:
            fields[field] = parsed
    if not fields["ptxas_options"]:
        del fields["ptxas_options"]
    return ProgramOptions(name=name, arch=arch.sm, include_path=includes, define_macro=macros or None, **fields)
