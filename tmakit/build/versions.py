"""NVRTC and driver versions (parts of the compile cache key, and of the JIT check when loading PTX)."""
from __future__ import annotations

import functools

from .. import _driver
from ..errors import UnsupportedDeviceError


@functools.lru_cache(maxsize=1)
def nvrtc_version() -> tuple[int, int]:
    from cuda.bindings import nvrtc  # deferred: NVRTC is loaded only when a version is asked for

    err, major, minor = nvrtc.nvrtcVersion()
    if int(err) != 0:
        raise UnsupportedDeviceError(f"NVRTC is not usable ({err}); pip install 'nvidia-cuda-nvrtc>=13.0,<13.1'")
    return int(major), int(minor)


@functools.lru_cache(maxsize=1)
def driver_version_tag() -> str:
    """The driver version for cache keys: a driver may change what it accepts; 'none' without a GPU."""
    if not _driver.gpu_available():
        return "none"
    major, minor = _driver.driver_version()
    return f"{major}.{minor}"
