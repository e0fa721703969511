"""The CPU model of TMA: hardware dumps replayed byte for byte, and properties of the model."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tmakit import DataType, Swizzle
from tmakit.layout import bank_conflicts, box_geometry, swizzle_offset, swizzle_pattern, tma_load_image, tma_store
from tmakit.layout.tma_model import NAN_FILL

DATA = Path(__file__).parent / "data"  # tests/data/README.md says how each dump was recorded
PROBE = DATA / "tma_load_images_h100.jsonl"
INTERLEAVE_PROBE = DATA / "tma_interleave_images_h100.jsonl"


def spec(dtype, dims, box, es=None, swizzle=0, oob=0, strides=None, interleave=0):
    size = DataType(dtype).size
    if strides is None:
        strides, acc = [], dims[0] * size
        for d in dims[1:]:
            acc = -(-acc // 16) * 16
            strides.append(acc)
            acc *= d
    return SimpleNamespace(dtype=dtype, dims=list(dims), strides=list(strides), box=list(box),
                           element_strides=list(es or [1] * len(dims)), swizzle=swizzle, oob_fill=oob,
                           interleave=interleave)


def probe_records():
    return [json.loads(line) for line in PROBE.read_text().splitlines() if '"image"' in line]


@pytest.mark.parametrize("record", probe_records(), ids=lambda r: r["name"])
def test_model_matches_recorded_hardware_images(record):
    s = spec(record["dtype"], record["dims"], record["box"], record["element_strides"], record["swizzle"],
             record["oob"], record["strides"])
    es = record["esize"]
    total = s.strides[-1] * s.dims[-1] if len(s.dims) > 1 else s.dims[0] * es
    memory = (np.arange(total // es, dtype=np.uint64) + 1).astype({1: np.uint8, 2: np.uint16, 4: np.uint32,
                                                                   8: np.uint64}[es]).view(np.uint8)
    model = tma_load_image(s, memory, record["coords"], poison=0xAB)
    hardware = np.frombuffer(bytes.fromhex(record["image"]), dtype=np.uint8)
    n = max(model.size, hardware.size)
    a, b = np.full(n, 0xAB, np.uint8), np.full(n, 0xAB, np.uint8)
    a[:model.size], b[:hardware.size] = model, hardware
    assert np.array_equal(a, b)
    assert box_geometry(s).box_bytes == record["nbytes"]


def interleave_records():
    return [json.loads(line) for line in INTERLEAVE_PROBE.read_text().splitlines() if '"image"' in line]


@pytest.mark.parametrize("record", interleave_records(), ids=lambda r: r["name"])
def test_model_matches_recorded_interleaved_images(record):
    """Each dump was taken twice with different poison bytes, so the record says which bytes the load wrote:
    the model must write exactly those, with the same values, and count them as the transaction bytes."""
    s = spec(record["dtype"], record["dims"], record["box"], record["element_strides"], record["swizzle"],
             record["oob"], record["strides"], record["interleave"])
    es = record["esize"]
    total = s.strides[-1] * s.dims[-1] + 4096  # the probe's buffer has 4 KiB beyond the tensor
    memory = (np.arange(total // es, dtype=np.uint64) + 1).astype({1: np.uint8, 2: np.uint16, 4: np.uint32,
                                                                   8: np.uint64}[es]).view(np.uint8)
    model_a = tma_load_image(s, memory, record["coords"], poison=0xAB)
    model_b = tma_load_image(s, memory, record["coords"], poison=0x54)
    hardware = np.frombuffer(bytes.fromhex(record["image"]), dtype=np.uint8)
    written = np.unpackbits(np.frombuffer(bytes.fromhex(record["written_mask"]), dtype=np.uint8))[:hardware.size]
    n = max(model_a.size, hardware.size)
    model_written = np.zeros(n, dtype=bool)
    model_written[:model_a.size] = model_a == model_b
    hw_written = np.zeros(n, dtype=bool)
    hw_written[:hardware.size] = written.astype(bool)
    assert np.array_equal(model_written, hw_written)
    assert np.array_equal(model_a[hw_written[:model_a.size]], hardware[hw_written[:hardware.size]])
    assert box_geometry(s).box_bytes == record["written_bytes"]
    assert record["completes_with_written_tx"]


def test_interleave_probe_covers_both_modes_oob_and_swizzles():
    records = interleave_records()
    assert {r["interleave"] for r in records} >= {1, 2}
    assert {r["swizzle"] for r in records if r["interleave"] == 1} == {0, 1, 2, 3}
    assert any(r["oob"] for r in records) and any(min(r["coords"]) < 0 for r in records)


def test_probe_covers_every_swizzle_oob_and_element_strides():
    assert not any(r["interleave"] for r in probe_records())  # interleaved loads: tma_interleave_images_h100.jsonl
    names = {r["name"] for r in probe_records()}
    assert {"sw128_full", "sw64_full", "sw32_full", "sw128_half", "oob_nan_f64", "es_4_3", "oob_full"} <= names


@settings(max_examples=200, deadline=None)
@given(swizzle=st.sampled_from(list(Swizzle)[:4]), offset=st.integers(0, 1 << 20))
def test_swizzle_is_an_involution_within_its_atom(swizzle, offset):
    out = swizzle_offset(offset, swizzle)
    assert swizzle_offset(out, swizzle) == offset
    assert out // max(swizzle.atom_bytes, 1) == offset // max(swizzle.atom_bytes, 1) or swizzle is Swizzle.NONE
    assert out % 16 == offset % 16  # 16-byte chunks move whole


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_in_bounds_load_then_store_round_trips(data):
    dtype = data.draw(st.sampled_from([0, 1, 2, 4, 6, 7, 8, 9]))
    size = DataType(dtype).size
    rank = data.draw(st.integers(1, 4))
    swizzle = data.draw(st.sampled_from([0, 1, 2, 3]))
    span = {0: 256 * size, 1: 32, 2: 64, 3: 128}[swizzle]
    inner = 16 * data.draw(st.integers(1, max(1, min(span, 256 * size) // 16)))
    box = [max(1, inner // size)] + [data.draw(st.integers(1, 5)) for _ in range(rank - 1)]
    dims = [box[0] + data.draw(st.integers(0, 40))] + [b + data.draw(st.integers(0, 6)) for b in box[1:]]
    s = spec(dtype, dims, box, swizzle=swizzle)
    total = s.strides[-1] * dims[-1] if rank > 1 else dims[0] * size
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    memory = rng.integers(0, 256, total, dtype=np.uint8)
    coords = [16 // size * data.draw(st.integers(0, max(0, (dims[0] - box[0]) // max(1, 16 // size))))]
    coords += [data.draw(st.integers(0, d - b)) for d, b in zip(dims[1:], box[1:])]
    image = tma_load_image(s, memory, coords)
    target = np.zeros_like(memory)
    tma_store(s, target, coords, image)
    reread = tma_load_image(s, target, coords)
    assert np.array_equal(reread, image)
    geo = box_geometry(s)
    assert image.size == geo.smem_bytes and geo.box_bytes == int(np.prod([min(b, 10**9) for b in box])) * size


def test_fully_out_of_bounds_box_is_all_fill():
    s = spec(7, [20, 12], [8, 8], oob=1)
    image = tma_load_image(s, np.zeros(20 * 12 * 4, np.uint8), [96, 100])
    assert (image.view(np.uint32) == NAN_FILL[4]).all()
    assert np.isnan(image.view(np.float32)).all()
    s = spec(7, [20, 12], [8, 8], oob=0)
    assert not tma_load_image(s, np.ones(20 * 12 * 4, np.uint8), [-16, -100]).any()


def test_nan_fill_patterns_are_nans_in_their_format():
    assert np.isnan(np.array([NAN_FILL[2]], np.uint16).view(np.float16)).all()
    assert np.isnan(np.array([NAN_FILL[8]], np.uint64).view(np.float64)).all()
    bf16_as_f32 = np.array([NAN_FILL[2] << 16], np.uint32).view(np.float32)
    assert np.isnan(bf16_as_f32).all()


def test_misaligned_dim0_start_is_refused():
    with pytest.raises(ValueError, match="multiple of 16"):
        tma_load_image(spec(7, [64, 8], [8, 8]), np.zeros(64 * 8 * 4, np.uint8), [1, 0])


def test_tf32_conversion_matches_the_hardware_probe():
    """4096 bit patterns (ties, denormals, NaNs, infinities, random) loaded by TMA as tf32/f32_ftz on an H100."""
    probe = json.loads((DATA / "tf32_probe_h100.json").read_text())
    values = np.array(probe["input"], dtype=np.uint32)
    for name, code in (("tf32", 11), ("f32_ftz", 10), ("tf32_ftz", 12), ("f32", 7)):
        s = spec(code, [values.size], [256])
        model = np.concatenate([tma_load_image(s, values.view(np.uint8), [i * 256]).view(np.uint32)
                                for i in range(values.size // 256)])
        assert np.array_equal(model, np.array(probe[name], dtype=np.uint32)), name
    s = spec(11, [4], [4])
    ties = np.array([0x3F801000, 0x3F803000, 0x7FC00001, 0x00003000], np.uint32)
    out = tma_load_image(s, ties.view(np.uint8), [0]).view(np.uint32)
    assert out.tolist() == [0x3F800000, 0x3F804000, 0x7FFFE000, 0x00004000]  # ties to even; canonical NaN


def test_bank_conflicts_of_swizzled_columns():
    # a warp reading one 16-byte column of 8 rows of 128 B: unswizzled all in banks 0-3, swizzled spread out
    plain = [r * 128 for r in range(8)]
    assert bank_conflicts(plain, 16) == 7
    assert bank_conflicts([swizzle_offset(a, "128B") for a in plain], 16) == 0
    assert bank_conflicts([4 * i for i in range(32)], 4) == 0
    assert bank_conflicts([0] * 32, 4) == 0  # broadcast
    assert bank_conflicts([0, None, 128, None], 4) == 1  # inactive lanes take no part; 0 and 128 share a bank
    assert bank_conflicts([None] * 8, 16) == 0
    with pytest.raises(ValueError, match="access_bytes"):
        bank_conflicts([0], 3)


def test_store_refuses_a_negative_start():
    """Measured on the H100 (docs/TMA_SEMANTICS.md, section 5): a store box starting at a negative coordinate faults; past
    the far edges it is clipped."""
    from tmakit import describe_tensor
    from tmakit.errors import InvalidArgumentError

    spec = describe_tensor(shape=(64, 128), dtype="f32", box=(8, 32), swizzle="128B")
    memory = np.zeros(64 * 128 * 4, np.uint8)
    image = np.arange(8 * 128, dtype=np.uint32).astype(np.uint8)
    for coords in ([-4, 0], [0, -4], [-8, -8]):
        with pytest.raises(InvalidArgumentError, match=r"coords\[\d\]=-\d: is negative: a TMA store box cannot start"):
            tma_store(spec, memory, coords, image)
    tma_store(spec, memory, [120, 60], image)  # clipped at the far edges
    assert memory.reshape(64, 512)[60:, 480:].any() and not memory.reshape(64, 512)[:60].any()


# ---- argument checks: every bad value is an InvalidArgumentError naming the parameter ----------------------
def _mem():
    return np.zeros(64 * 8 * 4, np.uint8)


@pytest.mark.parametrize("call, parameter", [
    (lambda: tma_load_image(None, _mem(), [0, 0]), "spec"),
    (lambda: box_geometry("abc"), "spec"),
    (lambda: box_geometry(SimpleNamespace(dtype=7)), "spec"),
    (lambda: tma_load_image(spec(7, [64, 8], [8, 8]), _mem(), [0, 0], poison=256), "poison"),
    (lambda: tma_load_image(spec(7, [64, 8], [8, 8]), _mem(), [0, 0], poison=1.5), "poison"),
    (lambda: tma_load_image(spec(7, [64, 8], [8, 8]), _mem(), [0, 0], poison=True), "poison"),
    (lambda: tma_load_image(spec(7, [64, 8], [8, 8]), _mem(), [8.9, 0]), r"coords\[0\]"),
    (lambda: tma_load_image(spec(7, [64, 8], [8, 8]), _mem(), ["8", 0]), r"coords\[0\]"),
    (lambda: tma_load_image(spec(7, [64, 8], [8, 8]), _mem(), [0, 2**40]), r"coords\[1\]"),
    (lambda: tma_load_image(spec(7, [64, 8], [8, 8]), _mem(), "00"), "coords"),
    (lambda: tma_load_image(spec(7, [64, 8], [8, 8]), None, [0, 0]), "memory"),
    (lambda: tma_load_image(spec(7, [64, 8], [8, 8], swizzle=4), _mem(), [0, 0]), "spec.swizzle"),
    (lambda: tma_load_image(spec(7, [64, 8], [8, 300]), _mem(), [0, 0]), r"spec.box\[1\]"),
    (lambda: tma_store(spec(7, [64, 8], [8, 8]), _mem(), [0, 0], np.zeros(256, np.float32)), "image"),
    (lambda: tma_store(spec(7, [64, 8], [8, 8]), _mem(), [0, 0], np.zeros(255, np.uint8)), "image"),
    (lambda: tma_store(spec(7, [64, 8], [8, 8]), _mem(), [0, -1], np.zeros(256, np.uint8)), r"coords\[1\]"),
    (lambda: tma_store(spec(7, [64, 8], [8, 8]), np.zeros(16, np.uint8), [0, 0], np.zeros(256, np.uint8)), "memory"),
    (lambda: swizzle_offset(-1, "128B"), "offset"),
    (lambda: swizzle_offset(1.5, "128B"), "offset"),
    (lambda: swizzle_offset(np.array([-16]), "128B"), "offset"),
    (lambda: swizzle_offset(16, "128B_ATOM_32B"), "swizzle"),
    (lambda: swizzle_pattern("128B", -1), "rows"),
    (lambda: swizzle_pattern("128B", 10**9), "rows"),
    (lambda: swizzle_pattern("128B", 2.0), "rows"),
    (lambda: bank_conflicts([-4, 0], 4), r"byte_offsets\[0\]"),
    (lambda: bank_conflicts(["0"], 4), r"byte_offsets\[0\]"),
    (lambda: bank_conflicts([0], True), "access_bytes"),
    (lambda: bank_conflicts(None, 4), "byte_offsets"),
])
def test_layout_model_refuses_bad_arguments_by_name(call, parameter):
    from tmakit.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match=rf"^{parameter}=.*: .*fix: "):
        call()


def test_layout_model_accepts_unusual_valid_forms():
    s = spec(7, [64, 8], [8, 8])
    memory = np.arange(64 * 8 * 4, dtype=np.uint32).astype(np.uint8)
    base = tma_load_image(s, memory, [16, 0])
    for coords in ((16, 0), np.array([16, 0]), (np.int64(16), np.int32(0)), (c for c in [16, 0])):
        assert np.array_equal(tma_load_image(s, memory, coords, poison=np.uint8(0)), base)
    assert np.array_equal(swizzle_offset([0, 128, 256], "128B"), swizzle_offset(np.array([0, 128, 256]), Swizzle.B128))
    assert swizzle_offset(np.int64(144), 3) == swizzle_offset(144, "128B") == 128
    assert swizzle_pattern(Swizzle.B64, np.int64(4)).shape == (4, 4)
    assert bank_conflicts((a for a in [0, 4, 8]), np.int64(4)) == 0
