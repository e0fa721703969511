"""Experiment: what TMA writes for TFLOAT32 / FLOAT32_FTZ / TFLOAT32_FTZ elements (bit patterns in, bits out)."""
from __future__ import annotations

import json
import sys

import numpy as np


def main() -> int:
    from tmakit import DeviceArray, describe_tensor
    from tmakit.ops import load_tiles

    rng = np.random.default_rng(5)
    special = [0x00000000, 0x80000000, 0x00000001, 0x007FFFFF, 0x80000001, 0x00400000, 0x00800000, 0x3F800000,
               0x3F800FFF, 0x3F801000, 0x3F801001, 0x3F802FFF, 0x3F803000, 0x3F803001, 0x3F801FFF, 0x3F802000,
               0x7F7FFFFF, 0x7F7FF000, 0x7F7FF001, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 0x7FBFFFFF,
               0xFFC00001, 0x7FFFFFFF, 0xBF801000, 0xBF803000, 0x00001000, 0x00003000, 0x00FFFFFF, 0x3F7FF000]
    values = np.array(special + list(rng.integers(0, 2**32, 4096 - len(special), dtype=np.uint64)), dtype=np.uint32)
    host = values.reshape(64, 64)
    out = {}
    with DeviceArray.from_host(host) as dev:
        for dtype in ("tf32", "f32_ftz", "tf32_ftz", "f32"):
            tm = describe_tensor(dev, box=(64, 32), dtype=dtype, swizzle="none")
            res = load_tiles(tm, [[0, 0], [0, 32]], backend="tma")
            img = res.images.view(np.uint32).reshape(2, 64, 32)
            got = np.concatenate([img[0], img[1]], axis=1).ravel()
            out[dtype] = got.tolist()
    json.dump({"input": values.tolist(), **out}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
