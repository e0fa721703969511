"""Benchmark: host<->device bandwidth of tmakit's async copies against torch in the same run, and the pipeline.

Measures (medians over CUDA events after warm-up, buffers far larger than the 50 MB L2):
  - pinned H2D and D2H: tmakit.copy_h2d/copy_d2h vs torch ``dst.copy_(src, non_blocking=True)`` (goal >= 0.97x)
  - pageable H2D and D2H (tmakit; torch's pageable copy for reference)
  - bidirectional: H2D and D2H at once on two streams (total GB/s)
  - device-to-device: tmakit.copy_d2d vs torch (reference, not a goal)
  - the pipeline: vector add over two inputs, one stream (sequential) vs three streams; end-to-end against the
    slowest stage (goal <= 1.10x) and against the sum of the stages
Writes benchmarks/results/transfer_bandwidth.md and .json (device, date, commit); ``--out DIR`` copies them there.

    PYTHONPATH=. python benchmarks/transfer_bandwidth.py [--quick] [--out DIR]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import sys
from pathlib import Path
from typing import Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import commit  # noqa: E402


def median_ms(stream, enqueue: Callable[[], None], *, inner: int, reps: int, warmup: int) -> float:
    """Median GPU time of one ``enqueue()``: ``inner`` calls back to back between two events, so the host's
    per-call overhead overlaps the previous copy instead of being timed."""
    from tmakit.streams import Event, elapsed_ms

    for _ in range(warmup):
        enqueue()
    stream.sync()
    samples = []
    for _ in range(reps):
        start = Event(stream.device).record(stream)
        for _ in range(inner):
            enqueue()
        end = Event(stream.device).record(stream)
        samples.append(elapsed_ms(start, end) / inner)
    return statistics.median(samples)


def gbps(nbytes: int, ms: float) -> float:
    return nbytes / (ms * 1e6)


def measure(nbytes: int, reps: int, quick: bool) -> tuple[list[dict], dict]:
    from tmakit.device_array import DeviceArray
    from tmakit.memory import pinned_empty
    from tmakit.copies import copy_d2d, copy_d2h, copy_h2d
    from tmakit.streams import Event, Stream, as_stream, elapsed_ms

    rows: list[dict] = []
    n = nbytes // 4
    kw = dict(inner=4, reps=reps, warmup=3)
    s = Stream(0)
    h_pin, h_pin2 = pinned_empty(n, np.float32), pinned_empty(n, np.float32)
    h_page = np.ones(n, np.float32)
    h_pin[:] = 1.0
    d, d2 = DeviceArray.empty(n, np.float32), DeviceArray.empty(n, np.float32)

    try:
        import torch
    except ImportError:
        torch = None
    t_res: dict[str, float] = {}
    if torch is not None and torch.cuda.is_available():
        ts = torch.cuda.Stream()
        tstream = as_stream(ts)
        t_pin = torch.ones(n, dtype=torch.float32, pin_memory=True)
        t_page = torch.ones(n, dtype=torch.float32)
        t_dev, t_dev2 = torch.empty(n, dtype=torch.float32, device="cuda"), torch.empty(n, dtype=torch.float32, device="cuda")
        with torch.cuda.stream(ts):
            t_res["pinned H2D"] = median_ms(tstream, lambda: t_dev.copy_(t_pin, non_blocking=True), **kw)
            t_res["pinned D2H"] = median_ms(tstream, lambda: t_pin.copy_(t_dev, non_blocking=True), **kw)
            t_res["pageable H2D"] = median_ms(tstream, lambda: t_dev.copy_(t_page, non_blocking=True), **kw)
            t_res["pageable D2H"] = median_ms(tstream, lambda: t_page.copy_(t_dev, non_blocking=True), **kw)
            t_res["D2D"] = median_ms(tstream, lambda: t_dev2.copy_(t_dev, non_blocking=True), **kw)
        torch.cuda.synchronize()

    mine = {
        "pinned H2D": median_ms(s, lambda: copy_h2d(d, h_pin, s), **kw),
        "pinned D2H": median_ms(s, lambda: copy_d2h(h_pin, d, s), **kw),
        "pageable H2D": median_ms(s, lambda: copy_h2d(d, h_page, s), **kw),
        "pageable D2H": median_ms(s, lambda: copy_d2h(h_page, d, s), **kw),
        "D2D": median_ms(s, lambda: copy_d2d(d2, d, s), **kw),
    }
    goals = {"pinned H2D": ">= 0.97x torch", "pinned D2H": ">= 0.97x torch"}
    for op, ms in mine.items():
        moved = nbytes * (2 if op == "D2D" else 1)  # D2D reads and writes
        ref = t_res.get(op)
        ratio = ref / ms if ref else None
        goal = goals.get(op, "")
        if goal and ratio is not None:
            goal += " (met)" if ratio >= 0.97 else " (MISSED)"
        rows.append({"op": op, "bytes": nbytes, "tmakit_ms": ms, "tmakit_gbps": gbps(moved, ms),
                     "torch_gbps": gbps(moved, ref) if ref else None, "ratio_vs_torch": ratio, "goal": goal})

    # bidirectional: H2D on one stream while D2H runs on another
    s2 = Stream(0)
    d3 = DeviceArray.empty(n, np.float32)
    samples = []
    for i in range(reps + 2):
        start = Event(0).record(s)
        s2.wait(start)
        for _ in range(4):
            copy_h2d(d, h_pin, s)
            copy_d2h(h_pin2, d3, s2)
        s.wait(Event(0).record(s2))
        end = Event(0).record(s)
        if i >= 2:
            samples.append(elapsed_ms(start, end) / 4)
    ms = statistics.median(samples)
    rows.append({"op": "bidirectional (H2D + D2H, 2 streams)", "bytes": 2 * nbytes, "tmakit_ms": ms,
                 "tmakit_gbps": gbps(2 * nbytes, ms), "torch_gbps": None, "ratio_vs_torch": None,
                 "goal": "total (measured ~87 GB/s)"})
    for obj in (d, d2, d3, h_pin.base, h_pin2.base, s, s2):
        obj.close()
    return rows, pipeline_bench(quick)


def pipeline_bench(quick: bool) -> dict:
    from examples.async_memcpy_overlap import vector_add_kernel
    from tmakit.memory import pinned_empty
    from tmakit.transfer import pipeline

    n = (256 << 20) // 4 if quick else (1 << 30) // 4
    rng = np.random.default_rng()
    a, b, c = (pinned_empty(n, np.float32) for _ in range(3))
    a[:] = rng.standard_normal(n, dtype=np.float32)
    b[:] = rng.standard_normal(n, dtype=np.float32)
    add = vector_add_kernel(0)
    pipeline((a, b), add, outputs=c, chunk_bytes=32 << 20, streams=3, progress=False)  # warm-up
    out: dict = {"elements": n, "bytes_moved": 3 * n * 4, "chunk_bytes": 32 << 20}
    for name, streams in (("sequential", 1), ("overlapped", 3)):
        reports = []
        for _ in range(1 if quick else 3):
            c[:] = np.nan
            _, rep = pipeline((a, b), add, outputs=c, chunk_bytes=32 << 20, streams=streams, buffers=streams,
                              progress=False)
            reports.append(rep)
        if not np.array_equal(c, a + b):
            raise SystemExit(f"pipeline ({name}) produced wrong results")
        rep = sorted(reports, key=lambda r: r.total_ms)[len(reports) // 2]
        out[name] = rep.as_dict()
    out["speedup_overlapped_vs_sequential"] = out["sequential"]["total_ms"] / out["overlapped"]["total_ms"]
    return out


def write(rows: list[dict], pipe: dict, args: argparse.Namespace) -> list[Path]:
    from tmakit import _driver

    meta = {"device": _driver.device_name(0), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "commit": commit(), "quick": args.quick, "driver": "%d.%d" % _driver.driver_version()}
    fmt = lambda v, f="{:.1f}": "n/a" if v is None else f.format(v)  # noqa: E731
    lines = [f"# Transfer bandwidth ({'quick' if args.quick else 'full'} run)", "",
             f"- device: {meta['device']} (driver {meta['driver']})", f"- date: {meta['date']}", f"- commit: {meta['commit']}",
             f"- buffer: {rows[0]['bytes'] / 2**20:.0f} MiB; medians over CUDA events after warm-up", "",
             "| op | tmakit GB/s | torch GB/s | tmakit / torch | goal |", "|---|---:|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r['op']} | {fmt(r['tmakit_gbps'])} | {fmt(r['torch_gbps'])} | "
                     f"{fmt(r['ratio_vs_torch'], '{:.3f}x')} | {r['goal']} |")
    seq, ovl = pipe["sequential"], pipe["overlapped"]
    lines += ["", f"## Pipeline: vector add, {pipe['elements']:,} float32 per input, 32 MiB chunks", "",
              "| run | end-to-end ms | H2D ms | kernel ms | D2H ms | end-to-end / slowest stage | sum of stages / end-to-end |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    for name, r in (("sequential (1 stream)", seq), ("overlapped (3 streams)", ovl)):
        lines.append(f"| {name} | {r['total_ms']:.2f} | {r['h2d_ms']:.2f} | {r['kernel_ms']:.2f} | {r['d2h_ms']:.2f} | "
                     f"{r['vs_ideal']:.3f} | {r['speedup_vs_serial']:.2f} |")
    lines += ["", f"Overlapped is {pipe['speedup_overlapped_vs_sequential']:.2f}x faster than sequential; "
              f"goal: overlapped end-to-end <= 1.10x its slowest stage (got {ovl['vs_ideal']:.3f}x: "
              f"{'met' if ovl['vs_ideal'] <= 1.10 else 'MISSED'}).", ""]
    results = ROOT / "benchmarks" / "results"
    results.mkdir(parents=True, exist_ok=True)
    md = results / "transfer_bandwidth.md"
    md.write_text("\n".join(lines))
    js = results / "transfer_bandwidth.json"  # what docs/PERFORMANCE.md is built from (make_performance_md.py)
    js.write_text(json.dumps({"benchmark": "transfer_bandwidth", **meta, "buffer_bytes": rows[0]["bytes"],
                              "rows": rows, "pipeline": pipe}, indent=1) + "\n")
    print("\n".join(lines))
    paths = [md, js]
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        paths += [Path(shutil.copy(md, args.out)), Path(shutil.copy(js, args.out))]
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="64 MiB buffers, fewer repetitions, a smaller pipeline")
    parser.add_argument("--out", help="also copy the result files into this folder")
    parser.add_argument("--mib", type=int, default=None, help="buffer size in MiB (default 256; quick 64)")
    args = parser.parse_args(argv)
    from tmakit import _driver

    if not _driver.gpu_available():
        print("transfer_bandwidth: no CUDA GPU here; nothing measured.")
        return 0
    nbytes = (args.mib or (64 if args.quick else 256)) << 20
    rows, pipe = measure(nbytes, reps=5 if args.quick else 20, quick=args.quick)
    write(rows, pipe, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
