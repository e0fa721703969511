"""Kernel launch through ``cuLaunchKernelEx``: checked arguments, cached launch configurations, clusters.

Per-launch host work is kept to: write the changing argument bytes into the kernel's parameter buffer
(laid out once, ``ArgPacker``), look up the ``CUlaunchConfig`` for (grid, block, shared memory, stream,
cluster) in a dict, and call the driver. Everything that is checked once per configuration (dimension
limits, the shared-memory opt-in, cluster rules) happens on a config-cache miss.
"""
from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any, Callable

from . import _driver, _hotpath
from .errors import CudaDriverError, InvalidArgumentError, LaunchError
from .kernel_signature import ArgPacker, ParamInfo, merge_driver_layout
from .tensormap.tensor_map import TensorMap

if TYPE_CHECKING:  # pragma: no cover
    from .build.module import Module

_MAX_CONFIGS = 256  # launch configurations remembered per kernel
# Argument types whose value cannot change behind tmakit's back: a launch that repeats the previous one with
# only these skips packing.
_REPEATABLE: frozenset[type] = frozenset({int, bytes, TensorMap})
_stream_getters: dict[type, Callable[[Any], int]] = {}


def stream_handle(stream: Any) -> int:
    """The CUstream handle (int) of None (the legacy default stream), an int, a CUstream, an object with
    ``__cuda_stream__`` (cuda.core Stream), or a torch/cupy stream (``.cuda_stream`` / ``.ptr``)."""
    if stream is None:
        return 0
    tp = type(stream)
    getter = _stream_getters.get(tp)
    if getter is None:
        if isinstance(stream, int) and not isinstance(stream, bool):
            getter = int
        elif hasattr(stream, "__cuda_stream__"):  # the CUDA stream protocol: () -> (version, handle)
            getter = lambda s: int(s.__cuda_stream__()[1])  # noqa: E731
        elif hasattr(stream, "cuda_stream"):  # torch.cuda.Stream, and cupy's too
            getter = lambda s: int(s.cuda_stream)  # noqa: E731
        elif hasattr(stream, "handle"):  # cuda.core Stream
            getter = lambda s: int(s.handle)  # noqa: E731
        elif hasattr(stream, "ptr"):  # cupy.cuda.Stream
            getter = lambda s: int(s.ptr)  # noqa: E731
        elif tp.__name__ == "CUstream":
            getter = int
        else:
            raise InvalidArgumentError("stream", stream, "is not a CUDA stream",
                                       "pass a cuda.core Stream, a torch/cupy stream, a CUstream or its int handle")
        _stream_getters[tp] = getter
    return getter(stream)


def _dim3(value: Any, parameter: str) -> tuple[int, int, int]:
    dims = (value,) if isinstance(value, int) else tuple(value) if isinstance(value, (tuple, list)) else None
    if not dims or len(dims) > 3 or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in dims):
        raise InvalidArgumentError(parameter, value, "must be a positive int or a tuple of 1-3 positive ints",
                                   f"{parameter}=(128, 1, 1)")
    return (dims + (1, 1))[:3]  # type: ignore[return-value]


def _launch_options(*, grid: Any, block: Any, shared_mem: int = 0, stream: Any = None,
                    cluster: Any = None) -> tuple:
    """The launch keywords of ``kernel(*args, grid=, block=, shared_mem=0, stream=None, cluster=None)``."""
    return grid, block, shared_mem, stream, cluster


