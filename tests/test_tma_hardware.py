"""Hardware TMA box loads equal the CPU model byte for byte, on >= 1000 random descriptors per run.

Random tensor maps (ranks 1-5, 1/2/4/8-byte types, swizzle none/32B/64B/128B, OOB zero and NaN, element
strides, partial, negative and fully out-of-bounds boxes, interleave 16B/32B) over one buffer of fresh random bytes; each box is
loaded by the hardware (backend "tma") and by the forced cp.async path on the same GPU, and both images must
equal ``tmakit.layout.tma_load_image``. TMAKIT_HW_REPORT=path writes a JSON summary.
"""
from __future__ import annotations

import collections
import json
import math
import os
import random

import numpy as np
import pytest

from tmakit import DataType, Interleave, Swizzle, check_tiled
from tmakit.layout import box_geometry, tma_load_image

N_DESCRIPTORS = int(os.environ.get("TMAKIT_HW_DESCRIPTORS", "1000"))
BUFFER_BYTES = 32 << 20
TYPES = [DataType.UINT8, DataType.UINT16, DataType.FLOAT16, DataType.BFLOAT16, DataType.UINT32, DataType.INT32,
         DataType.FLOAT32, DataType.UINT64, DataType.FLOAT64, DataType.INT64, DataType.TFLOAT32, DataType.FLOAT32_FTZ,
         DataType.TFLOAT32_FTZ]
# TMA rounds these to tf32 in flight; the cp.async path refuses them by design.
CONVERTING = (DataType.TFLOAT32, DataType.TFLOAT32_FTZ)


