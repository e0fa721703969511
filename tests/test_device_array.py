"""DeviceArray: allocation, views with numpy's indexing rules, fill, host round trips, __cuda_array_interface__
and DLPack. CPU tests run on tests/_fake_driver.py; GPU tests compare with numpy on fresh random data."""
from __future__ import annotations

import gc

import numpy as np
import pytest

from _fake_driver import fake  # noqa: F401 - fixture
from tmakit import InvalidArgumentError, device_array
from tmakit.arrays import _from_dlpack, device_array_view
from tmakit.device_array import DeviceArray

DTYPES = [np.uint8, np.int8, np.float16, np.int16, np.float32, np.int32, np.float64, np.int64, np.uint64]


def _random(rng, shape, dtype):
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)


# ---------------------------------------------------------------- CPU (fake driver)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(0,), (1,), (7,), (3, 5), (2, 3, 4)])
def test_round_trip_fake(fake, dtype, shape):
    host = _random(np.random.default_rng(), shape, dtype)
    d = DeviceArray.from_host(host)
    assert d.shape == shape and d.dtype == np.dtype(dtype) and d.nbytes == host.nbytes and d.is_c_contiguous
    out = np.full(shape, 0x5A, dtype=dtype) if host.size else np.empty(shape, dtype)
    np.testing.assert_array_equal(d.to_host(out), host)
    d.close()


@pytest.mark.parametrize("dtype, value", [(np.uint8, 0xAB), (np.int16, -3), (np.float16, 1.5), (np.float32, -2.25),
                                          (np.int32, 123456), (np.float64, np.pi), (np.int64, -(1 << 40) - 5),
                                          (np.uint64, (1 << 63) + 7)])
def test_fill_every_element_size(fake, dtype, value):
    d = DeviceArray.empty((5, 3), dtype)
    d.fill(value)
    np.testing.assert_array_equal(fake.view(d), np.full((5, 3), value, dtype=dtype))
    z = DeviceArray.zeros(9, dtype)
    assert not fake.view(z).any()


def test_fill_errors(fake):
    d = DeviceArray.empty((4, 4), np.int8)
    with pytest.raises(InvalidArgumentError, match="value=.*cannot be stored"):
        d.fill("x")
    with pytest.raises(InvalidArgumentError, match="C-contiguous for fill"):
        d[:, ::2].fill(1)


INDEXES = [np.s_[1:], np.s_[:, ::2], np.s_[::-1], np.s_[2], np.s_[1, 2], np.s_[..., 1], np.s_[None, 1:3],
           np.s_[-1, ::-2], np.s_[1:3, 1:4], np.s_[:0]]


@pytest.mark.parametrize("index", INDEXES, ids=str)
def test_views_follow_numpy(fake, index):
    host = np.arange(4 * 6, dtype=np.int32).reshape(4, 6)
    d = DeviceArray.from_host(host)
    view = d[index]
    parts = index if isinstance(index, tuple) else (index,)
    ref = fake.view(d)[parts if Ellipsis in parts else parts + (Ellipsis,)]  # a 0-d view, not a scalar
    assert view.shape == ref.shape and view.strides == ref.strides
    if ref.size:
        assert view.ptr == ref.__array_interface__["data"][0]
    np.testing.assert_array_equal(ref, host[index])
    cai = view.__cuda_array_interface__
    assert cai["shape"] == ref.shape and cai["version"] == 3
    assert (cai["strides"] is None) == view.is_c_contiguous


def test_view_errors(fake):
    d = DeviceArray.empty((4, 6), np.float32)
    with pytest.raises(InvalidArgumentError, match="index=.*out of range"):
        d[9]
    with pytest.raises(InvalidArgumentError, match="fancy"):
        d[[0, 1]]
    with pytest.raises(InvalidArgumentError, match="fancy"):
        d[d.shape[0] > 2]
    with pytest.raises(InvalidArgumentError, match="shape=.*does not fit"):
        d.reshape(5, 5)
    with pytest.raises(InvalidArgumentError, match="C-contiguous for reshape"):
        d[:, 1:].reshape(-1)
    assert d.reshape(2, -1).shape == (2, 12) and d.ravel().shape == (24,) and d[1:].reshape((9, 2)).shape == (9, 2)


def test_cuda_array_interface_and_device_array_view(fake):
    d = DeviceArray.empty((3, 4), np.float16)
    cai = d.__cuda_array_interface__
    assert cai == {"shape": (3, 4), "typestr": "<f2", "data": (d.ptr, False), "strides": None, "version": 3}
    v = device_array_view(d[:, 1::2])
    assert (v.ptr, v.shape, v.strides, v.dtype_name, v.device) == (d.ptr + 2, (3, 2), (8, 4), "float16", 0)


