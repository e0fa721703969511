"""Host cost per launch of an empty kernel taking a CUtensorMap (__grid_constant__), a pointer and an int.

Compares, in one run on one stream:
  tmakit       Kernel.__call__ (cuLaunchKernelEx, by-value 128-byte descriptor)
  cuda.core    cuda.core.launch with its own TensorMapDescriptor (StridedMemoryView.as_tensor_map), and
               cuda.core.launch of the same kernel body without the descriptor argument (pointer + int)
  cupy         cupy.RawKernel without the descriptor argument (CuPy cannot pass a 128-byte struct by value)
Host time: time.perf_counter over 256 back-to-back launches (few enough that the launch queue never fills, so
it is the host's cost and not the GPU's launch rate), the stream synchronised untimed after each; all variants
interleaved, one batch each per round; median of the rounds. GPU time: CUDA events around the same launches.
The descriptor is encoded with cuda.bindings.driver.cuTensorMapEncodeTiled directly over a 64 MB buffer
(larger than L2), wrapped in a tiny object with __kernel_param__ (the TensorMap module is not needed).

    PYTHONPATH=. python benchmarks/launch_overhead.py [--quick] [--out DIR]
Goal: tmakit within 1.1x of cuda.core (with descriptor).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import commit  # noqa: E402

SOURCE = r'''
struct __align__(64) TmaDescriptor { unsigned long long opaque[16]; };  // same layout as CUtensorMap
extern "C" __global__ void empty_tma(const __grid_constant__ TmaDescriptor tm, float* p, int n) {
    if (n < 0) p[0] = (float)tm.opaque[0];  // never true: keeps the parameters live
}
extern "C" __global__ void empty_ptr(float* p, int n) {
    if (n < 0) p[0] = 1.0f;
}
'''
ROWS, COLS = 4096, 4096  # float32: 64 MB


class RawDescriptor:
    """128 CUtensorMap bytes passed by value through tmakit's __kernel_param__ protocol."""

    def __init__(self, raw: bytes, device: int = 0):
        self.raw, self.device = raw, device

    def __kernel_param__(self, nbytes: int) -> bytes:
        return self.raw


def encode_descriptor(ptr: int) -> bytes:
    from tmakit.tensormap.encode import encode_tiled

    return encode_tiled(7, ptr, [COLS, ROWS], [COLS * 4], [64, 64], [1, 1], 0, 0, 0, 0)  # f32, no swizzle

def python_twin(module: Any, name: str) -> Any:
    """A second Kernel object for ``name`` whose repeat path is the Python twin (tmakit._hotpath), so the C
    repeat path and its fallback are timed side by side."""
    from tmakit._hotpath import PyRepeatLaunch
    from tmakit.launch import Kernel

    twin = Kernel(module, name, module.kernel(name)._func, module.code.params(name))
    twin.__class__ = type("TwinKernel", (PyRepeatLaunch, Kernel), {})
    return twin


def measure_all(launches: dict[str, Callable[[], None]], stream: Any, n: int, rounds: int) -> dict[str, dict]:
    """Host and GPU microseconds per launch of each variant, in interleaved rounds (each variant once per round).
    A round is ``n`` back-to-back launches, few enough that the launch queue never fills (so the host time is
    the host's own cost, not the GPU's launch rate), with the stream synchronised, untimed, after each."""
    from cuda.core import EventOptions

    timing = EventOptions(timing_enabled=True)
    for launch in launches.values():  # warm-up: config caches, lazy loading
        for _ in range(200):
            launch()
        stream.sync()
    host: dict[str, list[float]] = {name: [] for name in launches}
    gpu: dict[str, list[float]] = {name: [] for name in launches}
    for _ in range(rounds):
        for name, launch in launches.items():
            start = stream.record(options=timing)
            t0 = time.perf_counter()
            for _ in range(n):
                launch()
            t1 = time.perf_counter()
            end = stream.record(options=timing)
            end.sync()
            host[name].append((t1 - t0) / n * 1e6)
            gpu[name].append((end - start) / n * 1e3)
    return {name: {"host_us": statistics.median(host[name]), "host_us_min": min(host[name]),
                   "gpu_us": statistics.median(gpu[name])} for name in launches}


