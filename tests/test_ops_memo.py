"""The ops' launch memo (tmakit/ops/_memo.py): a repeated call with the same geometry launches the launch
prepared the first time; anything that changes a decision prepares again.

CPU tier: keys from array geometry, environment, stream and options; replayed log lines; eviction; a dead
module's launch is not reused. GPU tier: repeated copies and transposes hit the memo and stay exact when the
source's contents change, miss on another geometry, backend or setting, and keep no caller array alive.
"""
from __future__ import annotations

import gc
import importlib
import logging
import secrets
import weakref

import numpy as np
import pytest
from test_ops import BACKENDS, POISON, FakeDeviceArray, _device, _poisoned, _random_array, _sync

from tmakit import ops
from tmakit.ops._memo import LaunchMemo, geometry


class TorchLike:
    """The torch tensor calls the memo reads: data_ptr, shape, stride, dtype, get_device."""

    def __init__(self, ptr, shape, stride, dtype="float32", device=0):
        self._ptr, self.shape, self._stride, self.dtype, self._device = ptr, shape, stride, dtype, device

    def data_ptr(self):
        return self._ptr

    def stride(self):
        return self._stride

    def get_device(self):
        return self._device


class FakeLaunch:
    def __init__(self):
        self.alive, self.launches = True, 0

    def __call__(self):
        self.launches += 1


def test_keys_follow_geometry_not_identity():
    memo = LaunchMemo()
    a, b = FakeDeviceArray((4, 8)), FakeDeviceArray((4, 8))
    assert memo.key((a, b), ("auto",), None) == memo.key((b, a), ("auto",), None)  # same geometry, other objects
    base = memo.key((a, a), ("auto",), None)
    for other in [FakeDeviceArray((8, 4)), FakeDeviceArray((4, 8), "<i4"), FakeDeviceArray((4, 8), strides=(64, 4))]:
        assert memo.key((other, a), ("auto",), None) != base
    assert memo.key((a, a), ("tma",), None) != base
    assert memo.key((a, a), ("auto",), 7) != base  # another stream handle


def test_key_reads_tmakit_backend(monkeypatch):
    memo = LaunchMemo()
    a = FakeDeviceArray((4, 8))
    monkeypatch.delenv("TMAKIT_BACKEND", raising=False)
    plain = memo.key((a, a), ("auto",), None)
    monkeypatch.setenv("TMAKIT_BACKEND", "cp.async")
    assert memo.key((a, a), ("auto",), None) != plain


def test_torch_like_geometry_reads_five_cheap_calls():
    t = TorchLike(4096, (2, 3), (3, 1))
    assert geometry(t) == (4096, (2, 3), (3, 1), "float32", 0)
    for other in [TorchLike(4352, (2, 3), (3, 1)), TorchLike(4096, (2, 3), (3, 1), device=1),
                  TorchLike(4096, (2, 3), (4, 1)), TorchLike(4096, (2, 3), (3, 1), "int32")]:
        assert geometry(other) != geometry(t)


def test_no_key_for_what_the_op_must_reject():
    """Non-arrays, bad streams and unhashable options get no key: the op's full path names the problem."""
    memo = LaunchMemo()
    a = FakeDeviceArray((4, 8))
    assert memo.key((a, "not an array"), ("auto",), None) is None
    assert memo.key((a, a), ("auto",), "not a stream") is None
    assert memo.key((a, a), (["unhashable"],), None) is None
    half_torch = TorchLike(4096, (2, 3), (3, 1))
    del half_torch.dtype  # data_ptr/stride/get_device but no dtype
    assert memo.key((a, half_torch), ("auto",), None) is None
    assert memo.run(None) is None and memo.misses == 1


def test_run_launches_the_stored_launch_and_logs_its_notes_again(caplog):
    memo = LaunchMemo()
    a = FakeDeviceArray((4, 8))
    key = memo.key((a, a), ("auto",), None)
    assert memo.run(key) is None
    launch, result = FakeLaunch(), object()
    memo.store(key, launch, result, ((logging.INFO, "tmakit backend: tma"), (logging.WARNING, "fell back")))
    with caplog.at_level(logging.INFO, logger="tmakit"):
        assert memo.run(key) is result
    assert launch.launches == 1 and (memo.hits, memo.misses) == (1, 1)
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [(logging.INFO, "tmakit backend: tma"),
                                                                     (logging.WARNING, "fell back")]
    launch.alive = False  # its module was closed: prepare again
    assert memo.run(key) is None and launch.launches == 1
    memo.store(None, launch, result, ())  # no key, nothing stored
    assert len(memo) == 1


def test_memo_evicts_the_oldest(monkeypatch):
    from tmakit.ops import _memo

    monkeypatch.setattr(_memo, "_CAPACITY", 3)
    memo = LaunchMemo()
    keys = [memo.key((FakeDeviceArray((4, 8 + i)),), (), None) for i in range(4)]
    for k in keys:
        memo.store(k, FakeLaunch(), k, ())
    assert len(memo) == 3 and memo.run(keys[0]) is None and memo.run(keys[3]) == keys[3]


# ----------------------------------------------------------------------------------------------------------
# GPU tier
# ----------------------------------------------------------------------------------------------------------

