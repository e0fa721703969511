"""Experiment: the transpose's ring depth, tile order and image buffers per backend, against torch's copy.

Each variant patches ``tmakit.ops.transpose`` (``_STAGES``, ``_IMAGE_BUFFERS``, ``_TILE_ROWS``, ``_THREADS`` and the compile-time defines
TMAKIT_TRANSPOSE_GROUP / TMAKIT_TRANSPOSE_BUFFERS, ``_L2_PROMOTION``) and transposes 2 GiB as 1/2/4/8-byte elements; every
result is checked against torch before it is timed. Rounds are interleaved (variant order repeated) so that
drift of the machine hits every variant alike; prints one JSON line per variant and size with the median
ratio to torch's copy over the rounds and each round's value.

    PYTHONPATH=. python benchmarks/experiments/transpose_stages.py [--gib 2] [--rounds 3]
"""
from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from copy_bandwidth import _time_ms  # noqa: E402

# (backend, stages, tile-row group, image buffers, source rows per tile, threads per block)
VARIANTS = [("tma", 3, 4, 2, 128, 256), ("tma", 2, 4, 2, 256, 256), ("cp.async", 4, 4, 1, 128, 256),
            ("cp.async", 2, 4, 1, 256, 256), ("cp.async", 3, 4, 1, 256, 256), ("cp.async", 3, 4, 1, 256, 512),
            ("cp.async", 2, 2, 1, 256, 256)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import torch

    from tmakit.backend import Backend

    tr = importlib.import_module("tmakit.ops.transpose")  # the module; tmakit.ops.transpose is the function
    cols = 32768
    rows = int(args.gib * (1 << 30)) // (4 * cols)
    src = torch.randn(rows, cols, device="cuda")
    dst = torch.empty_like(src)
    dst_t = torch.empty(cols, rows, device="cuda")
    plain_kernel = tr.kernel
    ratios: dict[tuple, list[float]] = {}
    for _ in range(args.rounds):
        for variant in VARIANTS:
            backend, stages, group, buffers, tile_rows, threads = variant
            tr._TILE_ROWS, tr._THREADS = tile_rows, threads
            tr._STAGES[Backend(backend)] = stages
            tr._IMAGE_BUFFERS = buffers
            tr.kernel = lambda *a, g=group, b=buffers, **d: plain_kernel(*a, TMAKIT_TRANSPOSE_GROUP=g,
                                                                          TMAKIT_TRANSPOSE_BUFFERS=b, **d)
            copy_ms = _time_ms(torch, lambda: dst.copy_(src), 2, 9)
            for dtype in (torch.uint8, torch.int16, torch.float32, torch.int64):
                s_x = src.view(dtype)
                d_x = dst_t.view(-1).view(dtype).view(s_x.shape[1], s_x.shape[0])
                d_x.view(torch.uint8).fill_(0xA5)
                fn = lambda: tr.transpose(d_x, s_x, backend=backend)  # noqa: E731
                fn()
                torch.cuda.synchronize()
                ms = _time_ms(torch, fn, 3, 15) if torch.equal(d_x, s_x.t()) else float("nan")
                ratios.setdefault((*variant, s_x.element_size()), []).append(round(copy_ms / ms, 3))
    for (backend, stages, group, buffers, tile_rows, threads, esize), values in ratios.items():
        print(json.dumps({"backend": backend, "stages": stages, "group": group, "buffers": buffers,
                          "tile_rows": tile_rows, "threads": threads, "esize": esize,
                          "vs_copy": statistics.median(values), "rounds": values}))
    print(json.dumps({"device": torch.cuda.get_device_name()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
