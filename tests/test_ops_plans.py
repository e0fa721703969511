"""The ops' plans (tmakit/ops/_plan.py): prepared launches, run again as they are or on new buffers.

CPU tier (tests/_fake_driver.py's fake kernels on a pretend sm_90): ``plan()`` relaunches the bound launch and
nothing else; ``plan(dst2, src2)`` replaces the bound launch's buffer arguments; another geometry, or an address
that changes a decision, raises naming the parameter; tuning choices reach the kernel as plan arguments.
GPU tier: plans rerun exactly on fresh data, on new buffers, for both backends.
"""
from __future__ import annotations

import secrets

import numpy as np
import pytest
from _fake_driver import device_view, fake, fake_launch  # noqa: F401 - fixture

from tmakit import ops
from tmakit.errors import InvalidArgumentError
from tmakit.ops._boxparams import PackedBoxParams

BACKENDS = [pytest.param("tma", marks=pytest.mark.requires_sm90), pytest.param("cp.async", marks=pytest.mark.requires_sm80)]
POISON = 0xA5


# ----------------------------------------------------------------------------------------------------------
# CPU tier
# ----------------------------------------------------------------------------------------------------------

def test_copy_plan_reruns_and_repoints(fake_launch):
    dst, src = device_view(0x10000, (64, 64)), device_view(0x20000, (64, 64))
    plan = ops.plan_copy(dst, src)
    (kernel,) = fake_launch
    (bound,) = kernel.bound
    assert (kernel.entry, bound.launches, plan.result.path, plan.backend.name) == ("tmakit_copy", 0, "bulk", "tma")
    assert plan() is plan.result and plan() is plan.result
    assert bound.launches == 2 and bound.args == [0x10000, 0x20000, 64 * 64 * 4]
    plan(device_view(0x30000, (64, 64)), device_view(0x40000, (64, 64)))
    assert bound.args == [0x30000, 0x40000, 64 * 64 * 4] and bound.launches == 3
    assert len(kernel.bound) == 1  # re-pointed, not bound again


def test_copy_plan_refuses_another_geometry_naming_the_buffer(fake_launch):
    plan = ops.plan_copy(device_view(0x10000, (64, 64)), device_view(0x20000, (64, 64)))
    with pytest.raises(InvalidArgumentError, match=r"src=.*shape \(64, 32\).*must have the plan's geometry"):
        plan(device_view(0x30000, (64, 64)), device_view(0x40000, (64, 32)))
    with pytest.raises(InvalidArgumentError, match=r"dst=.*float16.*must have the plan's geometry.*plan_copy"):
        plan(device_view(0x30000, (64, 64), "float16"), device_view(0x40000, (64, 64)))
    with pytest.raises(InvalidArgumentError, match=r"src=.*differs from dst .* modulo 16 .*bulk path"):
        plan(device_view(0x30000, (64, 64)), device_view(0x40004, (64, 64)))
    with pytest.raises(InvalidArgumentError, match="dst=.*overlaps src"):
        plan(device_view(0x30000, (64, 64)), device_view(0x30010, (64, 64)))
    with pytest.raises(InvalidArgumentError, match=r"buffers='1 arrays': must be 2: \(dst, src\)"):
        plan(device_view(0x30000, (64, 64)))
    assert fake_launch[0].bound[0].launches == 0  # nothing ran


def test_copy_tuning_is_an_argument(fake_launch):
    plan = ops.plan_copy(device_view(0x10000, (4096,)), device_view(0x20000, (4096,)), blocks=3, backend="cp.async")
    assert fake_launch[0].bound[0].options["grid"] == (3, 1, 1) and plan.result.blocks == 3
    assert fake_launch[0].defines.get("TMAKIT_FORCE_CP_ASYNC") == 1
    with pytest.raises(InvalidArgumentError, match="blocks=0: must be an int"):
        ops.plan_copy(device_view(0x10000, (4096,)), device_view(0x20000, (4096,)), blocks=0)


