"""What tmakit can see: versions, driver, GPUs and their TMA / cp.async support. Never raises."""
from __future__ import annotations

import platform
from importlib.metadata import version
from typing import Any

from . import __version__, _driver
from .device import device_limits


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
            limits = device_limits(ordinal)
            info["devices"].append({
                "ordinal": ordinal, "name": limits.name, "arch": limits.arch.sm, "tma": limits.tma,
                "cp_async": limits.cp_async, "memory_gib": round((limits.memory_bytes or 0) / 2**30, 1),
                "smem_optin": limits.smem_per_block_optin, "sms": limits.sm_count, "l2_mib": (limits.l2_bytes or 0) / 2**20,
            })
        info["gpu_status"] = f"{len(info['devices'])} GPU(s)"
    except Exception as exc:  # noqa: BLE001 - "no GPU" is an answer, not an error
        info["gpu_status"] = f"no GPU ({str(exc).splitlines()[0]})"
    return info
