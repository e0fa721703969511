"""Describe a tensor for TMA, load boxes with the hardware and compare them with tmakit's CPU model.

Shows: ``tmakit.describe_tensor`` (the rules checked, the swizzle chosen, the bytes to ``expect_tx``, the
shared-memory footprint), the 128B swizzle as a chunk map, the CPU model ``tmakit.tma_load_image`` of one box
load (where each element lands in shared memory), and, on a GPU, real box loads (``tmakit.ops.plan_load_tiles``:
TMA on sm_90, the cp.async twin on sm_80..89) checked byte for byte against the model, in and out of bounds.
Without a GPU it describes and models, and says that the loads need one.

    python examples/describe_and_load.py [--rows 1000] [--cols 1024] [--box 8,32] [--swizzle 128B]
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import tmakit

POISON = 0xA5  # shared-memory bytes no load writes (the padding of swizzled rows) read back as this


def _box(text: str) -> tuple[int, int]:
    try:
        rows, cols = (int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not ROWS,COLS (two integers, e.g. 8,32)") from None
    return rows, cols


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def _swizzle(text: str) -> str:
    if text.strip().lower() != "auto":
        try:
            tmakit.Swizzle.parse(text, "swizzle")
        except tmakit.InvalidArgumentError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=_positive, default=1000, help="rows of the float32 tensor (default 1000)")
    parser.add_argument("--cols", type=_positive, default=1024,
                        help="columns (default 1024; a multiple of 4: rows of a multiple of 16 bytes)")
    parser.add_argument("--box", type=_box, default=(8, 32), help="box ROWS,COLS in elements (default 8,32)")
    parser.add_argument("--swizzle", type=_swizzle, default="128B",
                        help='shared-memory swizzle: "auto", "none", "32B", "64B", "128B"')
    args = parser.parse_args(argv)

    shape = (args.rows, args.cols)
    host = np.arange(args.rows * args.cols, dtype=np.float32).reshape(shape)  # every element says where it came from
    # 1. describe: from shape and dtype alone (no GPU needed); every rule is checked, the violations come all at once
    try:
        tm = tmakit.describe_tensor(shape=shape, dtype="float32", box=args.box, swizzle=args.swizzle, oob_fill="nan")
    except tmakit.TensorMapError as err:  # the arguments break a TMA rule: say which, with the fix (exit 2)
        parser.error(f"--rows/--cols/--box/--swizzle describe no valid tensor map:\n{err}")
    print(f"tensor {shape} float32, box {args.box}: swizzle {tm.swizzle.name}, expect_tx {tm.box_bytes} bytes, "
          f"shared memory {tm.smem_bytes} bytes aligned to {tm.smem_alignment}")
    print(f"  swizzle chosen because: {tm.swizzle_reason or 'asked for'}")
    # 2. the swizzle: where each 16-byte chunk of a row lands (rows repeat every 8 for 128B)
    if tm.swizzle is not tmakit.Swizzle.NONE:
        print(f"\n{tm.swizzle.name}: row r's chunk c lands at chunk position [r, c]")
        print(tmakit.swizzle_pattern(tm.swizzle))
    # 3. the CPU model of one box load at the far corner (partly out of bounds: NaN fill)
    corner = (args.rows - args.box[0] // 2, args.cols - args.box[1])
    image = tmakit.tma_load_image(tm, host.view(np.uint8).ravel(), list(corner[::-1]), poison=POISON)
    per_row = tm.geometry.row_pitch // 4
    rows = image.view(np.float32)[: 4 * per_row].reshape(4, per_row)
    source = np.where(np.isnan(rows), -1, rows % args.cols).astype(np.int64)  # -1: out of bounds (NaN fill)
    print(f"\nmodel of the box at {corner} (numpy order): the source column of each element in its first four "
          "shared-memory rows (-1: out of bounds, NaN-filled); the swizzle moves 16-byte chunks (4 floats):")
    print(np.array2string(source, max_line_width=200, threshold=10**6))

    try:
        gpu = tmakit.device_limits(0)
    except tmakit.UnsupportedDeviceError:
        print("\ndescribe_and_load: no CUDA GPU here; described and modelled only (the box loads need a GPU).")
        return 0

    # 4. the hardware: the same boxes loaded by TMA (or cp.async), compared with the model byte for byte
    rng = np.random.default_rng()
    coords = [[0, 0], list(corner)]
    coords += [[int(rng.integers(-args.box[0], args.rows)), int(rng.integers(-4, args.cols // 4)) * 4] for _ in range(6)]
    with tmakit.DeviceArray.from_host(host) as device_tensor:
        tm_device = tmakit.describe_tensor(device_tensor, box=args.box, swizzle=args.swizzle, oob_fill="nan")
        with tmakit.ops.plan_load_tiles(tm_device, coords) as plan:
            result = plan()
    flat = host.view(np.uint8).ravel()
    for c, got in zip(coords, result.images):
        want = tmakit.tma_load_image(tm_device, flat, c[::-1], poison=POISON)
        if not np.array_equal(got, want):
            print(f"box at {c}: {int(np.count_nonzero(got != want))} bytes differ from the model")
            return 1
    print(f"\n{len(coords)} boxes loaded with {result.backend.name} on {gpu.name}: every byte matches "
          "the CPU model (in bounds, out of bounds and swizzle padding)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
