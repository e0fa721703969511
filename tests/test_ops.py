"""tmakit.ops and the kernels behind them.

CPU tier: argument checks and the backend choice (no GPU needed).
GPU tier: every result is compared with a CPU reference on fresh random data, outputs are poisoned first.
The cp.async path runs on Hopper too (backend="cp.async" compiles the kernels with TMAKIT_FORCE_CP_ASYNC), so
one H100 checks both paths; the two must also agree byte for byte.
"""
from __future__ import annotations

import logging
import secrets

import numpy as np
import pytest

from _fake_driver import FakeDeviceArray, device_view, fake_launch  # noqa: F401 - fixture

from tmakit import ops
from tmakit.arch import Arch
from tmakit.backend import Backend, choose_backend, parse_backend
from tmakit.errors import InvalidArgumentError, UnsupportedDeviceError

BACKENDS = [pytest.param("tma", marks=pytest.mark.requires_sm90), pytest.param("cp.async", marks=pytest.mark.requires_sm80)]
POISON = 0xA5


def _rng():
    seed = secrets.randbits(32)
    return np.random.default_rng(seed), seed


# ----------------------------------------------------------------------------------------------------------
# CPU tier
# ----------------------------------------------------------------------------------------------------------

def test_backend_auto_follows_capability():
    assert choose_backend("auto", arch="sm_90").backend is Backend.TMA
    assert choose_backend("auto", arch="sm_89").backend is Backend.CP_ASYNC
    assert choose_backend("cp.async", arch="sm_90").backend is Backend.CP_ASYNC
    assert choose_backend(None, arch="sm_100").backend is Backend.TMA


def test_backend_tma_below_sm90_raises_with_required_and_actual():
    with pytest.raises(UnsupportedDeviceError, match=r'backend="tma" needs compute capability sm_90.*the GPU is sm_86') as info:
        choose_backend("tma", arch="sm_86")
    assert info.value.required == Arch(9, 0) and info.value.actual == Arch(8, 6)


def test_backend_below_sm80_raises():
    with pytest.raises(UnsupportedDeviceError, match="need cp.async"):
        choose_backend("auto", arch="sm_75")
    with pytest.raises(UnsupportedDeviceError, match="needs compute capability sm_80"):
        choose_backend("cp.async", arch="sm_70")


def test_backend_environment_override_and_logging(monkeypatch, caplog):
    monkeypatch.setenv("TMAKIT_BACKEND", "cp.async")
    with caplog.at_level(logging.INFO, logger="tmakit"):
        choice = choose_backend("auto", arch="sm_90")
    assert choice.backend is Backend.CP_ASYNC and choice.source == "environment"
    assert "cp.async" in caplog.text
    # an explicit argument beats the environment
    assert choose_backend("tma", arch="sm_90").source == "argument"
    monkeypatch.setenv("TMAKIT_BACKEND", "tma")
    with pytest.raises(UnsupportedDeviceError, match="TMAKIT_BACKEND='tma'"):
        choose_backend("auto", arch="sm_80")
    monkeypatch.setenv("TMAKIT_BACKEND", "warp-speed")
    with pytest.raises(InvalidArgumentError, match="TMAKIT_BACKEND='warp-speed': is not a backend"):
        choose_backend("auto", arch="sm_90")


def test_backend_bad_name():
    with pytest.raises(InvalidArgumentError, match="backend='fast': is not a backend"):
        parse_backend("fast")


def test_copy_rejects_host_arrays():
    with pytest.raises(InvalidArgumentError, match="dst=.*host memory"):
        ops.copy(np.zeros(4), np.zeros(4))


def test_copy_rejects_shape_dtype_and_layout_mismatch():
    with pytest.raises(InvalidArgumentError, match=r"dst='shape \(4, 5\)': must equal the shape of src \(5, 4\)"):
        ops.copy(FakeDeviceArray((4, 5)), FakeDeviceArray((5, 4)))
    with pytest.raises(InvalidArgumentError, match="dst='dtype float64': must have the dtype of src"):
        ops.copy(FakeDeviceArray((4,), "<f8"), FakeDeviceArray((4,), "<f4"))
    with pytest.raises(InvalidArgumentError, match="src=.*must be C-contiguous"):
        ops.copy(FakeDeviceArray((4, 4)), FakeDeviceArray((4, 4), strides=(4, 16)))


