"""CPU tests of the TMA mode models (im2col loads, reduce-add), of the mode kernels' PTX, and of the refusals of
modes the cp.async twin cannot express. The hardware side is tests/test_tma_modes_hardware.py."""
from __future__ import annotations

import importlib.util
import random
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from tmakit import DataType, InvalidArgumentError, Swizzle, TmakitError, check_im2col, check_tiled
from tmakit.layout import box_geometry, swizzle_offset, tma_store
from tmakit.layout.im2col import im2col_geometry, im2col_load_image, im2col_pixels
from tmakit.layout.tma_model import NAN_FILL
from tmakit.layout.tma_reduce import add_elements, tma_reduce_add
from tmakit.tensormap.enums import Interleave, L2Promotion, OOBFill
from tmakit.tensormap.spec import Im2colSpec

ROOT = Path(__file__).resolve().parents[1]


def im2col_spec(dtype, dims, lower, upper, cpp, ppc, es=None, swizzle=Swizzle.NONE, oob=0, strides=None):
    dt = DataType(dtype)
    if strides is None:
        strides, acc = [], dims[0] * dt.size
        for d in dims[1:]:
            acc = -(-acc // 16) * 16
            strides.append(acc)
            acc *= d
    return Im2colSpec(dt, 0, tuple(dims), tuple(strides), tuple(lower), tuple(upper), cpp, ppc,
                      tuple(es or [1] * len(dims)), Interleave.NONE, Swizzle(swizzle), L2Promotion.NONE, OOBFill(oob))


def iota(spec, dtype=np.uint32):
    extent = spec.strides[-1] * spec.dims[-1]
    return np.arange(extent // np.dtype(dtype).itemsize, dtype=dtype).view(np.uint8)


# ---- im2col: the walk -------------------------------------------------------------------------------------

def test_im2col_walk_of_ptx_example_1():
    """PTX ISA im2col example 1: W=9, H=14, corners -1 (a 'same' 3x3 box: w in [-1, 7], h in [-1, 12]),
    coordinates (c=7, w=7, h=4, n=0): the walk starts at (7, 4), wraps to the box's lower W corner on the next row."""
    s = im2col_spec(DataType.FLOAT16, (64, 9, 14, 64), (-1, -1), (-1, -1), 8, 64)
    pos, img = im2col_pixels(s, (7, 7, 4, 0), (0, 0))
    assert pos[0].tolist() == [7, 4] and pos[1].tolist() == [-1, 5] and pos[9].tolist() == [7, 5]
    assert pos[10].tolist() == [-1, 6] and pos[63].tolist() == [7, 11]
    assert img.tolist() == [0] * 64


def test_im2col_walk_moves_to_the_next_image_after_the_last_row():
    s = im2col_spec(DataType.UINT32, (4, 3, 2, 2), (0, 0), (0, 0), 4, 3)
    pos, img = im2col_pixels(s, (0, 2, 1, 0), (0, 0))
    assert pos.tolist() == [[2, 1], [0, 0], [1, 0]] and img.tolist() == [0, 1, 1]


def test_im2col_walk_steps_by_the_traversal_stride():
    s = im2col_spec(DataType.UINT32, (4, 5, 4, 1), (0, 0), (0, 0), 4, 5, es=(1, 2, 3, 1))
    pos, img = im2col_pixels(s, (0, 0, 0, 0), (0, 0))
    assert pos.tolist() == [[0, 0], [2, 0], [4, 0], [0, 3], [2, 3]] and img.tolist() == [0] * 5


# ---- im2col: the bytes ------------------------------------------------------------------------------------

def test_im2col_image_by_hand_offsets_and_wrap():
    """u32 (C=4, W=5, N=2), value = element index; box w in [-1, 3]; start (c=0, w=2, n=0), offset 1: pixels at
    w+1 = 3, 4 | 0, 1, 2, 3 of image 1 -> elements 12 .. 35 in order."""
    s = im2col_spec(DataType.UINT32, (4, 5, 2), (-1,), (-1,), 4, 6)
    image = im2col_load_image(s, iota(s), (0, 2, 0), (1,))
    assert image.view(np.uint32).tolist() == list(range(12, 36))
    assert im2col_geometry(s).box_bytes == 6 * 16 == image.size


def test_im2col_padding_pixels_and_channels_are_filled():
    """Offset 0: the third pixel sits at w = -1 (padding) -> zeros; channels past C are zeros; NaN fill for floats."""
    s = im2col_spec(DataType.UINT32, (4, 5, 2), (-1,), (-1,), 4, 4)
    image = im2col_load_image(s, iota(s), (0, 2, 0), (0,)).view(np.uint32).reshape(4, 4)
    assert image[2].tolist() == [0, 0, 0, 0] and image[0].tolist() == [8, 9, 10, 11] and image[3].tolist() == [20, 21, 22, 23]
    s2 = im2col_spec(DataType.FLOAT32, (3, 5, 2), (0,), (0,), 4, 2, oob=1)
    image2 = im2col_load_image(s2, iota(s2), (0, 0, 0), (0,)).view(np.uint32).reshape(2, 4)
    assert image2[:, 3].tolist() == [NAN_FILL[4]] * 2 and image2[1, :3].tolist() == [4, 5, 6]
    s3 = im2col_spec(DataType.FLOAT32, (4, 2, 1), (0,), (0,), 4, 3, oob=1)  # the walk runs past the only image
    image3 = im2col_load_image(s3, iota(s3), (0, 0, 0), (0,)).view(np.uint32).reshape(3, 4)
    assert image3[2].tolist() == [NAN_FILL[4]] * 4 and image3[1].tolist() == [4, 5, 6, 7]


def test_im2col_swizzle_moves_16_byte_chunks_and_pads_narrow_rows():
    s = im2col_spec(DataType.UINT8, (128, 8, 1), (0,), (0,), 128, 8)
    plain = im2col_load_image(s, iota(s, np.uint8), (0, 0, 0), (0,))
    for mode in (Swizzle.B32, Swizzle.B64, Swizzle.B128):
        if mode.span < 128:
            continue
        sw = im2col_load_image(s.replace(swizzle=mode), iota(s, np.uint8), (0, 0, 0), (0,))
        moved = swizzle_offset(np.arange(plain.size, dtype=np.int64), mode)
        assert np.array_equal(sw[moved], plain)
    narrow = im2col_spec(DataType.UINT8, (32, 8, 1), (0,), (0,), 32, 4, swizzle=Swizzle.B128)
    image = im2col_load_image(narrow, iota(narrow, np.uint8), (0, 0, 0), (0,), poison=0xEE)
    assert image.size == 4 * 128 and im2col_geometry(narrow).box_bytes == 4 * 32
    assert int((image != 0xEE).sum()) <= 4 * 32 and int((image == 0xEE).sum()) >= 4 * 96


def test_im2col_model_agrees_with_tiled_model_on_a_plain_row():
    """A 1-pixel-wide walk along W with no corners and no offsets reads what a tiled box (cpp x ppc) reads."""
    from tmakit.layout import tma_load_image

    s = im2col_spec(DataType.UINT16, (16, 20, 1), (0,), (0,), 16, 8)
    tiled = SimpleNamespace(dtype=DataType.UINT16, dims=[16, 20, 1], strides=list(s.strides), box=[16, 8, 1],
                            element_strides=[1, 1, 1], swizzle=0, oob_fill=0, interleave=0)
    mem = iota(s, np.uint16)
    assert np.array_equal(im2col_load_image(s, mem, (0, 3, 0), (0,)), tma_load_image(tiled, mem, (0, 3, 0)))


@pytest.mark.parametrize("bad", [dict(offsets=(32, 0, 0)), dict(offsets=(0, 0)), dict(coords=(0, 0, 0, 0)),
                                 dict(poison=256), dict(poison=1.5)])
def test_im2col_model_refuses_bad_arguments(bad):
    s = im2col_spec(DataType.UINT32, (4, 4, 4, 4, 2), (0, 0, 0), (0, 0, 0), 4, 2)
    args = dict(coords=(0, 0, 0, 0, 0), offsets=(0, 0, 0), poison=None) | bad
    with pytest.raises(InvalidArgumentError, match="offsets|coords|poison"):
        im2col_load_image(s, iota(s), args["coords"], args["offsets"], poison=args["poison"])


def test_im2col_model_refuses_a_tiled_map():
    tiled = SimpleNamespace(dtype=DataType.UINT16, dims=[16, 20], strides=[32], box=[16, 8])
    with pytest.raises(InvalidArgumentError, match="not an im2col tensor map"):
        im2col_geometry(tiled)


# ---- reduce-add ---------------------------------------------------------------------------------------------

def _bytes(values, t):
    return np.asarray(values, dtype=t).view(np.uint8).reshape(len(values), -1)


def test_reduce_add_arithmetic_by_hand():
    f16 = add_elements(DataType.FLOAT16, _bytes([2048, 2048, 1.5], np.float16), _bytes([1, 3, 0.25], np.float16))
    assert f16.view(np.float16).ravel().tolist() == [2048, 2052, 1.75]  # ties to even; 2051 -> 2052
    bf = lambda v: (np.asarray(v, np.float32).view(np.uint32) >> 16).astype(np.uint16).view(np.uint8).reshape(-1, 2)
    out = add_elements(DataType.BFLOAT16, bf([256, 256, 1.0]), bf([1, 3, 0.5]))
    assert ((out.view(np.uint16).astype(np.uint32) << 16).view(np.float32).ravel().tolist()) == [256, 260, 1.5]
    u32 = add_elements(DataType.UINT32, _bytes([0xFFFFFFFF, 5], np.uint32), _bytes([2, 7], np.uint32))
    assert u32.view(np.uint32).ravel().tolist() == [1, 12]
    s32 = add_elements(DataType.INT32, _bytes([-5, 2**31 - 1], np.int32), _bytes([3, 1], np.int32))
    assert s32.view(np.int32).ravel().tolist() == [-2, -2**31]
    f32 = add_elements(DataType.FLOAT32, _bytes([1.0], np.float32), _bytes([2.0**-24], np.float32))
    assert f32.view(np.float32).ravel().tolist() == [1.0]


@pytest.mark.parametrize("dtype", [DataType.INT64, DataType.FLOAT64, DataType.UINT8, DataType.TFLOAT32])
def test_reduce_add_refuses_types_without_add(dtype):
    with pytest.raises(InvalidArgumentError, match="no reduce-add"):
        add_elements(dtype, np.zeros((1, dtype.size), np.uint8), np.zeros((1, dtype.size), np.uint8))


def test_reduce_add_is_store_of_the_sum_and_skips_out_of_bounds():
    """reduce(before, box) == store(before, box + before-at-box) for in-bounds elements; zero box changes nothing."""
    s = SimpleNamespace(dtype=DataType.INT32, dims=[8, 5], strides=[32], box=[8, 4], element_strides=[1, 2],
                        swizzle=Swizzle.B32, oob_fill=0, interleave=0)
    rng = np.random.default_rng(0)
    before = rng.integers(-1000, 1000, 40, dtype=np.int32)
    image = rng.integers(-1000, 1000, box_geometry(s).smem_bytes // 4, dtype=np.int32)
    out = tma_reduce_add(s, before.copy(), (0, 1), image.view(np.uint8))
    changed = np.flatnonzero(out != before)
    rows = sorted({int(i) // 8 for i in changed})
    assert set(rows) <= {1, 3}  # element stride 2 from row 1: rows 1, 3 (5, 7 are outside the 5-row tensor)
    stored = tma_store(s, before.copy(), (0, 1), image.view(np.uint8))
    assert np.array_equal(np.where(stored != before, out - before, 0), np.where(stored != before, stored, 0))
    assert np.array_equal(tma_reduce_add(s, before.copy(), (0, 1), np.zeros_like(image).view(np.uint8)), before)
    with pytest.raises(InvalidArgumentError, match="negative"):
        tma_reduce_add(s, before.copy(), (0, -1), image.view(np.uint8))


# ---- device code and host refusals ------------------------------------------------------------------------

# (the instructions tma_modes.cu and tma_prefetch.cu emit: tests/test_device_headers.py, INSTRUCTIONS)


@pytest.mark.parametrize("call", ["load_im2col", "multicast_load", "reduce_add_tiles"])
def test_cp_async_backend_refuses_modes_it_cannot_express_before_launch(monkeypatch, call):
    from tmakit import _driver, choose_backend
    from tmakit.ops import modes

    monkeypatch.setattr(modes, "choose_backend", lambda backend, device=0: choose_backend("cp.async", arch="sm_90"))
    monkeypatch.setattr(_driver, "ensure_context", lambda *a, **k: pytest.fail("launched"))
    tm = SimpleNamespace(device=0, descriptor=b"\0" * 128, dims=(16, 4, 4, 2), rank=4, dtype=DataType.FLOAT32,
                         mode="im2col")
    mode = {"load_im2col": "im2col", "multicast_load": "multicast", "reduce_add_tiles": "reduce-add"}[call]
    args = {"load_im2col": ([[0, 0, 0, 0]], [[0, 0]]), "multicast_load": ([[0, 0, 0, 0]], [3]),
            "reduce_add_tiles": ([[0, 0, 0, 0]], np.zeros((1, 16), np.uint8))}[call]
    kwargs = {"cluster_size": 2} if call == "multicast_load" else {}
    with pytest.raises(InvalidArgumentError, match=f"backend.*cannot run the {mode} mode.*cp.async") as info:
        getattr(modes, call)(tm, *args, backend="cp.async", **kwargs)
    assert isinstance(info.value, TmakitError)


def test_mode_functions_refuse_maps_without_a_device():
    from tmakit.ops import modes

    tm = SimpleNamespace(device=None, descriptor=None, dims=(16, 4, 2), rank=3)
    for call, args in (("load_im2col", ([[0, 0, 0]], [[0]])), ("prefetch_load", ([[0, 0, 0]],)),
                       ("store_tiles", ([[0, 0, 0]], np.zeros((1, 16), np.uint8)))):
        with pytest.raises(InvalidArgumentError, match="no device"):
            getattr(modes, call)(tm, *args)


# ---- the hardware harness's random descriptors are valid ---------------------------------------------------

def _harness():
    spec = importlib.util.spec_from_file_location("_tma_modes_harness", ROOT / "benchmarks" / "tma_modes_vs_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_random_descriptors_pass_the_rules_and_the_models():
    h = _harness()
    rng = random.Random(7)
    host = np.random.default_rng(7).integers(0, 256, 8 << 20, dtype=np.uint8)
    seen = set()
    for _ in range(60):
        c = h.random_im2col(rng)
        assert not check_im2col(c["dtype"], 1 << 40, c["dims"], c["strides"], c["lower"], c["upper"], c["cpp"],
                                c["ppc"], c["es"], swizzle=c["swizzle"], oob_fill=c["oob"])
        s = im2col_spec(c["dtype"], c["dims"], c["lower"], c["upper"], c["cpp"], c["ppc"], c["es"], c["swizzle"],
                        c["oob"], c["strides"])
        for coords, offsets in c["boxes"]:
            assert im2col_load_image(s, host, coords, offsets).size == im2col_geometry(s).smem_bytes
        seen.add((len(c["dims"]), c["swizzle"]))
        t = h.random_tiled(rng, h.REDUCE_TYPES, store=True)
        assert not check_tiled(t["dtype"], 1 << 40, t["dims"], t["strides"], t["box"], t["es"], swizzle=t["swizzle"])
        assert all(v >= 0 for co in t["coords"] for v in co)
    assert len({r for r, _ in seen}) == 3


def test_harness_refuses_a_bad_descriptor_count():
    with pytest.raises(SystemExit):
        _harness().main(["--descriptors", "0"])


DIGESTS = ROOT / "benchmarks" / "results" / "tma_modes_h100_digests.json"


@pytest.mark.parametrize("mode", ["tiled", "interleave", "im2col", "store", "multicast", "reduce", "prefetch"])
def test_models_reproduce_every_recorded_h100_image(mode):
    """The H100 run recorded a digest of every image (benchmarks/results/tma_modes_h100_digests.json, 1000
    descriptors per mode): the CPU models regenerate the same descriptors and data from the seed and must
    reproduce each digest. The first 150 descriptors per mode run here; --replay runs all of them."""
    h = _harness()
    recorded = h.load_recorded(str(DIGESTS))[mode]
    assert recorded["run"]["descriptors_per_mode"] >= 1000 and "H100" in recorded["run"]["device"]
    result = h.run_mode(mode, 150, recorded["seed"], recorded["digests"])
    assert result["stats"]["descriptors"] == 150
    assert result["stats"]["equal"] == result["stats"]["compared"] > 0, result["failures"][:2]


def test_im2col_tensor_map_sizes_follow_the_model_and_refuse_the_cp_async_form():
    from tmakit import describe_im2col

    tm = describe_im2col(shape=(2, 8, 8, 16), dtype="f16", pixels_per_column=32, swizzle="128B",
                         lower_corner=(-1, -1), upper_corner=(-1, -1))
    assert tm.box_bytes == 32 * 16 * 2 == im2col_geometry(tm).box_bytes
    assert tm.smem_bytes == 32 * 128 == im2col_geometry(tm).smem_bytes  # 32-byte rows padded to the 128-B span
    with pytest.raises(InvalidArgumentError, match="im2col map.*no cp.async form"):
        tm.box_params()


def test_load_tiles_refuses_an_im2col_map():
    from tmakit import describe_im2col
    from tmakit.ops import load_tiles

    tm = describe_im2col(shape=(2, 8, 8, 16), dtype="f16", pixels_per_column=32)
    with pytest.raises(InvalidArgumentError, match="not a tiled map.*load_im2col"):
        load_tiles(tm, [[0, 0, 0, 0]])


def test_prefetch_on_the_cp_async_twin_refuses_converting_types_before_launch(monkeypatch):
    from tmakit import _driver, choose_backend
    from tmakit.ops import modes

    monkeypatch.setattr(modes, "choose_backend", lambda backend, device=0: choose_backend("cp.async", arch="sm_80"))
    monkeypatch.setattr(_driver, "ensure_context", lambda *a, **k: pytest.fail("launched"))
    tm = SimpleNamespace(device=0, descriptor=None, dims=(16, 4), rank=2, dtype=DataType.TFLOAT32)
    with pytest.raises(InvalidArgumentError, match="cannot load tf32"):
        modes.prefetch_load(tm, [[0, 0]], backend="cp.async")


@pytest.mark.parametrize("masks, size", [([0], 2), ([4], 2), (["3"], 2), ([3, 3], 2), ([1], 9), ([1], True)])
def test_multicast_refuses_bad_masks_and_cluster_sizes(monkeypatch, masks, size):
    from tmakit import choose_backend
    from tmakit.ops import modes

    monkeypatch.setattr(modes, "choose_backend", lambda backend, device=0: choose_backend("tma", arch="sm_90"))
    tm = SimpleNamespace(device=0, descriptor=b"\0" * 128, dims=(16, 4), rank=2, dtype=DataType.FLOAT32)
    with pytest.raises(InvalidArgumentError, match="masks|cluster_size"):
        modes.multicast_load(tm, [[0, 0]], masks, cluster_size=size)


# ---- im2col: a filter base outside the bounding box faults the GPU, so the model and the launch refuse it ----

@pytest.mark.parametrize("lower, upper, coords, axis, box", [
    ((0,), (0,), (0, -1, 0), "w", r"\[0, 23\]"),     # w = -1 with lower corner 0
    ((0,), (1,), (0, 25, 0), "w", r"\[0, 24\]"),     # w = 25 on a 24-wide image with upper corner +1
    ((-2,), (-3,), (0, 21, 0), "w", r"\[-2, 20\]"),  # past the upper corner
])
def test_im2col_model_refuses_a_base_outside_the_bounding_box(lower, upper, coords, axis, box):
    s = im2col_spec(DataType.UINT32, (4, 24, 2), lower, upper, 4, 8)
    match = (rf"coords\[1\]={coords[1]}: puts the filter base at {axis}={coords[1]}, outside the bounding box {box}"
             r".*PTX ISA §5\.5\.4 'im2col mode'.*fix: start w in")
    with pytest.raises(InvalidArgumentError, match=match):
        im2col_load_image(s, iota(s), coords, (0,))
    with pytest.raises(InvalidArgumentError, match=match):
        im2col_pixels(s, coords, (0,))


def test_im2col_bases_on_the_box_edges_and_off_the_stride_grid_are_loaded():
    s = im2col_spec(DataType.UINT32, (4, 24, 5, 2), (-1, 0), (1, 0), 4, 8, es=(1, 3, 2, 1))
    for w, h in ((-1, 0), (24, 4), (0, 1), (7, 3)):  # both corners of the box, and bases the strides never reach
        assert im2col_load_image(s, iota(s), (0, w, h, 0), (0, 0)).size == im2col_geometry(s).smem_bytes
    with pytest.raises(InvalidArgumentError, match=r"coords\[2\]=5: puts the filter base at h=5, outside the "
                       r"bounding box \[0, 4\] of h"):
        im2col_load_image(s, iota(s), (0, 0, 5, 0), (0, 0))


def test_load_im2col_refuses_a_base_outside_the_box_before_any_launch(monkeypatch):
    from tmakit import _driver, choose_backend, describe_im2col
    from tmakit.ops import modes
    from tmakit.tensormap.tensor_map import TensorMap

    monkeypatch.setattr(modes, "choose_backend", lambda backend, device=0: choose_backend("tma", arch="sm_90"))
    monkeypatch.setattr(_driver, "ensure_context", lambda *a, **k: pytest.fail("launched"))
    monkeypatch.setattr(modes, "kernel", lambda *a, **k: pytest.fail("compiled a kernel for an off-box start"))
    described = describe_im2col(shape=(1, 24, 24, 16), dtype="f16", pixels_per_column=32, encode=False)
    tm = TensorMap(described.spec, described.arch, 0, b"\0" * 128)  # as if encoded on device 0
    with pytest.raises(InvalidArgumentError, match=r"coords\[1\]=-1: puts the filter base at w=-1, outside the "
                       r"bounding box \[0, 23\].*PTX ISA"):
        modes.load_im2col(tm, [[0, 0, 0, 0], [0, -1, 0, 0]], [[0, 0], [0, 0]])
    with pytest.raises(InvalidArgumentError, match=r"coords\[2\]=24: .*h=24, outside the bounding box \[0, 23\]"):
        modes.load_im2col(tm, [[0, 3, 24, 0]], [[0, 0]])
