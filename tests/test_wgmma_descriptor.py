"""tmakit.layout.wgmma: the wgmma shared-memory descriptor derived from a TensorMap.

CPU: for every swizzle mode and both majors, TMA's CPU model (tma_load_image) writes the stage from a random
matrix, the descriptors of wgmma_descriptors read it back through the canonical-layout model (read_operand), and
the result is the source matrix; the descriptor encoding matches the device header's; every planted mismatch
(swizzle mode, alignment, k-slice advance, LBO/SBO, major vs box) is explained by check_wgmma_descriptor.
GPU (sm_90): cuda_src/wgmma_probe.cu loads A and B with TMA (or copies the model's stage images) and runs wgmma
m64nNkK with the host's descriptors, N = 128 and every other multiple of 16 from 16 to 256; the product equals the
exact product of the source tiles for every operand type, swizzle mode and both majors of A and B.
"""
from __future__ import annotations

import numpy as np
import pytest

from tmakit import describe_tensor, tma_load_image
from tmakit.errors import InvalidArgumentError
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
    ({"k": "64"}, r"k='64': must be a positive int"),
    ({"k": 24}, r"k=24: must be a positive multiple of 16"),
    ({"mn_offset": -8}, r"mn_offset=-8: must be an int in \[0, 256\]"),
    ({"mn": 0}, r"mn=0: must be None or the MN extent"),
])
def test_descriptor_functions_refuse_bad_arguments(change, match):
    args = {"tmap": describe_tensor(shape=(4096, 4096), dtype="bf16", box=(64, 64), encode=False), "role": "A",
            "major": "K", "stage_address": 0, "k": 64, "mn": None, "mn_offset": 0}
    args.update(change)
    tmap, role, major = args.pop("tmap"), args.pop("role"), args.pop("major")
    with pytest.raises(InvalidArgumentError, match=match):
        wgmma_descriptors(tmap, role, major, **args)
    with pytest.raises(InvalidArgumentError, match=match):
        check_wgmma_descriptor(tmap, role, major, [0] * 4, **args)


