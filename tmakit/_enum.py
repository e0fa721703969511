"""Forgiving parsing for tmakit's IntEnums: members, ints, driver enum members, full and short names."""
from __future__ import annotations

import enum
from typing import Any, TypeVar

from .errors import InvalidArgumentError

E = TypeVar("E", bound="ParsableEnum")


def _norm(text: str) -> str:
    return text.strip().upper().replace("-", "_").replace(" ", "_")


# (enum class, type of the value, value) -> member, for the str and int values parse has accepted: describing
# a tensor map parses about ten options, and a repeat of a string costs a dict probe instead of normalising it.
_PARSED: dict[tuple[type, type, Any], Any] = {}
_PARSED_LIMIT = 4096


class ParsableEnum(enum.IntEnum):
    """An IntEnum whose ``parse`` accepts the member, its int, the driver's member and name, and aliases.

    Subclasses set ``_driver_prefix_`` (e.g. ``"CU_TENSOR_MAP_SWIZZLE_"``) and may define ``_aliases_``
    (a dict short name -> member name) through ``aliases()``.
    """

    @classmethod
    def _driver_prefix(cls) -> str:
        return ""

    @classmethod
    def aliases(cls) -> dict[str, str]:
        return {}

    @classmethod
    def parse(cls: type[E], value: Any, parameter: str | None = None) -> E:
        tp = type(value)
        if tp is cls:
            return value
        if tp is str or tp is int:
            found = _PARSED.get((cls, tp, value))
            if found is not None:
                return found
            member = cls._parse(value, parameter)
            if len(_PARSED) < _PARSED_LIMIT:
                _PARSED[cls, tp, value] = member
            return member
        return cls._parse(value, parameter)

    @classmethod
    def _parse(cls: type[E], value: Any, parameter: str | None) -> E:
        param = parameter or cls.__name__
        if isinstance(value, cls):
            return value
        if isinstance(value, bool) or type(value).__name__ == "bool_":
            raise InvalidArgumentError(param, value, f"is not a {cls.__name__}", cls._choices())
        if not isinstance(value, (int, str, enum.Enum)) and hasattr(value, "__index__") and type(value).__name__ != "ndarray":
            value = int(value.__index__())  # a numpy integer
        if isinstance(value, enum.Enum) and not isinstance(value, str):  # a cuda.bindings enum member
            value = value.name if type(value).__name__.startswith("CU") else value.value
        if isinstance(value, int) and not isinstance(value, bool):
            try:
                return cls(int(value))
            except ValueError:
                raise InvalidArgumentError(param, value, f"is not a valid {cls.__name__} value", cls._choices()) from None
        if isinstance(value, str):
            key = _norm(value)
            prefix = cls._driver_prefix()
            if prefix and key.startswith(prefix):
                key = key[len(prefix):]
            if key in cls.__members__:
                return cls.__members__[key]
            alias = {_norm(k): v for k, v in cls.aliases().items()}.get(key)
            if alias is not None:
                return cls.__members__[alias]
            raise InvalidArgumentError(param, value, f"is not a known {cls.__name__}", cls._choices())
        raise InvalidArgumentError(param, value, f"must be a {cls.__name__}, its name or its int value", cls._choices())

    @classmethod
    def _choices(cls) -> str:
        return "use one of " + ", ".join(repr(m.short) for m in cls)

    @property
    def short(self) -> str:
        return self.name

    @property
    def driver_name(self) -> str:
        return self._driver_prefix() + self.name

    def to_driver(self) -> Any:
        """The matching ``cuda.bindings.driver`` enum member."""
        from ._driver import bindings

        enum_type = getattr(bindings(), self._driver_enum_name())
        return enum_type(int(self))

    @classmethod
    def _driver_enum_name(cls) -> str:
        raise NotImplementedError

    def __str__(self) -> str:
        return self.short
