"""Experiment: the transpose's ring depth per backend, against torch's copy in the same run.

For each backend and each depth, ``tmakit.ops.transpose`` runs on 2 GiB (1/2/4/8-byte elements) with the
depth patched into ``tmakit.ops.transpose._STAGES`` (the host sizes shared memory and compiles
TMAKIT_TRANSPOSE_STAGES from it); each result is checked against torch before it is timed. Prints a JSON
list of {backend, stages, esize, blocks_per_sm, ms, vs_copy}.

    PYTHONPATH=. python benchmarks/experiments/transpose_stages.py [--gib 2]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from copy_bandwidth import _time_ms  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=2.0)
    args = parser.parse_args()
    import torch

    from tmakit.backend import Backend, choose_backend
    import importlib

    tr = importlib.import_module("tmakit.ops.transpose")  # the module; tmakit.ops.transpose is the function
    from tmakit.ops._kernels import kernel

    cols = 32768
    rows = int(args.gib * (1 << 30)) // (4 * cols)
    src = torch.randn(rows, cols, device="cuda")
    dst = torch.empty_like(src)
    dst_t = torch.empty(cols, rows, device="cuda")
    copy_ms = _time_ms(torch, lambda: dst.copy_(src), 3, 15)
    results = []
    variants = [(Backend.TMA, 3, group) for group in (1, 8)]
    variants += [(Backend.CP_ASYNC, stages, group) for stages in (3, 4) for group in (1, 8)]
    plain_kernel = tr.kernel
    for backend, stages, group in variants:
        tr._STAGES[backend] = stages
        tr.kernel = lambda *a, group=group, **d: plain_kernel(*a, TMAKIT_TRANSPOSE_GROUP=group, **d)
        smem = (stages + tr._IMAGE_BUFFERS) * tr._TILE_BYTES + 1024
        for dtype in (torch.uint8, torch.int16, torch.float32, torch.int64):
            s_x = src.view(dtype)
            d_x = dst_t.view(-1).view(dtype).view(s_x.shape[1], s_x.shape[0])
            d_x.view(torch.uint8).fill_(0xA5)
            fn = lambda: tr.transpose(d_x, s_x, backend=backend.value)  # noqa: E731
            fn()
            torch.cuda.synchronize()
            ok = torch.equal(d_x, s_x.t())
            ms = _time_ms(torch, fn, 3, 15) if ok else float("nan")
            k = kernel("transpose.cu", "tmakit_transpose", choose_backend(backend.value, device=0), 0,
                          TMAKIT_TRANSPOSE_STAGES=stages)
            row = {"backend": backend.value, "stages": stages, "group": group, "esize": s_x.element_size(),
                   "resident_blocks": k.resident_blocks(tr._THREADS, smem), "ms": round(ms, 4),
                   "vs_copy": round(copy_ms / ms, 3), "correct": ok}
            results.append(row)
            print(json.dumps(row), flush=True)
    print(json.dumps({"copy_ms": copy_ms, "device": torch.cuda.get_device_name()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
