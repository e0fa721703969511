"""Pinned host memory: numpy arrays owning page-locked allocations, registration, exactly-once frees,
keep-alive until async copies complete. CPU tests run against tests/_fake_driver.py; GPU tests on the real one."""
from __future__ import annotations

import gc
import os

import numpy as np
import pytest

from _fake_driver import fake  # noqa: F401 - fixture
from conftest import gpu_probe
from tmakit import InvalidArgumentError, UnsupportedDeviceError, memory
from tmakit.device_array import DeviceArray, live_device
from tmakit.copies import copy_d2h, copy_h2d
from tmakit.streams import Stream


# ---------------------------------------------------------------- CPU
@pytest.mark.skipif(gpu_probe().available, reason="checks the no-GPU error; this machine has a GPU")
def test_no_gpu_raises_unsupported_device():
    with pytest.raises(UnsupportedDeviceError, match="no NVIDIA driver|cuInit|GPU"):
        memory.pinned_empty(16, np.float32)


def test_pinned_empty_is_numpy_array_owned_by_buffer(fake):
    a = memory.pinned_empty((3, 5), np.float64, portable=True, write_combined=True)
    assert isinstance(a, np.ndarray) and a.shape == (3, 5) and a.dtype == np.float64 and a.flags.c_contiguous
    assert isinstance(a.base, memory.PinnedBuffer)
    assert a.base.portable and a.base.write_combined and not a.base.mapped
    assert a.ctypes.data == a.base.ptr and a.base.ptr in fake.host
    assert memory.host_owner(a[1:, ::2].T) is a.base and memory.is_pinned(a[2])
    a[:] = 7.0
    assert a.sum() == 105.0


@pytest.mark.parametrize("bad", ["x", None, 3, [1.0, 2.0], memoryview(b"abcd"), object()],
                         ids=["str", "none", "int", "list", "memoryview", "object"])
def test_is_pinned_refuses_what_is_not_a_numpy_array(fake, bad):
    with pytest.raises(InvalidArgumentError, match=r"array=.*must be a numpy array"):
        memory.is_pinned(bad)
    with pytest.raises(InvalidArgumentError, match=r"array=.*must be a numpy array"):
        memory.host_owner(bad)
    # also while a registration exists (the lookup then reads the array's address)
    held = np.zeros(64, np.uint8)
    with memory.registered(held):
        with pytest.raises(InvalidArgumentError, match=r"array=.*must be a numpy array"):
            memory.is_pinned(bad)
    assert memory.is_pinned(np.zeros(4)) is False


def test_flags_reach_the_driver(fake, monkeypatch):
    seen = []
    real_alloc = fake.cuMemHostAlloc
    monkeypatch.setattr(fake, "cuMemHostAlloc", lambda n, flags: seen.append(flags) or real_alloc(n, flags))
    for kw, flags in (({}, 0), ({"portable": True}, 1), ({"mapped": True}, 2), ({"write_combined": True}, 4),
                      ({"portable": True, "mapped": True, "write_combined": True}, 7)):
        memory.pinned_empty(4, np.uint8, **kw).base.close()
        assert seen[-1] == flags


def test_close_is_idempotent_and_frees_exactly_once(fake):
    a = memory.pinned_empty(100, np.int32)
    ptr = a.base.ptr
    a.base.close()
    a.base.close()
    assert ptr not in fake.host and a.base.closed
    del a
    gc.collect()  # the finalizer must not free a second time (the fixture asserts no double free)


def test_garbage_collection_frees_when_last_view_dies(fake):
    a = memory.pinned_empty(64, np.float32)
    ptr, view = a.base.ptr, a[10:20]
    del a
    gc.collect()
    assert ptr in fake.host  # the view keeps the allocation alive
    del view
    gc.collect()
    assert ptr not in fake.host


