"""The one-shot ops' plan cache (tmakit/ops/_plan_cache.py), on the fake sm_90 of tests/_fake_driver.py: a geometry
seen before re-points the plan made then (one bound launch, its arguments replaced); another geometry, address
class, option or stream plans afresh; a re-pointed call keeps every check of a plan (overlap refused, nothing
launched); the cache is bounded, least recently used first out. GPU tier: one-shot ops on seen geometries write
what torch does, on fresh data each call.
"""
from __future__ import annotations

import threading

import pytest
from _fake_driver import device_view, fake, fake_launch  # noqa: F401 - fixtures

from tmakit import ops
from tmakit.errors import InvalidArgumentError
from tmakit.ops import _plan_cache


@pytest.fixture(autouse=True)
def _empty_cache():
    ops.clear_plan_cache()
    before = dict(ops.plan_cache_info())
    yield before
    ops.clear_plan_cache()


def _info() -> dict:
    return ops.plan_cache_info()


def test_a_seen_geometry_repoints_the_plan_made_for_it(fake_launch):
    start = _info()
    ops.copy(device_view(0x10000, (64, 64)), device_view(0x20000, (64, 64)))
    ops.copy(device_view(0x30000, (64, 64)), device_view(0x40000, (64, 64)))
    (kernel,) = fake_launch
    (bound,) = kernel.bound  # one plan, bound once, re-pointed
    assert bound.launches == 2 and bound.args[:2] == [0x30000, 0x40000]
    assert (_info()["hits"] - start["hits"], _info()["misses"] - start["misses"], _info()["plans"]) == (1, 1, 1)


@pytest.mark.parametrize("other", [
    ((0x30000, (64, 32)), (0x40000, (64, 32))),  # another shape
    ((0x30000, (64, 64), "float16"), (0x40000, (64, 64), "float16")),  # another dtype
    ((0x30000, (64, 64)), (0x40004, (64, 64))),  # an address the plan's bulk path refuses (src - dst mod 16)
])
def test_another_geometry_or_a_refused_address_plans_afresh(fake_launch, other):
    ops.copy(device_view(0x10000, (64, 64)), device_view(0x20000, (64, 64)))
    ops.copy(device_view(*other[0]), device_view(*other[1]))
    assert len(fake_launch) == 2 and _info()["plans"] == 2 and fake_launch[0].bound[0].launches == 1


def test_a_key_seen_before_another_call_hits_by_key(fake_launch):
    """The last call's plan is tried first; another op in between sends the next call through the key, where
    the address class (modulo 256) is part of the geometry."""
    ops.copy(device_view(0x10000, (64, 64)), device_view(0x20000, (64, 64)))
    ops.transpose(device_view(0x100000, (96, 80), "uint16"), device_view(0x200000, (80, 96), "uint16"),
                  backend="cp.async")
    ops.copy(device_view(0x30000, (64, 64)), device_view(0x40000, (64, 64)))  # same class: the first plan
    assert len(fake_launch) == 2 and fake_launch[0].bound[0].launches == 2
    ops.transpose(device_view(0x100000, (96, 80), "uint16"), device_view(0x200000, (80, 96), "uint16"),
                  backend="cp.async")
    ops.copy(device_view(0x30040, (64, 64)), device_view(0x40040, (64, 64)))  # another class: a plan of its own
    assert len([k for k in fake_launch if k.entry == "tmakit_copy"]) == 2 and _info()["plans"] == 3


def test_options_and_streams_are_part_of_the_key(fake_launch):
    dst, src = device_view(0x10000, (64, 64)), device_view(0x20000, (64, 64))
    ops.copy(dst, src)
    ops.copy(dst, src, backend="cp.async")
    ops.copy(dst, src, stream=7)
    ops.copy(dst, src, chunk_bytes=16384)
    assert len(fake_launch) == 4 and _info()["plans"] == 4
    ops.copy(dst, src, stream=7)
    assert len(fake_launch) == 4 and _info()["hits"] == 1


