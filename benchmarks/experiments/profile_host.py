"""Profile the host paths of describe_tensor (fresh tensor of a known shape) and Kernel launch (cProfile)."""
from __future__ import annotations

import cProfile
import pstats
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    import torch

    from tmakit import describe_tensor
    from tmakit.build import load_module
    from tmakit.tensormap.describe import clear_requests

    x = torch.empty((4096, 4096), dtype=torch.bfloat16, device="cuda")
    views = [x[i:i + 2048] for i in range(2048)]
    for v in views[:10]:
        describe_tensor(v, box=(64, 64))

    def fresh():
        for v in views * 3:
            clear_requests()
            describe_tensor(v, box=(64, 64))

    import launch_overhead as lo
    from cuda.core import Device

    dev = Device(0)
    dev.set_current()
    stream = dev.create_stream()
    buf = dev.allocate(lo.ROWS * lo.COLS * 4, stream=stream)
    ptr = int(buf.handle)
    desc = lo.RawDescriptor(lo.encode_descriptor(ptr))
    k = load_module(lo.SOURCE).kernel("empty_tma")

    def launches():
        for _ in range(6000):
            k(desc, ptr, 1, grid=1, block=32, stream=stream)
        stream.sync()

    for name, fn in (("describe fresh", fresh), ("launch", launches)):
        fn()
        prof = cProfile.Profile()
        prof.enable()
        fn()
        prof.disable()
        print(f"==== {name}")
        pstats.Stats(prof).sort_stats("tottime").print_stats(18)
    return 0


if __name__ == "__main__":
    sys.exit(main())
