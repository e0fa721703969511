"""A loaded module: owns its CUmodule, hands out Kernels that keep it alive.

Which image is loaded follows the binary-compatibility rules: a cubin for sm_XY runs on sm_XZ with Z >= Y
(an 'a' cubin only on sm_XY itself); a device of a newer major gets the PTX of the same compile, JIT-compiled
by the driver (that is how the sm_80 path runs on Hopper), and says so in ``Module.image``.
"""
from __future__ import annotations

import ctypes
import weakref
from typing import Any

from .. import _driver
from ..arch import Arch
from ..errors import CompileError, CudaDriverError, LaunchError, UnsupportedDeviceError
from ..launch import Kernel
from .versions import nvrtc_version


def choose_image(code: Any, device: Arch) -> str:
    """'cubin' or 'ptx': which of the code's images this device can run; UnsupportedDeviceError otherwise."""
    need = code.arch
    if need.accelerated and (device.major, device.minor) != (need.major, need.minor):
        raise UnsupportedDeviceError(
            f"{code.name} was built for {need.sm}, whose arch-specific features run only on that exact GPU; "
            f"this GPU is {device.sm}. Compile for arch={device.with_accelerated().sm!r} (or arch=None)",
            required=need, actual=device)
    if (device.major, device.minor) < (need.major, need.minor):
        raise UnsupportedDeviceError(
            f"{code.name} needs {need.sm} or newer; this GPU is {device.sm}. Use the kernel's lower-arch "
            "variant or a newer GPU", required=need, actual=device)
    if code.kind == "cubin" and device.major == need.major:
        return "cubin"
    return "ptx"


def _check_jit_possible(code: Any) -> None:
    if code.kind == "cubin":  # NVRTC's PTX: the driver must be at least as new as NVRTC to JIT it
        drv, rtc = _driver.driver_version(), nvrtc_version()
        if drv < rtc:
            raise UnsupportedDeviceError(
                f"{code.name} was built for {code.arch.sm} and this GPU needs its PTX JIT-compiled, but the driver "
                f"(CUDA {drv[0]}.{drv[1]}) is older than NVRTC ({rtc[0]}.{rtc[1]}); install "
                f"nvidia-cuda-nvrtc=={drv[0]}.{drv[1]}.* or compile for this GPU's arch", required=rtc, actual=drv)


def _unload(handle: Any) -> None:
    # Finalizers must never raise: at interpreter exit the context may already be gone, and there is
    # nobody to report to. The handle is unloaded at most once because weakref.finalize runs at most once.
    try:
        _driver.bindings().cuModuleUnload(handle)
    except Exception:  # noqa: BLE001
        pass


class Module:
    """A CUmodule on one device. ``close()`` is idempotent; kernels taken from it keep it loaded."""

    def __init__(self, code: Any, device: int = 0):
        self.code, self.device = code, int(device)
        self._kernels: dict[str, Kernel] = {}
        self._checked: tuple[Module, Any] | None = None  # the hang doctor's twin, made on first checked bind
        _driver.make_current(self.device)
        self.image = choose_image(code, _driver.device_arch(self.device))
        if self.image == "ptx":
            _check_jit_possible(code)
        # A NUL-terminated copy (the driver reads PTX as a C string) passed by address: the driver copies
        # the image during the call, so the buffer may go after it.
        image = ctypes.create_string_buffer(code.code if self.image == "cubin" else code.ptx.encode())
        try:
            self._handle = _driver.call("cuModuleLoadData", ctypes.addressof(image))
        except CudaDriverError as exc:
            if self.image == "ptx":
                raise CompileError(code.name, f"the driver could not JIT-compile the PTX: {exc}", (), code.ptx) from exc
            raise
        self._finalizer = weakref.finalize(self, _unload, self._handle)

    @property
    def handle(self) -> Any:
        if not self._finalizer.alive:
            raise LaunchError(f"module {self.code.name} is closed")
        return self._handle

    def kernel(self, name: str) -> Kernel:
        found = self._kernels.get(name)
        if found is None:
            names = self.code.entry_names()
            if name not in names:
                raise LaunchError(f"module {self.code.name} has no kernel {name!r}; its kernels are {names} "
                                  '(declare kernels extern "C" so their names are not mangled)')
            func = _driver.call("cuModuleGetFunction", self.handle, name.encode())
            found = self._kernels[name] = Kernel(self, name, func, self.code.params(name))
        return found

    def checked_kernel(self, name: str) -> tuple[Kernel, Any]:
        """``(kernel, instrumented)``: kernel ``name`` of this module's hang-doctor twin, its mbarrier waits bounded
        (tmakit.doctor.instrument), assembled and loaded once per module."""
        if self._checked is None:
            from dataclasses import replace

            from ..doctor.assemble import ptx_to_cubin
            from ..doctor.instrument import instrument

            ins = instrument(self.code.ptx)
            cubin = ptx_to_cubin(ins.ptx, self.code.arch.sm, self.code.name)
            code = replace(self.code, code=cubin, kind="cubin", ptx=ins.ptx, cache_key=self.code.cache_key + "+checked",
                           from_cache=False, _entries={})
            self._checked = (Module(code, self.device), ins)
        module, ins = self._checked
        return module.kernel(name), ins

    def close(self) -> None:
        self._kernels.clear()
        if self._checked is not None:
            self._checked[0].close()
            self._checked = None
        self._finalizer()

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def __enter__(self) -> "Module":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"device {self.device}, {self.image}"
        return f"<tmakit.Module {self.code.name} {self.code.arch.sm} ({state}) kernels={self.code.entry_names()}>"
