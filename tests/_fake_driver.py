"""The one fake layer of the CPU tests: a stand-in CUDA driver, fake device arrays, streams, tensor maps,
kernels and launches, so the host-side logic (exactly-once frees, keep-alive, copy checks, chunking, argument
packing, plans) is tested on machines without a GPU. No test file keeps a private fake.

- ``fake`` (fixture): patches ``tmakit._driver.driver`` with a FakeDriver. It implements only the calls
  tmakit's host side makes; "device memory" is ordinary host memory and every copy runs at once
  (bounds-checked against live allocations, so an out-of-bounds copy fails the test instead of corrupting
  memory). ``fake.hold_events = True`` keeps events "not ready" until ``fake.complete_all()``.
- ``FakeDeviceArray`` (a ``__cuda_array_interface__`` object, or any interface dict), ``FakeTorchTensor``
  (``data_ptr()`` and friends), ``device_view`` (an ArrayView at an address), the stream-likes
  ``TorchLikeStream`` / ``CupyLikeStream`` / ``ProtocolStream``, ``FakeDescriptor`` (a TensorMap's by-value
  bytes).
- ``LaunchDriver`` + ``fake_kernel_of(monkeypatch, params)``: a real ``tmakit.launch.Kernel`` over a driver that
  records each launch's argument bytes as the driver reads them.
- ``fake_launch`` (fixture): the ops on a pretend sm_90 with ``FakeKernel``s that record binds and launches.
"""
from __future__ import annotations

import ctypes
import gc
import weakref

import numpy as np
import pytest
from cuda.bindings import driver as real

from tmakit import _driver, streams

OK = real.CUresult.CUDA_SUCCESS
NOT_READY = real.CUresult.CUDA_ERROR_NOT_READY
INVALID = real.CUresult.CUDA_ERROR_INVALID_VALUE
BAD_HANDLE = real.CUresult.CUDA_ERROR_INVALID_HANDLE
ALREADY = real.CUresult.CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED


class FakeCtx(int):
    """A context handle the fake hands out (an int subclass so ``int(ctx)`` works)."""


