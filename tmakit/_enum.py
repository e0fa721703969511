"""Forgiving parsing for tmakit's IntEnums: members, ints, driver enum members, full and short names."""
from __future__ import annotations

import enum
from typing import Any, TypeVar

from . import _driver
from .errors import InvalidArgumentError

E = TypeVar("E", bound="ParsableEnum")


def _norm(text: str) -> str:
    return text.strip().upper().replace("-", "_").replace(" ", "_")


# enum class -> {accepted spelling: member}: every name, driver name and alias, built on first use
_TABLES: dict[type, dict[str, Any]] = {}


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
        if type(value) is cls:
            return value
        if type(value) is str:  # the names every enum accepts, built once per class (a table, not a memo)
            table = _TABLES.get(cls) or cls._names()
            member = table.get(value)
            if member is None:
                member = table.get(_norm(value))
            if member is not None:
                return member
        return cls._parse(value, parameter)

    @classmethod
    def _names(cls: type[E]) -> dict[str, E]:
        table = _TABLES.get(cls)
        if table is None:
            table = {}
            prefix = cls._driver_prefix()
            for name, member in cls.__members__.items():
                table[name] = member
                if prefix:
                    table[prefix + name] = member
            for alias, name in cls.aliases().items():
                table.setdefault(_norm(alias), cls.__members__[name])
            for key, member in list(table.items()):  # the spellings users type: "none", "zero", "128b"
                table.setdefault(key.lower(), member)
            for alias, name in cls.aliases().items():
                table.setdefault(alias, cls.__members__[name])
            _TABLES[cls] = table
        return table

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
        enum_type = getattr(_driver.bindings(), self._driver_enum_name())
        return enum_type(int(self))

    @classmethod
    def _driver_enum_name(cls) -> str:
        raise NotImplementedError

    def __str__(self) -> str:
        return self.short