class Kernel(_hotpath.RepeatLaunch):
    """A kernel of a loaded ``Module`` (which it keeps alive), launched with
    ``kernel(*args, grid=, block=, shared_mem=0, stream=None, cluster=None)``."""

    def __init__(self, module: "Module", name: str, func: Any, ptx_params: list[ParamInfo] | None):
        self.module, self.name, self._func = module, name, func
        self.device = module.device
        self.params: list[ParamInfo] = merge_driver_layout(ptx_params, self._driver_layout(len(ptx_params or [])), name)
        self._packer = ArgPacker(self.params, name, self.device)
        self._module_alive = module._finalizer
        self._configs: dict[Any, Any] = {}
        self._resident: dict[tuple, int] = {}  # (block, shared_mem) -> resident_blocks()
        self._lock = threading.Lock()
        self._dynamic_smem_limit: int | None = None  # read from the function on first use
        # Like CUDA_LAUNCH_BLOCKING: wait after every launch so an asynchronous fault names this kernel.
        self._blocking = os.environ.get("TMAKIT_LAUNCH_BLOCKING", "0") not in ("", "0")
        # The hot path calls the binding directly and tests the CUresult inline; any failure still goes
        # through _driver.check (in _launch_failed), so errors read like every other driver error.
        self._launch = _driver.driver().cuLaunchKernelEx
        # The C repeat path calls the driver's entry point itself, but only where launches go to the real
        # driver (tests stand in their own); with 0 it runs the armed BoundLaunch instead.
        real = self._launch is _driver.bindings().cuLaunchKernelEx
        self._raw_launch = _driver.entry_point("cuLaunchKernelEx") if real and _hotpath.IMPLEMENTATION == "native" else 0
        self._candidate: tuple | None = None  # the last repeatable launch, armed when it comes again

    def _driver_layout(self, expected: int) -> list[tuple[int, int]]:
        """(offset, size) of each parameter from cuFuncGetParamInfo. With the PTX signature known, exactly
        ``expected`` entries are read (asking one past the end is an API error that compute-sanitizer reports)."""
        layout: list[tuple[int, int]] = []
        while not expected or len(layout) < expected:
            try:
                offset, size = _driver.call("cuFuncGetParamInfo", self._func, len(layout))
            except CudaDriverError as exc:
                if exc.name == "CUDA_ERROR_INVALID_VALUE" and not expected:
                    return layout  # no PTX signature: probe until the driver says there is no next parameter
                raise
            layout.append((int(offset), int(size)))
            if len(layout) > 4096:  # defensive: never loop forever on a broken driver
                break
        return layout

    def attribute(self, name: str) -> int:
        """A ``CU_FUNC_ATTRIBUTE_*`` value, e.g. ``attribute("NUM_REGS")``."""
        attr = getattr(_driver.bindings().CUfunction_attribute, f"CU_FUNC_ATTRIBUTE_{name}")
        return int(_driver.call("cuFuncGetAttribute", attr, self._func))

    def resident_blocks(self, block: Any, shared_mem: int = 0) -> int:
        """Blocks of this kernel the whole device runs at once with this block size and dynamic shared memory
        (the driver's occupancy for one SM times the SM count): the grid of a persistent, grid-stride kernel,
        which must not leave a second wave of blocks waiting for the first."""
        b = _dim3(block, "block")
        key = (b, shared_mem)
        blocks = self._resident.get(key)
        if blocks is None:
            self._prepare_shared_memory(shared_mem)  # occupancy counts only what the function may use
            per_sm = int(_driver.call("cuOccupancyMaxActiveBlocksPerMultiprocessor", self._func, b[0] * b[1] * b[2],
                                      shared_mem))
            if per_sm < 1:
                raise LaunchError(f"kernel {self.name}: block={b} with shared_mem={shared_mem} bytes does not fit on "
                                  f"one SM of device {self.device}; use fewer threads or less shared memory")
            sms = _driver.device_attribute("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT", self.device)
            blocks = self._resident[key] = per_sm * sms
        return blocks

    # kernel(*args, grid=, block=, shared_mem=0, stream=None, cluster=None) is RepeatLaunch.__call__ (C in
    # tmakit/_native.c, or its Python twin): a repeat of the armed launch launches its frozen parameter buffer
    # directly; everything else comes here.
    def _launch_slow(self, args: tuple, kwargs: dict) -> None:
        grid, block, shared_mem, stream, cluster = _launch_options(**kwargs)
        self._require_module()
        config = self._config_for(grid, block, shared_mem, stream, cluster)
        types = tuple(map(type, args))
        with self._lock:  # one parameter buffer per kernel; the driver copies it before returning
            packer = self._packer
            packer.pack(args)
            result = self._launch(config, self._func, packer.pointers_address, 0)
            if (result[0] if type(result) is tuple else result) != 0:
                self._launch_failed(result, config, packer.pointers_address)  # retries, still under the lock
            # Arm on the second identical launch in a row, so arguments that change every launch pay for no
            # copies. Only immutable argument types (ints, bytes, TensorMaps) can be repeated from a frozen
            # copy; the tuple compares types before values, so == never compares arrays.
            request = (types, args, kwargs)
            if self._blocking or not _REPEATABLE.issuperset(types):
                self._candidate = None
            elif self._candidate != request:
                self._candidate = request
            else:
                self._candidate = None
                bound = BoundLaunch(self, config, *packer.frozen_copy())
                self._arm(args, kwargs, bound, self._module_alive, self._raw_launch,
                          config.getPtr() if self._raw_launch else 0, int(self._func) if self._raw_launch else 0,
                          bound._address)
        if self._blocking:
            _driver.call("cuStreamSynchronize", config.hStream)

    def _repeat_failed(self, code: int) -> None:
        """The armed launch's driver call returned ``code`` (called by RepeatLaunch)."""
        bound = self._armed
        with self._lock:
            self._launch_failed(_driver.bindings().CUresult(code), bound._config, bound._address)

    def bind(self, *args: Any, grid: Any, block: Any, shared_mem: int = 0, stream: Any = None,
             cluster: Any = None, keep_args: bool = True) -> "BoundLaunch":
        """Check and pack the arguments and the configuration once; the returned object launches exactly this
        (``bound()``) at the binding's own cost plus a few attribute reads: for hot loops of identical launches.
        Arrays are bound by their address at bind time. It keeps the arguments and the stream alive unless
        ``keep_args=False``: then it holds only the packed bytes, for callers that key the launch by the
        arrays' addresses and layouts themselves (the ops' launch memo)."""
        self._require_module()
        config = self._config_for(grid, block, shared_mem, stream, cluster)
        with self._lock:
            self._packer.pack(args)
            address, keep_alive = self._packer.frozen_copy()
        return BoundLaunch(self, config, address, (keep_alive, args, stream) if keep_args else keep_alive)

    def _require_module(self) -> None:
        if not self._module_alive.alive:
            raise LaunchError(f"kernel {self.name}: its module was closed; load it again")

    def _config_for(self, grid: Any, block: Any, shared_mem: Any, stream: Any, cluster: Any) -> Any:
        handle = stream_handle(stream)
        key = (grid, block, shared_mem, handle, cluster)
        try:
            return self._configs[key]
        except (KeyError, TypeError):  # TypeError: grid/block given as lists
            config = self._configure(grid, block, shared_mem, handle, cluster)
            try:
                if len(self._configs) >= _MAX_CONFIGS:
                    self._configs.clear()
                self._configs[key] = config
            except TypeError:
                pass  # an unhashable key (lists) is just not remembered
            return config

    def _launch_failed(self, result: Any, config: Any, pointers_address: int) -> None:
        try:
            _driver.check("cuLaunchKernelEx", result)
        except CudaDriverError as exc:
            if exc.name != "CUDA_ERROR_INVALID_CONTEXT":
                raise
        # This thread has no (or another device's) context current: make ours current and launch once more.
        from .build.module import make_current

        make_current(self.device)
        _driver.check("cuLaunchKernelEx", self._launch(config, self._func, pointers_address, 0))

    def _configure(self, grid: Any, block: Any, shared_mem: Any, handle: int, cluster: Any) -> Any:
        drv = _driver.driver()
        g, b = _dim3(grid, "grid"), _dim3(block, "block")
        threads, limit = b[0] * b[1] * b[2], self.attribute("MAX_THREADS_PER_BLOCK")
        if threads > limit:
            raise LaunchError(f"kernel {self.name}: block={b} has {threads} threads, this kernel allows at most "
                              f"{limit} (registers/launch bounds); use a smaller block")
        if g[0] >= 2**31 or g[1] >= 65536 or g[2] >= 65536:
            raise LaunchError(f"kernel {self.name}: grid={g} exceeds (2**31-1, 65535, 65535); tile the work")
        self._prepare_shared_memory(shared_mem)
        config = drv.CUlaunchConfig()
        config.gridDimX, config.gridDimY, config.gridDimZ = g
        config.blockDimX, config.blockDimY, config.blockDimZ = b
        config.sharedMemBytes = shared_mem
        config.hStream = drv.CUstream(handle)
        attrs = [self._cluster_attribute(cluster, g)] if cluster is not None else []
        config.attrs, config.numAttrs = attrs, len(attrs)
        return config

    def _prepare_shared_memory(self, shared_mem: Any) -> None:
        if not isinstance(shared_mem, int) or isinstance(shared_mem, bool) or shared_mem < 0:
            raise InvalidArgumentError("shared_mem", shared_mem, "must be a non-negative int (bytes)", "shared_mem=0")
        if self._dynamic_smem_limit is None:  # 48 KB minus the static shared memory, unless raised before
            self._dynamic_smem_limit = self.attribute("MAX_DYNAMIC_SHARED_SIZE_BYTES")
        if shared_mem <= self._dynamic_smem_limit:
            return
        static = self.attribute("SHARED_SIZE_BYTES")
        optin = _driver.device_attribute("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", self.device)
        if static + shared_mem > optin:
            raise LaunchError(
                f"kernel {self.name}: shared_mem={shared_mem} bytes of dynamic shared memory plus {static} static "
                f"is {static + shared_mem}, more than the {optin} bytes per block device {self.device} can give; "
                f"ask for at most {optin - static}")
        attr = _driver.bindings().CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        _driver.call("cuFuncSetAttribute", self._func, attr, shared_mem)
        self._dynamic_smem_limit = shared_mem

    def _cluster_attribute(self, cluster: Any, grid: tuple[int, int, int]) -> Any:
        drv = _driver.driver()
        c = _dim3(cluster, "cluster")
        arch = _driver.device_arch(self.device)
        if arch.major < 9:
            raise LaunchError(f"kernel {self.name}: cluster={c} needs sm_90 or newer; device {self.device} is "
                              f"{arch.sm}; launch without cluster=")
        if any(gi % ci for gi, ci in zip(grid, c)):
            raise LaunchError(f"kernel {self.name}: grid={grid} is not a multiple of cluster={c} in every dimension")
        if c[0] * c[1] * c[2] > 8:  # portable limit; larger clusters need the non-portable opt-in
            attr = drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
            _driver.call("cuFuncSetAttribute", self._func, attr, 1)
        value = drv.CUlaunchAttribute()
        value.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        value.value.clusterDim.x, value.value.clusterDim.y, value.value.clusterDim.z = c
        return value

    def __repr__(self) -> str:
        return f"<tmakit.Kernel {self.name} ({len(self.params)} params) device {self.device}>"