def test_copy_byte_path_plan_takes_any_offset(fake_launch):
    plan = ops.plan_copy(device_view(0x10000, (100,), "uint8"), device_view(0x20003, (100,), "uint8"))
    assert plan.result.path == "bytes" and fake_launch[0].entry == "tmakit_copy_bytes"
    plan(device_view(0x30000, (100,), "uint8"), device_view(0x40000, (100,), "uint8"))
    assert fake_launch[0].bound[0].args[:2] == [0x30000, 0x40000]


def test_transpose_plan_repoints_its_box_parameters(fake_launch):
    dst, src = device_view(0x100000, (96, 80), "uint16"), device_view(0x200000, (80, 96), "uint16")
    plan = ops.plan_transpose(dst, src, backend="cp.async")
    (kernel,) = fake_launch
    (bound,) = kernel.bound
    assert all(isinstance(a, PackedBoxParams) for a in bound.args[:4])
    before = [a.data for a in bound.args[:4]]
    plan()
    plan(device_view(0x300000, (96, 80), "uint16"), device_view(0x400000, (80, 96), "uint16"))
    after = [a.data for a in bound.args[:4]]
    assert bound.launches == 2 and all(a != b for a, b in zip(before, after))
    fresh = ops.plan_transpose(device_view(0x300000, (96, 80), "uint16"), device_view(0x400000, (80, 96), "uint16"),
                               backend="cp.async")
    assert after == [a.data for a in fake_launch[-1].bound[0].args[:4]]  # as a new plan would pack them
    assert bound.args[4:] == fake_launch[-1].bound[0].args[4:] and fresh.result == plan.result


def test_transpose_plan_refuses_buffers_that_change_a_decision(fake_launch):
    plan = ops.plan_transpose(device_view(0x100000, (96, 80), "uint16"), device_view(0x200000, (80, 96), "uint16"),
                              backend="cp.async")
    with pytest.raises(InvalidArgumentError, match=r"dst=.*0x300010.*must sit where the plan's buffers sat"):
        plan(device_view(0x300010, (96, 80), "uint16"), device_view(0x400000, (80, 96), "uint16"))  # 16 into a sector
    with pytest.raises(InvalidArgumentError, match=r"dst=.*shape \(80, 96\).*must have the plan's geometry"):
        plan(device_view(0x300000, (80, 96), "uint16"), device_view(0x400000, (80, 96), "uint16"))