def test_transpose_rejects_bad_shapes():
    with pytest.raises(InvalidArgumentError, match="src='shape \\(2, 3, 4\\)': must be 2-D"):
        ops.transpose(FakeDeviceArray((4, 3, 2)), FakeDeviceArray((2, 3, 4)))
    with pytest.raises(InvalidArgumentError, match=r"src='shape \(2147483648, 1\)': each dimension must be at most "
                                                   r"2147482624 \(tile coordinates are 32-bit"):
        ops.transpose(FakeDeviceArray((1, 2**31), "|u1"), FakeDeviceArray((2**31, 1), "|u1"))
    with pytest.raises(InvalidArgumentError, match=r"src='shape \(1073741824, 1073741824\)': makes up to \d+ tiles; "
                                                   r"the kernel counts tiles in 32 bits"):
        ops.transpose(FakeDeviceArray((2**30, 2**30), "|u1"), FakeDeviceArray((2**30, 2**30), "|u1"))
    with pytest.raises(InvalidArgumentError, match=r"dst='shape \(3, 4\)': must be \(4, 3\)"):
        ops.transpose(FakeDeviceArray((3, 4)), FakeDeviceArray((3, 4)))


def test_sector_plan_aligns_runs_to_32_byte_sectors():
    """Which dst rows start 16 bytes into a sector, and so are written V elements earlier."""
    from tmakit.ops.transpose import SectorPlan, sector_plan

    assert sector_plan(0x1000, 256, 10) == SectorPlan(1, 0)      # every row on a sector boundary
    assert sector_plan(0x1010, 256, 10) == SectorPlan(1, 1)      # every row 16 bytes in
    assert sector_plan(0x1000, 16336, 10) == SectorPlan(2, 2)    # pitch 16 mod 32: the odd rows
    assert sector_plan(0x1010, 16336, 10) == SectorPlan(2, 1)    # ... or the even ones
    assert sector_plan(0x1010, 16336, 1) == SectorPlan(1, 1)     # one row: one class
    # not 16-byte aligned (plain stores): each row's run starts on a sector of its own
    assert sector_plan(0x1008, 16336, 10) == SectorPlan(1, 0, row_sectors=True)
    assert sector_plan(0x1000, 100, 10) == SectorPlan(1, 0, row_sectors=True)
    assert sector_plan(0x1000, 100, 10, align=False) == SectorPlan(1, 0)


def test_transpose_source_classes_make_a_pitch_of_whole_16_bytes():
    """k rows back to back make a super-row of k * pitch bytes, a multiple of 16, for TMA to read."""
    from tmakit.ops.transpose import source_classes

    assert source_classes(0x1000, 20014, 8192) == 8      # 2-byte elements, an odd count: 8 rows
    assert source_classes(0x1000, 32749, 30011) == 16    # bytes, odd
    assert source_classes(0x1000, 65524, 16384) == 4     # 4 mod 16
    assert source_classes(0x1000, 98744, 9001) == 2      # 8 mod 16
    assert source_classes(0x1000, 4096, 100) == 0        # whole 16 bytes: none needed
    assert source_classes(0x1008, 20014, 8192) == 0      # a base TMA cannot take
    assert source_classes(0x1000, 20014, 7) == 0         # fewer rows than one super-row


def test_transpose_tile_grid_counts_the_extra_tile_row_of_shifted_runs():
    """Tile rows of H source rows and tile columns of 128 bytes; shifted runs end V rows before a tile's, so
    one more tile row where that leaves rows over, but not when one tile row holds every row; row-sector runs
    take none (the last tile row's runs go on to the rows' end)."""
    from tmakit.ops.transpose import tile_grid

    assert tile_grid(16384, 32768, 4, 256, False) == (64, 1024)
    assert tile_grid(16384, 32768, 4, 256, True) == (65, 1024)       # 4 rows (V) past the last tile's run
    assert tile_grid(16368, 131072, 1, 256, True) == (64, 1024)      # 16368 + 16 fits 64 tile rows
    assert tile_grid(256, 100, 1, 256, True) == (1, 1)              # one tile row: no shifted runs in it
    assert tile_grid(257, 100, 8, 256, True) == (2, 7)
    # row-sector runs start up to 32/E - 1 elements early, and the last tile row's runs go on to the rows' end:
    # no tile row more
    assert tile_grid(512, 100, 1, 256, False, row_sectors=True) == (2, 1)
    assert tile_grid(481, 100, 1, 256, False, row_sectors=True) == (2, 1)
    assert tile_grid(513, 100, 1, 256, False, row_sectors=True) == (3, 1)
    assert tile_grid(510, 100, 8, 256, False, row_sectors=True) == (2, 7)
    assert tile_grid(250, 100, 1, 256, False, row_sectors=True) == (1, 1)


def test_transpose_source_lead_puts_tile_rows_on_whole_lines():
    """Where every source row starts at one place inside a 128-byte line (a pitch of whole lines), the tile
    columns after the first start that many elements early; other pitches and unaligned bases get none."""
    from tmakit.ops.transpose import source_lead, tile_grid

    assert source_lead(0x1000, 32768 * 4, 4) == 0         # on a line already
    assert source_lead(0x1020, 32768 * 4, 4) == 8         # 32 bytes in: 8 floats early
    assert source_lead(0x1070, 4096, 1) == 112
    assert source_lead(0x1010, 256, 8) == 2               # a multiple of V = 16/E: even
    assert source_lead(0x1020, 131392, 4) == 0            # pitch 64 mod 128: rows differ, nothing uniform
    assert source_lead(0x1024, 32768 * 4, 4) == 0         # not 16-byte aligned (the cp.async any-pitch walk)
    assert tile_grid(256, 1024, 4, 256, False, 8) == (1, 33)   # 32 columns of 32, moved 8 back: one more
    assert tile_grid(256, 1024, 4, 256, False, 0) == (1, 32)
    assert tile_grid(256, 32, 4, 256, False, 8) == (1, 1)      # the first column holds them all


