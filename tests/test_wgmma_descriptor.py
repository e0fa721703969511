"""tmakit.layout.wgmma: the wgmma shared-memory descriptor derived from a TensorMap.

CPU: for every swizzle mode and both majors, TMA's CPU model (tma_load_image) writes the stage from a random
matrix, the descriptors of wgmma_descriptors read it back through the canonical-layout model (read_operand), and
the result is the source matrix; the descriptor encoding matches the device header's; every planted mismatch
(swizzle mode, alignment, k-slice advance, LBO/SBO, major vs box) is explained by check_wgmma_descriptor.
GPU (sm_90): cuda_src/wgmma_probe.cu loads A and B with TMA and runs wgmma m64n64k16 with the host's descriptors;
the product equals the float32 product of the source tiles for every swizzle mode and both majors of A and B.
"""
from __future__ import annotations

import numpy as np
import pytest

from tmakit import InvalidArgumentError, describe_tensor, tma_load_image
from tmakit.layout.wgmma import (WgmmaDescriptor, check_wgmma_descriptor, operand_offsets, read_operand,
                                 wgmma_descriptors)

SWIZZLES = ("none", "32B", "64B", "128B")
SPAN = {"none": 16, "32B": 32, "64B": 64, "128B": 128}
MN, K = 64, 64


def _map(major: str, swizzle: str, rows: int = MN):
    """A TensorMap for a (MN, K) operand stored K-major ((MN, K) array) or MN-major ((K, MN) array)."""
    chunk = SPAN[swizzle] // 2
    if major == "K":
        return describe_tensor(shape=(rows, K), dtype="bf16", box=(rows, chunk), swizzle=swizzle, encode=False)
    return describe_tensor(shape=(K, rows), dtype="bf16", box=(K, chunk), swizzle=swizzle, encode=False)


def _stage_image(tmap, major: str, source: np.ndarray) -> np.ndarray:
    """The stage TMA writes: boxes along K (K-major) or MN (MN-major), box_bytes apart."""
    chunk = tmap.box_shape[1]
    n_boxes = (K if major == "K" else MN) // chunk
    parts = [tma_load_image(tmap, source, (j * chunk, 0)) for j in range(n_boxes)]
    return np.concatenate(parts)


@pytest.mark.parametrize("swizzle", SWIZZLES)
@pytest.mark.parametrize("major", ["K", "MN"])
def test_descriptor_reads_back_the_tma_image(major: str, swizzle: str) -> None:
    rng = np.random.default_rng(7)
    bits = rng.integers(0, 2**16, size=(MN, K) if major == "K" else (K, MN), dtype=np.uint16)
    tmap = _map(major, swizzle)
    image = _stage_image(tmap, major, bits)
    base = 0x4000  # 1024-aligned shared address of the stage
    descs = wgmma_descriptors(tmap, "A", major, stage_address=base, k=K)
    assert len(descs) == K // 16
    got = read_operand(image, base, descs, major, MN)
    want = bits if major == "K" else bits.T
    np.testing.assert_array_equal(got, want)
    assert check_wgmma_descriptor(tmap, "A", major, descs, stage_address=base, k=K) == []


def test_encoding_matches_the_device_header() -> None:
    """wgmma.cuh's wgmma_make_desc(0x4420, 16, 1024, 1): the same 64 bits."""
    v = WgmmaDescriptor.encode(0x4420, 16, 1024, 1)
    assert v == (0x4420 >> 4) | (1 << 16) | (64 << 32) | (1 << 62)
    d = WgmmaDescriptor.decode(v)
    assert (d.start_address, d.lbo, d.sbo, d.swizzle_field, d.base_offset) == (0x4420, 16, 1024, 1, 0)
    assert "swizzle 128B" in str(d)


