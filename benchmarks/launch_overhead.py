"""Host cost per launch of an empty kernel taking a CUtensorMap (__grid_constant__), a pointer and an int.

Rows, in one run on one stream (ratios against the first, cuda.core's ``launch``):
  cuda.core launch                     cuda.core.launch with its TensorMapDescriptor (StridedMemoryView.as_tensor_map)
  tmakit kernel(...) one-shot          Kernel.__call__: configure, pack every argument, cuLaunchKernelEx
  tmakit bound()                       Kernel.bind(...) once, then bound() in the loop
  tmakit bound.update + bound()        the int argument changes every launch: bound.update(2, i & 1); bound()
  cuda.core, int changing              cuda.core.launch with a different np.int32 each launch
Host time: time.perf_counter over 256 back-to-back launches (few enough that the launch queue never fills, so
it is the host's cost and not the GPU's launch rate), the stream synchronised untimed after each; all variants
interleaved, one batch each per round; median of the rounds. GPU time: CUDA events around the same launches.
tmakit's descriptor is tmakit.encode_tiled over a 64 MB buffer (larger than L2); cuda.core's is its own
TensorMapDescriptor over the same buffer. Medians; ratios are taken within this one run.

    PYTHONPATH=. python benchmarks/launch_overhead.py [--quick] [--out DIR]
Goals: bound() <= 1.05x cuda.core launch; bound.update + bound() <= 1.2x cuda.core launch.
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
    results: dict[str, Any] = {}

    module = load_module(SOURCE)
    tm_kernel = module.kernel("empty_tma")
    from tmakit import encode_tiled

    tensor_map = encode_tiled("f32", ptr, [COLS, ROWS], [COLS * 4], [64, 64], device=0)
    arch = "".join(str(v) for v in dev.compute_capability)
    obj = Program(SOURCE, "c++", ProgramOptions(arch=f"sm_{arch}a" if int(arch) >= 90 else f"sm_{arch}")).compile(
        "cubin")
    cc_tma = obj.get_kernel("empty_tma")
    config = LaunchConfig(grid=1, block=32)
    p_arg, n_arg, np_values = ptr, np.int32(1), (np.int32(0), np.int32(1))
    view = StridedMemoryView.from_buffer(buf, shape=(ROWS, COLS), dtype=np.dtype(np.float32))
    tmd = view.as_tensor_map(box_dim=(64, 64))
    launch(stream, config, cc_tma, tmd, p_arg, n_arg)
    bound = tm_kernel.bind(tensor_map, ptr, 1, grid=1, block=32, stream=stream)
    counter = {"i": 0}

    def cuda_core_changing() -> None:
        counter["i"] += 1
        launch(stream, config, cc_tma, tmd, p_arg, np_values[counter["i"] & 1])

    def bound_update() -> None:
        counter["i"] += 1
        bound.update(2, counter["i"] & 1)
        bound()

    launches: dict[str, Callable[[], None]] = {
        "cuda.core launch (TensorMapDescriptor, pointer, int)": lambda: launch(stream, config, cc_tma, tmd, p_arg, n_arg),
        "tmakit kernel(TensorMap, pointer, int) one-shot":
            lambda: tm_kernel(tensor_map, ptr, 1, grid=1, block=32, stream=stream),
        "tmakit bound() relaunch": bound,
        "tmakit bound.update(2, i & 1); bound()": bound_update,
        "cuda.core launch, int changing every launch": cuda_core_changing,
    }
    results.update(measure_all(launches, stream, n, repeats))

    module.close()
    buf.close()
    ref = results["cuda.core launch (TensorMapDescriptor, pointer, int)"]["host_us"]
    for row in results.values():
        row["vs_cuda_core"] = row["host_us"] / ref
    results["tmakit bound.update(2, i & 1); bound()"]["vs_cuda_core_changing"] = (
        results["tmakit bound.update(2, i & 1); bound()"]["host_us"]
        / results["cuda.core launch, int changing every launch"]["host_us"])
    return {"device": tdrv.device_name(0), "launches_per_repeat": n, "repeats": repeats, "results": results}


def write(report: dict[str, Any], out: Path | None) -> Path:
    here = Path(__file__).resolve().parent / "results"
    here.mkdir(parents=True, exist_ok=True)
    report = {"benchmark": "launch_overhead", "date": dt.datetime.now().isoformat(timespec="seconds"),
              "commit": commit(), **report}
    lines = [
        "# Launch overhead: empty kernel (CUtensorMap by value + pointer + int)", "",
        f"- device: {report['device']}", f"- date: {report['date']}", f"- commit: {report['commit']}",
        f"- {report['launches_per_repeat']} launches per batch (the queue never fills), median of {report['repeats']} interleaved rounds",
        "",
        "| launcher | host us/launch (median) | host min | GPU us/launch (events) | host vs cuda.core |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, row in report["results"].items():
        lines.append(f"| {name} | {row['host_us']:.2f} | {row['host_us_min']:.2f} | {row['gpu_us']:.2f} | "
                         f"{row['vs_cuda_core']:.2f}x |")
    changing = report["results"]["tmakit bound.update(2, i & 1); bound()"]["vs_cuda_core_changing"]
    lines += ["", f"bound.update + bound() vs cuda.core with the int changing too: {changing:.2f}x.",
              "Goals: bound() <= 1.05x cuda.core launch; bound.update + bound() <= 1.2x cuda.core launch."]
    js = here / "launch_overhead.json"
    report["summary"] = lines
    js.write_text(json.dumps(report, indent=2) + "\n")
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        shutil.copy(js, out / js.name)
    print("\n".join(lines))
    return js


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
