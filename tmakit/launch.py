"""Kernel launch through ``cuLaunchKernelEx``: checked arguments, launch configurations, clusters.

``kernel(*args, grid=, block=, ...)`` is one launch: build the ``CUlaunchConfig`` (dimension limits, the
shared-memory opt-in, cluster and programmatic dependent launch rules checked), pack every argument into the
kernel's parameter buffer (``launch_args.ArgPacker``) and call the driver. ``kernel.bind(...)`` does the first two once and returns a
``BoundLaunch`` with its own buffer: ``bound()`` is one driver call, ``bound.update(i, value)`` rewrites one
argument's bytes. Nothing is cached between launches. Stream objects are read by ``streams.stream_handle``.
"""
from __future__ import annotations

import os
import threading
import weakref
from typing import Any

from . import _driver
from .arrays import is_array
from .device import device_limits
from .errors import CudaDriverError, InvalidArgumentError, LaunchError
from .kernel_signature import ParamInfo, merge_driver_layout
from .launch_args import ArgPacker
from .streams import stream_handle


def _dim3(value: Any, parameter: str) -> tuple[int, int, int]:
    if type(value) is int and value >= 1:  # the common forms first
        return (value, 1, 1)
    if type(value) is tuple and len(value) == 3:
        x, y, z = value
        if type(x) is int and type(y) is int and type(z) is int and x >= 1 and y >= 1 and z >= 1:
            return value
    dims = (value,) if isinstance(value, int) else tuple(value) if isinstance(value, (tuple, list)) else None
    if not dims or len(dims) > 3 or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in dims):
        raise InvalidArgumentError(parameter, value, "must be a positive int or a tuple of 1-3 positive ints",
                                   f"{parameter}=(128, 1, 1)")
    return (dims + (1, 1))[:3]  # type: ignore[return-value]


