"""Compile (NVRTC through cuda.core), cache on disk, and load kernels.

``compile_cuda`` -> ``CompiledKernelCode`` (cubin + its PTX) -> ``.load(device)`` -> ``Module`` ->
``.kernel(name)`` -> ``tmakit.launch.Kernel``. ``load_ptx``/``assemble_ptx`` handle hand-written PTX.
"""
from __future__ import annotations

from .cache import cache_dir, cache_enabled
from .code import CompiledKernelCode
from .compile import assemble_ptx, compile_cuda, load_module, load_ptx
from .module import Module
from .versions import nvrtc_version
from .sources import source_dirs

__all__ = [
    "CompiledKernelCode", "Module", "assemble_ptx", "cache_dir", "cache_enabled", "compile_cuda", "load_module",
    "load_ptx", "nvrtc_version", "source_dirs",
]