def test_transpose_tuning_choices_are_plan_arguments(fake_launch):
    dst, src = device_view(0x100000, (512, 512), "float32"), device_view(0x200000, (512, 512), "float32")
    tiles = ops.TilePlan.of(128, run_bytes=4096)
    plan = ops.plan_transpose(dst, src, backend="cp.async", tile_plan=tiles, source_eviction="normal",
                              align_sectors=False, max_blocks=5)
    defines = fake_launch[0].defines
    assert (defines["TMAKIT_TRANSPOSE_TILE_ROWS"], defines["TMAKIT_TRANSPOSE_RUN_BYTES"]) == (128, 4096)
    assert (defines["TMAKIT_TRANSPOSE_ELEMENT_BYTES"], defines["TMAKIT_TRANSPOSE_ROW_CLASSES"]) == (4, 1)
    assert defines["TMAKIT_TRANSPOSE_SOURCE_EVICTION"] == 0 and plan.result.tile_plan == tiles
    assert fake_launch[0].bound[0].options["grid"][0] == 5  # max_blocks: each block walks several of the 64 tiles
    default = ops.plan_transpose(dst, src, backend="cp.async")
    assert default.result.tile_plan.rows == 256 and fake_launch[-1].defines["TMAKIT_TRANSPOSE_SOURCE_EVICTION"] == 2
    with pytest.raises(InvalidArgumentError, match="source_eviction=.*'keep'"):
        ops.plan_transpose(dst, src, source_eviction="keep")
    for bad in (ops.TilePlan.of(512), ops.TilePlan.of(256, threads=100), ops.TilePlan.of(128, threads=2048)):
        with pytest.raises(InvalidArgumentError, match=r"tile_plan=.*must have 128 or 256 rows.*whole warps"):
            ops.plan_transpose(dst, src, tile_plan=bad)
    with pytest.raises(InvalidArgumentError, match="tile_plan=256: must be a tmakit.ops.transpose.TilePlan"):
        ops.plan_transpose(dst, src, tile_plan=256)
    for bad in (0, 4, 2.0, True, "3"):
        with pytest.raises(InvalidArgumentError, match=r"min_blocks=.*must be an int from 1 to 3 or None"):
            ops.plan_transpose(dst, src, min_blocks=bad)
    for bad in (0, -1, 2.0, True, "3"):
        with pytest.raises(InvalidArgumentError, match=r"max_blocks=.*must be a positive int or None"):
            ops.plan_transpose(dst, src, max_blocks=bad)
    for bad in ("512B", 7, None):
        with pytest.raises(InvalidArgumentError, match=r"l2_promotion=.*must be 'auto' or an L2Promotion.*'256B'"):
            ops.plan_transpose(dst, src, l2_promotion=bad)
    ops.plan_transpose(dst, src, backend="cp.async", l2_promotion="AUTO")  # any case, as the enums take
    for bad in (1, None, "yes"):
        with pytest.raises(InvalidArgumentError, match=r"source_row_classes=.*must be True or False"):
            ops.plan_transpose(dst, src, source_row_classes=bad)
    capped = ops.plan_transpose(dst, src, backend="cp.async", min_blocks=1)
    assert fake_launch[-1].defines["TMAKIT_TRANSPOSE_MIN_BLOCKS"] == 1 and capped.result.tile_plan.rows == 256


def test_no_tuning_module_globals_left():
    """Tuning is passed in, never patched in: the ops keep no settable module-level knobs."""
    import importlib

    copy_module, transpose_module = (importlib.import_module(f"tmakit.ops.{m}") for m in ("copy", "transpose"))

    for name in ("_PLANS", "_ALIGN_SECTORS", "_L2_PROMOTION", "_SOURCE_EVICTION", "_THREADS", "_CHUNK", "_MEMO"):
        assert not hasattr(copy_module, name) and not hasattr(transpose_module, name), name


def test_empty_plans_launch_nothing(fake_launch):
    plan = ops.plan_copy(device_view(0x10000, (0, 4)), device_view(0x20000, (0, 4)))
    assert plan().path == "empty" and fake_launch == []
    assert ops.plan_transpose(device_view(0x10000, (4, 0)), device_view(0x20000, (0, 4)))().reason == "empty"


# ----------------------------------------------------------------------------------------------------------
# GPU tier
# ----------------------------------------------------------------------------------------------------------

def _random(rng, shape, dtype):
    raw = rng.integers(0, 256, size=int(np.prod(shape)) * np.dtype(dtype).itemsize, dtype=np.uint8)
    return raw.view(dtype).reshape(shape)


def _poisoned(shape, dtype):
    from tmakit.device_array import DeviceArray

    return DeviceArray.from_host(np.full(int(np.prod(shape)) * np.dtype(dtype).itemsize, POISON, np.uint8)
                                 .view(dtype).reshape(shape))


def _sync():
    from tmakit import _driver

    _driver.call("cuCtxSynchronize")


