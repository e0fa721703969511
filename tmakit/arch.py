"""Compute capability as a value type (never the string '90')."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .errors import InvalidArgumentError


@dataclass(frozen=True, order=True)
class Arch:
    """A compute capability, e.g. ``Arch(9, 0, accelerated=True)`` for sm_90a."""

    major: int
    minor: int
    accelerated: bool = False  # the "a" suffix: arch-specific features (wgmma, setmaxnreg)

    @classmethod
    def parse(cls, value: Any, parameter: str = "arch") -> "Arch":
        """Accept ``Arch``, ``"sm_90"``, ``"sm_90a"``, ``"90"``, ``"9.0"``, ``(9, 0)``, ``90``."""
        if isinstance(value, Arch):
            return value
        if isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, int) for v in value):
            return cls(int(value[0]), int(value[1]))
        if isinstance(value, int) and not isinstance(value, bool) and 10 <= value < 1000:
            return cls(value // 10, value % 10)
        if isinstance(value, str):
            m = re.fullmatch(r"(?:sm_|compute_)?(\d+)(?:\.(\d))?(a|f)?", value.strip().lower())
            if m:
                digits, minor, suffix = m.groups()
                if minor is not None:
                    return cls(int(digits), int(minor), suffix == "a")
                if len(digits) >= 2:
                    return cls(int(digits[:-1]), int(digits[-1]), suffix == "a")
        raise InvalidArgumentError(
            parameter, value, "is not a compute capability", 'use "sm_80", "sm_90", "sm_90a", "sm_100" or (9, 0)'
        )

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
