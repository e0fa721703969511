"""Record how the driver lays out a CUtensorMap: encode random valid tensor maps and write, per map, its encode
parameters and the 128 bytes the driver produced (run on a GPU machine; sm_90+).

    python benchmarks/tensormap_layout_probe.py --n 2500 --out tests/data/tensormap_layout.jsonl

The first line is a header (driver version, device, cuda-bindings, seed); each further line one map:
``{"kind": "tiled"|"im2col", "dtype", "address", "dims", "strides", "box" | corners/channels/pixels,
"element_strides", "interleave", "swizzle", "l2_promotion", "oob_fill", "descriptor": "<256 hex digits>"}``
(driver order: innermost first; strides in bytes for dims 1..rank-1). ``tmakit decode --learn FILE`` derives
the field layout from it (tmakit.doctor.tensormap_layout), and tests/test_decode.py checks that every recorded
map decodes back to its parameters.

Parameters come from tmakit.tensormap.corpus's valid base cases (every dtype, rank 1-5, every swizzle,
interleave, L2 promotion and OOB fill), with addresses spread over a real allocation and, where the driver
accepts them, over the whole 64-bit range, so every field varies independently across the records.
"""
from __future__ import annotations

import argparse
import datetime
import json
import random
import sys
import time

from tmakit import _driver
from tmakit.errors import UnsupportedDeviceError
from tmakit.tensormap.corpus import base_im2col, base_tiled
from tmakit.tensormap.encode import descriptor_bytes, encode_im2col_raw, encode_tiled_raw

ALLOCATION = 1 << 28  # 256 MiB: addresses vary over bits 5..27 inside it


def _address(rng: random.Random, base: int, case: dict) -> int:
    granule = 32 if case["interleave"] == 2 or case["dtype"] in (14, 15) else 16
    if rng.random() < 0.3:  # a random address anywhere below 2^56 (the driver may refuse: then it is skipped)
        return rng.randrange(1, 1 << (56 - 5)) * 32 if granule == 32 else rng.randrange(1, 1 << (56 - 4)) * 16
    return base + rng.randrange(0, ALLOCATION // 32) * 32 if granule == 32 else base + rng.randrange(0, ALLOCATION // 16) * 16


def _encode(case: dict, address: int):
    common = (case["interleave"], case["swizzle"], case["l2_promotion"], case["oob_fill"])
    if case["kind"] == "tiled":
        return encode_tiled_raw(case["dtype"], address, case["dims"], case["strides"], case["box"],
                                case["element_strides"], *common)
    return encode_im2col_raw(case["dtype"], address, case["dims"], case["strides"], case["lower_corner"],
                             case["upper_corner"], case["channels_per_pixel"], case["pixels_per_column"],
                             case["element_strides"], *common)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2500, help="maps to record (tiled; a fifth as many im2col on top)")
    ap.add_argument("--seed", type=int, default=29)
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--out", default="tests/data/tensormap_layout.jsonl")
    args = ap.parse_args(argv)

    try:
        _driver.ensure_context(args.device)
    except UnsupportedDeviceError as exc:
        print(f"no GPU to encode with ({exc}); nothing recorded")
        return 0
    arch = _driver.device_arch(args.device)
    if arch.major < 9:
        print(f"device {args.device} is {arch.sm}: tensor maps need sm_90 or newer; nothing recorded")
        return 0
    allocation = int(_driver.call("cuMemAlloc", ALLOCATION + 1024))
    base = (allocation + 1023) // 1024 * 1024
    rng = random.Random(args.seed)
    header = {"header": True, "driver_version": "%d.%d" % _driver.driver_version(),
              "device": _driver.device_name(args.device), "arch": arch.sm, "seed": args.seed,
              "cuda_bindings": __import__("cuda.bindings").bindings.__version__,
              "date": datetime.date.today().isoformat()}
    counts = {"tiled": 0, "im2col": 0, "refused": 0}
    t0 = time.perf_counter()
    with open(args.out, "w") as fh:
        fh.write(json.dumps(header) + "\n")
        for kind, want, make in (("tiled", args.n, base_tiled), ("im2col", max(1, args.n // 5), base_im2col)):
            tries = 0
            while counts[kind] < want and tries < 20 * want:
                tries += 1
                case = make(rng)
                case["address"] = _address(rng, base, case)
                case.pop("address_offset", None)
                try:
                    err, tmap = _encode(case, case["address"])
                except (OverflowError, ValueError, TypeError):
                    counts["refused"] += 1
                    continue
                if int(err) != 0:
                    counts["refused"] += 1
                    continue
                case["descriptor"] = descriptor_bytes(tmap).hex()
                fh.write(json.dumps(case, separators=(",", ":")) + "\n")
                counts[kind] += 1
    _driver.call("cuMemFree", allocation)
    print(json.dumps({"header": header, "counts": counts, "out": args.out,
                      "seconds": round(time.perf_counter() - t0, 2)}))
    return 0 if counts["tiled"] >= min(args.n, 2000) else 1


if __name__ == "__main__":
    sys.exit(main())