@pytest.mark.requires_gpu
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.uint8, np.float32], ids=lambda d: np.dtype(d).name)
def test_copy_plan_on_the_gpu(backend, dtype):
    """plan() on new contents, then plan(dst2, src2) on other buffers: exact each time."""
    from tmakit.device_array import DeviceArray

    seed = secrets.randbits(32)
    rng = np.random.default_rng(seed)
    shape = (777, 1333)
    a, b = _random(rng, shape, dtype), _random(rng, shape, dtype)
    with DeviceArray.from_host(a) as src, _poisoned(shape, dtype) as dst, DeviceArray.from_host(b) as src2, \
            _poisoned(shape, dtype) as dst2:
        plan = ops.plan_copy(dst, src, backend=backend)
        assert plan().backend.name == backend
        _sync()
        assert dst.to_host().tobytes() == a.tobytes(), f"seed {seed}"
        plan(dst2, src2)
        _sync()
        assert dst2.to_host().tobytes() == b.tobytes(), f"seed {seed}: the re-pointed plan"
        with pytest.raises(InvalidArgumentError, match="src=.*must have the plan's geometry"):
            plan(dst2, src2[:10])


@pytest.mark.requires_gpu
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.uint8, np.float16, np.float64], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(144, 80), (1040, 272), (304, 1008)], ids=str)  # pitches TMA can describe
def test_transpose_plan_on_the_gpu(backend, dtype, shape):
    """A transpose plan reruns and re-points its tensor maps (TMA) or BoxParams (cp.async) exactly."""
    _transpose_plan_round_trip(backend, dtype, shape)


@pytest.mark.requires_sm80
@pytest.mark.parametrize("dtype", [np.uint8, np.float16], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(1031, 261), (37, 1333)], ids=str)
def test_transpose_plan_any_pitch_on_the_gpu(dtype, shape):
    """The cp.async path's any-pitch walk, re-pointed: its BoxParams carry the new addresses."""
    _transpose_plan_round_trip("cp.async", dtype, shape)


def _transpose_plan_round_trip(backend, dtype, shape):
    from tmakit.device_array import DeviceArray

    seed = secrets.randbits(32)
    rng = np.random.default_rng(seed)
    a, b = _random(rng, shape, dtype), _random(rng, shape, dtype)
    with DeviceArray.from_host(a) as src, _poisoned(shape[::-1], dtype) as dst, DeviceArray.from_host(b) as src2, \
            _poisoned(shape[::-1], dtype) as dst2:
        plan = ops.plan_transpose(dst, src, backend=backend)
        plan()
        _sync()
        assert dst.to_host().tobytes() == np.ascontiguousarray(a.T).tobytes(), f"seed {seed}"
        result = plan(dst2, src2)
        _sync()
        assert result is plan.result
        assert dst2.to_host().tobytes() == np.ascontiguousarray(b.T).tobytes(), f"seed {seed}: the re-pointed plan"
        plan(dst, src2)  # one buffer changed, the other kept
        _sync()
        assert dst.to_host().tobytes() == np.ascontiguousarray(b.T).tobytes(), f"seed {seed}: dst kept, src new"


@pytest.mark.requires_gpu
@pytest.mark.parametrize("backend", BACKENDS)
def test_load_tiles_plan_on_the_gpu(backend):
    """plan_load_tiles: plan() loads again (fresh images), plan(array2) loads the same boxes from array2."""
    from tmakit.device_array import DeviceArray
    from tmakit.layout import tma_model

    seed = secrets.randbits(32)
    rng = np.random.default_rng(seed)
    a, b = _random(rng, (64, 64), np.float32), _random(rng, (64, 64), np.float32)
    coords = [[0, 0], [8, 32], [60, 48]]
    with DeviceArray.from_host(a) as da, DeviceArray.from_host(b) as db:
        with ops.plan_load_tiles(da, coords, box=(8, 32), swizzle="128B", backend=backend) as plan:
            first = plan()
            again = plan()
            other = plan(db)
        tm = first.tensor_map
        for images, host in ((first.images, a), (again.images, a), (other.images, b)):
            want = np.stack([tma_model.tma_load_image(tm, host.view(np.uint8).ravel(), c[::-1], poison=POISON)
                             for c in coords])
            assert np.array_equal(images, want), f"seed {seed}"


