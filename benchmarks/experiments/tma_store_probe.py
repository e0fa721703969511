"""Experiment: which TMA tile-store coordinates the hardware takes. Each case stores one 128B-swizzled box of
float32 [8 rows, 32 columns] at the given (row, column) corner into a poisoned 64 x 128 array, in a child
process (a fault ends the context), and reports "ok" with the bytes checked against tmakit.layout.tma_store,
or the error the launch ended with.

    PYTHONPATH=. python benchmarks/experiments/tma_store_probe.py
"""
from __future__ import annotations

import json
import subprocess
import sys

CASES = [(0, 0), (8, 96), (60, 120), (-4, 0), (0, -4), (-4, -4), (-8, 0), (0, -32)]


def one(row: int, col: int) -> dict:
    import numpy as np

    from tmakit import _driver
    from tmakit.backend import choose_backend
    from tmakit.device_array import DeviceArray
    from tmakit.layout import tma_model
    from tmakit.ops._kernels import kernel
    from tmakit.tensormap import describe_tensor

    rng = np.random.default_rng([row + 1000, col + 1000])
    image = rng.integers(0, 256, size=8 * 128, dtype=np.uint8)
    with DeviceArray.from_host(np.full((64, 128), 0xA5A5A5A5, np.uint32).view(np.float32)) as dst, \
            DeviceArray.from_host(np.array([[col, row, 0, 0, 0]], np.int32)) as coords, DeviceArray.from_host(image) as img:
        tm = describe_tensor(dst, box=(8, 32), swizzle="128B")
        geo = tma_model.box_geometry(tm)
        k = kernel("tile_store.cu", "tmakit_tile_store", choose_backend("tma", device=0), 0)
        k(tm, coords.ptr, 1, 2, geo.box_bytes, geo.smem_bytes, tm.smem_alignment, img.ptr, grid=(1, 1, 1),
          block=(128, 1, 1), shared_mem=geo.smem_bytes + tm.smem_alignment)
        _driver.call("cuCtxSynchronize")
        got = dst.to_host().view(np.uint8).ravel()
    want = np.full(64 * 128 * 4, 0xA5, np.uint8)
    tma_model.tma_store(tm, want, [col, row], image)
    return {"corner": [row, col], "result": "ok" if np.array_equal(got, want) else "WRONG BYTES"}


def main() -> int:
    if len(sys.argv) == 3:
        try:
            print(json.dumps(one(int(sys.argv[1]), int(sys.argv[2]))))
        except Exception as exc:  # noqa: BLE001 - the child reports any failure as its result
            print(json.dumps({"corner": [int(sys.argv[1]), int(sys.argv[2])], "result": f"{type(exc).__name__}: {exc}"[:200]}))
        return 0
    for row, col in CASES:
        out = subprocess.run([sys.executable, __file__, str(row), str(col)], capture_output=True, text=True, timeout=120)
        print(out.stdout.strip() or out.stderr.strip()[-300:], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
