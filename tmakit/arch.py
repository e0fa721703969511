"""Compute capability as a value type (never the string '90')."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .errors import InvalidArgumentError

# Compute capabilities NVIDIA has shipped or CUDA 13 targets; anything else is refused (a typo, "sm_9999").
KNOWN = ((5, 0), (5, 2), (5, 3), (6, 0), (6, 1), (6, 2), (7, 0), (7, 2), (7, 5), (8, 0), (8, 6), (8, 7), (8, 8),
         (8, 9), (9, 0), (10, 0), (10, 1), (10, 3), (11, 0), (12, 0), (12, 1))


def _known_list() -> str:
    return ", ".join(f"sm_{a}{b}" for a, b in KNOWN)


def _is_int(value: Any) -> bool:
    return hasattr(value, "__index__") and type(value).__name__ not in ("bool", "bool_", "ndarray")


@dataclass(frozen=True, order=True)
class Arch:
    """A compute capability, e.g. ``Arch(9, 0, accelerated=True)`` for sm_90a."""

    major: int
    minor: int
    accelerated: bool = False  # the "a" suffix: arch-specific features (wgmma, setmaxnreg)

    def __post_init__(self) -> None:
        if not (_is_int(self.major) and _is_int(self.minor)) or not isinstance(self.accelerated, bool):
            raise InvalidArgumentError("arch", (self.major, self.minor, self.accelerated),
                                       "Arch takes (major: int, minor: int, accelerated: bool)", "use Arch.parse('sm_90')")

    @classmethod
    def parse(cls, value: Any, parameter: str = "arch") -> "Arch":
        """Accept ``Arch``, ``"sm_90"``, ``"sm_90a"``, ``"90"``, ``"9.0"``, ``(9, 0)`` (or a list), ``90``.

        Only known compute capabilities (``KNOWN``) are accepted; the error lists them."""
        if isinstance(value, Arch):
            return value
        found = None
        if isinstance(value, (tuple, list)) and len(value) == 2 and all(_is_int(v) for v in value):
            found = cls(int(value[0].__index__()), int(value[1].__index__()))
        elif _is_int(value) and not isinstance(value, (tuple, list)) and 10 <= int(value.__index__()) < 1000:
            found = cls(int(value.__index__()) // 10, int(value.__index__()) % 10)
        elif isinstance(value, str):
            m = re.fullmatch(r"(?:sm_|compute_)?(\d+)(?:\.(\d+))?(a|f)?", value.strip().lower())
            if m:
                digits, minor, suffix = m.groups()
                if minor is not None:
                    found = cls(int(digits), int(minor), suffix == "a")
                elif len(digits) >= 2:
                    found = cls(int(digits[:-1]), int(digits[-1]), suffix == "a")
        if found is None:
            raise InvalidArgumentError(parameter, value, "is not a compute capability",
                                       f'use a name such as "sm_90", "sm_90a" or "sm_80" (known: {_known_list()})')
        if (found.major, found.minor) not in KNOWN:
            raise InvalidArgumentError(parameter, value, f"names {found.major}.{found.minor}, not a known compute "
                                       "capability", f"use one of {_known_list()} (an \"a\" suffix from sm_90 on)")
        if found.accelerated and found.major < 9:
            raise InvalidArgumentError(parameter, value, "has an 'a' (arch-specific) suffix, which exists from sm_90 on",
                                       f'use "sm_{found.major}{found.minor}"')
        return found

    @property
    def sm(self) -> str:
        return f"sm_{self.major}{self.minor}{'a' if self.accelerated else ''}"

    @property
    def compute(self) -> str:
        return f"compute_{self.major}{self.minor}{'a' if self.accelerated else ''}"

    @property
    def has_tma(self) -> bool:
        return self.major >= 9

    @property
    def has_cp_async(self) -> bool:
        return self.major >= 8

    @property
    def is_blackwell_or_newer(self) -> bool:
        return self.major >= 10

    def with_accelerated(self) -> "Arch":
        """The arch-specific target NVRTC should compile for (sm_90 -> sm_90a)."""
        return Arch(self.major, self.minor, self.major >= 9)

    def __str__(self) -> str:
        return self.sm