# ----------------------------------------------------------------------------------------------------------
# Lifetimes: a plan keeps the arrays it took pointers from alive (CPU: fake arrays and kernels)
# ----------------------------------------------------------------------------------------------------------

def _held_after_del(make_plan, arrays):
    """Make the plan from ``arrays`` (a dict of FakeDeviceArrays), drop every reference the test holds, collect:
    the names of the arrays the plan let go."""
    import gc
    import weakref

    refs = {name: weakref.ref(a) for name, a in arrays.items()}
    plan = make_plan(**arrays)
    arrays.clear()
    gc.collect()
    gone = sorted(name for name, ref in refs.items() if ref() is None)
    return plan, gone


def _fa(drv, shape, typestr="<f4"):
    """A FakeDeviceArray over fake device memory (so that the array adapter finds its device)."""
    from _fake_driver import FakeDeviceArray

    nbytes = int(np.prod(shape)) * int(typestr[2:])
    from tmakit import _driver

    _driver.ensure_context(0)
    return FakeDeviceArray(shape, typestr, ptr=drv.cuMemAlloc(nbytes)[1])


LIFETIME_CASES = {
    "copy": (lambda dst, src: ops.plan_copy(dst, src),
             lambda d: {"dst": _fa(d, (64, 64)), "src": _fa(d, (64, 64))}),
    "copy_cp_async": (lambda dst, src: ops.plan_copy(dst, src, backend="cp.async"),
                      lambda d: {"dst": _fa(d, (64, 64)), "src": _fa(d, (64, 64))}),
    "transpose_cp_async": (lambda dst, src: ops.plan_transpose(dst, src, backend="cp.async"),
                           lambda d: {"dst": _fa(d, (48, 64)), "src": _fa(d, (64, 48))}),
    "gemm_cp_async": (lambda a, b, c: ops.plan_gemm(a, b, c, backend="cp.async"),
                      lambda d: {"a": _fa(d, (128, 64), "<f2"), "b": _fa(d, (64, 64), "<f2"),
                                 "c": _fa(d, (128, 64), "<f2")}),
    "attention_cp_async": (lambda q, k, v, out, lse: ops.plan_attention(q, k, v, out, lse=lse, backend="cp.async"),
                           lambda d: {"q": _fa(d, (1, 2, 64, 64), "<f2"), "k": _fa(d, (1, 2, 64, 64), "<f2"),
                                      "v": _fa(d, (1, 2, 64, 64), "<f2"), "out": _fa(d, (1, 2, 64, 64), "<f2"),
                                      "lse": _fa(d, (1, 2, 64), "<f4")}),
}


@pytest.mark.parametrize("case", list(LIFETIME_CASES))
def test_plans_keep_the_arrays_they_took_pointers_from_alive(fake, fake_launch, case):
    make_plan, arrays = LIFETIME_CASES[case]
    plan, gone = _held_after_del(make_plan, arrays(fake))
    assert gone == [], f"plan_{case} let {gone} go while its launch still points at them"
    plan()  # and it still runs
    assert fake_launch[-1].bound[-1].launches == 1


def _drop_and_reuse(*nbytes):
    """Collect garbage, then allocate and fill buffers of these sizes with 0x5A: memory a plan let go would be
    handed out again and overwritten here. Returns the buffers (keep them until the check)."""
    import gc

    from tmakit.device_array import DeviceArray

    gc.collect()
    return [DeviceArray.from_host(np.full(n, 0x5A, np.uint8)) for n in nbytes for _ in range(2)]


