"""Tensor-map element types and their mapping from numpy, torch, cupy and short names.

8-bit floats: TMA has no fp8 element type and moves their bytes as u8. A name that says which format it is
(``e4m3``, ``fp8_e4m3``, ``float8_e4m3fn``, ``f8e5m2``, ...) or the family names ``fp8`` and ``float8`` are
accepted; ``f8`` alone is refused (numpy's ``f8`` is float64), and every refusal of a dtype name lists the
accepted fp8 names.
"""
from __future__ import annotations

import re
from typing import Any

from ._enum import ParsableEnum
from .errors import InvalidArgumentError


class DataType(ParsableEnum):
    """``CUtensorMapDataType``; values equal the driver's."""

    UINT8 = 0
    UINT16 = 1
    UINT32 = 2
    INT32 = 3
    UINT64 = 4
    INT64 = 5
    FLOAT16 = 6
    FLOAT32 = 7
    FLOAT64 = 8
    BFLOAT16 = 9
    FLOAT32_FTZ = 10
    TFLOAT32 = 11
    TFLOAT32_FTZ = 12
    U4X16_ALIGN8B = 13  # driver: 16U4_ALIGN8B (Python names cannot start with a digit)
    U4X16_ALIGN16B = 14  # driver: 16U4_ALIGN16B
    U6X16_ALIGN16B = 15  # driver: 16U6_ALIGN16B

    @classmethod
    def _driver_prefix(cls) -> str:
        return "CU_TENSOR_MAP_DATA_TYPE_"

    @classmethod
    def _driver_enum_name(cls) -> str:
        return "CUtensorMapDataType"

    @classmethod
    def aliases(cls) -> dict[str, str]:
        return {
            "u8": "UINT8", "uint8": "UINT8", "fp8": "UINT8", "e4m3": "UINT8", "e5m2": "UINT8",
            "float8_e4m3fn": "UINT8", "float8_e5m2": "UINT8", "int8": "UINT8", "i8": "UINT8", "bool": "UINT8",
            "u16": "UINT16", "uint16": "UINT16", "int16": "UINT16", "i16": "UINT16",
            "u32": "UINT32", "uint32": "UINT32", "i32": "INT32", "int32": "INT32",
            "u64": "UINT64", "uint64": "UINT64", "i64": "INT64", "int64": "INT64",
            "f16": "FLOAT16", "fp16": "FLOAT16", "half": "FLOAT16", "float16": "FLOAT16",
            "f32": "FLOAT32", "fp32": "FLOAT32", "float": "FLOAT32", "float32": "FLOAT32",
            "f64": "FLOAT64", "fp64": "FLOAT64", "double": "FLOAT64", "float64": "FLOAT64",
            "bf16": "BFLOAT16", "bfloat16": "BFLOAT16",
            "f32_ftz": "FLOAT32_FTZ", "tf32": "TFLOAT32", "tf32_ftz": "TFLOAT32_FTZ",
            "16U4_ALIGN8B": "U4X16_ALIGN8B", "16U4_ALIGN16B": "U4X16_ALIGN16B", "16U6_ALIGN16B": "U6X16_ALIGN16B",
        }

    @classmethod
    def _parse(cls, value: Any, parameter: str | None) -> "DataType":
        if isinstance(value, str) and _is_fp8_name(value, parameter or "dtype"):
            return cls.UINT8
        return super()._parse(value, parameter)

    @classmethod
    def _choices(cls) -> str:
        return f"{super()._choices()}; {FP8_HINT}"

    @property
    def driver_name(self) -> str:
        return self._driver_prefix() + _PACKED_DRIVER.get(self.name, self.name)

    @staticmethod
    def alias_note(name: Any) -> str | None:
        """For a name that becomes a type of another meaning (fp8 -> u8, i8 -> u8, i16 -> u16): one sentence that
        says what it becomes and why; None for names that mean what they say."""
        if not isinstance(name, str):
            return None
        key = name.strip().lower()
        target = _MOVED_AS.get(key)
        if target is None and _FP8.fullmatch(_fp8_key(key)):
            target = DataType.UINT8
        if target is None:
            return None
        return (f"dtype {name!r} is moved as {target.short}: TMA copies bytes and has no {key} element type, so the "
                f"tensor map is a {target.short} map of the same bytes")

    @property
    def short(self) -> str:
        return _SHORT[self]

    @property
    def bits(self) -> int:
        """Bits one element occupies in global memory."""
        return _BITS[self]

    @property
    def size(self) -> int:
        """``elementSizeInBytes``: bytes per element as the driver's rules count them (packed types: 1)."""
        return max(1, self.bits // 8)

    @property
    def is_float(self) -> bool:
        return self in _FLOATS

    @property
    def is_packed(self) -> bool:
        return self in (DataType.U4X16_ALIGN8B, DataType.U4X16_ALIGN16B, DataType.U6X16_ALIGN16B)

    @property
    def blackwell_only(self) -> bool:
        return self.is_packed

    @property
    def numpy_dtype(self) -> str:
        """The numpy dtype whose bytes match one element (bf16 is viewed as uint16)."""
        return {1: "uint8", 2: "uint16", 4: "uint32", 8: "uint64"}[self.size] if self.is_packed or self in (
            DataType.BFLOAT16, DataType.TFLOAT32, DataType.TFLOAT32_FTZ, DataType.FLOAT32_FTZ) else _NUMPY[self]


_MOVED_AS: dict[str, "DataType"] = {}  # filled below: aliases whose element type is not the one named

# An 8-bit float name that says its format: optional family prefix, format, optional variant suffix
_FP8 = re.compile(r"(?:fp8|float8|f8)?(?:e4m3|e5m2|e8m0)(?:fn|fnuz|fnu)?|fp8|float8")
FP8_NAMES = ("fp8", "float8", "e4m3", "e4m3fn", "e4m3fnuz", "e5m2", "e5m2fnuz", "e8m0", "e8m0fnu")
FP8_HINT = (f"8-bit floats (moved as u8): {', '.join(FP8_NAMES)}, the formats also prefixed fp8_, float8_ or f8 "
            "(fp8_e4m3, float8_e4m3fn, f8e5m2, ...)")


def _fp8_key(text: str) -> str:
    return text.strip().lower().replace("_", "").replace("-", "").replace(" ", "")


def _is_fp8_name(text: str, parameter: str) -> bool:
    """True for an accepted 8-bit float name; InvalidArgumentError for one that names no format."""
    key = _fp8_key(text)
    if _FP8.fullmatch(key):
        return True
    if key == "f8":
        raise InvalidArgumentError(parameter, text, "is ambiguous: numpy's 'f8' is float64, and as an 8-bit float it "
                                   "names no format", f"use 'f64' for float64, or one of the {FP8_HINT}")
    return False

_PACKED_DRIVER = {"U4X16_ALIGN8B": "16U4_ALIGN8B", "U4X16_ALIGN16B": "16U4_ALIGN16B", "U6X16_ALIGN16B": "16U6_ALIGN16B"}
_BITS = {
    DataType.UINT8: 8, DataType.UINT16: 16, DataType.UINT32: 32, DataType.INT32: 32, DataType.UINT64: 64,
    DataType.INT64: 64, DataType.FLOAT16: 16, DataType.FLOAT32: 32, DataType.FLOAT64: 64, DataType.BFLOAT16: 16,
    DataType.FLOAT32_FTZ: 32, DataType.TFLOAT32: 32, DataType.TFLOAT32_FTZ: 32,
    DataType.U4X16_ALIGN8B: 4, DataType.U4X16_ALIGN16B: 4, DataType.U6X16_ALIGN16B: 6,
}
_FLOATS = {DataType.FLOAT16, DataType.FLOAT32, DataType.FLOAT64, DataType.BFLOAT16, DataType.FLOAT32_FTZ,
           DataType.TFLOAT32, DataType.TFLOAT32_FTZ}
_SHORT = {
    DataType.UINT8: "u8", DataType.UINT16: "u16", DataType.UINT32: "u32", DataType.INT32: "i32",
    DataType.UINT64: "u64", DataType.INT64: "i64", DataType.FLOAT16: "f16", DataType.FLOAT32: "f32",
    DataType.FLOAT64: "f64", DataType.BFLOAT16: "bf16", DataType.FLOAT32_FTZ: "f32_ftz", DataType.TFLOAT32: "tf32",
    DataType.TFLOAT32_FTZ: "tf32_ftz", DataType.U4X16_ALIGN8B: "16U4_ALIGN8B",
    DataType.U4X16_ALIGN16B: "16U4_ALIGN16B", DataType.U6X16_ALIGN16B: "16U6_ALIGN16B",
}
_NUMPY = {
    DataType.UINT8: "uint8", DataType.UINT16: "uint16", DataType.UINT32: "uint32", DataType.INT32: "int32",
    DataType.UINT64: "uint64", DataType.INT64: "int64", DataType.FLOAT16: "float16", DataType.FLOAT32: "float32",
    DataType.FLOAT64: "float64",
}

# Array element types (numpy/typestr names, torch/cupy names) -> tensor-map type. Signed ints map to the
# unsigned type of the same width: TMA only moves bytes, except int32/int64 which have their own codes.
_FROM_ARRAY = {
    "uint8": DataType.UINT8, "int8": DataType.UINT8, "bool": DataType.UINT8,
    "float8_e4m3fn": DataType.UINT8, "float8_e5m2": DataType.UINT8, "float8_e4m3fnuz": DataType.UINT8,
    "float8_e5m2fnuz": DataType.UINT8, "float8_e8m0fnu": DataType.UINT8,
    "uint16": DataType.UINT16, "int16": DataType.UINT16, "float16": DataType.FLOAT16, "half": DataType.FLOAT16,
    "bfloat16": DataType.BFLOAT16, "uint32": DataType.UINT32, "int32": DataType.INT32,
    "float32": DataType.FLOAT32, "float": DataType.FLOAT32, "uint64": DataType.UINT64, "int64": DataType.INT64,
    "float64": DataType.FLOAT64, "double": DataType.FLOAT64,
}
# __cuda_array_interface__ typestr kind+size -> name
_TYPESTR = {
    ("u", 1): "uint8", ("i", 1): "int8", ("b", 1): "bool", ("u", 2): "uint16", ("i", 2): "int16",
    ("f", 2): "float16", ("u", 4): "uint32", ("i", 4): "int32", ("f", 4): "float32", ("u", 8): "uint64",
    ("i", 8): "int64", ("f", 8): "float64",
}


def dtype_from_any(value: Any, parameter: str = "dtype") -> DataType:
    """A ``DataType`` from a DataType, driver enum, name ("bf16"), numpy/torch/cupy dtype or typestr."""
    if isinstance(value, DataType):
        return value
    name = None
    if isinstance(value, str) and len(value) >= 2 and value[0] in "<>|=" and value[1] in "uifb":
        name = _TYPESTR.get((value[1], int(value[2:]) if value[2:].isdigit() else -1))
    elif not isinstance(value, (str, int)) and value is not None:
        text = str(value)
        name = text.rsplit(".", 1)[-1].strip("'>")  # torch.bfloat16 -> bfloat16, <class 'numpy.float32'>
        if hasattr(value, "name") and isinstance(getattr(value, "name"), str) and not type(value).__name__.startswith("CU"):
            name = value.name  # numpy dtype / ml_dtypes
        if type(value).__name__.startswith("CU"):
            return DataType.parse(value, parameter)
    if name is not None:
        if name in _FROM_ARRAY:
            return _FROM_ARRAY[name]
        raise InvalidArgumentError(parameter, value, "has no TMA element type",
                                   "use a 1/2/4/8-byte integer or float type (fp8 is moved as uint8)")
    return DataType.parse(value, parameter)


for _name, _target in (("fp8", "UINT8"), ("e4m3", "UINT8"), ("e5m2", "UINT8"), ("float8_e4m3fn", "UINT8"),
                       ("float8_e5m2", "UINT8"), ("int8", "UINT8"), ("i8", "UINT8"), ("bool", "UINT8"),
                       ("int16", "UINT16"), ("i16", "UINT16")):
    _MOVED_AS[_name] = DataType[_target]
