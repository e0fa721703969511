"""Run ops.transpose once per given case, for Nsight Compute: a warm-up call (compile, module load), then the call
to profile. Each case is backend:dtype:rows,cols[:off] (rows x cols of float32 viewed as dtype; "off" turns the
sector-aligned runs off).

    ncu -k regex:tmakit_transpose --launch-skip 1 --launch-count 1 --metrics ... \
        python3 benchmarks/experiments/transpose_profile.py tma:uint8:16336,32848
"""
from __future__ import annotations

import sys


def main() -> int:
    import torch

    import importlib

    from tmakit import ops

    transpose_module = importlib.import_module("tmakit.ops.transpose")
    for case in sys.argv[1:]:
        backend, dtype, shape, *flags = case.split(":")
        transpose_module._ALIGN_SECTORS = "off" not in flags
        rows, cols = (int(v) for v in shape.split(","))
        src = torch.randn(rows, cols, device="cuda").view(getattr(torch, dtype))
        dst = torch.empty(src.shape[1], src.shape[0], dtype=src.dtype, device="cuda")
        for _ in range(2):
            ops.transpose(dst, src, backend=backend)
        torch.cuda.synchronize()
        print(case, "exact" if torch.equal(dst, src.t()) else "WRONG", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