class FakeDriver:
    def __init__(self, devices: int = 2):
        self.devices = devices
        self.current = 0
        self.ctx_stack: list[int] = []
        self.host: dict[int, ctypes.Array] = {}
        self.dev: dict[int, tuple[ctypes.Array, int]] = {}  # ptr -> (buffer, device)
        self.registered: dict[int, int] = {}
        self.streams: dict[int, int] = {}
        self.events: dict[int, dict] = {}
        self.errors: list[str] = []  # double frees, unknown handles: must stay empty
        self.calls: list[str] = []
        self.hold_events = False
        self.clock = 0.0
        self._next = 0x1000

    def __getattr__(self, name):  # enums such as CUpointer_attribute
        if name.startswith("CU"):
            return getattr(real, name)
        raise AttributeError(name)

    def _new(self) -> int:
        self._next += 0x10
        return self._next

    def _log(self, name):
        self.calls.append(name)

    # ---- init / devices / contexts
    def cuInit(self, flags): return (OK,)
    def cuDeviceGetCount(self): return (OK, self.devices)
    def cuDeviceGet(self, i): return (OK, i) if 0 <= i < self.devices else (real.CUresult.CUDA_ERROR_INVALID_DEVICE, None)
    def cuDevicePrimaryCtxRetain(self, dev): return (OK, FakeCtx(1000 + int(dev)))
    def cuCtxGetCurrent(self): return (OK, FakeCtx(self.current))
    def cuCtxSetCurrent(self, ctx): self.current = int(ctx); return (OK,)
    def cuCtxGetDevice(self): return (OK, self.current - 1000)

    def cuCtxPushCurrent(self, ctx):
        self.ctx_stack.append(self.current)
        self.current = int(ctx)
        return (OK,)

    def cuCtxPopCurrent(self):
        self.current = self.ctx_stack.pop()
        return (OK, None)

    def _device(self) -> int:
        assert self.current >= 1000, "no context current"
        return self.current - 1000

    # ---- streams / events
    def cuStreamCreateWithPriority(self, flags, prio):
        h = self._new(); self.streams[h] = self._device(); return (OK, h)

    def cuStreamDestroy(self, h):
        if self.streams.pop(int(h), None) is None:
            self.errors.append(f"cuStreamDestroy({h}) of an unknown/destroyed stream")
            return (BAD_HANDLE,)
        return (OK,)

    def cuStreamGetDevice(self, h):
        return (OK, self.streams[int(h)]) if int(h) in self.streams else (BAD_HANDLE, None)

    def cuStreamSynchronize(self, h): self.complete_all(); return (OK,)

    def cuStreamWriteValue64(self, s, addr, value, flags):
        if not self._in_dev(int(addr), 8):
            self.errors.append("cuStreamWriteValue64 out of bounds")
            return (INVALID,)
        ctypes.memmove(int(addr), int(getattr(value, "value", value)).to_bytes(8, "little"), 8)
        return (OK,)
    def cuStreamWaitEvent(self, s, e, flags): self._log("cuStreamWaitEvent"); return (OK,)

    def cuEventCreate(self, flags):
        h = self._new(); self.events[h] = {"done": True, "t": None, "timing": not flags & 2}; return (OK, h)

    def cuEventRecord(self, e, s):
        self.clock += 1.0
        self.events[int(e)].update(done=not self.hold_events, t=self.clock)
        return (OK,)

    def cuEventQuery(self, e): return (OK,) if self.events[int(e)]["done"] else (NOT_READY,)
    def cuEventSynchronize(self, e): self.events[int(e)]["done"] = True; return (OK,)

    def cuEventElapsedTime(self, a, b):
        return (OK, self.events[int(b)]["t"] - self.events[int(a)]["t"])

    def cuEventDestroy(self, e):
        if self.events.pop(int(e), None) is None:
            self.errors.append(f"cuEventDestroy({e}) twice")
            return (BAD_HANDLE,)
        return (OK,)

    def complete_all(self):
        for ev in self.events.values():
            ev["done"] = True

    # ---- memory
    def cuMemHostAlloc(self, n, flags):
        buf = (ctypes.c_char * n)(); p = ctypes.addressof(buf); self.host[p] = buf; return (OK, p)

    def cuMemFreeHost(self, p):
        if self.host.pop(int(p), None) is None:
            self.errors.append(f"cuMemFreeHost({p:#x}) twice or of unknown memory")
            return (INVALID,)
        return (OK,)

    def cuMemHostGetDevicePointer(self, p, flags): return (OK, int(p))

    def cuMemHostRegister(self, p, n, flags):
        if int(p) in self.registered:
            return (ALREADY,)
        self.registered[int(p)] = n
        return (OK,)

    def cuMemHostUnregister(self, p):
        if self.registered.pop(int(p), None) is None:
            self.errors.append(f"cuMemHostUnregister({p:#x}) twice")
            return (INVALID,)
        return (OK,)

    def cuMemAlloc(self, n):
        buf = (ctypes.c_char * n)(); p = ctypes.addressof(buf); self.dev[p] = (buf, self._device()); return (OK, p)

    def cuMemFree(self, p):
        if self.dev.pop(int(p), None) is None:
            self.errors.append(f"cuMemFree({p:#x}) twice or of unknown memory")
            return (INVALID,)
        return (OK,)

    def cuPointerGetAttribute(self, attr, p):
        for start, (buf, device) in self.dev.items():
            if start <= int(p) < start + len(buf):
                return (OK, device)
        return (INVALID, None)

    def _in_dev(self, p: int, n: int) -> bool:
        return any(s <= p and p + n <= s + len(b) for s, (b, _) in self.dev.items())

    def _copy(self, name, dst, src, n, dst_dev, src_dev):
        self._log(name)
        if (dst_dev and not self._in_dev(int(dst), n)) or (src_dev and not self._in_dev(int(src), n)):
            self.errors.append(f"{name} out of bounds")
            return (INVALID,)
        ctypes.memmove(int(dst), int(src), n)
        return (OK,)

    def cuMemcpyHtoDAsync(self, d, s, n, st): return self._copy("cuMemcpyHtoDAsync", d, s, n, True, False)
    def cuMemcpyDtoHAsync(self, d, s, n, st): return self._copy("cuMemcpyDtoHAsync", d, s, n, False, True)
    def cuMemcpyDtoDAsync(self, d, s, n, st): return self._copy("cuMemcpyDtoDAsync", d, s, n, True, True)
    def cuMemcpyDtoH(self, d, s, n): return self._copy("cuMemcpyDtoH", d, s, n, False, True)
    def cuMemcpyHtoD(self, d, s, n): return self._copy("cuMemcpyHtoD", d, s, n, True, False)

    def _memset(self, ptr, value, count, size, pitch=None):
        pitch = pitch or size
        if not self._in_dev(int(ptr), pitch * (count - 1) + size):
            self.errors.append("memset out of bounds")
            return (INVALID,)
        pattern = int(value).to_bytes(size, "little")
        for i in range(count):
            ctypes.memmove(int(ptr) + i * pitch, pattern, size)
        return (OK,)

    def cuMemsetD8Async(self, p, v, n, s): return self._memset(p, v, n, 1)
    def cuMemsetD16Async(self, p, v, n, s): return self._memset(p, v, n, 2)
    def cuMemsetD32Async(self, p, v, n, s): return self._memset(p, v, n, 4)
    def cuMemsetD2D32Async(self, p, pitch, v, w, h, s): return self._memset(p, v, h, 4, pitch)

    # ---- helpers for tests
    def view(self, arr) -> np.ndarray:
        """A numpy view of a (fake) device array's memory, for emulating kernels on the CPU."""
        buf = (ctypes.c_char * max(1, arr.nbytes)).from_address(arr.ptr)
        return np.frombuffer(buf, dtype=arr.dtype, count=arr.size).reshape(arr.shape)