class Kernel:
    """A kernel of a loaded ``Module`` (which it keeps alive), launched with
    ``kernel(*args, grid=, block=, shared_mem=0, stream=None, cluster=None, pdl=False)``.

    ``pdl=True`` launches with programmatic stream serialization (sm_90): the kernel may start while the kernel
    before it in the stream still runs, from when every block of that one has executed
    ``griddepcontrol.launch_dependents`` (or exited), so its launch and prologue overlap that kernel's tail. The
    kernel must execute ``griddepcontrol.wait`` (``tmakit/grid_dependency.cuh``) before it touches anything the
    previous kernel writes; a kernel without it races. Work before the previous kernel, and anything that is not
    a kernel, is still waited for in stream order. Checked launches (the hang doctor's twin) are always serialized."""

    def __init__(self, module: Any, name: str, func: Any, ptx_params: list[ParamInfo] | None):
        self.module, self.name, self._func = module, name, func
        self.device = module.device
        self.params: list[ParamInfo] = merge_driver_layout(ptx_params, self._driver_layout(len(ptx_params or [])), name)
        self._packer = ArgPacker(self.params, name, self.device)
        self._module_alive = module._finalizer
        self._max_threads: int | None = None  # read from the function on first use
        self._resident: dict[tuple, int] = {}  # (block, shared_mem) -> resident_blocks()
        self._lock = threading.Lock()
        self._dynamic_smem_limit: int | None = None  # read from the function on first use
        # Like CUDA_LAUNCH_BLOCKING: wait after every launch so an asynchronous fault names this kernel.
        self._blocking = os.environ.get("TMAKIT_LAUNCH_BLOCKING", "0") not in ("", "0")
        # TMAKIT_CHECK=1 (or =deferred): every launch is a checked one (bounded mbarrier waits, HangError:
        # tmakit.doctor.hang)
        env = os.environ.get("TMAKIT_CHECK", "0").strip().lower()
        self._checked: bool | str = "deferred" if env == "deferred" else env not in ("", "0")
        # The hot path calls the binding directly and tests the CUresult inline; any failure still goes
        # through _driver.check (in _launch_failed), so errors read like every other driver error.
        self._launch = _driver.driver().cuLaunchKernelEx

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
            sms = device_limits(self.device).sm_count
            blocks = self._resident[key] = per_sm * sms
        return blocks

    def __call__(self, *args: Any, grid: Any, block: Any, shared_mem: int = 0, stream: Any = None,
                 cluster: Any = None, pdl: bool = False) -> None:
        """Launch once: check the configuration, pack every argument, call cuLaunchKernelEx."""
        if self._checked:
            self.bind(*args, grid=grid, block=block, shared_mem=shared_mem, stream=stream, cluster=cluster,
                      pdl=pdl)()
            return
        self._require_module()
        config = self._configure(grid, block, shared_mem, stream_handle(stream), cluster, pdl)
        with self._lock:  # one parameter buffer per kernel; the driver copies it before returning
            packer = self._packer
            packer.pack(args)
            result = self._launch(config, self._func, packer.pointers_address, 0)
            if (result[0] if type(result) is tuple else result) != 0:
                self._launch_failed(result, config, packer.pointers_address)  # retries, still under the lock
        if self._blocking:
            _driver.call("cuStreamSynchronize", config.hStream)

    def bind(self, *args: Any, grid: Any, block: Any, shared_mem: int = 0, stream: Any = None,
             cluster: Any = None, pdl: bool = False, keep_args: bool = True, checked: bool | str | None = None,
             timeout: float | None = None) -> "BoundLaunch":
        """Check the configuration and pack the arguments once; ``bound()`` launches exactly this,
        ``bound.update(index, value)`` replaces one argument, ``bound(stream=s)`` launches on another stream.

        Arrays are bound by their address at bind time. The bound launch keeps its arguments and its stream
        alive. With ``keep_args=False`` it holds only the packed bytes and the stream, plus weak references to
        the array arguments, and refuses to launch once one of those is gone (for callers that manage the
        memory themselves, e.g. by keying launches on the arrays' addresses).

        ``checked=True`` (default: the TMAKIT_CHECK environment variable) binds the hang doctor's twin of the
        kernel instead: every mbarrier wait gives up after ``timeout`` seconds (default 2), each launch waits for
        its record, and a wait that expired raises ``HangError`` naming the block, thread, barrier, parity and
        bytes (docs/DEBUGGING.md). ``checked="deferred"``: launches do not wait; a hang raises from a later launch
        of the binding, its ``check()`` or ``tmakit.check_hangs()``."""
        if checked is None:
            checked = self._checked
        if checked not in (True, False, "deferred"):
            raise InvalidArgumentError("checked", checked, 'must be True, False, "deferred" or None',
                                       'checked=True (raise from the launch) or checked="deferred"')
        if checked:
            from .doctor.hang import checked_bind

            self._pdl_attribute_wanted(pdl)  # its rules hold for checked binds too, which drop it (no _configure)
            return checked_bind(self, args, dict(grid=grid, block=block, shared_mem=shared_mem, stream=stream,
                                                 cluster=cluster, pdl=pdl, keep_args=keep_args), timeout,
                                deferred=checked == "deferred")
        self._require_module()
        config = self._configure(grid, block, shared_mem, stream_handle(stream), cluster, pdl)
        with self._lock:  # packed in the kernel's buffer, copied into the bound launch's own
            packer = self._packer.packed_copy(args)
        return BoundLaunch(self, config, packer, list(args), stream, keep_args)

    def _require_module(self) -> None:
        if not self._module_alive.alive:
            raise LaunchError(f"kernel {self.name}: its module was closed; load it again")

    def _launch_failed(self, result: Any, config: Any, pointers_address: int) -> None:
        try:
            _driver.check("cuLaunchKernelEx", result)
        except CudaDriverError as exc:
            # another device's context current (torch's work on another GPU switches it): the function handle is
            # invalid there (CUDA_ERROR_INVALID_HANDLE), or no context at all (CUDA_ERROR_INVALID_CONTEXT)
            wrong_context = exc.name == "CUDA_ERROR_INVALID_HANDLE" and not _driver.is_current(self.device)
            if exc.name != "CUDA_ERROR_INVALID_CONTEXT" and not wrong_context:
                raise
        # This thread has no (or another device's) context current: make ours current and launch once more.
        _driver.make_current(self.device)
        _driver.check("cuLaunchKernelEx", self._launch(config, self._func, pointers_address, 0))

    def _configure(self, grid: Any, block: Any, shared_mem: Any, handle: int, cluster: Any, pdl: Any = False) -> Any:
        drv = _driver.driver()
        g, b = _dim3(grid, "grid"), _dim3(block, "block")
        if self._max_threads is None:
            self._max_threads = self.attribute("MAX_THREADS_PER_BLOCK")
        threads, limit = b[0] * b[1] * b[2], self._max_threads
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
        attrs = [] if cluster is None else [self._cluster_attribute(cluster, g)]
        if self._pdl_attribute_wanted(pdl):
            value = drv.CUlaunchAttribute()
            value.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
            value.value.programmaticStreamSerializationAllowed = 1
            attrs.append(value)
        if attrs:  # a new CUlaunchConfig has no attributes
            config.attrs, config.numAttrs = attrs, len(attrs)
        return config

    def _pdl_attribute_wanted(self, pdl: Any) -> bool:
        if pdl is False:
            return False
        if pdl is not True:
            raise InvalidArgumentError("pdl", pdl, "must be True or False", "pdl=True (overlap the previous kernel)")
        arch = _driver.device_arch(self.device)
        if arch.major < 9:
            raise LaunchError(f"kernel {self.name}: pdl=True (programmatic dependent launch) needs sm_90 or newer; "
                              f"device {self.device} is {arch.sm}; launch with pdl=False")
        return True

    def _prepare_shared_memory(self, shared_mem: Any) -> None:
        if not isinstance(shared_mem, int) or isinstance(shared_mem, bool) or shared_mem < 0:
            raise InvalidArgumentError("shared_mem", shared_mem, "must be a non-negative int (bytes)", "shared_mem=0")
        if self._dynamic_smem_limit is None:  # 48 KB minus the static shared memory, unless raised before
            self._dynamic_smem_limit = self.attribute("MAX_DYNAMIC_SHARED_SIZE_BYTES")
        if shared_mem <= self._dynamic_smem_limit:
            return
        static = self.attribute("SHARED_SIZE_BYTES")
        optin = device_limits(self.device).smem_per_block_optin
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
    """One launch of a kernel with bound arguments and configuration (``Kernel.bind``); call it to launch.

    It owns its parameter buffer: ``update(index, value)`` rewrites that argument's bytes only, and the
    kernel's own launches never touch it. It keeps its arguments (and stream) alive, so the device pointers
    taken from them stay valid; bound with ``keep_args=False`` it keeps the stream and weak references to the
    array arguments, and refuses to launch once one of those is gone."""

    __slots__ = ("kernel", "_launch", "_func", "_config", "_packer", "_writers", "_address", "_alive", "_args",
                 "_stream", "_weak", "_blocking")

    def __init__(self, kernel: Kernel, config: Any, packer: ArgPacker, args: list, stream: Any,
                 keep_args: bool = True) -> None:
        self.kernel, self._config, self._packer = kernel, config, packer
        self._address, self._writers = packer.pointers_address, None  # the packer's writers, on the first update
        self._launch, self._func, self._alive = kernel._launch, kernel._func, kernel._module_alive
        self._blocking = kernel._blocking
        self._weak: list | None = None
        self._stream = stream  # a foreign stream object owns its handle: always held
        if keep_args:
            self._args = args
        else:
            self._args, self._weak = None, [_weak_if_array(a) for a in args]

    def __call__(self, stream: Any = None) -> None:
        config = self._config if stream is None else self._config_on(stream)
        if self._weak is not None or not self._alive.alive:
            self._require_launchable()
        result = self._launch(config, self._func, self._address, 0)
        if (result[0] if type(result) is tuple else result) != 0:
            with self.kernel._lock:
                self.kernel._launch_failed(result, config, self._address)
        if self._blocking:
            _driver.call("cuStreamSynchronize", config.hStream)

    def update(self, index: int, value: Any) -> None:
        """Replace positional argument ``index`` (checked like at bind time; only its bytes are written)."""
        writers = self._writers
        if writers is None:
            writers = self._writers = self._packer._writers
        if type(index) is not int or not 0 <= index < len(writers):
            raise LaunchError(f"kernel {self.kernel.name}: argument index {index!r} is not in 0..{len(writers) - 1}")
        writers[index](value)
        if self._args is not None:
            self._args[index] = value
        else:
            self._weak[index] = _weak_if_array(value)  # type: ignore[index]

    def _config_on(self, stream: Any) -> Any:
        """This launch's configuration on another stream (a new CUlaunchConfig; the bound one is unchanged)."""
        drv = _driver.driver()
        c, config = self._config, drv.CUlaunchConfig()
        config.gridDimX, config.gridDimY, config.gridDimZ = c.gridDimX, c.gridDimY, c.gridDimZ
        config.blockDimX, config.blockDimY, config.blockDimZ = c.blockDimX, c.blockDimY, c.blockDimZ
        config.sharedMemBytes = c.sharedMemBytes
        config.hStream = drv.CUstream(stream_handle(stream))
        config.attrs, config.numAttrs = c.attrs, c.numAttrs
        return config

    def _require_launchable(self) -> None:
        if not self._alive.alive:
            raise LaunchError(f"kernel {self.kernel.name}: its module was closed; load it again")
        for i, ref in enumerate(self._weak or ()):
            if ref is not None and ref() is None:
                raise LaunchError(f"kernel {self.kernel.name}: argument {i} was freed after bind(keep_args=False); "
                                  "the device pointer it gave is no longer valid: bind again")

    @property
    def alive(self) -> bool:
        """Whether the kernel's module is still loaded (else calling raises)."""
        return self._alive.alive

    @property
    def args(self) -> tuple:
        """The bound arguments (empty when bound with keep_args=False)."""
        return tuple(self._args) if self._args is not None else ()

    def __repr__(self) -> str:
        c = self._config
        return (f"<tmakit.BoundLaunch {self.kernel.name} grid=({c.gridDimX}, {c.gridDimY}, {c.gridDimZ}) "
                f"block=({c.blockDimX}, {c.blockDimY}, {c.blockDimZ}) shared_mem={c.sharedMemBytes}>")


def _weak_if_array(obj: Any) -> Any:
    """A weak reference to an array argument (the object a device pointer was taken from); None for values
    (ints, bytes, TensorMaps: their bytes are packed) and for arrays that cannot be referenced weakly."""
    if not is_array(obj):
        return None
    try:
        return weakref.ref(obj)
    except TypeError:
        return None
