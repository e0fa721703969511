"""Copy and transpose with tmakit's plans, checked, and their bandwidth beside torch's copy.

Shows: ``tmakit.ops.plan_copy`` / ``plan_transpose`` (prepare once: backend, tensor maps, tiles, bound launch),
``plan()`` to run again, ``plan(dst2, src2)`` to run on other buffers of the same geometry, the decisions a
plan records (``plan.result``), the results checked against numpy, and GB/s (bytes read + written) timed with
tmakit's own events, beside torch's ``copy_`` when torch is installed. Without a GPU it prints what a plan
would decide for the shape and exits 0.

    python examples/tma_copy_transpose.py [--rows 8192] [--cols 8192] [--dtype float32] [--repeats 20]
"""
from __future__ import annotations

import argparse
import sys

import numpy as np


def _gbps(nbytes: int, ms: float) -> float:
    return 2 * nbytes / (ms * 1e6)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=8192, help="source rows (default 8192)")
    parser.add_argument("--cols", type=int, default=8192, help="source columns (default 8192)")
    parser.add_argument("--dtype", default="float32", help="element type: uint8, float16, float32, float64, ...")
    parser.add_argument("--repeats", type=int, default=20, help="timed runs of each plan (default 20)")
    parser.add_argument("--backend", default="auto", help='"auto" (TMA on sm_90, else cp.async), "tma" or "cp.async"')
    args = parser.parse_args(argv)

    import tmakit
    from tmakit import _driver
    from tmakit.ops.transpose import sector_plan, source_lead, tile_grid

    dtype = np.dtype(args.dtype)
    rows, cols, esize = args.rows, args.cols, dtype.itemsize
    nbytes = rows * cols * esize
    if not _driver.gpu_available():
        sectors = sector_plan(0, rows * esize, cols)
        print(f"a {rows}x{cols} {dtype.name} transpose on a 16-byte aligned buffer would run "
              f"{'on TMA' if (cols * esize) % 16 == 0 and (rows * esize) % 16 == 0 else 'on the cp.async path'} "
              f"(sm_90) in {tile_grid(rows, cols, esize, 256, sectors.shifted != 0, source_lead(0, cols * esize, esize))} "
              f"tiles of 256 rows x 128 bytes, {sectors}")
        print("tma_copy_transpose: no CUDA GPU here; nothing launched (the plans need a GPU).")
        return 0

    rng = np.random.default_rng()
    a = rng.integers(0, 256, nbytes, dtype=np.uint8).view(dtype).reshape(rows, cols)
    b = rng.integers(0, 256, nbytes, dtype=np.uint8).view(dtype).reshape(rows, cols)
    with tmakit.Stream(0) as stream, tmakit.DeviceArray.from_host(a) as src, tmakit.DeviceArray.from_host(b) as src2, \
            tmakit.DeviceArray.empty((rows, cols), dtype) as dst, tmakit.DeviceArray.empty((cols, rows), dtype) as dst_t:
        copy = tmakit.ops.plan_copy(dst, src, backend=args.backend, stream=stream)
        transpose = tmakit.ops.plan_transpose(dst_t, src, backend=args.backend, stream=stream)
        print(f"copy plan: {copy.result}")
        print(f"transpose plan: {transpose.result}")
        copy()
        transpose()
        stream.sync()
        ok = np.array_equal(dst.to_host().view(np.uint8), a.view(np.uint8))
        ok &= np.array_equal(dst_t.to_host().view(np.uint8), np.ascontiguousarray(a.T).view(np.uint8))
        transpose(dst_t, src2)  # the same plan on another source of the same geometry
        stream.sync()
        ok &= np.array_equal(dst_t.to_host().view(np.uint8), np.ascontiguousarray(b.T).view(np.uint8))
        if not ok:
            print("tma_copy_transpose: WRONG RESULT")
            return 1
        timings = {}
        for name, plan in (("tmakit plan_copy", copy), ("tmakit plan_transpose", transpose)):
            plan()  # warm-up
            with tmakit.timed(stream) as t:
                for _ in range(args.repeats):
                    plan()
            timings[name] = t.ms / args.repeats
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available():
        x = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        y = torch.empty_like(x)
        y.copy_(x)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(args.repeats):
            y.copy_(x)
        end.record()
        end.synchronize()
        timings["torch copy_"] = start.elapsed_time(end) / args.repeats
    print(f"\n{rows}x{cols} {dtype.name} ({nbytes / 2**20:.0f} MiB) on {_driver.device_name(0)}, results checked:")
    for name, ms in timings.items():
        print(f"  {name:24s} {ms:8.3f} ms  {_gbps(nbytes, ms):8.1f} GB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
