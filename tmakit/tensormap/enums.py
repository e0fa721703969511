"""Tensor-map option enums (values equal the driver's) with forgiving parsing ("128B", "nan", driver names).

One spelling everywhere: a swizzle or interleave is named as the driver names it (CU_TENSOR_MAP_SWIZZLE_128B ->
``128B``): the member's ``name``, ``str``, ``repr`` (``<Swizzle.128B: 3>``), the CLI and JSON agree. Python
identifiers cannot start with a digit, so those names are set through the class namespace, and ``Swizzle.B128``
(an alias of the same member) stays for code; parsing accepts both, the driver's full name and the int.
"""
from __future__ import annotations

from .._enum import ParsableEnum


class Swizzle(ParsableEnum):
    NONE = 0
    locals()["32B"] = 1  # the driver's spelling is the member's name
    locals()["64B"] = 2
    locals()["128B"] = 3
    locals()["128B_ATOM_32B"] = 4  # Blackwell
    locals()["128B_ATOM_32B_FLIP_8B"] = 5  # Blackwell
    locals()["128B_ATOM_64B"] = 6  # Blackwell
    B32 = 1  # aliases for code: Swizzle.B128 is Swizzle["128B"]
    B64 = 2
    B128 = 3
    B128_ATOM_32B = 4
    B128_ATOM_32B_FLIP_8B = 5
    B128_ATOM_64B = 6

    @classmethod
    def _driver_prefix(cls) -> str:
        return "CU_TENSOR_MAP_SWIZZLE_"

    @classmethod
    def _driver_enum_name(cls) -> str:
        return "CUtensorMapSwizzle"

    @classmethod
    def aliases(cls) -> dict[str, str]:
        return {"32": "32B", "64": "64B", "128": "128B", "0": "NONE"}

    @property
    def short(self) -> str:
        return self.name

    @property
    def span(self) -> int:
        """Bytes of one swizzled row (the limit on the inner box bytes); 0 for NONE."""
        return {0: 0, 1: 32, 2: 64, 3: 128}.get(int(self), 128)

    @property
    def atom_bytes(self) -> int:
        """Bytes of the repeating swizzle atom: span x 8 rows (256/512/1024 B)."""
        return self.span * 8

    @property
    def alignment(self) -> int:
        """Shared-memory alignment the destination needs (128 B without swizzle)."""
        return self.atom_bytes if self is not Swizzle.NONE else 128

    @property
    def blackwell_only(self) -> bool:
        return int(self) >= 4


class Interleave(ParsableEnum):
    NONE = 0
    locals()["16B"] = 1  # the driver's spelling (CU_TENSOR_MAP_INTERLEAVE_16B), as Swizzle's
    locals()["32B"] = 2
    B16 = 1  # aliases for code
    B32 = 2

    @classmethod
    def _driver_prefix(cls) -> str:
        return "CU_TENSOR_MAP_INTERLEAVE_"

    @classmethod
    def _driver_enum_name(cls) -> str:
        return "CUtensorMapInterleave"

    @classmethod
    def aliases(cls) -> dict[str, str]:
        return {"16": "16B", "32": "32B"}

    @property
    def short(self) -> str:
        return self.name

    @property
    def bytes(self) -> int:
        return {0: 0, 1: 16, 2: 32}[int(self)]


class L2Promotion(ParsableEnum):
    NONE = 0
    L2_64B = 1
    L2_128B = 2
    L2_256B = 3

    @classmethod
    def _driver_prefix(cls) -> str:
        return "CU_TENSOR_MAP_L2_PROMOTION_"

    @classmethod
    def _driver_enum_name(cls) -> str:
        return "CUtensorMapL2promotion"

    @classmethod
    def aliases(cls) -> dict[str, str]:
        return {"64B": "L2_64B", "128B": "L2_128B", "256B": "L2_256B", "64": "L2_64B", "128": "L2_128B",
                "256": "L2_256B"}

    @property
    def short(self) -> str:
        return "NONE" if self is L2Promotion.NONE else self.name[3:]


class OOBFill(ParsableEnum):
    NONE = 0  # out-of-bounds elements read as zero
    NAN_REQUEST_ZERO_FMA = 1

    @classmethod
    def _driver_prefix(cls) -> str:
        return "CU_TENSOR_MAP_FLOAT_OOB_FILL_"

    @classmethod
    def _driver_enum_name(cls) -> str:
        return "CUtensorMapFloatOOBfill"

    @classmethod
    def aliases(cls) -> dict[str, str]:
        return {"nan": "NAN_REQUEST_ZERO_FMA", "zero": "NONE", "zeros": "NONE", "0": "NONE"}

    @property
    def short(self) -> str:
        return "zero" if self is OOBFill.NONE else "nan"