def random_coords(rng: random.Random, dims, box, es, unit: int) -> list[list[int]]:
    """Three box starts: partial on either side, inside, or fully out of bounds; dim 0 a multiple of ``unit``."""
    coords = []
    for _ in range(3):
        kind = rng.random()
        c = []
        for i, (d, b, e) in enumerate(zip(dims, box, es)):
            reach = b * e
            if kind < 0.5:
                v = rng.randint(-reach, d)  # partial boxes on either side
            elif kind < 0.9:
                v = rng.randint(0, max(0, d - reach))
            else:
                v = rng.choice([-reach - 16, d + 5, -1000])  # fully out of bounds
            if i == 0:
                v = (v // unit) * unit
            c.append(v)
        coords.append(c)
    return coords


def random_interleaved_case(rng: random.Random):
    """An interleaved (NC/xHWCx) map: rank 3-5, dim 0 counted in 16- or 32-byte slices (tma_model docstring)."""
    while True:
        dtype = rng.choice(TYPES)
        size = dtype.size
        rank = rng.randint(3, 5)
        interleave = rng.choice([Interleave.B16, Interleave.B32])
        slice_bytes = 16 if interleave is Interleave.B16 else 32
        swizzle = Swizzle.B32 if interleave is Interleave.B32 else rng.choice(list(Swizzle)[:4])
        box = [max(1, 16 // size) * rng.randint(1, 4)] + [rng.choice([1, 2, 3, 4, 5]) for _ in range(rank - 1)]
        es = [rng.choice([1, 1, 2, 3]) for _ in range(rank)]
        dims = [rng.randint(1, 3 * b * e) for b, e in zip(box, es)]
        strides, acc = [], dims[0] * slice_bytes
        for d in dims[1:]:
            acc = -(-acc // slice_bytes) * slice_bytes + slice_bytes * rng.choice([0, 0, 1])
            strides.append(acc)
            acc *= d
        oob = 1 if (dtype.is_float and rng.random() < 0.4) else 0
        if acc > 4 << 20 or check_tiled(dtype, 1 << 40, dims, strides, box, es, interleave=interleave,
                                        swizzle=swizzle, oob_fill=oob):
            continue
        offset = 256 * rng.randrange((BUFFER_BYTES - acc) // 256)
        return dict(dtype=dtype, dims=dims, strides=strides, box=box, es=es, swizzle=swizzle, oob=oob, offset=offset,
                    coords=random_coords(rng, dims, box, es, 1), interleave=interleave)


def random_case(rng: random.Random):
    """A random valid tiled tensor map (driver order) inside BUFFER_BYTES, and coordinates to load."""
    if rng.random() < 0.15:
        return random_interleaved_case(rng)
    while True:
        dtype = rng.choice(TYPES)
        size = dtype.size
        rank = rng.randint(1, 5)
        swizzle = rng.choice([Swizzle.NONE, Swizzle.B32, Swizzle.B64, Swizzle.B128])
        span = swizzle.span or 256 * size
        inner = 16 * rng.randint(1, max(1, min(span, 256 * size, 512) // 16))
        box = [max(1, inner // size)] + [rng.choice([1, 2, 3, 4, 5, 8]) for _ in range(rank - 1)]
        es = [1] + [rng.choice([1, 1, 1, 2, 3]) for _ in range(rank - 1)]
        dims = [rng.randint(1, box[0] * 3)] + [rng.randint(1, 3 * b * e) for b, e in zip(box[1:], es[1:])]
        strides, acc = [], dims[0] * size
        for d in dims[1:]:
            acc = -(-acc // 16) * 16 + 16 * rng.choice([0, 0, 1, 3])
            strides.append(acc)
            acc *= d
        extent = acc if rank > 1 else dims[0] * size
        oob = 1 if (dtype.is_float and rng.random() < 0.4) else 0
        # the image (rows padded to the swizzle span) must fit a block's shared memory, which load_tiles checks
        image = max(box[0] * size, swizzle.span) * math.prod(-(-b // e) for b, e in zip(box[1:], es[1:]))
        if image > 160 << 10 or extent > 4 << 20 or check_tiled(dtype, 1 << 40, dims, strides, box, es, swizzle=swizzle, oob_fill=oob):
            continue
        offset = 256 * rng.randrange((BUFFER_BYTES - extent) // 256)
        unit = max(1, 16 // size)  # dim-0 starts must be 16-byte aligned
        return dict(dtype=dtype, dims=dims, strides=strides, box=box, es=es, swizzle=swizzle, oob=oob, offset=offset,
                    coords=random_coords(rng, dims, box, es, unit), interleave=Interleave.NONE)


@pytest.mark.requires_sm90
def test_hardware_images_equal_cpu_model_and_cp_async_twin():
    from tmakit import DeviceArray, encode_tiled
    from tmakit.ops import load_tiles
    from tmakit.ops.load_tiles import POISON

    seed = int(os.environ.get("TMAKIT_HW_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    host = np.random.default_rng(seed).integers(0, 256, BUFFER_BYTES, dtype=np.uint8)
    stats = collections.Counter()
    failures = []
    with DeviceArray.from_host(host) as buf:
        for n in range(N_DESCRIPTORS):
            case = random_case(rng)
            tm = encode_tiled(case["dtype"], buf.ptr + case["offset"], case["dims"], case["strides"], case["box"],
                              case["es"], swizzle=case["swizzle"], oob_fill=case["oob"], interleave=case["interleave"],
                              device=0, owner=buf)
            coords_np = [list(reversed(c)) for c in case["coords"]]
            memory = host[case["offset"]:]
            try:
                tma = load_tiles(tm, coords_np, backend="tma")
                cpa = None if case["dtype"] in CONVERTING else load_tiles(tm, coords_np, backend="cp.async")
            except Exception as exc:  # the seed reproduces the case (TMAKIT_HW_SEED)
                raise AssertionError(f"TMAKIT_HW_SEED={seed}, case {n}: {exc}") from exc
            for i, c in enumerate(case["coords"]):
                model = tma_load_image(tm, memory, c, poison=POISON)
                ok_tma = np.array_equal(tma.images[i], model)
                ok_cpa = True if cpa is None else np.array_equal(cpa.images[i], model)
                stats["cp_async_compared"] += cpa is not None
                stats["boxes"] += 1
                stats["tma_equal"] += ok_tma
                stats["cp_async_equal"] += cpa is not None and ok_cpa  # only boxes the cp.async path loaded
                if not (ok_tma and ok_cpa) and len(failures) < 10:
                    failures.append({"case": n, "coords": c, "tma": ok_tma, "cp.async": ok_cpa,
                                     "spec": {k: (str(v) if not isinstance(v, (list, int)) else v)
                                              for k, v in case.items() if k != "coords"}})
            stats[f"rank{len(case['dims'])}"] += 1
            stats[f"dtype_{case['dtype'].short}"] += 1
            stats[f"swizzle_{case['swizzle'].short}"] += 1
            stats[f"interleave_{case['interleave'].short}"] += 1
            stats[f"oob_{'nan' if case['oob'] else 'zero'}"] += 1
            stats["element_strides>1"] += any(e > 1 for e in case["es"])
            stats["descriptors"] += 1
    report = {"seed": seed, "stats": dict(stats), "failures": failures}
    if os.environ.get("TMAKIT_HW_REPORT"):
        with open(os.environ["TMAKIT_HW_REPORT"], "w") as fh:
            json.dump(report, fh, indent=1)
    assert stats["descriptors"] >= min(N_DESCRIPTORS, 1000)
    assert failures == [], json.dumps(report)[:4000]
    assert all(stats[f"rank{r}"] > 0 for r in range(1, 6))
    assert all(stats[f"swizzle_{s}"] > 0 for s in ("NONE", "32B", "64B", "128B"))
    assert stats["cp_async_compared"] > 2000
    assert stats["interleave_16B"] > 0 and stats["interleave_32B"] > 0
