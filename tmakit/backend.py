"""Which async-copy engine a kernel uses: "tma" (sm_90+) or "cp.async" (sm_80+), chosen loudly.

Precedence: an explicit ``backend="tma"|"cp.async"`` argument, then the ``TMAKIT_BACKEND`` environment
variable, then the device's capability ("auto"). Every choice is logged on the ``tmakit`` logger and returned
as a ``BackendChoice`` that ops record on their results. Asking for TMA on a GPU without it raises
``UnsupportedDeviceError`` (required vs actual); nothing falls back silently.
"""
from __future__ import annotations

import enum
import logging
import os
from dataclasses import dataclass
from typing import Any

from . import _driver
from .arch import Arch
from .errors import InvalidArgumentError, UnsupportedDeviceError

log = logging.getLogger("tmakit")

ENV_VAR = "TMAKIT_BACKEND"


class Backend(str, enum.Enum):
    TMA = "tma"
    CP_ASYNC = "cp.async"

    @property
    def required_arch(self) -> Arch:
        return Arch(9, 0) if self is Backend.TMA else Arch(8, 0)

    @property
    def defines(self) -> dict[str, int]:
        """Preprocessor defines that select this backend in the one-source kernels (cuda_src/tmakit/config.cuh)."""
        return {} if self is Backend.TMA else {"TMAKIT_FORCE_CP_ASYNC": 1}


_NAMES = {"tma": "tma", "cp.async": "cp.async", "cp_async": "cp.async", "cpasync": "cp.async", "auto": "auto",
          "ampere": "cp.async", "hopper": "tma"}


def parse_backend(value: Any, parameter: str = "backend") -> str:
    """'auto', 'tma' or 'cp.async' from a Backend, a name, or None (= 'auto')."""
    if value is None:
        return "auto"
    if type(value) is str:  # the common forms ("auto", "tma", "cp.async") as typed: one look-up
        name = _NAMES.get(value)
        if name is not None:
            return name
    if isinstance(value, Backend):
        return value.value
    if isinstance(value, str) and value.strip().lower() in _NAMES:
        return _NAMES[value.strip().lower()]
    raise InvalidArgumentError(parameter, value, "is not a backend", 'use "auto", "tma" or "cp.async"')


@dataclass(frozen=True)
class BackendChoice:
    """The engine chosen, for which device, and why (what a result object records)."""

    backend: Backend
    arch: Arch
    source: str  # "argument", "environment" or "auto"
    reason: str

    @property
    def name(self) -> str:
        return self.backend.value

    @property
    def defines(self) -> dict[str, int]:
        return self.backend.defines

    def __str__(self) -> str:
        return f"{self.name} on {self.arch} ({self.reason})"

    @property
    def log_line(self) -> str:
        """What ``choose_backend`` logs (at INFO), and what an op's repeated call logs again."""
        return f"tmakit backend: {self}"


def _require(backend: Backend, arch: Arch, source: str) -> None:
    ok = arch.has_tma if backend is Backend.TMA else arch.has_cp_async
    if not ok:
        where = f"{ENV_VAR}={os.environ.get(ENV_VAR)!r}" if source == "environment" else f'backend="{backend.value}"'
        raise UnsupportedDeviceError(
            f"{where} needs compute capability {backend.required_arch} or newer ({'TMA' if backend is Backend.TMA else 'cp.async'}); "
            f"the GPU is {arch}. Use backend=\"auto\"" + (" or \"cp.async\"" if backend is Backend.TMA and arch.has_cp_async else ""),
            required=backend.required_arch, actual=arch)


def choose_backend(requested: Any = "auto", *, device: int = 0, arch: Any = None) -> BackendChoice:
    """Resolve ``requested`` for ``device`` (or for ``arch`` when given, which needs no GPU)."""
    want = parse_backend(requested)
    source = "argument"
    if want == "auto" and os.environ.get(ENV_VAR):
        want, source = parse_backend(os.environ[ENV_VAR], ENV_VAR), "environment"
    if arch is None and (type(device) is bool or not hasattr(device, "__index__") or int(device) < 0):
        raise InvalidArgumentError("device", device, "must be a device ordinal (an int >= 0)",
                                   "pass device=0, or arch= to choose without a GPU")
    target = Arch.parse(arch) if arch is not None else _driver.device_arch(int(device))
    if want == "auto":
        source = "auto"
        if target.has_tma:
            backend, reason = Backend.TMA, f"{target} has TMA"
        elif target.has_cp_async:
            backend, reason = Backend.CP_ASYNC, f"{target} has no TMA (needs sm_90); using the cp.async path"
        else:
            raise UnsupportedDeviceError(f"tmakit's kernels need cp.async (sm_80) or TMA (sm_90); the GPU is {target}",
                                         required=Arch(8, 0), actual=target)
    else:
        backend = Backend(want)
        _require(backend, target, source)
        reason = f"requested by {'the ' + ENV_VAR + ' environment variable' if source == 'environment' else 'the caller'}"
    choice = BackendChoice(backend, target, source, reason)
    if log.isEnabledFor(logging.INFO):  # the line is formatted only when someone reads it (ops call this each time)
        log.info("%s", choice.log_line)
    return choice