def _detach_fake_finalizers() -> None:
    # Objects from a fake session must never reach the real driver (on a GPU machine) with fake handles.
    registry = getattr(weakref.finalize, "_registry", {})
    for fin in list(registry):
        info = registry.get(fin)
        if info is not None and any(isinstance(a, FakeCtx) for a in info.args):
            fin.detach()


def _clear_driver_caches() -> None:
    """Device facts the driver layer caches belong to whichever driver answered; drop them on a switch."""
    for cached in (_driver._primary_contexts, _driver._primary_address, _driver.device_count, _driver.device_handle,
                   _driver.device_arch):
        cached.cache_clear()


@pytest.fixture
def fake(monkeypatch):
    # Free real garbage with the real driver first, and keep the cycle collector from freeing a real
    # object into the fake (or a fake one into the real driver) while the fake is installed.
    gc.collect()
    gc.disable()
    drv = FakeDriver()
    _clear_driver_caches()
    monkeypatch.setattr(_driver, "driver", lambda: drv)
    monkeypatch.setattr(streams, "_watcher", streams._Watcher())  # real pending events stay with the real one
    try:
        yield drv
        drv.complete_all()
        streams._watcher.sweep()
        gc.collect()
        streams._watcher.sweep()
        gc.collect()
    finally:
        _detach_fake_finalizers()
        _clear_driver_caches()
        gc.enable()
    assert drv.errors == [], drv.errors


# ---- fake arrays and launches: the ops' host side without a GPU ---------------------------------------------

class FakeDeviceArray:
    """A __cuda_array_interface__ object at ``ptr`` (no driver needed to view it at 0): enough for argument
    checks and pointer packing. ``FakeDeviceArray.of_interface(d)`` carries any dict, malformed ones too."""

    def __init__(self, shape=(4,), typestr="<f4", strides=None, ptr=0):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr, "data": (ptr, False),
                                         "strides": strides, "version": 3}

    @classmethod
    def of_interface(cls, interface):
        array = cls.__new__(cls)
        array.__cuda_array_interface__ = interface
        return array


