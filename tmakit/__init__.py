"""tmakit: build, inspect and run Hopper TMA descriptors and async-copy kernels from Python, up to the
tensor-core kernels they feed (GEMM, attention).

Layers, lowest first (docs/CONTRACTS.md names every module; tests/test_architecture.py keeps the import graph
acyclic): ``errors``, ``arch``, ``dtypes`` -> ``_driver`` (the CUresult chokepoint), ``device`` (limits), ``backend`` -> ``arrays``
(the one array adapter), ``streams`` (the one stream adapter), ``memory``, ``copies``, ``device_array``,
``transfer`` -> ``tensormap`` (spec, rules, encode, tensor_map, describe, im2col, suggest, order) and ``layout``
(CPU model of every TMA mode, wgmma descriptors) -> ``kernel_signature``, ``launch_args``, ``launch`` ->
``build`` (compile, disk cache, modules) -> ``ops`` (plans: load_tiles, copy, transpose, gemm, attention,
modes) -> ``cli``. ``doctor`` (lint, the hang doctor's PTX rewrite, the CUtensorMap decoder) sits beside
``build``: it reads PTX; ``launch`` reaches its hang side only for checked launches.
"""
from __future__ import annotations

from .arch import Arch
from .dtypes import DataType
from .errors import (
    CompileError,
    CudaDriverError,
    HangError,
    InvalidArgumentError,
    LaunchError,
    TensorMapError,
    TmakitError,
    UnsupportedDeviceError,
)
from . import ops
from .backend import Backend, BackendChoice, choose_backend
from .build import CompiledKernelCode, Module, assemble_ptx, compile_cuda, load_module, load_ptx, source_dirs
from .device import DeviceLimits, device_limits
from .device_array import DeviceArray
from .kernel_signature import ParamInfo
from .launch import BoundLaunch, Kernel
from .memory import PinnedBuffer, is_pinned, pinned_empty, pinned_like, registered
from .copies import copy_d2d, copy_d2h, copy_h2d
from .streams import Event, Stream, as_stream, elapsed_ms, timed, use_device
from .transfer import Chunk, PipelineResult, TransferReport, pipeline
from .layout import (bank_conflicts, box_geometry, im2col_load_image, swizzle_offset, swizzle_pattern, tma_load_image,
                     tma_reduce_add, tma_store)
from .layout import check_wgmma_descriptor, wgmma_descriptors
from .tensormap import (
    ReplaceStep,
    TensorMap,
    apply_tensormap_replace,
    Violation,
    check_im2col,
    check_tiled,
    describe_im2col,
    describe_tensor,
    encode_im2col,
    encode_tiled,
    tensormap_replace_steps,
)
from .tensormap.enums import Interleave, L2Promotion, OOBFill, Swizzle
from .doctor import DecodedTensorMap, Finding, LintReport, check_hangs, decode_tensormap, lint

__version__ = "0.1.0"

__all__ = [
    "Arch", "DataType", "Interleave", "L2Promotion", "OOBFill", "Swizzle",
    "TmakitError", "CudaDriverError", "TensorMapError", "UnsupportedDeviceError", "CompileError", "LaunchError",
    "InvalidArgumentError", "HangError",
    "lint", "LintReport", "Finding", "decode_tensormap", "DecodedTensorMap", "check_hangs",
    "describe_tensor", "describe_im2col", "encode_tiled", "ReplaceStep", "tensormap_replace_steps", "apply_tensormap_replace", "encode_im2col", "check_tiled", "check_im2col", "TensorMap", "Violation",
    "tma_load_image", "tma_store", "box_geometry", "swizzle_offset", "swizzle_pattern", "bank_conflicts",
    "wgmma_descriptors", "check_wgmma_descriptor",
    "im2col_load_image", "tma_reduce_add",
    "CompiledKernelCode", "Module", "Kernel", "BoundLaunch", "ParamInfo", "assemble_ptx", "compile_cuda", "load_module", "load_ptx",
    "source_dirs",
    "DeviceLimits", "device_limits",
    "DeviceArray", "PinnedBuffer", "is_pinned", "pinned_empty", "pinned_like", "registered",
    "Stream", "Event", "as_stream", "copy_h2d", "copy_d2h", "copy_d2d", "elapsed_ms", "timed", "use_device",
    "pipeline", "Chunk", "TransferReport", "PipelineResult",
    "ops", "Backend", "BackendChoice", "choose_backend",
]
