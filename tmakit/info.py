"""What tmakit can see: versions, driver, GPUs and their TMA / cp.async support. Never raises."""
from __future__ import annotations

import platform
from importlib.metadata import version
from typing import Any

from . import __version__, _driver


def _version(module: str) -> str:
    try:
        return version(module)
    except Exception:  # noqa: BLE001 - a missing package is reported as such
        return "not installed"


def collect_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "tmakit": __version__, "python": platform.python_version(), "cuda-bindings": _version("cuda-bindings"),
        "cuda-core": _version("cuda-core"), "nvidia-cuda-nvrtc": _version("nvidia-cuda-nvrtc"),
        "numpy": _version("numpy"), "rich": _version("rich"), "driver": "none",
        "gpu_status": "", "devices": [],
    }
    try:
        info["nvrtc"] = "%d.%d" % __import__("tmakit.build", fromlist=["nvrtc_version"]).nvrtc_version()
    except Exception as exc:  # noqa: BLE001
        info["nvrtc"] = f"unavailable ({type(exc).__name__})"
    try:
        info["driver"] = "CUDA %d.%d" % _driver.driver_version()
        for ordinal in range(_driver.device_count()):
            arch = _driver.device_arch(ordinal)
            mem = int(_driver.call("cuDeviceTotalMem", _driver.device_handle(ordinal)))
            info["devices"].append({
                "ordinal": ordinal, "name": _driver.device_name(ordinal), "arch": arch.sm, "tma": arch.has_tma,
                "cp_async": arch.has_cp_async, "memory_gib": round(mem / 2**30, 1),
                "smem_optin": _driver.device_attribute("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", ordinal),
                "sms": _driver.device_attribute("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT", ordinal),
            })
        info["gpu_status"] = f"{len(info['devices'])} GPU(s)"
    except Exception as exc:  # noqa: BLE001 - "no GPU" is an answer, not an error
        info["gpu_status"] = f"no GPU ({str(exc).splitlines()[0]})"
    return info