class FakeTorchTensor:
    """Enough of a CUDA torch tensor for tmakit's array adapter (data_ptr, stride, element_size, device)."""

    class _Device:
        type, index = "cuda", 0

    def __init__(self, shape, ptr=1 << 20, dtype="float32", itemsize=4):
        self.shape, self._ptr, self.dtype, self._itemsize = tuple(shape), ptr, f"torch.{dtype}", itemsize
        self.device = self._Device()
        self._strides = tuple(int(x) for x in np.cumprod((1,) + self.shape[:0:-1])[::-1])

    def data_ptr(self):
        return self._ptr

    def stride(self):
        return self._strides

    def element_size(self):
        return self._itemsize

    def get_device(self):
        return 0


class TorchLikeStream:
    """A stream object as torch shows it (``.cuda_stream``)."""

    def __init__(self, handle):
        self.cuda_stream = handle


class CupyLikeStream:
    """A stream object as CuPy shows it (``.ptr``)."""

    def __init__(self, handle):
        self.ptr = handle


class ProtocolStream:
    """A stream through the CUDA stream protocol (``__cuda_stream__``)."""

    def __init__(self, handle, version=0):
        self._answer = (version, handle)

    def __cuda_stream__(self):
        return self._answer


class FakeDescriptor:
    """Stands in for tmakit's TensorMap: by-value bytes through __kernel_param__, and a device ordinal."""

    def __init__(self, payload: bytes, device: int = 0):
        self.payload, self.device, self.asked = payload, device, []

    def __kernel_param__(self, nbytes: int) -> bytes:
        self.asked.append(nbytes)
        return self.payload


