"""Host time of one ops.copy / ops.transpose call: a new geometry (the full path) against a repeat (the launch memo).

Each of --calls pairs of torch tensors has its own geometry (source views four rows shorter each), so the first
pass over them prepares every call and the second repeats each; torch's ``copy_`` on the same pairs is the
reference. Kernels are small (a few hundred KB), so the host time is what is measured; the stream is
synchronised, untimed, before each pass. Prints one JSON line per op: its first pass and the median repeat.

    PYTHONPATH=. python benchmarks/experiments/op_host_cost.py --calls 200
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import commit  # noqa: E402


def _per_call_us(torch, call, items: list) -> float:
    """Host microseconds per ``call(dst, src)`` over one pass of ``items``, the stream idle at the start."""
    torch.cuda.synchronize()
    began = time.perf_counter()
    for dst, src in items:
        call(dst, src)
    return (time.perf_counter() - began) * 1e6 / len(items)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5, help="repeat passes (the first pass is the full path)")
    args = parser.parse_args()
    import torch

    from tmakit import ops

    rows, cols = 512 + 4 * args.calls, 256
    base = torch.randint(0, 255, (rows, cols), dtype=torch.uint8, device="cuda").view(torch.float32)
    # float32 views 4 rows apart: every pair its own address and shape, every pitch TMA-describable
    sources = [base[4 * i:] for i in range(args.calls)]
    pairs = {"copy": [(torch.empty_like(s), s) for s in sources],
             "transpose": [(torch.empty(s.shape[::-1], dtype=s.dtype, device="cuda"), s) for s in sources]}
    run = {"copy": ops.copy, "transpose": ops.transpose}
    warm = base[:256].clone()
    for op in run:  # compile and load the kernels outside the timing
        run[op](torch.empty(warm.shape[::-1] if op == "transpose" else warm.shape, dtype=warm.dtype, device="cuda"), warm)
    for op, items in pairs.items():
        per_pass = [_per_call_us(torch, run[op], items) for _ in range(1 + args.rounds)]
        torch.cuda.synchronize()
        for dst, src in items:  # the outputs are right, or the timing means nothing
            want = src.t() if op == "transpose" else src
            assert torch.equal(dst.view(torch.int32), want.contiguous().view(torch.int32)), op
        print(json.dumps({"op": op, "first_call_us": round(per_pass[0], 1),
                          "repeat_us": round(statistics.median(per_pass[1:]), 1), "calls": len(items),
                          "commit": commit(), "device": torch.cuda.get_device_name()}))
    items = pairs["copy"]
    times = [_per_call_us(torch, lambda dst, src: dst.copy_(src), items) for _ in range(args.rounds)]
    torch.cuda.synchronize()
    print(json.dumps({"op": "torch copy_", "repeat_us": round(statistics.median(times), 1), "calls": len(items)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
