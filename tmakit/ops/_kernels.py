"""Compiled kernels for the ops, one per (source, entry, backend, device), loaded once per process.

The backend reaches the device code only through ``BackendChoice.defines`` (TMAKIT_FORCE_CP_ASYNC), so the
same .cu file serves both engines and the build cache keys them apart.
"""
from __future__ import annotations

import functools
from typing import Any

from ..backend import Backend, BackendChoice
from ..build import load_module
from ..device import device_limits


@functools.lru_cache(maxsize=None)
def _kernel(source: str, entry: str, backend: Backend, device: int, defines: tuple[tuple[str, int], ...]) -> Any:
    module = load_module(source, device=device, defines={**backend.defines, **dict(defines)})
    return module.kernel(entry)  # the Kernel keeps its Module alive


def kernel(source: str, entry: str, choice: BackendChoice, device: int, **defines: int) -> Any:
    """The kernel `entry` of cuda_src/`source` for this backend and device; `defines` are the op's own
    compile-time parameters (each set is a separate module)."""
    return _kernel(source, entry, choice.backend, int(device), tuple(sorted(defines.items())))


@functools.lru_cache(maxsize=None)
def sm_count(device: int) -> int:
    return device_limits(device).sm_count