def test_every_type_reads_32_bytes_of_k_per_slice() -> None:
    """tf32 k8, fp8/int8 k32: the k-slices of a 128B-swizzled K-major stage start 32 bytes apart for every element
    size (a u8 map gave [0, 16, 32, 48] and an f32 map [0, 64, 8192, 8256] before)."""
    for dtype, elem in (("u8", 1), ("bf16", 2), ("f32", 4)):
        tm = describe_tensor(shape=(64, 512), dtype=dtype, box=(64, 128 // elem), swizzle="128B", encode=False)
        descs = wgmma_descriptors(tm, "A", "K", stage_address=0x4000, k=256 // elem)
        assert [d.start_address - 0x4000 for d in descs] == [0, 32, 64, 96, 8192, 8224, 8256, 8288], dtype
        assert operand_offsets(descs[0].value, "K", 64, elem=elem).shape == (64, 32 // elem)


def test_mn_major_is_for_16_bit_types_only() -> None:
    tm = describe_tensor(shape=(64, 64), dtype="u8", box=(64, 128), swizzle="128B", encode=False)
    with pytest.raises(InvalidArgumentError, match=r"major='MN'.*K-major only.*PTX ISA 9\.7\.15\.5\.2"):
        wgmma_descriptors(tm, "B", "MN")
    with pytest.raises(InvalidArgumentError, match=r"k=24: must be a positive multiple of 32"):
        wgmma_descriptors(tm, "A", "K", k=24)
    with pytest.raises(InvalidArgumentError, match=r"stage_address='0x4040': must be 128-byte aligned"):
        wgmma_descriptors(tm, "A", "K", stage_address=0x4040, k=128)
    with pytest.raises(InvalidArgumentError, match=r"mn_offset=4: must be a multiple of 8"):
        wgmma_descriptors(tm, "A", "K", mn_offset=4, k=128)


# --- The probe's cases: every type, major, swizzle and stage placement ---------------------------------------

# (A type, B type, A MN-major, B MN-major), by the combo number cuda_src/wgmma_probe.cu gives them
COMBOS = ([("bf16", "bf16", ta, tb) for ta in (False, True) for tb in (False, True)]
          + [("f16", "f16", ta, tb) for ta in (False, True) for tb in (False, True)]
          + [("tf32", "tf32", False, False)]
          + [(a, b, False, False) for a in ("e4m3", "e5m2") for b in ("e4m3", "e5m2")]
          + [(a, b, False, False) for a in ("s8", "u8") for b in ("s8", "u8")])
ELEM = {"bf16": 2, "f16": 2, "tf32": 4, "e4m3": 1, "e5m2": 1, "s8": 1, "u8": 1}
MAP_DTYPE = {1: "uint8", 2: "uint16", 4: "uint32"}  # the maps move bits
_FP8 = {"e4m3": {0: 0x00, 1: 0x38, 2: 0x40, 3: 0x44, 4: 0x48}, "e5m2": {0: 0x00, 1: 0x3C, 2: 0x40, 3: 0x42, 4: 0x44}}
ALIGN = {16: 128, 32: 256, 64: 512, 128: 1024}


def _bits(values: np.ndarray, kind: str) -> np.ndarray:
    """Small integers as the element bit patterns of `kind` (exact in every type)."""
    if kind == "bf16":
        return (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    if kind == "f16":
        return values.astype(np.float16).view(np.uint16)
    if kind == "tf32":
        return values.astype(np.float32).view(np.uint32)
    if kind in _FP8:
        mag = np.vectorize(_FP8[kind].__getitem__)(np.abs(values)).astype(np.uint8)
        return mag | np.where(values < 0, 0x80, 0).astype(np.uint8)
    return values.astype(np.int8 if kind == "s8" else np.uint8).view(np.uint8)


def _values(rng, shape, kind: str) -> np.ndarray:
    if kind == "u8":
        return rng.integers(0, 16, size=shape)
    if kind == "s8":
        return rng.integers(-8, 9, size=shape)
    return rng.integers(-4, 5, size=shape)


def _operand(rng, kind: str, role: str, mn_major: bool, swizzle: str, kbytes: int, at: int, n: int = 128) -> dict:
    """One operand's stage: its matrix ((MN, K) values; B has n columns), the map of the array it is stored in, the
    stage image (the map's boxes, tma_load_image), where it sits and its descriptors."""
    elem = ELEM[kind]
    mn, k = (64 if role == "A" else n), kbytes // elem
    span = SPAN[swizzle]
    chunk = span // elem
    matrix = _values(rng, (mn, k), kind)
    stored = matrix.T if mn_major else matrix  # MN-major: K rows of MN contiguous
    bits = np.ascontiguousarray(_bits(stored, kind))
    tm = describe_tensor(shape=bits.shape, dtype=MAP_DTYPE[elem], box=(bits.shape[0], chunk), swizzle=swizzle,
                         encode=False)
    boxes = bits.shape[1] // chunk
    image = np.concatenate([tma_load_image(tm, bits.view(np.uint8), (j * chunk, 0)) for j in range(boxes)])
    major = "MN" if mn_major else "K"
    descs = wgmma_descriptors(tm, role, major, stage_address=at, k=k, mn=mn)
    return dict(kind=kind, matrix=matrix, bits=bits, map=tm, image=image, boxes=boxes, chunk=chunk, at=at,
                major=major, descs=descs, mn=mn, elem=elem)


def _case(rng, n: int = 128) -> dict:
    """A random probe case of an m64nN wgmma: a combo, per operand a swizzle and a stage address (on the swizzle's
    repeat, or, one stage in three, on another 128-byte boundary: a non-zero base offset), a K of 32..256 bytes. An
    MN-major B takes the swizzles whose span of elements divides n (its boxes tile the n columns)."""
    combo = int(rng.integers(0, len(COMBOS)))
    ka, kb, ta, tb = COMBOS[combo]
    b_swizzles = [sw for sw in SWIZZLES if not tb or n % (SPAN[sw] // ELEM[kb]) == 0]
    swizzles = [str(rng.choice(SWIZZLES)), str(rng.choice(b_swizzles))]
    kbytes = int(rng.choice([x for x in (32, 64, 128, 256) if all(x >= SPAN[sw] or mn for sw, mn in zip(swizzles, (ta, tb)))]))
    ops = []
    for kind, role, mn_major, sw, region in ((ka, "A", ta, swizzles[0], 0), (kb, "B", tb, swizzles[1], 20480)):
        align = ALIGN[SPAN[sw]]
        at = region + int(rng.integers(0, 4096 // align)) * align
        if SPAN[sw] > 16 and rng.random() < 1 / 3:
            at = region + 128 * int(rng.integers(1, 32))
            if at % align == 0:
                at += 128
        ops.append(_operand(rng, kind, role, mn_major, sw, kbytes, at, n))
    return dict(combo=combo, a=ops[0], b=ops[1], slices=len(ops[0]["descs"]))


def _expected(case: dict) -> np.ndarray:
    """D = A B^T of the matrices (64 x N), exact in float64 (small integers), as the kernel's 32-bit words."""
    d = case["a"]["matrix"].astype(np.float64) @ case["b"]["matrix"].astype(np.float64).T
    return d.astype(np.int32) if COMBOS[case["combo"]][0] in ("s8", "u8") else d.astype(np.float32)


@pytest.mark.parametrize("n", [128, 16, 80, 144, 240])
def test_model_reads_back_every_probe_stage(n: int) -> None:
    """On the CPU, for 400 random probe cases (100 at widths other than 128): the descriptors read back, through
    the canonical layouts and the swizzle with its base offset, exactly the matrix the stage image holds."""
    rng = np.random.default_rng(11 + n)
    based = 0
    for _ in range(400 if n == 128 else 100):
        case = _case(rng, n)
        for op in (case["a"], case["b"]):
            dt = {1: np.uint8, 2: np.uint16, 4: np.uint32}[op["elem"]]
            got = read_operand(op["image"], op["at"], op["descs"], op["major"], op["mn"], dtype=dt)
            want = op["bits"].T if op["major"] == "MN" else op["bits"]
            np.testing.assert_array_equal(got, want)
            based += op["descs"][0].base_offset != 0
    assert based > (50 if n == 128 else 10)  # stages off their swizzle's repeat boundary were among them


def test_desc_rebase_on_the_host_twin_matches_the_derivation(tmp_path) -> None:
    """wgmma.cuh's wgmma_desc_rebase and types.cuh's list_item, compiled for the host: a kernel that takes a
    descriptor list derived at shared address 0 (descriptor_define) reads the descriptors wgmma_descriptors gives
    for its stage's real address."""
    import shutil
    import subprocess
    from pathlib import Path

    from tmakit.layout.wgmma import descriptor_define

    if shutil.which("nvcc") is None:
        pytest.skip("nvcc (host compiler driver) is not on the PATH")
    tm = describe_tensor(shape=(256, 256), dtype="bf16", box=(64, 64), swizzle="128B", encode=False)
    listed = descriptor_define(wgmma_descriptors(tm, "B", "MN", k=64, mn=256))
    src = tmp_path / "rebase.cu"
    src.write_text('#include <cstdio>\n#include "tmakit/types.cuh"\n#include "tmakit/wgmma.cuh"\n'
                   f"#define DESCS {listed}\n"
                   "int main() { for (unsigned at = 0; at < 200000; at += 9216)\n"
                   "  for (int i = 0; i < 4; ++i) printf(\"%u %d %llu\\n\", at, i,\n"
                   "    (unsigned long long)tmakit::wgmma_desc_rebase(tmakit::list_item(i, DESCS), at)); }\n")
    root = Path(__file__).resolve().parents[1]
    exe = tmp_path / "rebase"
    subprocess.run(["nvcc", "-std=c++17", f"-I{root / 'cuda_src'}", str(src), "-o", str(exe)], check=True,
                   capture_output=True, timeout=300)
    lines = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split("\n")
    rows = [tuple(int(x) for x in line.split()) for line in lines if line]
    assert len(rows) == 4 * 22
    for at, i, value in rows:
        assert value == wgmma_descriptors(tm, "B", "MN", k=64, mn=256, stage_address=at)[i].value, (at, i)


# ----------------------------------------------------------------------------------------------------------
# GPU: the hardware reads what the model says
# ----------------------------------------------------------------------------------------------------------

def _run_probe_cases(n: int, cases: int, seed: int) -> tuple[int, set]:
    """Run `cases` random probe cases through cuda_src/wgmma_probe.cu built for m64nN; every D must equal the
    exact product. Returns (stages TMA filled, (combo, swizzles, base offset) seen)."""
    torch = pytest.importorskip("torch")
    import tmakit

    probe = tmakit.load_module("wgmma_probe.cu", arch="sm_90a",
                               defines={"TMAKIT_WGMMA_PROBE_N": n}).kernel("tmakit_wgmma_probe")
    rng = np.random.default_rng(seed)
    seen, tma_filled = set(), 0
    for c in range(cases):
        case = _case(rng, n)
        a, b = case["a"], case["b"]
        args = []
        for op in (a, b):
            # TMA fills the stages it can (its swizzled boxes need the repeat-aligned address: base offset 0)
            use_tma = op["descs"][0].base_offset == 0 and rng.random() < 0.5
            bits = torch.from_numpy(op["bits"].view(np.uint8).copy()).cuda()
            tm = tmakit.describe_tensor(bits.view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[op["elem"]]),
                                        box=op["map"].box_shape, swizzle=op["map"].swizzle)
            image = torch.from_numpy(op["image"]).cuda()
            args.append((tm, image, bits, op["boxes"] if use_tma else 0))
            tma_filled += use_tma
        descs = torch.tensor(np.array([d.value for d in a["descs"] + b["descs"]], dtype=np.uint64).view(np.int64),
                             device="cuda")
        out = torch.full((64, n), -1, dtype=torch.int32, device="cuda")
        (tm_a, img_a, _, boxes_a), (tm_b, img_b, _, boxes_b) = args
        probe(tm_a, tm_b, img_a, img_b, np.uint32(a["at"]), np.uint32(b["at"]), np.uint32(a["image"].size),
              np.uint32(b["image"].size), np.int32(boxes_a), np.int32(boxes_b), np.int32(a["chunk"]), np.int32(b["chunk"]),
              descs, np.int32(case["slices"]), np.int32(case["combo"]), out,
              grid=(1, 1, 1), block=(128, 1, 1), shared_mem=20480 + 4096 + 256 * n + 2048)
        torch.cuda.synchronize()
        want = _expected(case)
        got = out.cpu().numpy().view(want.dtype)
        bad = np.flatnonzero(got != want)
        what = (f"m64n{n} case {c}: combo {COMBOS[case['combo']]}, A {a['major']}-major {a['map'].swizzle.name} at "
                f"{a['at']:#x} (base offset {a['descs'][0].base_offset}), B {b['major']}-major {b['map'].swizzle.name} "
                f"at {b['at']:#x} (base offset {b['descs'][0].base_offset}), {case['slices']} slices")
        assert bad.size == 0, f"{what}: {bad.size} of {64 * n} wrong, first {got.flat[bad[0]]} != {want.flat[bad[0]]}"
        seen.add((case["combo"], a["map"].swizzle.name, b["map"].swizzle.name, a["descs"][0].base_offset > 0))
    return tma_filled, seen


@pytest.mark.requires_sm90
def test_wgmma_reads_what_the_model_says_on_1000_random_stages() -> None:
    """cuda_src/wgmma_probe.cu multiplies the stages of 1,000 random cases (every type wgmma takes, both majors for
    16-bit types, every swizzle, TMA-filled stages and thread-copied ones, base offsets) with the host's descriptors;
    D equals the exact product of the matrices the stages hold, bit for bit."""
    tma_filled, seen = _run_probe_cases(128, 1000, int(__import__("os").environ.get("TMAKIT_TEST_SEED", "20261126")))
    assert tma_filled > 500 and len(seen) > 150


@pytest.mark.requires_sm90
@pytest.mark.parametrize("n", [w for w in range(16, 257, 16) if w != 128])
def test_every_wgmma_width_reads_what_the_model_says(n: int) -> None:
    """wgmma.cuh's m64nN for every N it offers besides 128 (its operand lists and operand numbers are per N): 60
    random probe cases each, every type and both majors among them, D exact."""
    tma_filled, seen = _run_probe_cases(n, 60, int(__import__("os").environ.get("TMAKIT_TEST_SEED", "20261126")) + n)
    assert tma_filled > 20 and len({combo for combo, *_ in seen}) > 10
