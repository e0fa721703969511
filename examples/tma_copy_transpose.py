"""Copy and transpose with tmakit's plans, checked, and their bandwidth beside torch's copy.

Shows: ``tmakit.ops.plan_copy`` / ``plan_transpose`` (prepare once: backend, tensor maps, tiles, bound launch),
``plan()`` to run again, ``plan(dst2, src2)`` to run on other buffers of the same geometry, the decisions a
plan records (``plan.result``), the results checked against numpy, and GB/s (bytes read + written) timed with
tmakit's own events, beside torch's ``copy_`` when torch is installed. Without a GPU it prints what the plans
would decide on an sm_90 GPU (``tmakit.ops.describe_transpose``: the decision ``plan_transpose`` makes) and
exits 0.

    python examples/tma_copy_transpose.py [--rows 8192] [--cols 8192] [--dtype float32] [--repeats 20]
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import tmakit


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def _dtype(text: str) -> np.dtype:
    try:
        dtype = np.dtype(text)
    except TypeError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a numpy dtype (uint8, float16, float32, float64, ...)") from None
    if dtype.itemsize not in (1, 2, 4, 8):
        raise argparse.ArgumentTypeError(f"{dtype.name} has {dtype.itemsize}-byte elements; use 1, 2, 4 or 8")
    return dtype


def _gbps(nbytes: int, ms: float) -> float:
    return 2 * nbytes / (ms * 1e6)


def explain(rows: int, cols: int, dtype: np.dtype, backend: str) -> None:
    """What the plans decide on an sm_90 GPU for fresh (256-byte aligned) buffers, without one."""
    copy_choice = tmakit.choose_backend(backend, arch="sm_90")  # what plan_copy chooses
    result = tmakit.ops.describe_transpose((rows, cols), dtype, arch="sm_90", backend=backend)
    print(f"copy {rows}x{cols} {dtype.name} on sm_90: {copy_choice}")
    print(f"transpose {rows}x{cols} {dtype.name} on sm_90: the {result.backend.name} path ({result.reason})")
    if result.tile_plan is not None:
        print(f"  {result.tiles[0]} x {result.tiles[1]} tiles of {result.tile_plan.rows} source rows x 128 bytes, "
              f"dst written by {result.dst_stores} stores, {result.sectors}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=_positive, default=8192, help="source rows (default 8192)")
    parser.add_argument("--cols", type=_positive, default=8192, help="source columns (default 8192)")
    parser.add_argument("--dtype", type=_dtype, default=np.dtype(np.float32),
                        help="element type: uint8, float16, float32, float64, ... (default float32)")
    parser.add_argument("--repeats", type=_positive, default=20, help="timed runs of each plan (default 20)")
    parser.add_argument("--backend", default="auto", choices=("auto", "tma", "cp.async"),
                        help='"auto" (TMA on sm_90, else cp.async), "tma" or "cp.async"')
    args = parser.parse_args(argv)

    dtype, rows, cols = args.dtype, args.rows, args.cols
    try:
        gpu = tmakit.device_limits(0)
    except tmakit.UnsupportedDeviceError:
        try:
            explain(rows, cols, dtype, args.backend)
        except tmakit.InvalidArgumentError as err:  # e.g. --backend tma for a shape TMA cannot read
            parser.error(str(err))
        print("tma_copy_transpose: no CUDA GPU here; nothing launched (the plans need a GPU).")
        return 0

    nbytes = rows * cols * dtype.itemsize
    rng = np.random.default_rng()
    a = rng.integers(0, 256, nbytes, dtype=np.uint8).view(dtype).reshape(rows, cols)
    b = rng.integers(0, 256, nbytes, dtype=np.uint8).view(dtype).reshape(rows, cols)
    with tmakit.Stream(0) as stream, tmakit.DeviceArray.from_host(a) as src, tmakit.DeviceArray.from_host(b) as src2, \
            tmakit.DeviceArray.empty((rows, cols), dtype) as dst, tmakit.DeviceArray.empty((cols, rows), dtype) as dst_t:
        dst_t.fill(7)  # poisoned: an element the transpose leaves unwritten shows (random bytes are rarely 7)
        try:
            copy = tmakit.ops.plan_copy(dst, src, backend=args.backend, stream=stream)
            transpose = tmakit.ops.plan_transpose(dst_t, src, backend=args.backend, stream=stream)
        except tmakit.InvalidArgumentError as err:  # e.g. --backend tma for a shape TMA cannot read
            parser.error(str(err))
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
    print(f"\n{rows}x{cols} {dtype.name} ({nbytes / 2**20:.0f} MiB) on {gpu.name}, results checked:")
    for name, ms in timings.items():
        print(f"  {name:24s} {ms:8.3f} ms  {_gbps(nbytes, ms):8.1f} GB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