def test_transpose_source_eviction_parses_friendly_names_and_refuses_others():
    """The host's L2Eviction mirrors cache_policy.cuh's values and parses like tmakit's other enums."""
    from tmakit.ops._cache_policy import L2Eviction

    assert [int(m) for m in L2Eviction] == [0, 1, 2]
    assert L2Eviction.parse("evict_last") is L2Eviction.parse("last") is L2Eviction.parse(2) is L2Eviction.LAST
    with pytest.raises(InvalidArgumentError, match="policy=.*'keep'.*is not a known L2Eviction"):
        L2Eviction.parse("keep", "policy")
    with pytest.raises(InvalidArgumentError, match="policy=3.*is not a valid L2Eviction value"):
        L2Eviction.parse(3, "policy")


def test_transpose_tile_plan_fits_the_device():
    """256-row tiles where they fit a block's shared memory, else the 128-row plan; one block per tile with one
    stage and one image buffer (TilePlan.shared_mem), three blocks per SM on sm_90."""
    from tmakit.ops.transpose import choose_tile_plan

    for prefix in (False, True):  # with room for the V rows before each tile (shifted rows) or without
        big, small = choose_tile_plan(227 * 1024, prefix), choose_tile_plan(48 * 1024, prefix)
        assert (big.rows, small.rows) == (256, 128)
        assert 3 * (big.shared_mem_for(prefix) + 1024) <= 228 * 1024  # sm_90: 1 KiB reserved per block
        assert small.shared_mem_for(prefix) <= 48 * 1024
        assert big.shared_mem_for(prefix) == big.shared_mem + prefix * 16 * 128
    for limit in (163 * 1024, 99 * 1024):  # sm_80; sm_86 and sm_89
        assert choose_tile_plan(limit, prefix=True).rows == 256
    # both pitches odd (source row classes and row-sector runs): three blocks too, 1-byte rows by the split turn
    big = choose_tile_plan(227 * 1024)
    for esize, classes in ((1, 16), (2, 8), (4, 4), (8, 2)):
        assert 3 * (big.shared_mem_for(False, True, esize, classes) + 1024) <= 228 * 1024, (esize, classes)
        assert big.split_turn(True, classes) == (esize == 1)
    with pytest.raises(InvalidArgumentError, match="device=.*the transpose needs at least"):
        choose_tile_plan(32 * 1024)


def test_load_tiles_needs_a_box_for_arrays():
    with pytest.raises(InvalidArgumentError, match="box=None: is required"):
        ops.load_tiles(FakeDeviceArray((8, 8)), [[0, 0]])


# ----------------------------------------------------------------------------------------------------------
# GPU tier helpers
# ----------------------------------------------------------------------------------------------------------

def _random_array(rng, shape, dtype):
    dtype = np.dtype(dtype)
    raw = rng.integers(0, 256, size=int(np.prod(shape)) * dtype.itemsize, dtype=np.uint8)
    return raw.view(dtype).reshape(shape)


def _device(host):
    from tmakit.device_array import DeviceArray

    return DeviceArray.from_host(host)


def _poisoned(shape, dtype):
    from tmakit.device_array import DeviceArray

    return DeviceArray.from_host(np.full(int(np.prod(shape)) * np.dtype(dtype).itemsize, POISON, np.uint8)
                                 .view(dtype).reshape(shape))


def _sync():
    from tmakit import _driver

    _driver.call("cuCtxSynchronize")