@pytest.mark.requires_gpu
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op", ["copy", "transpose"])
def test_plans_keep_their_buffers_alive_on_the_gpu(backend, op):
    """The plan is the only holder of its device arrays: after the caller drops them (and the memory would be
    reused), plan() still reads and writes them."""
    import weakref

    from tmakit.device_array import DeviceArray

    seed = secrets.randbits(32)
    rng = np.random.default_rng(seed)
    host = _random(rng, (256, 320), np.float32)
    src, dst = DeviceArray.from_host(host), _poisoned((320, 256) if op == "transpose" else (256, 320), np.float32)
    plan = (ops.plan_transpose if op == "transpose" else ops.plan_copy)(dst, src, backend=backend)
    refs = [weakref.ref(src), weakref.ref(dst)]
    del src, dst
    junk = _drop_and_reuse(host.nbytes)
    assert all(r() is not None for r in refs), "the plan let its buffers go"
    plan()
    _sync()
    want = np.ascontiguousarray(host.T) if op == "transpose" else host
    assert refs[1]().to_host().tobytes() == want.tobytes(), f"seed {seed}"
    del junk


@pytest.mark.requires_gpu
@pytest.mark.parametrize("backend", BACKENDS)
def test_load_tiles_plan_keeps_its_array_alive_on_the_gpu(backend):
    import weakref

    from tmakit.device_array import DeviceArray
    from tmakit.layout import tma_model

    seed = secrets.randbits(32)
    host = _random(np.random.default_rng(seed), (64, 64), np.float32)
    array = DeviceArray.from_host(host)
    coords = [[0, 0], [8, 32]]
    plan = ops.plan_load_tiles(array, coords, box=(8, 32), swizzle="128B", backend=backend)
    ref = weakref.ref(array)
    del array
    junk = _drop_and_reuse(host.nbytes)
    assert ref() is not None, "the plan let its array go"
    result = plan()
    want = np.stack([tma_model.tma_load_image(result.tensor_map, host.view(np.uint8).ravel(), c[::-1], poison=POISON)
                     for c in coords])
    assert np.array_equal(result.images, want), f"seed {seed}"
    del junk


@pytest.mark.requires_gpu
@pytest.mark.parametrize("backend", BACKENDS)
def test_gemm_and_attention_plans_keep_their_operands_alive_on_the_gpu(backend):
    import weakref

    from tmakit.device_array import DeviceArray

    seed = secrets.randbits(32)
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((128, 64)).astype(np.float16)
    b = rng.standard_normal((64, 64)).astype(np.float16)
    da, db, dc = DeviceArray.from_host(a), DeviceArray.from_host(b), _poisoned((128, 64), np.float16)
    gemm = ops.plan_gemm(da, db, dc, backend=backend)
    q, k, v = (rng.standard_normal((1, 2, 64, 64)).astype(np.float16) for _ in range(3))
    dq, dk, dv = (DeviceArray.from_host(x) for x in (q, k, v))
    do, dl = _poisoned((1, 2, 64, 64), np.float16), _poisoned((1, 2, 64), np.float32)
    attention = ops.plan_attention(dq, dk, dv, do, lse=dl, backend=backend)
    refs = [weakref.ref(x) for x in (da, db, dc, dq, dk, dv, do, dl)]
    del da, db, dc, dq, dk, dv, do, dl
    junk = _drop_and_reuse(a.nbytes, b.nbytes, q.nbytes)
    assert all(r() is not None for r in refs), "a plan let an operand go"
    gemm()
    attention()
    _sync()
    want = a.astype(np.float32) @ b.astype(np.float32).T
    got = refs[2]().to_host().astype(np.float32)
    assert np.allclose(got, want, rtol=2e-2, atol=5e-2), f"seed {seed}: gemm max error {np.abs(got - want).max()}"
    s = np.einsum("bhqd,bhkd->bhqk", q.astype(np.float32), k.astype(np.float32)) / 8.0
    p = np.exp(s - s.max(-1, keepdims=True))
    o = np.einsum("bhqk,bhkd->bhqd", p / p.sum(-1, keepdims=True), v.astype(np.float32))
    got = refs[6]().to_host().astype(np.float32)
    assert np.allclose(got, o, rtol=2e-2, atol=2e-2), f"seed {seed}: attention max error {np.abs(got - o).max()}"
    del junk
