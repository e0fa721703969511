"""Compile (NVRTC through cuda.core), cache on disk, and load kernels.

``compile_cuda`` -> ``CompiledKernelCode`` (cubin + its PTX) -> ``.load(device)`` -> ``Module`` ->
``.kernel(name)`` -> ``tmakit.launch.Kernel``. ``load_ptx``/``assemble_ptx`` handle hand-written PTX.
"""
from __future__ import annotations

from .cache import cache_dir, cache_enabled
from .compile import CompiledKernelCode, assemble_ptx, compile_cuda, load_ptx, nvrtc_version
from .module import Module, load_module
from .sources import source_dirs

__all__ = [
    "CompiledKernelCode", "Module", "assemble_ptx", "cache_dir", "cache_enabled", "compile_cuda", "load_module",
    "load_ptx", "nvrtc_version", "source_dirs",
]