def test_the_gemm_kernels_descriptors() -> None:
    """gemm.cu's desc_a/desc_b: K-major 128B (start + 32 k, SBO 1024) and N-major 128B (start + 2048 k, LBO = a
    64 x 64 box, SBO 1024)."""
    a = describe_tensor(shape=(8192, 8192), dtype="bf16", box=(128, 64), swizzle="128B", encode=False)
    da = wgmma_descriptors(a, "A", "K", stage_address=0x8000)
    assert [d.start_address - 0x8000 for d in da] == [0, 32, 64, 96] and {d.sbo for d in da} == {1024}
    b = describe_tensor(shape=(8192, 8192), dtype="bf16", box=(64, 64), swizzle="128B", encode=False)
    db = wgmma_descriptors(b, "B", "MN", stage_address=0x8000, mn=256)
    assert [d.start_address - 0x8000 for d in db] == [0, 2048, 4096, 6144]
    assert {(d.lbo, d.sbo, d.swizzle_field) for d in db} == {(8192, 1024, 1)}


def _rules(violations):
    return sorted(v.rule for v in violations)


def test_check_explains_planted_mismatches() -> None:
    tmap = _map("K", "128B")
    good = wgmma_descriptors(tmap, "A", "K", stage_address=0x4000)
    # swizzle mode written with the TMA enum's number (3 = 128B there, 32B here)
    bad = [WgmmaDescriptor.encode(d.start_address, d.lbo, d.sbo, 3) for d in good]
    v = check_wgmma_descriptor(tmap, "A", "K", bad, stage_address=0x4000)
    assert _rules(v) == ["wgmma.swizzle_vs_map"] * 4 and "must be 128B" in str(v[0])
    # k-slices advanced by a whole row (128 bytes) instead of 32 bytes
    bad = [WgmmaDescriptor.encode(0x4000 + 128 * i, 16, 1024, 1) for i in range(4)]
    v = check_wgmma_descriptor(tmap, "A", "K", bad, stage_address=0x4000)
    assert _rules(v) == ["wgmma.k_advance"] * 3 and "starts 32 bytes into the stage" in str(v[0])
    # SBO of one row
    bad = [WgmmaDescriptor.encode(d.start_address, 16, 128, 1) for d in good]
    assert _rules(check_wgmma_descriptor(tmap, "A", "K", bad, stage_address=0x4000)) == ["wgmma.sbo"] * 4
    # a stage on a 512-byte boundary with 128B swizzle
    at = 0x4200
    v = check_wgmma_descriptor(tmap, "A", "K", wgmma_descriptors(tmap, "A", "K", stage_address=at), stage_address=at)
    assert _rules(v) == ["wgmma.stage_alignment"] and "1024-byte boundary" in str(v[0])
    # too few descriptors for the stage
    assert "wgmma.k_advance" in _rules(check_wgmma_descriptor(tmap, "A", "K", good[:2], stage_address=0x4000))


def test_check_explains_mn_major_lbo_and_major_vs_box() -> None:
    tmap = _map("MN", "64B")
    good = wgmma_descriptors(tmap, "B", "MN", stage_address=0x2000)
    bad = [WgmmaDescriptor.encode(d.start_address, 512, d.sbo, d.swizzle_field) for d in good]
    v = check_wgmma_descriptor(tmap, "B", "MN", bad, stage_address=0x2000)
    assert _rules(v) == ["wgmma.lbo"] * 4 and f"LBO = {tmap.box_bytes}" in v[0].fix
    # a K-major operand described with a box whose inner extent is the MN chunk of a wider box
    wide = describe_tensor(shape=(MN, K), dtype="bf16", box=(MN, 32), swizzle="128B", encode=False)
    v = check_wgmma_descriptor(wide, "A", "K", good, stage_address=0x2000)
    assert _rules(v) == ["wgmma.major_vs_box"] and "box[-1] = 64" in v[0].fix


def test_operand_offsets_cover_distinct_bytes() -> None:
    for sw in SWIZZLES:
        for major in ("K", "MN"):
            d = wgmma_descriptors(_map(major, sw), "A", major, stage_address=0x8000)[1]
            off = operand_offsets(d.value, major, MN)
            assert len(np.unique(off)) == MN * 16 and (off % 2 == 0).all()


# ----------------------------------------------------------------------------------------------------------
# GPU: the hardware reads what the model says
# ----------------------------------------------------------------------------------------------------------

