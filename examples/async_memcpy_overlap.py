"""Overlapping host<->device copies with a kernel: vector add c = a + b on 1-2 GB, sequential vs overlapped.

Shows: a kernel compiled and launched with tmakit (load_module from source text, kernel(..., stream=)),
pinned host arrays (pinned_empty), the chunked pipeline (tmakit.pipeline) on one stream
(every stage waits for the previous one) and on three streams (copies in both directions run while the
kernel computes), the timeline of both runs and the ratios: overlapped time against the sum of the stages
and against the slowest stage (the ideal). The result is checked against numpy. Without a GPU it compiles the kernel and exits 0 with
a message.

    python examples/async_memcpy_overlap.py [--gib 1] [--chunk-mib 32] [--streams 3] [--png t.png]
"""
from __future__ import annotations

import argparse
import sys
from typing import Callable

import numpy as np

import tmakit

VECTOR_ADD = r"""
extern "C" __global__ void vector_add(const float* __restrict__ a, const float* __restrict__ b,
                                      float* __restrict__ c, unsigned long long n) {
    // grid-stride loop: one launch shape serves every chunk size, including the last partial chunk
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        c[i] = a[i] + b[i];
    }
}
"""


def vector_add_kernel(device: int = 0) -> Callable:
    """Compile vector_add with tmakit (NVRTC -> cubin for this GPU, cached on disk) and return a pipeline kernel
    ``fn(chunk)`` that launches it on the chunk's stream."""
    kernel = tmakit.load_module(VECTOR_ADD, device=device).kernel("vector_add")
    sms = tmakit.device_limits(device).sm_count

    def run(chunk) -> None:
        a, b = chunk.inputs
        c = chunk.output
        n = c.size
        blocks = max(1, min(sms * 8, -(-n // 256)))
        kernel(a.ptr, b.ptr, c.ptr, n, grid=(blocks, 1, 1), block=(256, 1, 1), stream=chunk.stream)

    return run


def _ranged(kind: type, lo: float, hi: float) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {kind.__name__}") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{value} is out of range: use {lo}..{hi}")
        return value
    return parse


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=_ranged(float, 1 / 1024, 64), default=1.0,
                        help="size of each input array in GiB (default 1)")
    parser.add_argument("--chunk-mib", type=_ranged(int, 1, 4096), default=32, help="MiB per chunk (default 32)")
    parser.add_argument("--streams", type=_ranged(int, 1, 16), default=3, help="streams of the overlapped run (default 3)")
    parser.add_argument("--png", help="also save the overlapped timeline as a PNG (needs tmakit[plot])")
    args = parser.parse_args(argv)

    try:
        gpu = tmakit.device_limits(0)
    except tmakit.UnsupportedDeviceError:
        code = tmakit.compile_cuda(VECTOR_ADD, arch="sm_90a", name="vector_add.cu")
        print(f"async_memcpy_overlap: vector_add compiles ({len(code.code)} bytes of sm_90a cubin), but there is no "
              "CUDA GPU here to run the pipeline on.")
        return 0
    from rich.console import Console

    console = Console()
    n = int(args.gib * (1 << 30)) // 4
    console.print(f"[bold]{gpu.name}[/]: c = a + b over {n:,} float32 "
                  f"({3 * n * 4 / 1e9:.2f} GB moved), chunks of {args.chunk_mib} MiB")
    rng = np.random.default_rng()
    a, b = tmakit.pinned_empty(n, np.float32), tmakit.pinned_empty(n, np.float32)
    a[:] = rng.standard_normal(n, dtype=np.float32)
    b[:] = rng.standard_normal(n, dtype=np.float32)
    c = tmakit.pinned_empty(n, np.float32)
    add = vector_add_kernel(0)
    expected = a + b
    chunk = args.chunk_mib << 20

    tmakit.pipeline((a, b), add, outputs=c, chunk_bytes=chunk, streams=1, buffers=1)  # warm-up
    results = {}
    for name, streams in (("sequential (1 stream)", 1), (f"overlapped ({args.streams} streams)", args.streams)):
        c.fill(np.nan)
        _, report = tmakit.pipeline((a, b), add, outputs=c, chunk_bytes=chunk, streams=streams, buffers=streams)
        if not np.array_equal(c, expected):
            bad = int(np.count_nonzero(c != expected))
            console.print(f"[red]{name}: {bad} wrong elements[/]")
            return 1
        console.rule(name)
        report.print_timeline(console=console)
        results[name] = report
    seq, ovl = results.values()
    console.rule("ratios")
    console.print(f"overlapped is {seq.total_ms / ovl.total_ms:.2f}x faster than sequential "
                  f"({seq.total_ms:.1f} ms -> {ovl.total_ms:.1f} ms)")
    console.print(f"overlapped end-to-end / slowest stage = {ovl.vs_ideal:.3f} (1.0 is the ideal; goal <= 1.10)")
    console.print(f"overlapped end-to-end / sum of stages = {ovl.total_ms / ovl.sum_stages_ms:.3f}")
    if args.png:
        console.print(f"timeline saved to {ovl.save_timeline_png(args.png)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