def test_dlpack_export_is_read_back_by_tmakit(fake):
    d = DeviceArray.empty((5, 6), np.int64)
    view = d[1:, ::3]
    assert view.__dlpack_device__() == (2, 0)
    parsed = _from_dlpack(view)
    assert (parsed.ptr, parsed.shape, parsed.strides, parsed.dtype_name) == (view.ptr, (4, 2), (48, 24), "int64")
    del parsed
    gc.collect()
    assert not device_array._exports, "an unconsumed capsule must release its export"
    with pytest.raises(BufferError, match="copy=True"):
        d.__dlpack__(copy=True)
    with pytest.raises(BufferError, match="cannot export"):
        d.__dlpack__(dl_device=(1, 0))


def test_closed_array_is_refused_and_freed_once(fake):
    d = DeviceArray.empty(10, np.float32)
    view = d[2:]
    ptr = d._alloc.ptr
    d.close()
    d.close()
    assert ptr not in fake.dev and view.closed
    with pytest.raises(InvalidArgumentError, match="array=.*closed"):
        view.__cuda_array_interface__
    with pytest.raises(InvalidArgumentError, match="closed"):
        device_array_view(view)
    del d, view
    gc.collect()  # finalizer must not free again (fixture asserts)


def test_views_keep_allocation_alive(fake):
    d = DeviceArray.empty(10, np.float32)
    ptr, view = d._alloc.ptr, d[3:]
    del d
    gc.collect()
    assert ptr in fake.dev
    del view
    gc.collect()
    assert ptr not in fake.dev


def test_context_manager_and_repr(fake):
    with DeviceArray.empty(3, np.uint8) as d:
        assert "shape=(3,)" in repr(d)
    assert d.closed and "closed" in repr(d)


# ---------------------------------------------------------------- GPU
@pytest.mark.requires_gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(0,), (1,), (1000,), (129, 31), (3, 0, 5), (4, 17, 9)])
def test_gpu_round_trip(dtype, shape):
    host = _random(np.random.default_rng(), shape, dtype)
    d = DeviceArray.from_host(host)
    out = np.full(shape, 0x7F, dtype=dtype)  # poison
    np.testing.assert_array_equal(d.to_host(out), host)
    d.close()


@pytest.mark.requires_gpu
@pytest.mark.parametrize("dtype, value", [(np.uint8, 0xAB), (np.float16, -1.5), (np.float32, 3.25),
                                          (np.float64, -np.e), (np.int64, (1 << 40) + 3)])
@pytest.mark.parametrize("n", [1, 1023, 100_001])
def test_gpu_fill(dtype, value, n):
    d = DeviceArray.from_host(np.zeros(n, dtype))
    d[1:].fill(value)
    expected = np.full(n, value, dtype=dtype)
    expected[0] = 0
    np.testing.assert_array_equal(d.to_host(), expected)


@pytest.mark.requires_gpu
def test_gpu_views_and_dlpack_with_torch():
    torch = pytest.importorskip("torch")
    host = _random(np.random.default_rng(), (64, 48), np.float32)
    d = DeviceArray.from_host(host)
    for index in INDEXES:
        if any(stride < 0 for stride in d[index].strides):
            continue  # torch has no negative strides; cupy covers them below
        t = torch.from_dlpack(d[index])
        np.testing.assert_array_equal(t.cpu().numpy(), host[index])
        t2 = torch.as_tensor(d[index], device="cuda")  # __cuda_array_interface__
        np.testing.assert_array_equal(t2.cpu().numpy(), host[index])
    # writes through torch land in our memory
    torch.from_dlpack(d)[3].fill_(-7.0)
    torch.cuda.synchronize()
    host[3] = -7.0
    np.testing.assert_array_equal(d.to_host(), host)


@pytest.mark.requires_gpu
def test_gpu_cupy_reads_device_array():
    cupy = pytest.importorskip("cupy")
    host = _random(np.random.default_rng(), (33, 65), np.int32)
    d = DeviceArray.from_host(host)
    np.testing.assert_array_equal(cupy.asnumpy(cupy.asarray(d[:, 1::2])), host[:, 1::2])
    np.testing.assert_array_equal(cupy.asnumpy(cupy.from_dlpack(d[5:])), host[5:])
    for index in INDEXES:
        np.testing.assert_array_equal(cupy.asnumpy(cupy.asarray(d[index])), host[index])


@pytest.mark.requires_gpu
def test_gpu_device_array_view_reports_device():
    d = DeviceArray.empty((8, 8), np.float32)
    v = device_array_view(d[2:])
    assert v.device == 0 and v.ptr == d.ptr + 2 * 8 * 4
