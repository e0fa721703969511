"""Overlapping host<->device copies with a kernel: vector add c = a + b on 1-2 GB, sequential vs overlapped.

Shows: a kernel compiled and launched with tmakit (load_module from source text, kernel(..., stream=)),
pinned host arrays (pinned_empty), the chunked pipeline (tmakit.pipeline) on one stream
(every stage waits for the previous one) and on three streams (copies in both directions run while the
kernel computes), the timeline of both runs and the ratios: overlapped time against the sum of the stages
and against the slowest stage (the ideal). The result is checked against numpy. Without a GPU it compiles the kernel and exits 0 with
a message.

    PYTHONPATH=. python examples/async_memcpy_overlap.py [--gib 1] [--chunk-mib 32] [--streams 3] [--png t.png]
"""
from __future__ import annotations

import argparse
import sys
from typing import Callable

import numpy as np

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
    import tmakit
    from tmakit import _driver

    kernel = tmakit.load_module(VECTOR_ADD, device=device).kernel("vector_add")
    sms = _driver.device_attribute("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT", device)

    def run(chunk) -> None:
        a, b = chunk.inputs
        c = chunk.output
        n = c.size
        blocks = max(1, min(sms * 8, -(-n // 256)))
        kernel(a.ptr, b.ptr, c.ptr, n, grid=(blocks, 1, 1), block=(256, 1, 1), stream=chunk.stream)

    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.0, help="size of each input array in GiB (default 1)")
    parser.add_argument("--chunk-mib", type=int, default=32)
    parser.add_argument("--streams", type=int, default=3)
    parser.add_argument("--png", help="also save the overlapped timeline as a PNG (needs tmakit[plot])")
    args = parser.parse_args(argv)

    from tmakit import _driver
    from tmakit.memory import pinned_empty
    from tmakit.transfer import pipeline

    if not _driver.gpu_available():
        import tmakit

        code = tmakit.compile_cuda(VECTOR_ADD, arch="sm_90a", name="vector_add.cu")
        print(f"async_memcpy_overlap: vector_add compiles ({len(code.code)} bytes of sm_90a cubin), but there is no "
              "CUDA GPU here to run the pipeline on.")
        return 0
    from rich.console import Console

    console = Console()
    n = int(args.gib * (1 << 30)) // 4
    console.print(f"[bold]{_driver.device_name(0)}[/]: c = a + b over {n:,} float32 "
                  f"({3 * n * 4 / 1e9:.2f} GB moved), chunks of {args.chunk_mib} MiB")
    rng = np.random.default_rng()
    a, b = pinned_empty(n, np.float32), pinned_empty(n, np.float32)
    a[:] = rng.standard_normal(n, dtype=np.float32)
    b[:] = rng.standard_normal(n, dtype=np.float32)
    c = pinned_empty(n, np.float32)
    add = vector_add_kernel(0)
    expected = a + b
    chunk = args.chunk_mib << 20

    pipeline((a, b), add, outputs=c, chunk_bytes=chunk, streams=1, buffers=1)  # warm-up
    results = {}
    for name, streams in (("sequential (1 stream)", 1), (f"overlapped ({args.streams} streams)", args.streams)):
        c.fill(np.nan)
        _, report = pipeline((a, b), add, outputs=c, chunk_bytes=chunk, streams=streams, buffers=streams)
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