def test_an_option_of_another_type_is_another_key(fake_launch):
    # True == 1 and 16384.0 == 16384: the plan made for the one must not answer the other, which plans afresh
    # (and is refused where the op refuses it)
    dst, src = device_view(0x10000, (64, 64)), device_view(0x20000, (64, 64))
    ops.copy(dst, src, chunk_bytes=16384)
    with pytest.raises(InvalidArgumentError, match="chunk_bytes"):
        ops.copy(dst, src, chunk_bytes=16384.0)  # the call site's last plan: the fast path
    ops.copy(dst, src, stream=7)
    with pytest.raises(InvalidArgumentError, match="chunk_bytes"):
        ops.copy(dst, src, chunk_bytes=16384.0)  # by key
    assert _info()["plans"] == 2


def test_tmakit_check_is_part_of_the_key(fake_launch, monkeypatch):
    dst, src = device_view(0x10000, (64, 64)), device_view(0x20000, (64, 64))
    ops.copy(dst, src)
    monkeypatch.setenv("TMAKIT_CHECK", "0")
    ops.copy(dst, src)
    assert _info()["plans"] == 2 and _info()["hits"] == 0


def test_a_repointed_call_keeps_every_check_of_a_plan(fake_launch):
    ops.copy(device_view(0x10000, (64, 64)), device_view(0x20000, (64, 64)))
    with pytest.raises(InvalidArgumentError, match="dst=.*overlaps src"):
        ops.copy(device_view(0x30000, (64, 64)), device_view(0x30100, (64, 64)))
    assert fake_launch[0].bound[0].launches == 1  # the refused call ran nothing
    with pytest.raises(InvalidArgumentError, match="dst=.*host array"):
        ops.copy(device_view(0x30000, (64, 64), device=None), device_view(0x40000, (64, 64)))


def test_transposes_and_the_cp_async_gemm_reuse_their_plans(fake_launch):
    for base in (0x100000, 0x500000):
        ops.transpose(device_view(base, (96, 80), "uint16"), device_view(base + 0x100000, (80, 96), "uint16"),
                      backend="cp.async")
    assert len(fake_launch) == 1 and fake_launch[0].bound[0].launches == 2
    for base in (0x1000000, 0x2000000):
        a, b = device_view(base, (256, 64), "float16"), device_view(base + 0x100000, (128, 64), "float16")
        c = device_view(base + 0x200000, (256, 128), "float16")
        assert ops.gemm(a, b, c, backend="cp.async") is c
    gemm_kernels = [k for k in fake_launch if "gemm" in k.entry]
    assert len(gemm_kernels) == 1 and sum(b.launches for b in gemm_kernels[0].bound) == 2
    assert gemm_kernels[0].bound[-1].args[:3] == [0x2000000, 0x2100000, 0x2200000]
    assert _info()["hits"] == 2


def test_the_cache_is_bounded_least_recently_used_first_out(fake_launch):
    cap = _info()["capacity"]
    shapes = [(64, 64 + 16 * i) for i in range(cap + 1)]
    for shape in shapes:
        ops.copy(device_view(0x100000, shape), device_view(0x800000, shape))
    assert _info()["plans"] == cap  # the first shape went
    ops.copy(device_view(0x100000, shapes[1]), device_view(0x800000, shapes[1]))  # still there: a hit
    assert _info()["hits"] == 1
    ops.copy(device_view(0x100000, shapes[0]), device_view(0x800000, shapes[0]))  # gone: planned again
    assert _info()["misses"] == cap + 2 and _info()["plans"] == cap