def run(quick: bool) -> dict[str, Any]:
    from cuda.core import Device, LaunchConfig, Program, ProgramOptions, launch
    try:
        from cuda.core import StridedMemoryView
    except ImportError:  # cuda.core 1.2.0 keeps it in utils
        from cuda.core.utils import StridedMemoryView

    import tmakit._driver as tdrv
    from tmakit.build import load_module

    n, repeats = (256, 11) if quick else (256, 101)
    dev = Device(0)
    dev.set_current()
    stream = dev.create_stream()
    buf = dev.allocate(ROWS * COLS * 4, stream=stream)
    ptr = int(buf.handle)
    stream.sync()
    desc = RawDescriptor(encode_descriptor(ptr))
    results: dict[str, Any] = {}

    module = load_module(SOURCE)
    tm_kernel, tm_ptr_kernel = module.kernel("empty_tma"), module.kernel("empty_ptr")
    from tmakit import encode_tiled

    tensor_map = encode_tiled("f32", ptr, [COLS, ROWS], [COLS * 4], [64, 64], device=0)
    flip = iter(range(1 << 62))
    bound = tm_kernel.bind(tensor_map, ptr, 1, grid=1, block=32, stream=stream)
    twin = python_twin(module, "empty_tma")
    launches: dict[str, Callable[[], None]] = {
        "tmakit (TensorMap, pointer, int)": lambda: tm_kernel(tensor_map, ptr, 1, grid=1, block=32, stream=stream),
        "tmakit (TensorMap, pointer, int changing every launch)":
            lambda: tm_kernel(tensor_map, ptr, next(flip) & 1, grid=1, block=32, stream=stream),
        "tmakit (raw 128-byte descriptor object, pointer, int)":
            lambda: tm_kernel(desc, ptr, 1, grid=1, block=32, stream=stream),
        "tmakit Kernel.bind(TensorMap, pointer, int), then bound()": bound,
        "tmakit (TensorMap, pointer, int), Python twin of the repeat path":
            lambda: twin(tensor_map, ptr, 1, grid=1, block=32, stream=stream),
        "tmakit (pointer, int)": lambda: tm_ptr_kernel(ptr, 1, grid=1, block=32, stream=stream),
    }

    arch = "".join(str(v) for v in dev.compute_capability)
    obj = Program(SOURCE, "c++", ProgramOptions(arch=f"sm_{arch}a" if int(arch) >= 90 else f"sm_{arch}")).compile(
        "cubin")
    cc_tma, cc_ptr = obj.get_kernel("empty_tma"), obj.get_kernel("empty_ptr")
    config = LaunchConfig(grid=1, block=32)
    p_arg, n_arg = ptr, np.int32(1)
    try:
        view = StridedMemoryView.from_buffer(buf, shape=(ROWS, COLS), dtype=np.dtype(np.float32))
        tmd = view.as_tensor_map(box_dim=(64, 64))
        launch(stream, config, cc_tma, tmd, p_arg, n_arg)
        launches["cuda.core (TensorMapDescriptor, pointer, int)"] = lambda: launch(stream, config, cc_tma, tmd, p_arg, n_arg)
    except Exception as exc:  # noqa: BLE001 - report the peer as unavailable, keep measuring the others
        results["cuda.core (TensorMapDescriptor, pointer, int)"] = {"error": f"{type(exc).__name__}: {exc}"}
    launches["cuda.core (pointer, int)"] = lambda: launch(stream, config, cc_ptr, p_arg, n_arg)

    try:
        import cupy

        raw = cupy.RawKernel(SOURCE, "empty_ptr", options=("-std=c++17",))
        cp_stream = cupy.cuda.ExternalStream(int(stream.handle))
        memory = cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(ptr, ROWS * COLS * 4, buf), 0)
        cp_array = cupy.ndarray((ROWS * COLS,), dtype=cupy.float32, memptr=memory)
        cp_n = np.int32(1)

        def cupy_launch() -> None:
            with cp_stream:  # RawKernel launches on the current CuPy stream: the same CUstream as the others
                raw((1,), (32,), (cp_array, cp_n))

        cupy_launch()
        launches["cupy.RawKernel (pointer, int; inside `with stream`)"] = cupy_launch
    except Exception as exc:  # noqa: BLE001
        results["cupy.RawKernel (pointer, int)"] = {"error": f"{type(exc).__name__}: {exc}"}
    results.update(measure_all(launches, stream, n, repeats))

    module.close()
    buf.close()
    ref = results.get("cuda.core (TensorMapDescriptor, pointer, int)", {})
    if "host_us" not in ref:
        ref = results["cuda.core (pointer, int)"]
    for row in results.values():
        if "host_us" in row:
            row["vs_cuda_core"] = row["host_us"] / ref["host_us"]
    from tmakit import _hotpath

    return {"device": tdrv.device_name(0), "launches_per_repeat": n, "repeats": repeats, "results": results,
            "hot_path": _hotpath.STATUS}


def write(report: dict[str, Any], out: Path | None) -> Path:
    here = Path(__file__).resolve().parent / "results"
    here.mkdir(parents=True, exist_ok=True)
    report = {"benchmark": "launch_overhead", "date": dt.datetime.now().isoformat(timespec="seconds"),
              "commit": commit(), **report}
    lines = [
        "# Launch overhead: empty kernel (CUtensorMap by value + pointer + int)", "",
        f"- device: {report['device']}", f"- date: {report['date']}", f"- commit: {report['commit']}",
        f"- {report['launches_per_repeat']} launches per batch (the queue never fills), median of {report['repeats']} interleaved rounds",
        f"- repeat path: {report.get('hot_path', 'unknown')}", "",
        "| launcher | host us/launch (median) | host min | GPU us/launch (events) | host vs cuda.core |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, row in report["results"].items():
        if "error" in row:
            lines.append(f"| {name} | unavailable: {row['error'][:80]} | | | |")
        else:
            lines.append(f"| {name} | {row['host_us']:.2f} | {row['host_us_min']:.2f} | {row['gpu_us']:.2f} | "
                         f"{row['vs_cuda_core']:.2f}x |")
    lines += ["", "Reference is cuda.core with its TensorMapDescriptor (or without the descriptor when that "
              "is unavailable). CuPy is measured without the descriptor. Goal: tmakit within 1.1x of cuda.core."]
    md, js = here / "launch_overhead.md", here / "launch_overhead.json"
    md.write_text("\n".join(lines) + "\n")
    js.write_text(json.dumps(report, indent=2) + "\n")
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        shutil.copy(md, out / md.name)
        shutil.copy(js, out / js.name)
    print("\n".join(lines))
    return md


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer launches and repeats")
    parser.add_argument("--out", type=Path, default=None, help="also copy the results to this folder")
    args = parser.parse_args()
    from tmakit import _driver

    if not _driver.gpu_available():
        print("launch_overhead: no CUDA GPU here; nothing measured")
        return 0
    write(run(args.quick), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