def test_use_after_free_is_refused_before_any_copy(fake):
    a = memory.pinned_empty(8, np.float32)
    d = DeviceArray.empty(8, np.float32)
    a.base.close()
    fake.calls.clear()
    with pytest.raises(InvalidArgumentError, match="src=.*already freed"):
        copy_h2d(d, a)
    with pytest.raises(InvalidArgumentError, match="dst=.*already freed"):
        copy_d2h(a[:8], d)
    with pytest.raises(InvalidArgumentError, match="buffer=.*was freed"):
        np.asarray(a.base)
    assert not [c for c in fake.calls if c.startswith("cuMemcpy")]


def test_keep_alive_until_async_copy_completes(fake):
    fake.hold_events = True
    d = DeviceArray.empty(1024, np.float32)
    a = memory.pinned_empty(1024, np.float32)
    a[:] = 1.5
    ptr = a.base.ptr
    s = Stream(0)
    copy_h2d(d, a, s)
    del a
    gc.collect()
    assert ptr in fake.host, "freed while an async copy could still read it"
    s.sync()  # completes the events and sweeps the keep-alive list
    gc.collect()
    assert ptr not in fake.host


def test_close_waits_for_pending_copies(fake):
    fake.hold_events = True
    d = DeviceArray.empty(16, np.uint8)
    a = memory.pinned_empty(16, np.uint8)
    copy_d2h(a, d, Stream(0))
    pending = [e for e in fake.events.values() if not e["done"]]
    assert pending
    a.base.close()  # must synchronise on the copy's event first
    assert all(e["done"] for e in pending)


def test_pinned_like_and_mapped_pointer(fake):
    src = np.arange(12, dtype=np.int16).reshape(3, 4)
    empty_like = memory.pinned_like(src)
    assert empty_like.shape == src.shape and empty_like.dtype == src.dtype
    copy = memory.pinned_like(src, copy=True, mapped=True)
    np.testing.assert_array_equal(copy, src)
    assert copy.base.device_pointer == copy.base.ptr
    with pytest.raises(InvalidArgumentError, match="mapped=True"):
        empty_like.base.device_pointer
    with pytest.raises(InvalidArgumentError, match="array=.*numpy array"):
        memory.pinned_like([1, 2, 3])


@pytest.mark.parametrize("shape, dtype, match", [
    ((-1, 4), np.float32, "shape=.*negative"),
    ("abc", np.float32, "shape=.*ints"),
    ((4,), "not-a-dtype", "dtype="),
    ((4,), object, "dtype=.*Python objects"),
])
def test_bad_shapes_and_dtypes(fake, shape, dtype, match):
    with pytest.raises(InvalidArgumentError, match=match):
        memory.pinned_empty(shape, dtype)


def test_empty_and_scalar_shapes(fake):
    assert memory.pinned_empty((0, 3), np.float32).shape == (0, 3)
    s = memory.pinned_empty((), np.float64)
    s[()] = 2.5
    assert s.shape == () and float(s) == 2.5


def test_registered_pins_for_the_block_only(fake):
    a = np.arange(256, dtype=np.float32)
    with memory.registered(a, portable=True) as r:
        assert r is a and memory.is_pinned(a) and memory.is_pinned(a[10:20])
        assert a.ctypes.data in fake.registered
        with pytest.raises(InvalidArgumentError, match="already pinned or registered"):
            with memory.registered(a):
                pass
    assert not memory.is_pinned(a) and a.ctypes.data not in fake.registered


def test_registered_unregisters_on_exception(fake):
    a = np.zeros(64, np.uint8)
    with pytest.raises(RuntimeError):
        with memory.registered(a):
            raise RuntimeError("boom")
    assert a.ctypes.data not in fake.registered and not memory.is_pinned(a)


@pytest.mark.parametrize("arr, match", [
    (np.zeros((8, 8), np.float32)[:, ::2], "C-contiguous"),
    (np.zeros(0, np.float32), "empty"),
    ([1, 2, 3], "numpy array"),
])
def test_registered_rejects_bad_arrays(fake, arr, match):
    with pytest.raises(InvalidArgumentError, match=match):
        with memory.registered(arr):
            pass