def test_unhashable_options_skip_the_cache_and_one_lock_guards_each_call():
    cache = _plan_cache.PlanCache(capacity=2)
    made = []
    run = lambda opts: cache.run("op", (), (), None, opts, lambda: made.append(1) or (lambda: "made"),  # noqa: E731
                                 lambda plan, views: "rerun")
    assert run({"k": [1]}) == "made" and run({"k": [1]}) == "made" and len(cache) == 0
    assert run({"k": 1}) == "made" and run({"k": 1}) == "rerun" and len(cache) == 1
    inside = []

    def slow(plan, views):
        inside.append(threading.get_ident())
        assert len(inside) == 1  # no other call is re-pointing at the same time
        inside.pop()
        return "rerun"

    threads = [threading.Thread(target=lambda: [cache.run("op", (), (), None, {"k": 1}, lambda: (lambda: "m"), slow)
                                                for _ in range(200)]) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert cache.hits == 801


BACKENDS = [pytest.param("tma", marks=pytest.mark.requires_sm90),
            pytest.param("cp.async", marks=pytest.mark.requires_sm80)]


def _poisoned(shape, dtype):
    import numpy as np

    from tmakit.device_array import DeviceArray

    return DeviceArray.from_host(np.full(int(np.prod(shape)) * np.dtype(dtype).itemsize, 0xA5, np.uint8)
                                 .view(dtype).reshape(shape))


@pytest.mark.requires_gpu
@pytest.mark.parametrize("backend", BACKENDS)
def test_one_shot_ops_on_seen_geometries_on_the_gpu(backend):
    """Each op three times on one geometry, fresh random data and poisoned outputs each time (the plan made by
    the first call, re-pointed by the next two): every output as the CPU computes it."""
    import secrets

    import numpy as np

    from tmakit import _driver
    from tmakit.device_array import DeviceArray

    seed = secrets.randbits(32)
    rng = np.random.default_rng(seed)
    for _ in range(3):
        src = rng.integers(0, 2**32, (300, 200), dtype=np.uint32).view(np.float32)
        dsrc = DeviceArray.from_host(src)
        dcopy, dt = _poisoned((300, 200), np.float32), _poisoned((200, 300), np.float32)
        ops.copy(dcopy, dsrc, backend=backend)
        ops.transpose(dt, dsrc, backend=backend)
        a = rng.standard_normal((256, 128)).astype(np.float16)
        b = rng.standard_normal((192, 128)).astype(np.float16)
        dc = _poisoned((256, 192), np.float16)
        ops.gemm(DeviceArray.from_host(a), DeviceArray.from_host(b), dc, backend=backend)
        q, k, v = (rng.standard_normal((1, 2, 128, 64)).astype(np.float16) for _ in range(3))
        do, dl = _poisoned((1, 2, 128, 64), np.float16), _poisoned((1, 2, 128), np.float32)
        ops.attention(*(DeviceArray.from_host(x) for x in (q, k, v)), do, lse=dl, backend=backend)
        _driver.call("cuCtxSynchronize")
        assert np.array_equal(dcopy.to_host().view(np.uint32), src.view(np.uint32)), f"seed {seed}: copy"
        assert np.array_equal(dt.to_host().view(np.uint32), src.T.view(np.uint32)), f"seed {seed}: transpose"
        want = a.astype(np.float32) @ b.astype(np.float32).T
        got = dc.to_host().astype(np.float32)
        assert np.allclose(got, want, rtol=2e-2, atol=5e-2), f"seed {seed}: gemm {np.abs(got - want).max()}"
        s = np.einsum("bhqd,bhkd->bhqk", q.astype(np.float32), k.astype(np.float32)) / 8.0
        p = np.exp(s - s.max(-1, keepdims=True))
        o = np.einsum("bhqk,bhkd->bhqd", p / p.sum(-1, keepdims=True), v.astype(np.float32))
        got = do.to_host().astype(np.float32)
        assert np.allclose(got, o, rtol=2e-2, atol=2e-2), f"seed {seed}: attention {np.abs(got - o).max()}"
    info = ops.plan_cache_info()
    assert info["hits"] >= 8 and info["plans"] == 4, info  # four plans, each re-pointed twice


def test_tmakit_backend_is_part_of_the_key(fake_launch, monkeypatch):
    dst, src = device_view(0x10000, (64, 64)), device_view(0x20000, (64, 64))
    assert ops.copy(dst, src).path == "bulk"
    monkeypatch.setenv("TMAKIT_BACKEND", "cp.async")
    assert ops.copy(dst, src).path == "cp.async" and _info()["plans"] == 2


def test_repointing_checks_the_device_the_output_dtype_and_lse(fake_launch):
    """What the one-shot ops' hits rely on: a re-pointed gemm or attention plan refuses operands on another
    device, an output of another dtype and an lse a new plan would refuse, before any launch."""
    a, b = device_view(0x1000000, (256, 64), "float16"), device_view(0x1100000, (128, 64), "float16")
    c16, c32 = device_view(0x1200000, (256, 128), "float16"), device_view(0x1300000, (256, 128), "float32")
    ops.gemm(a, b, c16, backend="cp.async")
    ops.gemm(a, b, c32, backend="cp.async")  # another output dtype: a plan of its own (fp32 epilogue)
    on1 = [device_view(p, s, "float16", device=1) for p, s in ((0x2000000, (256, 64)), (0x2100000, (128, 64)),
                                                                (0x2200000, (256, 128)))]
    ops.gemm(*on1, backend="cp.async")  # another device: a plan of its own
    gemm_kernels = [k for k in fake_launch if "gemm" in k.entry]
    assert [k.defines["TMAKIT_GEMM_OUT_F32"] for k in gemm_kernels] == [0, 1, 0]
    assert gemm_kernels[0].bound[-1].args[:3] == [0x1000000, 0x1100000, 0x1200000]  # untouched by the others
    plan = ops.plan_gemm(a, b, c16, backend="cp.async")
    with pytest.raises(InvalidArgumentError, match=r"c=.*float32.*must be the plan's output dtype \(float16\)"):
        plan(a, b, c32)
    with pytest.raises(InvalidArgumentError, match=r"a=.*on device 1.*must have the geometry and device"):
        plan(*on1)
    q, k, v = (device_view(0x3000000 + 0x100000 * i, (1, 2, 64, 64), "float16") for i in range(3))
    out, lse = device_view(0x3400000, (1, 2, 64, 64), "float16"), device_view(0x3500000, (1, 2, 64), "float32")
    ops.attention(q, k, v, out, lse=lse, backend="cp.async")
    with pytest.raises(InvalidArgumentError, match=r"lse=.*must be a contiguous float32 array of shape \(1, 2, 64\)"):
        ops.attention(q, k, v, out, lse=device_view(0x3500000, (4,), "float16"), backend="cp.async")


def test_a_hit_reads_each_array_once(fake_launch, monkeypatch):
    """A hit re-points its plan with the views the cache's key read: each array (torch-like here) is read once a
    call (gemm's a, b, c; attention's q, k, v, out, lse), where re-pointing from the arrays read them twice."""
    from _fake_driver import FakeTorchTensor

    from tmakit.arrays import ArrayView
    from tmakit.ops import _checks

    reads: list[str] = []
    for module in (_plan_cache, _checks):
        real = module.device_array_view
        monkeypatch.setattr(module, "device_array_view", lambda obj, name="array", real=real: (
            reads.append(name) if type(obj) is not ArrayView else None) or real(obj, name))

    def t(ptr, shape, dtype="float16"):
        return FakeTorchTensor(shape, ptr=ptr, dtype=dtype, itemsize=4 if dtype == "float32" else 2)
    for base in (0x1000000, 0x2000000):
        reads.clear()
        ops.gemm(t(base, (256, 64)), t(base + 0x100000, (128, 64)), t(base + 0x200000, (256, 128)),
                 backend="cp.async")
    assert sorted(reads) == ["a", "b", "c"] and _info()["hits"] == 1
    for base in (0x3000000, 0x4000000):
        reads.clear()
        ops.attention(*(t(base + 0x100000 * i, (1, 2, 64, 64)) for i in range(4)),
                      lse=t(base + 0x500000, (1, 2, 64), "float32"), backend="cp.async")
    assert sorted(reads) == ["k", "lse", "out", "q", "v"], reads
    assert len(reads) == 5 and _info()["hits"] == 2
