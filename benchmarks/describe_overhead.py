"""Host cost of building a tensor map: tmakit.describe_tensor vs a raw cuTensorMapEncodeTiled call vs Triton.

    PYTHONPATH=. python benchmarks/describe_overhead.py [--quick] [--out DIR]

Rows: the raw driver call through cuda.bindings (arguments converted as any caller must), describe_tensor on a
fresh tensor each call (new address: full path, shape verdict cached), describe_tensor with cache=False
(every rule checked), a repeated identical request (cache hit), and Triton's TensorDescriptor.from_tensor
(a host object; Triton encodes the descriptor later, at launch). Goals: fresh <= 1.5x raw; cached < 1 us.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import host_time_us, interleaved_host_times_us, write_results  # noqa: E402


def main(argv=None) -> int:  # noqa: C901
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    import torch

    from tmakit import describe_tensor
    from tmakit.tensormap.encode import encode_tiled_raw

    iters, rounds = (2000, 7) if args.quick else (20000, 21)
    x = torch.empty((4096, 4096), dtype=torch.bfloat16, device="cuda")
    views = [x[i:i + 2048] for i in range(2048)]  # distinct (row-aligned) addresses, one shape class
    from tmakit.tensormap.describe import clear_requests

    box = (64, 64)

    def raw():
        err, _ = encode_tiled_raw(9, x.data_ptr(), (4096, 4096), (8192,), (64, 64), (1, 1), 0, 3, 0, 0)
        assert int(err) == 0

    state = {"i": 0}

    def fresh():  # a tensor not seen before (new address), of a known shape class
        state["i"] = (state["i"] + 1) % len(views)
        clear_requests()
        describe_tensor(views[state["i"]], box=box)

    def fresh_unchecked_shape():  # nothing cached: parse, check every rule, encode
        state["i"] = (state["i"] + 1) % len(views)
        describe_tensor(views[state["i"]], box=box, cache=False)

    def cached():  # the result is dropped at once: every call builds a new TensorMap
        describe_tensor(x, box=box)

    held = {"tm": None}

    def cached_held():  # tm = describe_tensor(x, box) in a loop: the previous result is alive during the call
        held["tm"] = describe_tensor(x, box=box)

    from tmakit import _hotpath
    from tmakit.tensormap.describe import _describe_tensor
    from tmakit.tensormap.tensor_map import TensorMap

    def cached_python():  # the Python function with the Python twin of the cache: tmakit without its C extension
        _describe_tensor(x, box=box)

    paths = {"raw cuTensorMapEncodeTiled (cuda.bindings)": raw,
             "describe_tensor, fresh tensor (shape verdict cached)": fresh,
             "describe_tensor, fresh tensor, all rules checked": fresh_unchecked_shape,
             "describe_tensor, repeated identical request (cache)": cached,
             "describe_tensor, repeated identical request, previous result held": cached_held,
             "describe_tensor, repeated identical request, Python twins (no C extension)": cached_python,
             "clear": clear_requests}
    native_lookup = _hotpath.lookup_request
    _hotpath.py_bind_tensor_map(TensorMap, ())
    _hotpath.lookup_request = _hotpath.py_lookup_request  # reaches only the Python function; the C front has its own
    try:
        times = interleaved_host_times_us(paths, iters // 10, rounds=rounds)
    finally:
        _hotpath.lookup_request = native_lookup
    # the fresh row clears the request cache each call; that is not part of the cost
    times["describe_tensor, fresh tensor (shape verdict cached)"] -= times.pop("clear")
    t_raw = times["raw cuTensorMapEncodeTiled (cuda.bindings)"]
    rows = [{"path": name, "us_per_call": t, "ratio_to_raw": t / t_raw} for name, t in times.items()]
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor

        t = host_time_us(lambda: TensorDescriptor.from_tensor(x, list(box)), iters)
        rows.append({"path": "triton TensorDescriptor.from_tensor (host object only)", "us_per_call": t,
                     "ratio_to_raw": t / t_raw})
    except Exception as exc:  # noqa: BLE001 - the peer is optional
        rows.append({"path": f"triton TensorDescriptor.from_tensor: unavailable ({type(exc).__name__})",
                     "us_per_call": float("nan"), "ratio_to_raw": float("nan")})
    notes = [f"{iters // 10} calls per sample, median of {rounds} interleaved rounds (each path once per round), after "
             "200 warm-up calls; Triton measured after; 4096x4096 bf16, box 64x64",
             "goal: fresh descriptor within 1.5x of the raw call; identical request from the cache under 1 us",
             f"request cache and re-pointing: {_hotpath.STATUS}"]
    write_results("describe_overhead", "describe_tensor host overhead", rows, notes, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
