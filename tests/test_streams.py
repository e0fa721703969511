"""Streams, events, timed() and the async copies' checks. CPU tests use tests/_fake_driver.py."""
from __future__ import annotations

import gc

import numpy as np
import pytest

from _fake_driver import CupyLikeStream, ProtocolStream, TorchLikeStream, fake  # noqa: F401 - fixture
from conftest import gpu_probe
from tmakit import InvalidArgumentError, TmakitError, UnsupportedDeviceError, _driver
from tmakit.device_array import DeviceArray
from tmakit.memory import pinned_empty
from tmakit.copies import copy_d2d, copy_d2h, copy_h2d
from tmakit.streams import Event, Stream, as_stream, elapsed_ms, timed, use_device


# ---------------------------------------------------------------- CPU
@pytest.mark.skipif(gpu_probe().available, reason="checks the no-GPU error; this machine has a GPU")
def test_no_gpu_stream_raises_unsupported_device():
    with pytest.raises(UnsupportedDeviceError, match="no NVIDIA driver|cuInit"):
        Stream(0)
    with pytest.raises(UnsupportedDeviceError):
        with timed():
            pass


def test_stream_and_event_lifecycle(fake):
    s = Stream(0)
    h = s.handle
    assert s.__cuda_stream__() == (0, h) and not s.borrowed and h in fake.streams
    s.close()
    s.close()
    assert h not in fake.streams and s.closed
    with pytest.raises(InvalidArgumentError, match="stream=.*closed"):
        s.handle
    e = Event(0)
    eh = e.handle
    e.close()
    e.close()
    assert eh not in fake.events
    with pytest.raises(InvalidArgumentError, match="event=.*closed"):
        e.record(Stream(0))
    with Stream(1) as s1:
        assert s1.device == 1
    gc.collect()


def test_borrowed_streams_are_never_destroyed(fake):
    owner = Stream(0)

    for obj in (TorchLikeStream(owner.handle), CupyLikeStream(owner.handle), ProtocolStream(owner.handle), owner.handle):
        s = as_stream(obj)
        assert s.borrowed and s.handle == owner.handle and s.device == 0
        s.close()
        del s
        gc.collect()
        assert owner.handle in fake.streams
    assert as_stream(owner) is owner
    default = as_stream(None, device=1)
    assert default.handle == 0 and default.device == 1


@pytest.mark.parametrize("bad", ["stream", 1.5, -3, object()])
def test_as_stream_rejects_non_streams(fake, bad):
    with pytest.raises(InvalidArgumentError, match="stream=.*not a CUDA stream"):
        as_stream(bad)


@pytest.mark.parametrize("device", [-1, "0", 1.0, True])
def test_bad_device_ordinal(fake, device):
    with pytest.raises(InvalidArgumentError, match="device=.*ordinal"):
        Stream(device)


def test_use_device_switches_to_primary_context(fake):
    use_device(1)
    assert _driver.current_device_ordinal() == 1
    use_device(0)
    assert _driver.current_device_ordinal() == 0
    with pytest.raises(UnsupportedDeviceError, match="device=5 does not exist"):
        use_device(5)


def test_events_and_timed(fake):
    s = Stream(0)
    start, end = Event(0).record(s), Event(0).record(s)
    assert elapsed_ms(start, end) == end.elapsed_ms(start) == 1.0
    with pytest.raises(InvalidArgumentError, match="start=.*never recorded"):
        elapsed_ms(Event(0), end)
    with pytest.raises(InvalidArgumentError, match="end=.*timing=False"):
        elapsed_ms(start, Event(0, timing=False).record(s))
    with pytest.raises(InvalidArgumentError, match="start=.*tmakit.Event"):
        elapsed_ms(3, end)
    with pytest.raises(InvalidArgumentError, match="stream=.*device 1 but the event is on device 0"):
        Event(0).record(Stream(1))
    with timed(s) as t:
        with pytest.raises(TmakitError, match="after the `with"):
            t.ms
    assert t.ms > 0


