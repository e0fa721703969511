"""Cold and warm compile time of every shipped kernel variant (NVRTC -> cubin), on this machine; no GPU needed.

    PYTHONPATH=. python benchmarks/compile_times.py [--only transpose] [--json] [--save] [--out DIR]

Variants: each kernel source under cuda_src/ with the compile-time parameters its op passes for a typical call
(the gemm and attention variants from tmakit.ops.describe_gemm / describe_attention, the transpose variants from
the decision plan_transpose makes, the copy's from plan_copy's defaults), for sm_90a (TMA) and for the cp.async
path (sm_80, and forced on sm_90a where the issue of slow compiles showed it).
- cold: the first compile, NVRTC running (each variant compiled into its own empty cache folder, so nothing of
  ~/.cache/tmakit is used or touched; the time includes writing the entry);
- warm: the same call again, served from that cache (reading and checking the entry);
- checked: what the first checked bind of a module adds (the hang doctor's twin: tmakit.doctor.instrument
  rewrites the PTX, ptxas or nvJitLink assembles it); later checked binds of the module look the twin up.
Output: a rich table (stderr shows progress), ``--json`` the rows as JSON on stdout, ``--save`` also
benchmarks/results/compile_times.{md,json} (device, date, commit, host) for docs/PERFORMANCE.md.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import write_results  # noqa: E402

import tmakit  # noqa: E402
from tmakit.doctor.assemble import ptx_to_cubin  # noqa: E402
from tmakit.doctor.instrument import instrument  # noqa: E402


def _transpose(shape: tuple[int, int], dtype: str, arch: str, backend: str) -> dict:
    """The defines of the transpose.cu variant plan_transpose compiles for fresh buffers of this problem."""
    import importlib

    import numpy as np

    from tmakit.ops._cache_policy import L2Eviction

    mod = importlib.import_module("tmakit.ops.transpose")  # the module (tmakit.ops.transpose is the function)
    from tmakit.ops.planning import _view

    size = np.dtype(dtype).itemsize
    src, dst = _view(shape, size, dtype), _view(shape[::-1], size, dtype)
    choice = tmakit.choose_backend(backend, arch=arch)
    limit = tmakit.device_limits(arch=arch).smem_per_block_optin
    result, layout, _ = mod.decide_transpose(dst, src, choice, limit, arch=choice.arch)
    defines = mod.kernel_defines(result, layout, size, L2Eviction.parse("last"), None, limit)
    return {**result.backend.defines, **defines}


def variants() -> list[tuple[str, str, str, dict]]:
    """(label, source, compile arch, defines) of each variant the ops compile."""
    out = []
    for arch, backend in (("sm_90", "tma"), ("sm_80", "cp.async")):
        g = tmakit.ops.describe_gemm(4096, 4096, 4096, arch=arch, backend=backend)
        out.append((f"gemm bf16 {backend}", "gemm.cu", g.compile_arch.sm, g.defines))
        for d in (128, 64):
            a = tmakit.ops.describe_attention(4, 16, 4096, d, arch=arch, backend=backend)
            out.append((f"attention D={d} {backend}", "attention.cu", a.compile_arch.sm, a.defines))
    tma, cp_async = tmakit.Backend.TMA.defines, tmakit.Backend.CP_ASYNC.defines
    for source in ("tile_load.cu", "tile_store.cu", "tma_prefetch.cu"):
        out += [(f"{source[:-3]} tma", source, "sm_90a", tma), (f"{source[:-3]} cp.async", source, "sm_80", cp_async)]
    out += [("tma_modes tma", "tma_modes.cu", "sm_90a", tma), ("pipeline", "pipeline.cu", "sm_90a", {}),
            ("wgmma_probe", "wgmma_probe.cu", "sm_90a", {}),
            ("copy tma", "copy.cu", "sm_90a", {"TMAKIT_COPY_CHUNK": 32768, "TMAKIT_COPY_STAGES": 3,
                                               "TMAKIT_COPY_SOURCE_EVICTION": 0}),
            ("copy cp.async", "copy.cu", "sm_80", cp_async)]
    for label, shape, dtype in (("aligned f32 8192x8192", (8192, 8192), "float32"),
                                ("both pitches odd f16 10007x10009", (10007, 10009), "float16")):
        out.append((f"transpose {label} tma", "transpose.cu", "sm_90a", _transpose(shape, dtype, "sm_90", "tma")))
        out.append((f"transpose {label} cp.async", "transpose.cu", "sm_80",
                    _transpose(shape, dtype, "sm_80", "cp.async")))
        out.append((f"transpose {label} cp.async forced on sm_90", "transpose.cu", "sm_90a",
                    _transpose(shape, dtype, "sm_90", "cp.async")))
    return out


def measure(source: str, arch: str, defines: dict, warm_repeats: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="tmakit-compile-times-") as cache:
        saved = {k: os.environ.get(k) for k in ("TMAKIT_CACHE_DIR", "TMAKIT_CACHE", "TMAKIT_COMPILE_STATUS")}
        os.environ.update(TMAKIT_CACHE_DIR=cache, TMAKIT_CACHE="1", TMAKIT_COMPILE_STATUS="0")
        try:
            t0 = time.perf_counter()
            code = tmakit.compile_cuda(source, arch=arch, defines=defines)
            cold = time.perf_counter() - t0
            warm = []
            for _ in range(warm_repeats):
                t0 = time.perf_counter()
                hit = tmakit.compile_cuda(source, arch=arch, defines=defines)
                warm.append(time.perf_counter() - t0)
                assert hit.from_cache, "the second compile must come from the cache"
            t0 = time.perf_counter()
            twin = ptx_to_cubin(instrument(code.ptx).ptx, code.arch.sm, code.name)
            checked = time.perf_counter() - t0
            assert twin, "the checked twin must assemble"
        finally:
            for key, value in saved.items():
                os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)
    return {"cold_s": round(cold, 2), "warm_ms": round(statistics.median(warm) * 1e3, 1),
            "checked_s": round(checked, 2), "cubin_kib": round(len(code.code) / 1024, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="measure the variants whose label contains this text")
    ap.add_argument("--warm-repeats", type=int, default=5, choices=range(1, 101), metavar="1..100",
                    help="cache hits timed per variant (median; default 5)")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON on stdout")
    ap.add_argument("--save", action="store_true", help="also write benchmarks/results/compile_times.{md,json}")
    ap.add_argument("--out", default=None, help="with --save, copy the results there too")
    args = ap.parse_args(argv)
    chosen = [v for v in variants() if args.only in v[0]]
    if not chosen:
        ap.error(f"--only {args.only!r} matches no variant")

    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    from tmakit.build import nvrtc_version

    rows = []
    with Progress(console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task("compiling", total=len(chosen))
        for label, source, arch, defines in chosen:
            progress.update(task, description=f"{label} ({source}, {arch})")
            rows.append({"variant": label, "source": source, "arch": arch,
                         **measure(source, arch, defines, args.warm_repeats)})
            progress.advance(task)
    host = f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.python_implementation()} {platform.python_version()}"
    notes = [f"host: {host}; NVRTC {'.'.join(map(str, nvrtc_version()))}",
             "cold: NVRTC runs (empty cache folder); warm: the same call served from the disk cache (median); "
             "checked: the hang doctor's twin, instrumented and assembled (once per module)"]
    if args.json:
        print(json.dumps({"host": host, "rows": rows, "notes": notes}, indent=1))
    else:
        table = Table(title="compile times (NVRTC -> cubin)")
        for column in ("variant", "source", "arch", "cubin KiB", "cold s", "warm ms", "checked s"):
            table.add_column(column, justify="left" if column in ("variant", "source", "arch") else "right")
        for r in rows:
            table.add_row(r["variant"], r["source"], r["arch"], f"{r['cubin_kib']:.1f}", f"{r['cold_s']:.2f}",
                          f"{r['warm_ms']:.1f}", f"{r['checked_s']:.2f}")
        Console().print(table)
        Console().print(notes[0], highlight=False)
    if args.save:
        with contextlib.redirect_stdout(sys.stderr):  # stdout holds the table or the JSON, nothing else
            write_results("compile_times", "Compile times: cold (NVRTC) and warm (disk cache) per kernel variant",
                          rows, notes, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