class LaunchDriver:
    """Answers the driver calls a Kernel makes; cuLaunchKernelEx reads kernelParams back like the driver does and
    records ``(config, [argument bytes])`` in ``launches``."""

    def __init__(self, layout):
        self.real, self.layout, self.launches, self.set_attrs, self.fail_next = real, layout, [], [], []
        for name in ("CUfunction_attribute", "CUlaunchConfig", "CUstream", "CUlaunchAttribute", "CUlaunchAttributeID"):
            setattr(self, name, getattr(real, name))
        self.func_attrs = {"MAX_THREADS_PER_BLOCK": 1024, "SHARED_SIZE_BYTES": 1024,
                           "MAX_DYNAMIC_SHARED_SIZE_BYTES": 48 * 1024 - 1024}

    def cuFuncGetParamInfo(self, func, index):
        if index >= len(self.layout):
            return real.CUresult.CUDA_ERROR_INVALID_VALUE, 0, 0
        return (OK, *self.layout[index])

    def cuFuncGetAttribute(self, attr, func):
        return OK, self.func_attrs[attr.name.replace("CU_FUNC_ATTRIBUTE_", "")]

    def cuFuncSetAttribute(self, func, attr, value):
        self.set_attrs.append((attr.name, value))
        return (OK,)

    def cuOccupancyMaxActiveBlocksPerMultiprocessor(self, func, threads, smem):
        per_sm = (228 * 1024) // (smem + self.func_attrs["SHARED_SIZE_BYTES"]) if threads <= 1024 else 0
        return OK, min(per_sm, 2048 // threads)

    def cuLaunchKernelEx(self, config, func, params, extra):
        if self.fail_next:
            return (self.fail_next.pop(0),)
        pointers = (ctypes.c_void_p * len(self.layout)).from_address(params)
        args = [ctypes.string_at(pointers[i], size) for i, (_, size) in enumerate(self.layout)]
        self.launches.append((config, args))
        return (OK,)


class FakeModule:
    """What a Kernel holds of its Module: a device and a finalizer that says it is open."""

    def __init__(self, device=0):
        self.device = device
        self._finalizer = weakref.finalize(self, lambda: None)


def fake_h100(monkeypatch, **changes):
    """Stand in for an H100 wherever tmakit asks for device limits (``tmakit.device_limits(device)``): the
    sm_90 planning table with 132 SMs and 50 MiB of L2, ``changes`` applied."""
    import dataclasses

    from tmakit import Arch, device

    def read(ordinal):
        return dataclasses.replace(device.device_limits(arch=Arch(9, 0)), name="fake H100", source="driver",
                                   ordinal=ordinal, sm_count=132, l2_bytes=50 << 20, memory_bytes=80 << 30,
                                   **changes)

    monkeypatch.setattr(device, "_read_device", read)


def fake_kernel_of(monkeypatch, params, name="first"):
    """``(kernel, driver, module)``: a real tmakit Kernel for the PTX parameters ``params`` on a LaunchDriver
    (an sm_90 with 227 KiB of shared memory)."""
    from tmakit import Arch
    from tmakit.launch import Kernel

    drv = LaunchDriver([(p.offset, p.size) for p in params])
    monkeypatch.setattr(_driver, "driver", lambda: drv)
    monkeypatch.setattr(_driver, "bindings", lambda: real)
    monkeypatch.setattr(_driver, "device_arch", lambda ordinal=0: Arch(9, 0))
    fake_h100(monkeypatch)
    module = FakeModule()
    return Kernel(module, name, object(), params), drv, module


def device_view(ptr, shape, dtype="float32", strides=None, device=0):
    """A C-contiguous (or ``strides``) device ArrayView at ``ptr``: a buffer the ops accept without a driver."""
    from tmakit.arrays import ArrayView

    dtype = np.dtype(dtype)
    if strides is None:
        strides, acc = [], dtype.itemsize
        for dim in reversed(shape):
            strides.insert(0, acc)
            acc *= max(int(dim), 1)
    return ArrayView(ptr, tuple(shape), tuple(strides), dtype.name, dtype.itemsize, device)


class FakeBoundLaunch:
    """What ``Kernel.bind`` returns, recording launches and argument updates."""

    def __init__(self, kernel, args, options):
        self.kernel, self.args, self.options, self.launches = kernel, list(args), options, 0

    def __call__(self):
        self.launches += 1

    def update(self, index, value):
        self.args[index] = value


class FakeKernel:
    def __init__(self, source, entry, defines):
        self.source, self.entry, self.defines, self.bound = source, entry, defines, []

    def resident_blocks(self, block, shared_mem=0):
        return 132 * 4

    def bind(self, *args, **options):
        self.bound.append(FakeBoundLaunch(self, args, options))
        return self.bound[-1]


@pytest.fixture
def fake_launch(monkeypatch):
    """The ops on an sm_90 that is not there: kernels, device attributes and the backend choice are faked for
    every op module (copy, transpose, load_tiles, gemm, attention); returns the list of FakeKernels the ops asked
    for. Without a GPU no tensor map encodes: plan gemm and attention with ``backend="cp.async"``."""
    import importlib

    from tmakit.backend import choose_backend

    # the modules, not the functions tmakit.ops re-exports under the same names
    modules = [importlib.import_module(f"tmakit.ops.{m}") for m in ("copy", "transpose", "load_tiles", "gemm", "attention")]

    kernels = []

    def kernel(source, entry, choice, device, **defines):
        kernels.append(FakeKernel(source, entry, {**choice.defines, **defines}))
        return kernels[-1]

    for module in modules:
        monkeypatch.setattr(module, "kernel", kernel)
        monkeypatch.setattr(module, "choose_backend",
                            lambda backend, device=0, arch=None: choose_backend(backend, arch=arch or "sm_90"))
        if hasattr(module, "sm_count"):
            monkeypatch.setattr(module, "sm_count", lambda device: 132)
    fake_h100(monkeypatch)
    return kernels