class BoundLaunch:
    """One launch of a kernel with fixed arguments and configuration (``Kernel.bind``); call it to launch."""

    __slots__ = ("kernel", "_launch", "_func", "_config", "_address", "_alive", "_keep_alive")

    def __init__(self, kernel: Kernel, config: Any, address: int, keep_alive: Any) -> None:
        self.kernel, self._config, self._address, self._keep_alive = kernel, config, address, keep_alive
        self._launch, self._func, self._alive = kernel._launch, kernel._func, kernel._module_alive

    def __call__(self) -> None:
        if not self._alive.alive:
            raise LaunchError(f"kernel {self.kernel.name}: its module was closed; load it again")
        result = self._launch(self._config, self._func, self._address, 0)
        if (result[0] if type(result) is tuple else result) != 0:
            with self.kernel._lock:
                self.kernel._launch_failed(result, self._config, self._address)
        if self.kernel._blocking:
            _driver.call("cuStreamSynchronize", self._config.hStream)

    @property
    def alive(self) -> bool:
        """Whether the kernel's module is still loaded (else calling raises)."""
        return self._alive.alive

    def __repr__(self) -> str:
        c = self._config
        return (f"<tmakit.BoundLaunch {self.kernel.name} grid=({c.gridDimX}, {c.gridDimY}, {c.gridDimZ}) "
                f"block=({c.blockDimX}, {c.blockDimY}, {c.blockDimZ}) shared_mem={c.sharedMemBytes}>")
