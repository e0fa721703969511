"""Shared helpers for benchmark scripts: results files with device, date and commit."""
from __future__ import annotations

import datetime
import json
import os
import shutil
import statistics
import subprocess
import time
from pathlib import Path
from typing import Callable

RESULTS = Path(__file__).parent / "results"


def commit() -> str:
    """The commit measured: git where there is a checkout, else $TMAKIT_COMMIT or the file .device_commit at the
    repository root (for a copy of the working tree without .git)."""
    if os.environ.get("TMAKIT_COMMIT"):
        return os.environ["TMAKIT_COMMIT"]
    marker = Path(__file__).resolve().parents[1] / ".device_commit"
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             cwd=Path(__file__).parent, timeout=10).stdout.strip()
        if out:
            return out
    except Exception:  # noqa: BLE001 - a benchmark still runs outside a checkout
        pass
    return marker.read_text().strip() if marker.exists() else "unknown"


def time_ms(fn: Callable[[], object], torch, launches: int, queue_ahead: bool = False) -> float:
    """GPU milliseconds per call of `launches` calls back to back between two CUDA events. ``queue_ahead``: the
    stream first spins (``torch.cuda._sleep``, about 40 us per launch, at most 5 ms) so every launch is queued
    before the first event: the GPU time of the calls alone, not the host's time to issue them (a small kernel
    is otherwise timed at its caller's launch cost, which differs between peers and between hosts)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    sleep = getattr(torch.cuda, "_sleep", None)
    if queue_ahead and sleep is not None:
        sleep(int(min(40 * launches, 5000) * 2000))  # cycles at ~2 GHz
    start.record()
    for _ in range(launches):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / launches


def torch_with_gpu(script: str, peer: str):
    """torch when it is installed and sees a CUDA GPU, else None after printing why nothing is measured."""
    try:
        import torch
    except ImportError:
        print(f"{script} needs torch ({peer}); nothing measured")
        return None
    if not torch.cuda.is_available():
        print(f"{script}: no CUDA GPU; nothing measured")
        return None
    return torch


def device_name() -> str:
    try:
        from tmakit import _driver

        return _driver.device_name(0)
    except Exception as exc:  # noqa: BLE001
        return f"no GPU ({type(exc).__name__})"


def multi_gpu_name(stem: str, gpus: int) -> str:
    """The results file of a multi-GPU benchmark: one per card and GPU count (``copy_peer``: two H100s;
    ``copy_peer_h200``: two H200s; ``copy_peer_4gpus_h200``: four)."""
    return stem + (f"_{gpus}gpus" if gpus > 2 else "") + ("_h200" if "H200" in device_name() else "")


def host_time_us(fn: Callable[[], object], iterations: int, repeats: int = 7, warmup: int = 200) -> float:
    """Median over ``repeats`` of the mean host time per call (microseconds)."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(iterations):
            fn()
        samples.append((time.perf_counter() - t0) / iterations * 1e6)
    return statistics.median(samples)


def interleaved_host_times_us(fns: dict[str, Callable[[], object]], iterations: int, rounds: int = 15,
                              warmup: int = 200, between: Callable[[], object] | None = None) -> dict[str, float]:
    """Median host microseconds per call of each function, measured in interleaved rounds (every function once
    per round, ``between()`` untimed after each), so a change of machine state affects all of them alike and
    their ratios stay meaningful on a noisy host."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
        if between is not None:
            between()
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(iterations):
                fn()
            samples[name].append((time.perf_counter() - t0) / iterations * 1e6)
            if between is not None:
                between()
    return {name: statistics.median(values) for name, values in samples.items()}


def write_results(name: str, title: str, rows: list[dict], notes: list[str], out_dir: str | None,
                  also_json: bool = True, extra: dict | None = None) -> Path:
    """Write benchmarks/results/<name>.md (and .json unless ``also_json=False``, with ``extra``'s keys beside the
    rows), and copy them to ``out_dir``."""
    RESULTS.mkdir(exist_ok=True)
    meta = {"benchmark": name, "device": device_name(), "date": datetime.date.today().isoformat(), "commit": commit()}
    columns = list(rows[0]) if rows else []
    lines = [f"# {title}", "", f"- device: {meta['device']}", f"- date: {meta['date']}", f"- commit: {meta['commit']}", ""]
    lines += ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(f"{v:.3g}" if isinstance(v, float) else str(v) for v in row.values()) + " |")
    lines += [""] + [f"- {n}" for n in notes]
    md = RESULTS / f"{name}.md"
    md.write_text("\n".join(lines) + "\n")
    written = [md]
    if also_json:
        written.append(RESULTS / f"{name}.json")
        written[-1].write_text(json.dumps({**meta, "rows": rows, "notes": notes, **(extra or {})}, indent=1))
    if out_dir:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        for path in written:
            shutil.copy(path, out_dir)
    print("\n".join(lines))
    return md


def gemm_tile_label(plan) -> str:
    """A GEMM plan's tile plan as the results files name it: "BMxBNx64 sSTAGES cCLUSTER" ("a" after the cluster:
    the pair shares A; " kS": split-K ranges; " swap": the tiles of C^T, the operands swapped; " + R rows ...":
    C's last R rows by a second plan, its own label)."""
    cfg = plan.config
    label = f"{cfg.block_m}x{cfg.block_n}x64 s{cfg.stages} c{cfg.cluster}{'a' if cfg.multicast_a else ''}"
    label += f" k{cfg.splits}" if cfg.splits > 1 else ""
    label += " swap" if cfg.swap_ab else ""
    tail = getattr(plan, "tail", None)
    return label + (f" + {cfg.tail_rows} rows {gemm_tile_label(tail)}" if tail is not None else "")