def test_no_leak_over_10000_cycles_fake(fake):
    before = memory.live_pinned(), live_device()
    for i in range(10_000):
        memory.pinned_empty(32 + i % 7, np.uint8).base.close()
        d = DeviceArray.empty(16 + i % 5, np.float32)
        if i % 2:
            d.close()
        del d  # the other half is freed by garbage collection
    gc.collect()
    assert (memory.live_pinned(), live_device()) == before
    assert not fake.host and not fake.dev


# ---------------------------------------------------------------- GPU
def _rss_kib() -> int:
    with open(f"/proc/{os.getpid()}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS"))


@pytest.mark.requires_gpu
@pytest.mark.parametrize("flags", [{}, {"portable": True}, {"mapped": True}, {"write_combined": True}])
def test_gpu_pinned_round_trip(flags):
    rng = np.random.default_rng()
    src = memory.pinned_empty((257, 33), np.float32, **flags)
    src[:] = rng.standard_normal(src.shape, dtype=np.float32)
    dst = memory.pinned_empty((257, 33), np.float32)
    dst[:] = np.nan  # poison
    s = Stream(0)
    d = DeviceArray.empty(src.shape, np.float32)
    copy_h2d(d, src, s)
    copy_d2h(dst, d, s)
    s.sync()
    np.testing.assert_array_equal(dst, src)
    if flags.get("mapped"):
        assert src.base.device_pointer != 0
    for obj in (src.base, dst.base, d, s):
        obj.close()


@pytest.mark.requires_gpu
def test_gpu_registered_array_copies():
    rng = np.random.default_rng()
    host = rng.integers(0, 1 << 30, size=100_003, dtype=np.int64)
    out = np.full_like(host, -1)
    before = memory.live_pinned()
    with memory.registered(host), memory.registered(out):
        assert memory.is_pinned(host)
        d = DeviceArray.from_host(host)
        d.to_host(out)
    np.testing.assert_array_equal(out, host)
    assert memory.live_pinned() == before and not memory.is_pinned(host)


@pytest.mark.requires_gpu
def test_gpu_keep_alive_until_copy_done():
    big = memory.pinned_empty(64 << 20, np.uint8)  # 64 MiB: the copy is still running when we drop it
    d = DeviceArray.empty(big.shape, np.uint8)
    before = memory.live_pinned()[0]
    s = Stream(0)
    copy_h2d(d, big, s)
    del big
    gc.collect()
    assert memory.live_pinned()[0] == before  # held by the copy's keep-alive
    s.sync()
    gc.collect()
    assert memory.live_pinned()[0] == before - 1
    d.close()
    s.close()


@pytest.mark.requires_gpu
def test_gpu_no_leak_over_10000_cycles():
    from tmakit import _driver

    def free_device_bytes() -> int:
        return int(_driver.call("cuMemGetInfo")[0])

    DeviceArray.empty(1 << 16, np.uint8).close()
    memory.pinned_empty(1 << 16, np.uint8).base.close()
    gc.collect()
    pinned0, device0, free0, rss0 = memory.live_pinned(), live_device(), free_device_bytes(), _rss_kib()
    for i in range(10_000):
        a = memory.pinned_empty(4096 + 64 * (i % 16), np.uint8)
        d = DeviceArray.empty(1 << 16, np.uint8)
        if i % 2:  # half freed explicitly, half by garbage collection
            a.base.close()
            d.close()
        del a, d
    gc.collect()
    assert memory.live_pinned() == pinned0 and live_device() == device0
    if not os.environ.get("PYTEST_XDIST_WORKER"):  # other workers allocate on the same GPU meanwhile
        assert abs(free_device_bytes() - free0) <= 8 << 20, "device memory leaked"
    assert _rss_kib() - rss0 < 64 << 10, "host memory grew by more than 64 MiB"
