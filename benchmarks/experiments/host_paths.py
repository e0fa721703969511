"""Experiment: where the host time of a launch and of a descriptor goes (cuda.bindings vs direct entry points).

Times, per call, in one process: the same empty-kernel launch through cuda.bindings' cuLaunchKernel and
cuLaunchKernelEx, through the driver's entry point called with ctypes (tmakit._entry_points), through
cuda.core.launch and through tmakit's Kernel; the tensor-map encode and address replacement both ways; and the
torch attribute reads describe_tensor's cache key needs.

    PYTHONPATH=. python benchmarks/experiments/host_paths.py
"""
from __future__ import annotations

import ctypes
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import launch_overhead as lo  # noqa: E402
from _common import host_time_us, interleaved_host_times_us  # noqa: E402


class CLaunchConfig(ctypes.Structure):
    """CUlaunchConfig of cuda.h 13.0 (no attributes used here)."""

    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p), ("attrs", ctypes.c_void_p),
                ("numAttrs", ctypes.c_uint)]


def entry_point(name: str, *argtypes):
    """The driver's own function pointer (cuGetProcAddress, CUDA 12.0 ABI) as a ctypes function."""
    from tmakit import _driver

    pfn = _driver.call("cuGetProcAddress", name.encode(), 12000, 0)
    pfn = pfn[0] if isinstance(pfn, tuple) else pfn
    return ctypes.CFUNCTYPE(ctypes.c_int, *argtypes)(int(pfn))


def per_call(fn) -> float:
    """Host microseconds per call: the benchmarks' own timer (median of 7 repeats of 20000 calls)."""
    return round(host_time_us(fn, 20000), 3)


def main() -> int:
    import torch
    from cuda.bindings import driver as drv
    from cuda.core import Device, LaunchConfig, launch

    from tmakit import _driver
    from tmakit.build import load_module

    dev = Device(0)
    dev.set_current()
    stream = dev.create_stream()
    s_handle = int(stream.handle)
    buf = dev.allocate(lo.ROWS * lo.COLS * 4, stream=stream)
    ptr = int(buf.handle)
    module = load_module(lo.SOURCE)
    k = module.kernel("empty_ptr")
    func = k._func
    out: dict[str, float] = {}

    params_buf = (ctypes.c_uint64 * 2)(ptr, 1)
    kparams = (ctypes.c_void_p * 2)(ctypes.addressof(params_buf), ctypes.addressof(params_buf) + 8)
    kp = ctypes.addressof(kparams)
    hstream = drv.CUstream(s_handle)

    def sync() -> None:
        stream.sync()

    cfg = drv.CUlaunchConfig()
    cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = 32, 1, 1
    cfg.sharedMemBytes = 0
    cfg.hStream = hstream
    cfg.attrs, cfg.numAttrs = [], 0
    vp = ctypes.c_void_p
    launch_ex = entry_point("cuLaunchKernelEx", vp, vp, vp, vp)
    ccfg = CLaunchConfig(1, 1, 1, 32, 1, 1, 0, s_handle, None, 0)
    caddr, fint = ctypes.addressof(ccfg), int(func)
    assert launch_ex(caddr, fint, kp, None) == 0
    cc_cfg = LaunchConfig(grid=1, block=32)
    from cuda.core import Program, ProgramOptions

    arch = "".join(str(v) for v in dev.compute_capability)
    cc_kernel = Program(lo.SOURCE, "c++", ProgramOptions(arch=f"sm_{arch}a")).compile("cubin").get_kernel("empty_ptr")
    n32 = np.int32(1)
    # launches: batches of 256 (the queue never fills, so this is host cost), interleaved, synced untimed
    out.update({name: round(t, 3) for name, t in interleaved_host_times_us({
        "bindings cuLaunchKernel": lambda: drv.cuLaunchKernel(func, 1, 1, 1, 32, 1, 1, 0, hstream, kp, 0),
        "bindings cuLaunchKernelEx": lambda: drv.cuLaunchKernelEx(cfg, func, kp, 0),
        "ctypes cuLaunchKernelEx": lambda: launch_ex(caddr, fint, kp, None),
        "cuda.core launch": lambda: launch(stream, cc_cfg, cc_kernel, ptr, n32),
        "tmakit Kernel (pointer, int)": lambda: k(ptr, 1, grid=1, block=32, stream=stream),
        "tmakit Kernel.bind (pointer, int), bound()": k.bind(ptr, 1, grid=1, block=32, stream=stream),
    }, 256, rounds=41, between=sync).items()})
    out["ctypes call overhead (no-op cuCtxGetCurrent-free)"] = per_call(lambda: None)

    # descriptors
    from tmakit.tensormap.encode import encode_prepared, prepare_tiled

    prepared = prepare_tiled(9, [4096, 4096], [8192], [64, 64], [1, 1], 0, 3, 0, 0)
    out["bindings cuTensorMapEncodeTiled (prepared)"] = per_call(lambda: encode_prepared(prepared, ptr))
    err, tmap = encode_prepared(prepared, ptr)
    out["bindings cuTensorMapReplaceAddress"] = per_call(lambda: drv.cuTensorMapReplaceAddress(tmap, ptr + 1024))
    ci, cu = ctypes.c_int, ctypes.c_uint
    enc = entry_point("cuTensorMapEncodeTiled", vp, ci, cu, vp, vp, vp, vp, vp, ci, ci, ci, ci)
    rep = entry_point("cuTensorMapReplaceAddress", vp, vp)
    storage = ctypes.create_string_buffer(192)
    sa = ctypes.addressof(storage) + (-ctypes.addressof(storage) % 64)  # CUtensorMap needs 64-byte alignment
    dims = (ctypes.c_uint64 * 2)(4096, 4096)
    strides = (ctypes.c_uint64 * 1)(8192)
    box = (ctypes.c_uint32 * 2)(64, 64)
    es = (ctypes.c_uint32 * 2)(1, 1)
    a = [ctypes.addressof(x) for x in (dims, strides, box, es)]
    assert enc(sa, 9, 2, ptr, *a, 0, 3, 0, 0) == 0
    out["ctypes cuTensorMapEncodeTiled"] = per_call(lambda: enc(sa, 9, 2, ptr, *a, 0, 3, 0, 0))
    out["ctypes cuTensorMapReplaceAddress"] = per_call(lambda: rep(sa, ptr + 1024))
    out["ctypes replace + bytes"] = per_call(lambda: (rep(sa, ptr + 1024), ctypes.string_at(sa, 128)))
    same = ctypes.string_at(sa, 128) == ctypes.string_at(int(tmap.getPtr()), 128)
    out["descriptor bytes equal (ctypes vs bindings)"] = float(same)

    # torch attribute reads
    t = torch.empty((4096, 4096), dtype=torch.bfloat16, device="cuda")
    out["torch data_ptr()"] = per_call(lambda: t.data_ptr())
    out["torch shape"] = per_call(lambda: t.shape)
    out["torch stride()"] = per_call(lambda: t.stride())
    out["torch dtype"] = per_call(lambda: t.dtype)
    out["torch get_device()"] = per_call(lambda: t.get_device())
    out["torch _version"] = per_call(lambda: t._version)
    out["dict get of a 10-tuple key"] = per_call(lambda: {}.get((id(t), (64, 64), "auto", "zero", "none", "none", None, None, None, True)))

    from tmakit import describe_tensor

    describe_tensor(t, (64, 64))
    out["describe_tensor repeated"] = per_call(lambda: describe_tensor(t, (64, 64)))
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