@pytest.mark.requires_sm90
@pytest.mark.parametrize("swizzle", SWIZZLES)
@pytest.mark.parametrize("a_major, b_major", [("K", "K"), ("K", "MN"), ("MN", "K"), ("MN", "MN")])
def test_tma_fed_wgmma_matches_the_model(a_major: str, b_major: str, swizzle: str) -> None:
    torch = pytest.importorskip("torch")
    import tmakit

    mod = tmakit.load_module("wgmma_probe.cu", arch="sm_90a")
    probe = mod.kernel("tmakit_wgmma_probe")
    a = torch.randn(MN, K, device="cuda").to(torch.bfloat16)  # A (M, K)
    b = torch.randn(MN, K, device="cuda").to(torch.bfloat16)  # B^T (N, K)
    a_st = a if a_major == "K" else a.T.contiguous()
    b_st = b if b_major == "K" else b.T.contiguous()
    chunk = SPAN[swizzle] // 2
    maps, descs, boxes = [], [], []
    for st, major, role, off in ((a_st, a_major, "A", 0), (b_st, b_major, "B", 8192)):
        tm = describe_tensor(st, box=(st.shape[0], chunk), swizzle=swizzle)
        maps.append(tm)
        descs += [d.value for d in wgmma_descriptors(tm, role, major, stage_address=off, k=K, mn=MN)]
        boxes.append(st.shape[1] // chunk)
    # the probe adds the shared address of its (1024-aligned) buffer to each start address
    d = torch.tensor(np.array(descs, dtype=np.uint64).view(np.int64), device="cuda")
    out = torch.full((MN, MN), float("nan"), device="cuda")
    probe(maps[0], maps[1], d, out, chunk, boxes[0], boxes[1], int(a_major == "MN"), int(b_major == "MN"),
          grid=(1, 1, 1), block=(128, 1, 1), shared_mem=16384 + 1024 + 64)
    torch.cuda.synchronize()
    ref = a.float() @ b.float().T
    assert torch.allclose(out, ref, atol=1e-2, rtol=1e-3), f"max diff {(out - ref).abs().max().item()}"


@pytest.mark.parametrize("descriptors, match", [
    (["garbage"], r"descriptors\[0\]='garbage': must be a 64-bit descriptor"),
    (None, r"descriptors=None: must be a sequence of 64-bit descriptors"),
    ([1.5, 0, 0, 0], r"descriptors\[0\]=1\.5: must be a 64-bit descriptor"),
    ([0, -1, 0, 0], r"descriptors\[1\]=-1: must be a 64-bit descriptor"),
    ({"a": 1}, r"descriptors=\{'a': 1\}: must be a sequence"),
])
def test_check_refuses_what_is_not_a_descriptor(descriptors, match):
    tmap = describe_tensor(shape=(4096, 4096), dtype="bf16", box=(64, 64), encode=False)
    with pytest.raises(InvalidArgumentError, match=match) as info:
        check_wgmma_descriptor(tmap, "A", "K", descriptors, stage_address=0)
    assert info.value.fix


@pytest.mark.parametrize("change, match", [
    ({"tmap": None}, r"tmap='NoneType': must be a tiled TensorMap"),
    ({"role": None}, r"role=None: must be one of 'A', 'B'"),
    ({"major": "row"}, r"major='row': must be one of 'K', 'MN'"),
    ({"stage_address": None}, r"stage_address=None: must be a shared-memory byte address"),
    ({"stage_address": 1 << 18}, r"stage_address=262144: must be a shared-memory byte address"),
    ({"k": "64"}, r"k='64': must be a positive multiple of 16"),
    ({"mn": 0}, r"mn=0: must be None or the MN extent"),
])
def test_descriptor_functions_refuse_bad_arguments(change, match):
    args = {"tmap": describe_tensor(shape=(4096, 4096), dtype="bf16", box=(64, 64), encode=False), "role": "A",
            "major": "K", "stage_address": 0, "k": 64, "mn": None}
    args.update(change)
    tmap, role, major = args.pop("tmap"), args.pop("role"), args.pop("major")
    with pytest.raises(InvalidArgumentError, match=match):
        wgmma_descriptors(tmap, role, major, **args)
    with pytest.raises(InvalidArgumentError, match=match):
        check_wgmma_descriptor(tmap, role, major, [0] * 4, **args)