def test_query_reports_not_ready_as_a_value(fake):
    fake.hold_events = True
    e = Event(0).record(Stream(0))
    assert e.query() is False and e.done is False
    e.sync()
    assert e.query() is True


# ---- copy checks: every bad input is refused before anything is written
@pytest.fixture
def arrays(fake):
    host = np.arange(12, dtype=np.float32).reshape(3, 4)
    d = DeviceArray.from_host(host)
    fake.calls.clear()
    return host, d


def _no_copy(fake):
    return not [c for c in fake.calls if c.startswith("cuMemcpy")]


@pytest.mark.parametrize("call, match", [
    (lambda h, d: copy_h2d(d, h.astype(np.float64)), "dst='float32': has a different dtype from src"),
    (lambda h, d: copy_h2d(d, h[:2]), r"dst='shape \(3, 4\)': differs from src shape \(2, 4\)"),
    (lambda h, d: copy_h2d(d[:, :2], np.zeros((3, 2), np.float32)), "dst=.*C-contiguous"),
    (lambda h, d: copy_h2d(d[:, :2], np.zeros((4, 3), np.float32)[:3, :2]), "src=.*C-contiguous"),
    (lambda h, d: copy_h2d(d, h.tolist()), "src=.*numpy array"),
    (lambda h, d: copy_h2d(h, h), "dst=.*host memory"),
    (lambda h, d: copy_d2h(np.zeros(12, np.float32), d), r"differs from src shape"),
    (lambda h, d: copy_d2h(np.zeros((3, 4), np.int32), d), "different dtype"),
    (lambda h, d: copy_d2h(np.broadcast_to(np.float32(0), (3, 4)), d), "dst=.*(C-contiguous|read-only)"),
    (lambda h, d: copy_d2d(d, DeviceArray.empty((3, 4), np.int32)), "different dtype"),
    (lambda h, d: copy_d2d(d, DeviceArray.empty((4, 3), np.float32)), "differs from src shape"),
    (lambda h, d: copy_h2d(d, h, Stream(1)), "stream=.*device 1.*lives on device 0"),
    (lambda h, d: copy_d2d(d, DeviceArray.empty((3, 4), np.float32, device=1)), "stream=.*device 1"),
])
def test_copy_rejects_bad_input_before_writing(fake, arrays, call, match):
    host, d = arrays
    before = fake.view(d).copy()
    with pytest.raises(InvalidArgumentError, match=match):
        call(host, d)
    assert _no_copy(fake)
    np.testing.assert_array_equal(fake.view(d), before)


def test_read_only_destination_is_refused(fake, arrays):
    host, d = arrays
    ro = np.zeros((3, 4), np.float32)
    ro.flags.writeable = False
    with pytest.raises(InvalidArgumentError, match="dst=.*read-only"):
        copy_d2h(ro, d)
    assert _no_copy(fake) and not ro.any()


def test_unit_dimensions_must_match_too(fake, arrays):
    host, d = arrays
    out = np.zeros((1, 3, 4), np.float32)
    copy_d2h(out, d[None])  # same shape: fine
    np.testing.assert_array_equal(out[0], host)
    with pytest.raises(InvalidArgumentError, match="differs from src shape"):
        copy_d2h(out, d)


def test_copies_move_the_bytes(fake):
    rng = np.random.default_rng()
    host = rng.standard_normal((5, 7)).astype(np.float32)
    d1, d2 = DeviceArray.empty((5, 7), np.float32), DeviceArray.empty((5, 7), np.float32)
    out = pinned_empty((5, 7), np.float32)
    out[:] = np.nan
    s = Stream(0)
    copy_h2d(d1, host, s)
    copy_d2d(d2, d1, s)
    copy_d2h(out, d2, s)
    s.sync()
    np.testing.assert_array_equal(out, host)


