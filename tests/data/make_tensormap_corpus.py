"""Record the driver's verdict for random near-valid tensor-map parameter sets (run on a GPU machine).

    PYTHONPATH=. python tests/data/make_tensormap_corpus.py --seed 1 --tiled 6000 --im2col 4000 \
        --out tests/data/tensormap_corpus.jsonl

The first line is a header (device, capability, driver version, seed); each further line one case with its
``verdict`` (the CUresult name). tests/test_driver_corpus.py replays the file through the rule checker.
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
import time

from tmakit import _driver
from tmakit.tensormap.corpus import driver_verdict, generate


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tiled", type=int, default=6000)
    ap.add_argument("--im2col", type=int, default=4000)
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)

    _driver.ensure_context(args.device)
    # A real allocation, so the base address is a genuine device pointer; offsets give the misalignments.
    base = int(_driver.call("cuMemAlloc", 1 << 20))
    base = (base + 1023) // 1024 * 1024
    arch = _driver.device_arch(args.device)
    header = {
        "header": True, "device": _driver.device_name(args.device), "arch": arch.sm,
        "driver_version": "%d.%d" % _driver.driver_version(), "seed": args.seed,
        "date": datetime.date.today().isoformat(),
        "cuda_bindings": __import__("cuda.bindings").bindings.__version__,
    }
    counts: dict[str, int] = {}
    t0 = time.perf_counter()
    with open(args.out, "w") as fh:
        fh.write(json.dumps(header) + "\n")
        for kind, n in (("tiled", args.tiled), ("im2col", args.im2col)):
            for case in generate(kind, n, args.seed):
                case["verdict"] = driver_verdict(case, base)
                counts[case["verdict"]] = counts.get(case["verdict"], 0) + 1
                fh.write(json.dumps(case, separators=(",", ":")) + "\n")
    print(json.dumps({"header": header, "counts": counts, "seconds": round(time.perf_counter() - t0, 2)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
