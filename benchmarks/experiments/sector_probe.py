"""Experiment: what a transpose's write pattern costs when its runs start inside a 32-byte sector.

A transpose writes each destination row in runs (256 bytes for a 1-byte tile of 256 source rows). When the
destination pitch is 16 mod 32 bytes, every other row starts 16 bytes into a sector, so each run on those rows
begins and ends with a half sector that another block writes at another time. This writes a destination of
`rows` x `pitch` bytes in 256-byte runs, 128 rows per tile, tiles in groups of 16 tile rows (the transpose's
order), with three patterns:
    aligned    pitch a multiple of 32 (every run whole sectors)
    straddle   pitch 16 mod 32, runs at r0 .. r0+256 on every row (what the transpose does today)
    shifted    pitch 16 mod 32, runs on odd rows moved 16 bytes back (r0-16 .. r0+240): whole sectors again
and times each with CUDA events (median of 15 after warm-up), checking every byte against numpy. Also reads
a source of the same size in every variant when --read is given (a copy-like load).

    python benchmarks/experiments/sector_probe.py [--rows 131072] [--cols 16384] [--read]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys

KERNEL = r"""
extern "C" __global__ void write_runs(unsigned char* dst, const unsigned char* src, long long rows,
                                      long long pitch, long long row_bytes, int shift_odd, int read_src) {
  const long long tiles_r = (row_bytes + shift_odd + 255) / 256, tiles_c = (rows + 127) / 128;
  const long long G = 16, tiles = tiles_r * tiles_c;
  for (long long t = blockIdx.x; t < tiles; t += gridDim.x) {
    const long long group = t / (G * tiles_c), first = group * G;
    const long long height = tiles_r - first < G ? tiles_r - first : G;
    const long long in_group = t - group * G * tiles_c;
    const long long c0 = (in_group / height) * 128, r0 = (first + in_group % height) * 256;
    for (int k = threadIdx.x; k < 128 * 16; k += blockDim.x) {
      const long long c = c0 + k / 16;
      const long long at = r0 - ((c & 1) ? shift_odd : 0) + (k % 16) * 16;
      if (c >= rows || at < 0 || at >= row_bytes) continue;
      uint4 v = make_uint4((unsigned)c, (unsigned)at, (unsigned)(c ^ at), 0x5a5a5a5au);
      if (read_src) {
        const uint4 s = *reinterpret_cast<const uint4*>(src + (t * 2048 + k) * 16 % (rows * row_bytes));
        v.w ^= s.x;
      }
      *reinterpret_cast<uint4*>(dst + c * pitch + at) = v;
    }
  }
}
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=131072, help="destination rows")
    parser.add_argument("--cols", type=int, default=16336, help="destination row bytes (16336 = 16 mod 32)")
    parser.add_argument("--read", action="store_true", help="also read a source of the same size")
    args = parser.parse_args()
    import cupy as cp
    import numpy as np

    kernel = cp.RawKernel(KERNEL, "write_runs")
    rows, row_bytes = args.rows, args.cols
    src = cp.random.randint(0, 256, size=rows * row_bytes, dtype=cp.uint8) if args.read else cp.zeros(16, cp.uint8)
    variants = {"aligned": (row_bytes + (-row_bytes) % 32, 0), "straddle": (row_bytes, 0), "shifted": (row_bytes, 16)}
    results = {}
    for name, (pitch, shift) in variants.items():
        dst = cp.full(rows * pitch, 0xA5, dtype=cp.uint8)
        call = lambda: kernel((264,), (256,), (dst, src, np.int64(rows), np.int64(pitch), np.int64(row_bytes),  # noqa: E731
                                               np.int32(shift), np.int32(args.read)))
        call()
        cp.cuda.runtime.deviceSynchronize()
        view = dst.reshape(rows, pitch)[:, :row_bytes].get()
        c = np.arange(rows, dtype=np.int64)[:, None]
        at = (np.arange(row_bytes // 16, dtype=np.int64) * 16)[None, :]
        want = np.stack(np.broadcast_arrays(c, at, c ^ at), -1).astype(np.uint32)
        got = view.reshape(rows, row_bytes // 16, 16).view(np.uint32)[..., :3]
        ok = bool(np.array_equal(got, want))
        times = []
        for _ in range(3):
            call()
        for _ in range(15):
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            call()
            end.record()
            end.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, end))
        ms = statistics.median(times)
        moved = rows * row_bytes * (2 if args.read else 1)
        results[name] = {"pitch": pitch, "shift_odd": shift, "ok": ok, "ms": round(ms, 4), "GB/s": round(moved / ms / 1e6, 1)}
        del dst
    for name, r in results.items():
        r["vs aligned"] = round(results["aligned"]["ms"] / r["ms"], 3)
        print(json.dumps({"variant": name, "read": args.read, **r}))
    return 0 if all(r["ok"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