# ---------------------------------------------------------------- GPU
@pytest.mark.requires_gpu
def test_gpu_cuda_core_and_tmakit_agree_on_the_context():
    from cuda.core import Device

    Device(0).set_current()
    assert int(_driver.call("cuCtxGetCurrent")) == int(_driver.primary_context(0))
    use_device(0)
    assert int(_driver.call("cuCtxGetCurrent")) == int(_driver.primary_context(0))
    assert int(Device(0).context.handle) == int(_driver.primary_context(0))


@pytest.mark.requires_gpu
@pytest.mark.parametrize("n", [1, 1000, 12_345_679])
def test_gpu_copies_all_directions(n):
    rng = np.random.default_rng()
    host = rng.standard_normal(n).astype(np.float32)
    pinned = pinned_empty(n, np.float32)
    pinned[:] = host
    d1, d2 = DeviceArray.empty(n, np.float32), DeviceArray.empty(n, np.float32)
    d2.fill(np.nan)
    out_pinned, out_page = pinned_empty(n, np.float32), np.full(n, np.nan, np.float32)
    out_pinned[:] = np.nan
    with Stream(0) as s:
        with timed(s) as t:
            copy_h2d(d1, pinned, s)
            copy_d2d(d2, d1, s)
            copy_d2h(out_pinned, d2, s)
        copy_h2d(d1, host, s)  # pageable source
        copy_d2h(out_page, d1, s)
        s.sync()
    np.testing.assert_array_equal(out_pinned, host)
    np.testing.assert_array_equal(out_page, host)
    assert t.ms > 0


@pytest.mark.requires_gpu
def test_gpu_events_time_and_order_work():
    s1, s2 = Stream(0), Stream(0)
    a = DeviceArray.empty(64 << 20, np.uint8)
    b = DeviceArray.empty(64 << 20, np.uint8)
    start = s1.record()
    a.fill(3, stream=s1)
    s2.wait(s1)  # b must see a's fill
    copy_d2d(b, a, s2)
    end = s2.record()
    assert elapsed_ms(start, end) > 0
    s2.sync()  # to_host runs on the legacy stream, which does not wait for non-blocking streams
    assert (b.to_host() == 3).all()


@pytest.mark.requires_gpu
def test_gpu_torch_stream_interop():
    torch = pytest.importorskip("torch")
    ts = torch.cuda.Stream()
    s = as_stream(ts)
    assert s.borrowed and s.device == 0 and s.handle == ts.cuda_stream
    host = np.random.default_rng().standard_normal(1 << 20).astype(np.float32)
    t = torch.empty(1 << 20, dtype=torch.float32, device="cuda")
    copy_h2d(t, host, s)  # a torch tensor is a device array too
    with torch.cuda.stream(ts):
        t.mul_(2.0)  # queued after our copy on the same stream
    out = np.full_like(host, np.nan)
    copy_d2h(out, t, s)
    s.sync()
    np.testing.assert_array_equal(out, host * 2)


@pytest.mark.requires_gpu
def test_gpu_stream_from_another_device_is_refused():
    if _driver.device_count() < 2:
        pytest.skip("needs two GPUs to make a stream on another device")
    d = DeviceArray.empty(16, np.float32, device=0)
    with pytest.raises(InvalidArgumentError, match="stream=.*device 1"):
        copy_h2d(d, np.zeros(16, np.float32), Stream(1))


def test_context_for_restores_the_callers_context(fake):
    from tmakit import _driver

    _driver.ensure_context(0)
    before = int(_driver.call("cuCtxGetCurrent"))
    with _driver.context_for(1):
        assert int(_driver.call("cuCtxGetDevice")) == 1
    assert int(_driver.call("cuCtxGetCurrent")) == before
    with _driver.context_for(0) as scope:  # already current: nothing pushed
        assert not scope.pushed
    assert int(_driver.call("cuCtxGetCurrent")) == before


def test_stream_priority_must_be_an_int():
    with pytest.raises(InvalidArgumentError, match="^priority"):
        Stream(0, priority="high")
