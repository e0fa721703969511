"""Tensor-map option enums (values equal the driver's) with forgiving parsing ("128B", "nan", driver names)."""
from __future__ import annotations

from .._enum import ParsableEnum


class Swizzle(ParsableEnum):
    NONE = 0
    B32 = 1
    B64 = 2
    B128 = 3
    B128_ATOM_32B = 4  # Blackwell
    B128_ATOM_32B_FLIP_8B = 5  # Blackwell
    B128_ATOM_64B = 6  # Blackwell

    @classmethod
    def _driver_prefix(cls) -> str:
        return "CU_TENSOR_MAP_SWIZZLE_"

    @classmethod
    def _driver_enum_name(cls) -> str:
        return "CUtensorMapSwizzle"

    @classmethod
    def aliases(cls) -> dict[str, str]:
        return {"32B": "B32", "64B": "B64", "128B": "B128", "32": "B32", "64": "B64", "128": "B128", "0": "NONE",
                "128B_ATOM_32B": "B128_ATOM_32B", "128B_ATOM_32B_FLIP_8B": "B128_ATOM_32B_FLIP_8B",
                "128B_ATOM_64B": "B128_ATOM_64B"}

    @property
    def driver_name(self) -> str:
        return self._driver_prefix() + self.short

    @property
    def short(self) -> str:
        if self is Swizzle.NONE:
            return "NONE"
        width, _, rest = self.name[1:].partition("_")
        return f"{width}B" + (f"_{rest}" if rest else "")

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
    B16 = 1
    B32 = 2

    @classmethod
    def _driver_prefix(cls) -> str:
        return "CU_TENSOR_MAP_INTERLEAVE_"

    @classmethod
    def _driver_enum_name(cls) -> str:
        return "CUtensorMapInterleave"

    @classmethod
    def aliases(cls) -> dict[str, str]:
        return {"16B": "B16", "32B": "B32", "16": "B16", "32": "B32"}

    @property
    def short(self) -> str:
        return "NONE" if self is Interleave.NONE else f"{self.name[1:]}B"

    @property
    def driver_name(self) -> str:
        return self._driver_prefix() + self.short

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
