"""Every TMA mode on the hardware equals its CPU model byte for byte, on >= 1000 random descriptors per mode.

Modes: tiled and interleaved loads, im2col loads, tile stores, multicast to 2 and 4 CTAs, reduce-add stores,
prefetch-then-load, and the cp.async twin's stores and loads (benchmarks/tma_modes_vs_model.py holds the generators and the comparisons; each mode runs
in its own process so that a fault cannot leak into the next). TMAKIT_MODES_DESCRIPTORS sets the count (default
1000), TMAKIT_MODES_SEED the seed, TMAKIT_MODES_DUMP a folder for each mode's failures with the bytes.
"""
from __future__ import annotations

import importlib.util
import json
import os
import random
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
N_DESCRIPTORS = int(os.environ.get("TMAKIT_MODES_DESCRIPTORS", "1000"))
SEED = int(os.environ.get("TMAKIT_MODES_SEED", random.randrange(1 << 30)))


def _harness():
    spec = importlib.util.spec_from_file_location("_tma_modes_harness", ROOT / "benchmarks" / "tma_modes_vs_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.requires_sm90
@pytest.mark.parametrize("mode", ["tiled", "interleave", "im2col", "store", "multicast", "reduce", "prefetch",
                                  "store_twin", "prefetch_twin"])
def test_mode_equals_cpu_model(mode):
    h = _harness()
    result = h._child(mode, N_DESCRIPTORS, SEED, timeout=200)
    if os.environ.get("TMAKIT_MODES_DUMP"):
        Path(os.environ["TMAKIT_MODES_DUMP"]).mkdir(parents=True, exist_ok=True)
        Path(os.environ["TMAKIT_MODES_DUMP"], f"{mode}.json").write_text(json.dumps(result, indent=1))
    assert "error" not in result, f"TMAKIT_MODES_SEED={SEED}: {result.get('error')}"
    stats = result["stats"]
    assert stats["descriptors"] >= min(N_DESCRIPTORS, 1000)
    summary = json.dumps({k: v for k, v in result.items() if k != "failures"} |
                         {"failures": [{k: v for k, v in f.items() if k not in ("hardware", "model")}
                                       for f in result["failures"][:5]]})
    assert stats["equal"] == stats["compared"], f"TMAKIT_MODES_SEED={SEED}: {summary[:4000]}"
    if mode == "multicast":
        assert stats["cluster_2"] > 0 and stats["cluster_4"] > 0
    if mode == "im2col":
        assert all(stats.get(f"rank{r}", 0) > 0 for r in (3, 4, 5))
        assert all(stats.get(f"swizzle_{s}", 0) > 0 for s in ("NONE", "32B", "64B", "128B"))


@pytest.mark.requires_sm90
def test_an_off_box_im2col_start_is_refused_and_the_context_lives_on():
    """A filter base outside the bounding box faulted the H100 (illegal instruction, context lost): the launch
    refuses it before the kernel runs, and a valid load on the same map afterwards still equals the model."""
    import numpy as np

    import tmakit
    from tmakit.ops.modes import POISON, load_im2col

    rng = np.random.default_rng()
    host = rng.integers(0, 1 << 16, (2, 24, 24, 16), dtype=np.uint16).view(np.float16)
    with tmakit.DeviceArray.from_host(host) as x:
        tm = tmakit.describe_im2col(x, pixels_per_column=32, lower_corner=(0, 0), upper_corner=(0, 1))
        for coords in ([0, -1, 0, 0], [0, 25, 0, 0], [0, 0, 24, 1]):  # w = -1, w past the +1 upper corner, h = 24
            with pytest.raises(tmakit.InvalidArgumentError, match=r"outside the bounding box.*PTX ISA"):
                load_im2col(tm, [coords], [[0, 0]])
        coords, offsets = [0, 24, 23, 1], [1, 0]  # the box's far corner (w = 24 lies inside with upper corner +1)
        got = load_im2col(tm, [coords], [offsets])[0]
        want = tmakit.im2col_load_image(tm, host.view(np.uint8).ravel(), coords, offsets, poison=POISON)
        assert np.array_equal(got, want)
