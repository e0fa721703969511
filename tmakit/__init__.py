"""tmakit: build, inspect and run Hopper TMA descriptors and async-copy kernels from Python."""
from __future__ import annotations

from .arch import Arch
from .dtypes import DataType
from .errors import (
    CompileError,
    CudaDriverError,
    InvalidArgumentError,
    LaunchError,
    TensorMapError,
    TmakitError,
    UnsupportedDeviceError,
)
from .tensormap.enums import Interleave, L2Promotion, OOBFill, Swizzle

__version__ = "0.1.0"

__all__ = [
    "Arch", "DataType", "Interleave", "L2Promotion", "OOBFill", "Swizzle",
    "TmakitError", "CudaDriverError", "TensorMapError", "UnsupportedDeviceError", "CompileError", "LaunchError",
    "InvalidArgumentError",
]