def _coords(rng, shape, box, itemsize, count):
    """Random box corners in numpy order, in and out of bounds (negative too), innermost 16-byte aligned."""
    step = max(1, 16 // itemsize)
    out = [[0] * len(shape), [s + 3 for s in shape]]  # the origin and a wholly out-of-bounds box
    for _ in range(count):
        out.append([int(rng.integers(-b - 2, s + 2)) for s, b in zip(shape, box)])
    coords = np.array(out, dtype=np.int64)
    coords[:, -1] = coords[:, -1] // step * step
    return coords


# (numpy dtype, shape, box, describe options); shapes keep row pitches a multiple of 16 bytes.
LOAD_CASES = {
    "f32_sw128": (np.float32, (64, 64), (8, 32), dict(swizzle="128B")),
    "f16_sw128_nan": (np.float16, (40, 104), (16, 64), dict(swizzle="128B", oob_fill="nan")),
    "u8_sw64": (np.uint8, (33, 304), (8, 64), dict(swizzle="64B")),
    "f32_noswizzle_nan": (np.float32, (20, 12), (8, 8), dict(swizzle="none", oob_fill="nan")),
    "f16_narrow_row_sw128": (np.float16, (24, 64), (8, 16), dict(swizzle="128B")),
    "u16_sw32": (np.uint16, (16, 48), (4, 16), dict(swizzle="32B")),
    "f64_3d": (np.float64, (5, 6, 40), (2, 3, 4), dict(swizzle="none", oob_fill="nan")),
    "i32_5d": (np.int32, (2, 3, 4, 5, 8), (1, 2, 2, 3, 4), dict(swizzle="none")),
    "f32_element_strides": (np.float32, (64, 64), (9, 32), dict(swizzle="128B", element_strides=(3, 1))),
    "i64_1d": (np.int64, (1000,), (32,), dict(swizzle="none")),
}


def _expected_images(tm, host, coords):
    from tmakit.layout import tma_model

    mem = np.ascontiguousarray(host).view(np.uint8).ravel()
    return np.stack([tma_model.tma_load_image(tm, mem, list(c[::-1]), poison=POISON) for c in coords])


# ----------------------------------------------------------------------------------------------------------
# GPU tier: load_tiles / tile_store / pipeline
# ----------------------------------------------------------------------------------------------------------

@pytest.mark.requires_gpu
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", list(LOAD_CASES))
def test_load_tiles_matches_layout_model(case, backend):
    from tmakit.tensormap import describe_tensor

    rng, seed = _rng()
    dtype, shape, box, options = LOAD_CASES[case]
    host = _random_array(rng, shape, dtype)
    with _device(host) as dev:
        tm = describe_tensor(dev, box=box, **options)
        coords = _coords(rng, shape, box, np.dtype(dtype).itemsize, 12)
        result = ops.load_tiles(tm, coords, backend=backend)
        assert result.backend.name == backend
        want = _expected_images(tm, host, coords)
        assert result.images.shape == want.shape
        for i, c in enumerate(coords):
            bad = np.flatnonzero(result.images[i] != want[i])
            assert bad.size == 0, (f"seed {seed}, {case}, {backend}, coords {c.tolist()}: {bad.size} bytes differ, "
                                   f"first at {bad[0]} (got {result.images[i][bad[0]]:#x}, want {want[i][bad[0]]:#x})")


@pytest.mark.requires_sm90
@pytest.mark.parametrize("case", list(LOAD_CASES))
def test_load_tiles_backends_agree(case):
    from tmakit.tensormap import describe_tensor

    rng, seed = _rng()
    dtype, shape, box, options = LOAD_CASES[case]
    host = _random_array(rng, shape, dtype)
    with _device(host) as dev:
        tm = describe_tensor(dev, box=box, **options)
        coords = _coords(rng, shape, box, np.dtype(dtype).itemsize, 8)
        tma = ops.load_tiles(tm, coords, backend="tma").images
        cpa = ops.load_tiles(tm, coords, backend="cp.async").images
    assert np.array_equal(tma, cpa), f"seed {seed}: the TMA and cp.async images differ for {case}"


@pytest.mark.requires_gpu
def test_load_tiles_from_array_and_typed_view():
    rng, _ = _rng()
    host = _random_array(rng, (32, 64), np.float32)
    with _device(host) as dev:
        result = ops.load_tiles(dev, [[8, 16]], box=(8, 16), swizzle="none")
    # random bits include NaNs, which never compare equal: compare the bits
    assert np.array_equal(result.typed()[0].view(np.uint32), host[8:16, 16:32].view(np.uint32))
    with pytest.raises(InvalidArgumentError, match="coords=.*not a multiple of 16"):
        with _device(host) as dev:
            ops.load_tiles(dev, [[0, 3]], box=(8, 16), swizzle="none")


@pytest.mark.requires_gpu
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", ["f32_sw128", "u8_sw64", "f16_narrow_row_sw128", "f64_3d", "i64_1d", "u16_sw32"])
def test_tile_store_round_trip(case, backend):
    """Images loaded from src, stored into a poisoned dst at the same corners: dst == the CPU store model."""
    from tmakit.backend import choose_backend
    from tmakit.layout import tma_model
    from tmakit.ops._kernels import kernel
    from tmakit.tensormap import describe_tensor

    rng, seed = _rng()
    dtype, shape, box, options = LOAD_CASES[case]
    options = {k: v for k, v in options.items() if k != "oob_fill"}
    host = _random_array(rng, shape, dtype)
    # non-overlapping corners on the box grid, including boxes that stick out past the far edges
    grid = [range(0, s, b) for s, b in zip(shape, box)]
    corners = np.array(np.meshgrid(*grid, indexing="ij")).reshape(len(shape), -1).T
    corners = corners[rng.permutation(len(corners))[:16]]
    with _device(host) as src, _poisoned(shape, dtype) as dst:
        tm_src = describe_tensor(src, box=box, **options)
        tm_dst = describe_tensor(dst, box=box, **options)
        images = ops.load_tiles(tm_src, corners, backend=backend).images
        choice = choose_backend(backend, device=tm_dst.device)
        geo = tma_model.box_geometry(tm_dst)
        padded = np.zeros((len(corners), 5), np.int32)
        padded[:, :len(shape)] = corners[:, ::-1]
        with _device(padded) as dcoords, _device(images) as dimages:
            k = kernel("tile_store.cu", "tmakit_tile_store", choice, tm_dst.device)
            k(tm_dst, dcoords.ptr, len(corners), tm_dst.rank, geo.box_bytes, geo.smem_bytes, tm_dst.smem_alignment,
              dimages.ptr, grid=(len(corners), 1, 1), block=(128, 1, 1), shared_mem=geo.smem_bytes + tm_dst.smem_alignment)
            _sync()
        got = dst.to_host()
    want = np.full(host.nbytes, POISON, np.uint8)
    for c, image in zip(corners, images):
        tma_model.tma_store(tm_dst, want, list(c[::-1]), image)
    bad = np.flatnonzero(got.view(np.uint8).ravel() != want)
    assert bad.size == 0, f"seed {seed}, {case}, {backend}: {bad.size} bytes differ from the store model, first at {bad[0]}"


@pytest.mark.requires_gpu
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [(1, 4), (37, 68), (300, 1000), (1031, 260)])
def test_pipeline_scale(shape, backend):
    from tmakit.backend import choose_backend
    from tmakit.ops._kernels import kernel, sm_count
    from tmakit.tensormap import describe_tensor

    rng, seed = _rng()
    x = rng.standard_normal(shape).astype(np.float32)
    tile_rows, tile_cols, alpha = 32, 64, np.float32(1.75)
    with _device(x) as dx, _poisoned(shape, np.float32) as dy:
        tm = describe_tensor(dx, box=(tile_rows, tile_cols), swizzle="none")
        choice = choose_backend(backend, device=tm.device)
        tiles = -(-shape[0] // tile_rows) * -(-shape[1] // tile_cols)
        k = kernel("pipeline.cu", "tmakit_pipeline_scale", choice, tm.device)
        stage = tile_rows * tile_cols * 4
        k(tm, dy.ptr, shape[0], shape[1], tile_rows, tile_cols, alpha, grid=(min(tiles, sm_count(tm.device)), 1, 1),
          block=(256, 1, 1), shared_mem=2 * stage + 128)
        _sync()
        y = dy.to_host()
    assert np.array_equal(y, x * alpha), f"seed {seed}: pipeline_scale {shape} {backend} differs"


# ----------------------------------------------------------------------------------------------------------
# GPU tier: copy and transpose
# ----------------------------------------------------------------------------------------------------------

SHAPES = [(1, 1), (1000, 1), (777, 1333), (4097, 65), (3, 5), (5, 16), (130, 272), (132, 68), (144, 80), (1024, 2048)]
DTYPES = [np.uint8, np.float16, np.float32, np.float64]


@pytest.mark.requires_gpu
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_copy_exact(shape, dtype, backend):
    rng, seed = _rng()
    host = _random_array(rng, shape, dtype)
    with _device(host) as src, _poisoned(shape, dtype) as dst:
        result = ops.copy(dst, src, backend=backend)
        _sync()
        got = dst.to_host()
    assert result.backend.name == backend and result.path in ("bulk", "cp.async")
    assert got.tobytes() == host.tobytes(), f"seed {seed}: copy {shape} {np.dtype(dtype).name} {backend} differs"


@pytest.mark.requires_gpu
@pytest.mark.parametrize("offsets", [(0, 0), (3, 3), (16, 1), (1, 7)])
def test_copy_unaligned_views(offsets):
    """Views that start mid-buffer: equal offsets mod 16 use the engines; unequal ones copy byte by byte."""
    rng, seed = _rng()
    n = 100_003
    host = _random_array(rng, (n + 32,), np.uint8)
    with _device(host) as src_buf, _poisoned((n + 32,), np.uint8) as dst_buf:
        d0, s0 = offsets
        result = ops.copy(dst_buf[d0:d0 + n], src_buf[s0:s0 + n])
        _sync()
        got = dst_buf.to_host()
        if (d0 - s0) % 16:
            assert result.path == "bytes"
            with pytest.raises(InvalidArgumentError, match="differs from dst .* modulo 16"):
                ops.copy(dst_buf[d0:d0 + n], src_buf[s0:s0 + n], backend="cp.async")
    want = np.full(n + 32, POISON, np.uint8)
    want[d0:d0 + n] = host[s0:s0 + n]
    assert np.array_equal(got, want), f"seed {seed}: offsets {offsets}"


@pytest.mark.requires_gpu
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_transpose_exact(shape, dtype, backend):
    from tmakit.ops.transpose import source_classes

    rng, seed = _rng()
    host = _random_array(rng, shape, dtype)
    esize = np.dtype(dtype).itemsize
    # a source pitch that is not a multiple of 16 bytes: TMA reads it as super-rows of k rows where it has one
    undescribable = "src" if shape[1] * esize % 16 and not source_classes(0, shape[1] * esize, shape[0]) else \
        "dst" if shape[0] * esize % 16 else ""
    with _device(host) as src, _poisoned(shape[::-1], dtype) as dst:
        if backend == "tma" and undescribable == "src":
            with pytest.raises(InvalidArgumentError, match="src.*cannot be described by a TMA tensor map"):
                ops.transpose(dst, src, backend=backend)
            result = ops.transpose(dst, src, backend="auto")  # auto takes the cp.async path and says why
            assert result.backend.name == "cp.async" and "TMA cannot describe src" in result.reason
        elif backend == "tma" and undescribable == "dst":  # TMA loads src, plain stores write dst
            result = ops.transpose(dst, src, backend=backend)
            assert result.backend.name == "tma" and result.dst_stores == "plain" and "plain 16-byte stores" in result.reason
        else:
            result = ops.transpose(dst, src, backend=backend)
            assert result.backend.name == backend
        _sync()
        got = dst.to_host()
    assert got.tobytes() == np.ascontiguousarray(host.T).tobytes(), \
        f"seed {seed}: transpose {shape} {np.dtype(dtype).name} {backend} differs"


@pytest.mark.requires_gpu
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_transpose_any_pitch_is_exact(dtype, backend):
    """Pitches and bases that are not multiples of 16 bytes on either side (odd row and column counts, views
    that start 1..3 elements into a buffer): TMA loads src where it can describe it (an odd pitch on an
    aligned base as row classes) and the block writes dst in sector-aligned runs of aligned 16-byte pieces
    (dst's own row ends element by element); a source TMA cannot describe is gathered from aligned pieces on
    the cp.async path. The same bytes as numpy, the poison around dst intact."""
    from tmakit.ops.transpose import source_classes

    rng, seed = _rng()
    esize = np.dtype(dtype).itemsize
    # rows past whole tile rows (row-sector runs start up to 32/E - 1 rows early, and the last tile row's go on
    # to the rows' end: 543 and 1031 at bytes; 511, its dst rows starting up to 31 bytes into a sector, ends
    # two pieces past the runs), rows of whole tile rows (512: the last tile row's runs end exactly at the
    # rows' end), a 1 x N and N x 1
    shapes = [(3, 5), (1, 37), (37, 1), (515, 263), (257, 301), (1000, 3), (3, 1000), (300, 16 // esize * 40 + 1),
              (543, 131), (1031, 33), (511, 77), (512, 77), (1, 1001), (1001, 1)]
    for (rows, cols), (s_off, d_off) in [(sh, off) for sh in shapes for off in ((0, 0), (0, 1), (1, 3))]:
        host = _random_array(rng, (rows, cols), dtype)
        pad = 64 // esize
        with _poisoned((rows * cols + pad,), dtype) as src_buffer, _poisoned((rows * cols + pad,), dtype) as buffer:
            src = src_buffer[s_off: s_off + rows * cols].reshape(rows, cols)
            src.copy_from_host(host)
            dst = buffer[d_off: d_off + rows * cols].reshape(cols, rows)
            src_ok = (s_off * esize) % 16 == 0 and ((cols * esize) % 16 == 0 or source_classes(0, cols * esize, rows) > 0)
            dst_ok = (d_off * esize) % 16 == 0 and (rows * esize) % 16 == 0
            if backend == "tma" and not src_ok:
                with pytest.raises(InvalidArgumentError, match="src.*cannot be described by a TMA tensor map"):
                    ops.transpose(dst, src, backend=backend)
                result = ops.transpose(dst, src, backend="auto")
                assert result.backend.name == "cp.async"
            else:
                result = ops.transpose(dst, src, backend=backend)
                assert result.backend.name == backend
                assert result.dst_stores == ("tma" if backend == "tma" and dst_ok else "plain")
                classes = source_classes(0, cols * esize, rows) if (cols * esize) % 16 else 0
                assert (f"TMA loads src as {classes} row classes" in result.reason) == (backend == "tma" and classes > 0)
                # l2_promotion="auto": 128-byte lines for the row classes' windows
                assert ("L2 promotion 128B" in result.reason) == (backend == "tma" and classes > 0)
            _sync()
            got = buffer.to_host()
        want = np.full(rows * cols + pad, 0, dtype)
        want.view(np.uint8)[:] = POISON
        want[d_off: d_off + rows * cols] = np.ascontiguousarray(host.T).ravel()
        assert got.tobytes() == want.tobytes(), \
            f"seed {seed}: {(rows, cols)} src offset {s_off} dst offset {d_off} {np.dtype(dtype).name} {backend} differs"


def _sector_cases(esize: int, backend: str) -> list[tuple[tuple[int, int], int]]:
    """(src shape, dst byte offset) cases of the sector plans: dst pitch 16 mod 32 (two row classes, the odd
    or, at offset 16, the even rows shifted) and 0 mod 32 at offset 16 (every row shifted), at one tile or
    less, a partial last tile, whole tile rows (beyond the first, a shifted run then needs one more tile
    row: 512 rows), odd and narrow column counts. TMA needs a source pitch of whole 16 bytes (columns a multiple of V); the
    cp.async path takes any, and odd counts give the two classes unequal row counts."""
    v = 16 // esize
    cols = (lambda n: -(-n // v) * v) if backend == "tma" else (lambda n: n)
    two_classes = [(3 * v, cols(7)), (256 - v, cols(129)), (512 + v, cols(2 * 128 // esize + 3)), (1024 + 9 * v, cols(1))]
    one_class = [(256, cols(131)), (512, cols(40)), (512 + 2 * v, cols(40)), (2 * v, cols(2))]
    return [(s, off) for s in two_classes for off in (0, 16)] + [(s, 16) for s in one_class]


@pytest.mark.requires_gpu
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_transpose_sector_aligned_runs_are_exact(dtype, backend):
    """Where dst rows start 16 bytes into a 32-byte sector, their runs move V elements earlier and each tile
    loads the V source rows before it: the same bytes as numpy, nothing written outside dst (poison around
    it), and the plan on the result."""
    from tmakit.ops.transpose import sector_plan

    rng, seed = _rng()
    esize = np.dtype(dtype).itemsize
    for (rows, cols), offset in _sector_cases(esize, backend):
        host = _random_array(rng, (rows, cols), dtype)
        pad = 32 // esize
        with _device(host) as src, _poisoned((rows * cols + pad,), dtype) as buffer:
            dst = buffer[offset // esize: offset // esize + rows * cols].reshape(cols, rows)
            result = ops.transpose(dst, src, backend=backend)
            _sync()
            got = buffer.to_host()
            plan = sector_plan(dst.ptr, rows * esize, cols)
        assert result.backend.name == backend and result.sectors == plan, (rows, cols, offset, plan)
        assert plan.shifted or cols == 1  # one dst row at offset 0 starts on a sector boundary
        want = np.full(rows * cols + pad, 0, dtype)
        want.view(np.uint8)[:] = POISON
        want[offset // esize: offset // esize + rows * cols] = np.ascontiguousarray(host.T).ravel()
        assert got.tobytes() == want.tobytes(), f"seed {seed}: {(rows, cols)} dst offset {offset} {backend} differs"


@pytest.mark.requires_gpu
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_transpose_line_aligned_source_columns_are_exact(dtype, backend):
    """A source base 16..112 bytes into a 128-byte line with a pitch of whole lines: the tile columns after
    the first start `lead` elements early (the first two overlap); the same bytes as numpy, nothing written
    outside dst, with one and two dst row classes, one tile column or several."""
    from tmakit.ops.transpose import source_lead

    rng, seed = _rng()
    esize = np.dtype(dtype).itemsize
    width, v = 128 // esize, 16 // esize
    for offset in (16, 32, 64, 112):
        for rows, cols in [(256 + v, 3 * width), (48, width), (512, 2 * width), (2 * v, 5 * width)]:
            host = _random_array(rng, (rows, cols), dtype)
            with _poisoned((rows * cols + 128 // esize,), dtype) as src_buffer, \
                    _poisoned((rows * cols + 32 // esize,), dtype) as buffer:
                src = src_buffer[offset // esize: offset // esize + rows * cols].reshape(rows, cols)
                src.copy_from_host(host)
                dst = buffer[:rows * cols].reshape(cols, rows)
                result = ops.transpose(dst, src, backend=backend)
                _sync()
                got = buffer.to_host()
                lead = source_lead(src.ptr, cols * esize, esize)
            assert result.lead == lead == offset // esize, (offset, result)
            want = np.full(rows * cols + 32 // esize, 0, dtype)
            want.view(np.uint8)[:] = POISON
            want[:rows * cols] = np.ascontiguousarray(host.T).ravel()
            assert got.tobytes() == want.tobytes(), f"seed {seed}: {(rows, cols)} src offset {offset} {backend} differs"


@pytest.mark.requires_gpu
@pytest.mark.parametrize("blocks", [None, 3], ids=["block_per_tile", "three_blocks"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_transpose_exact_with_128_row_tiles(dtype, backend, blocks):
    """128-row tiles, asked for: the plan for small shared-memory limits, with one block per tile, and with three
    blocks walking all the tiles (the stage and the image buffer reused tile after tile: the ring's phases and the
    store pipeline's reuse rule): the same bytes as numpy at edge shapes."""
    tiles = ops.TilePlan.of(128)
    rng, seed = _rng()
    # TMA-describable pitches, partial tiles; 144 1-byte rows: a pitch of 16 mod 32 (shifted odd rows)
    for shape in [(144, 80), (4112, 1040), (1024, 2048), (16 * 8 + 16 // np.dtype(dtype).itemsize, 272)]:
        host = _random_array(rng, shape, dtype)
        with _device(host) as src, _poisoned(shape[::-1], dtype) as dst:
            assert ops.transpose(dst, src, backend=backend, tile_plan=tiles, max_blocks=blocks).tile_plan == tiles
            _sync()
            got = dst.to_host()
        assert got.tobytes() == np.ascontiguousarray(host.T).tobytes(), f"seed {seed}: {shape} {backend} differs"


@pytest.mark.requires_sm90
@pytest.mark.parametrize("blocks", [None, 2], ids=["block_per_tile", "two_blocks"])
def test_transpose_split_turn_is_exact(blocks):
    """1-byte rows with both pitches odd (16 source row classes, row-sector runs) in 256-row tiles: the tile is
    turned in two halves, the upper half's images in the stage rows the lower half read, which fits three blocks per SM. One
    block per tile, and two blocks walking all the tiles (a stage reused after its images were stored): the same
    bytes as numpy, at interior and edge tiles."""
    rng, seed = _rng()
    for shape in [(1031, 523), (515, 263), (2049, 1025)]:
        host = _random_array(rng, shape, np.uint8)
        with _device(host) as src, _poisoned(shape[::-1], np.uint8) as dst:
            plan = ops.plan_transpose(dst, src, backend="tma", max_blocks=blocks, tile_plan=ops.TilePlan.of(256))
            chosen = plan.result.tile_plan
            assert chosen.split_turn(True, 16) and plan.result.sectors.row_sectors, plan.result
            # a 42 KiB stage, 22 KiB of extended rows (half the images, their prefix chunks and one chunk twice), 1 KiB
            # of slack: three blocks in 228 KiB
            assert chosen.shared_mem_for(False, True, 1, 16) == 65 * 1024
            plan()
            _sync()
            got = dst.to_host()
        assert got.tobytes() == np.ascontiguousarray(host.T).tobytes(), f"seed {seed}: {shape} blocks={blocks} differs"


@pytest.mark.requires_gpu
def test_ops_reject_mismatched_device_arrays():
    with _device(np.zeros((4, 4), np.float32)) as a, _device(np.zeros((4, 4), np.float64)) as b, \
            _device(np.zeros((2, 4), np.float32)) as c, _device(np.zeros(64, np.uint8)) as buf:
        with pytest.raises(InvalidArgumentError, match="must have the dtype of src"):
            ops.copy(a, b)
        with pytest.raises(InvalidArgumentError, match="src=.*must be C-contiguous"):
            ops.transpose(c, a[:, ::2])
        with pytest.raises(InvalidArgumentError, match="dst=.*overlaps src"):
            ops.copy(buf[8:40], buf[0:32])


@pytest.mark.requires_gpu
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(1, 16), (33, 64), (1000, 4096), (257, 1040)], ids=str)
def test_ptx_tile_copy_exact(shape, dtype, backend):
    """The hand-written PTX rings (TMA and cp.async twins) copy exactly, ragged edge tiles included."""
    rng, seed = _rng()
    host = _random_array(rng, shape, dtype)
    with _device(host) as src, _poisoned(shape, dtype) as dst:
        result = ops.ptx_tile_copy(dst, src, backend=backend)
        _sync()
        got = dst.to_host()
    assert result.backend.name == backend
    assert got.tobytes() == host.tobytes(), f"seed {seed}: ptx_tile_copy {shape} {np.dtype(dtype).name} {backend}"


@pytest.mark.requires_gpu
def test_ptx_tile_copy_rejects_unaligned_rows():
    with _device(np.zeros((4, 5), np.float32)) as a, _device(np.zeros((4, 5), np.float32)) as b:
        with pytest.raises(InvalidArgumentError, match="row pitch 20 bytes"):
            ops.ptx_tile_copy(a, b)



def test_transpose_plan_without_a_whole_super_row_takes_the_cp_async_path(fake_launch):
    """5 rows of 3 bytes make no super-row of 16 rows: "auto" gathers the source on the cp.async path."""
    few = ops.plan_transpose(device_view(0x10000000, (3, 5), "uint8"), device_view(0x20000000, (5, 3), "uint8"))
    assert few.result.backend.name == "cp.async" and "TMA cannot describe src" in few.result.reason
    assert fake_launch[-1].defines["TMAKIT_TRANSPOSE_SOURCE_CLASSES"] == 0