def _arrays(host, out_shape):
    """The source on the device, and a poisoned output of ``out_shape``."""
    return _device(host), _poisoned(out_shape, host.dtype)


@pytest.mark.requires_gpu
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op", ["copy", "transpose"])
def test_repeated_calls_hit_the_memo_and_stay_exact(op, backend):
    """Three rounds of fresh random data through the same arrays: the first call prepares, the others launch
    the prepared bytes, and each round's output equals numpy's. An odd shape: partial tiles, shifted runs."""
    seed = secrets.randbits(32)
    rng = np.random.default_rng(seed)
    shape, dtype = (1032, 272), np.uint16  # dst pitch 16 mod 32: shifted runs; partial tiles
    run = getattr(ops, op)
    memo = importlib.import_module(f"tmakit.ops.{op}")._MEMO  # tmakit.ops.copy is also the function
    expect = (lambda h: np.ascontiguousarray(h.T)) if op == "transpose" else (lambda h: h)
    host = _random_array(rng, shape, dtype)
    src, dst = _arrays(host, expect(host).shape)
    with src, dst:
        hits = memo.hits
        results = []
        for round_ in range(3):
            host = _random_array(rng, shape, dtype)
            src.copy_from_host(host)
            dst.fill(POISON)  # poisoned again: a stale output cannot pass
            results.append(run(dst, src, backend=backend))
            _sync()
            got = dst.to_host()
            assert got.tobytes() == expect(host).tobytes(), f"seed {seed}: {op} round {round_} {backend} differs"
        assert memo.hits - hits >= 2, "the repeated calls did not reuse the prepared launch"
        assert results[1] is results[2] and results[0] == results[1]
        assert results[2].backend.name == backend


@pytest.mark.requires_gpu
@pytest.mark.parametrize("backend", BACKENDS)
def test_another_geometry_or_setting_prepares_again(backend, monkeypatch):
    """Fewer source rows (another address and shape), another module setting, another backend argument and
    another TMAKIT_BACKEND each prepare their own launch; an unchanged call does not; every output is exact."""
    from tmakit.device_array import DeviceArray

    transpose_module = importlib.import_module("tmakit.ops.transpose")
    memo = transpose_module._MEMO
    memo.clear()  # an earlier test's arrays may have had these addresses and layouts (a correct hit, not here)
    monkeypatch.delenv("TMAKIT_BACKEND", raising=False)
    seed = secrets.randbits(32)
    rng = np.random.default_rng(seed)
    host = _random_array(rng, (512, 320), np.float32)
    with DeviceArray.from_host(host) as src, DeviceArray.empty(512 * 320, np.float32) as out:
        def check(rows, backend_arg):
            dst = out[:320 * rows].reshape(320, rows)
            out.fill(POISON)
            result = ops.transpose(dst, src[512 - rows:], backend=backend_arg)
            _sync()
            assert dst.to_host().tobytes() == np.ascontiguousarray(host[512 - rows:].T).tobytes(), \
                f"seed {seed}: {rows} rows backend={backend_arg} differ"
            return result

        steps = [("all rows", None, 512, backend, 1), ("fewer rows", None, 508, backend, 1),
                 ("the same call", None, 508, backend, 0),
                 ("sectors off", lambda: monkeypatch.setattr(transpose_module, "_ALIGN_SECTORS", False), 508, backend, 1),
                 ("backend auto", None, 508, "auto", 1),
                 ("TMAKIT_BACKEND", lambda: monkeypatch.setenv("TMAKIT_BACKEND", backend), 508, "auto", 1)]
        for what, change, rows, backend_arg, prepares in steps:
            if change is not None:
                change()
            misses = memo.misses
            result = check(rows, backend_arg)
            assert memo.misses - misses == prepares, what
        assert result.backend.name == backend and result.backend.source == "environment"


@pytest.mark.requires_gpu
def test_a_repeated_fallback_is_logged_every_time(caplog):
    """A pitch TMA cannot describe (6 bytes) under "auto": the cp.async path, logged on the prepared call and
    on every repeat, and recorded on the result."""
    seed = secrets.randbits(32)
    host = _random_array(np.random.default_rng(seed), (40, 3), np.uint16)
    src, dst = _arrays(host, (3, 40))
    with src, dst:
        for _ in range(2):
            caplog.clear()
            with caplog.at_level(logging.INFO, logger="tmakit"):
                result = ops.transpose(dst, src)
            assert "TMA cannot describe src" in caplog.text and "tmakit backend: cp.async" in caplog.text
            assert result.backend.name == "cp.async" and "TMA cannot describe" in result.reason
        _sync()
        assert dst.to_host().tobytes() == np.ascontiguousarray(host.T).tobytes(), f"seed {seed}"


@pytest.mark.requires_gpu
def test_the_memo_keeps_no_array_alive():
    host = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)
    src, dst = _arrays(host, (64, 64))
    ops.transpose(dst, src)
    ops.copy(src, dst)
    _sync()
    refs = [weakref.ref(src), weakref.ref(dst)]
    del src, dst
    gc.collect()
    assert [r() for r in refs] == [None, None]
