"""The chunked transfer pipeline and its report. CPU tests run the whole pipeline against
tests/_fake_driver.py with a numpy "kernel"; GPU tests run a real kernel (cuda.core, torch, cupy)."""
from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from _fake_driver import fake  # noqa: F401 - fixture
from tmakit import InvalidArgumentError, memory
from tmakit.device_array import live_device
from tmakit.streams import Stream
from tmakit.transfer import ChunkTiming, TransferReport, _busy_ms, pipeline

ROOT = Path(__file__).resolve().parents[1]


def _fake_add(fake):
    def add(chunk):
        a, b = chunk.inputs
        assert chunk.stop - chunk.start == a.shape[0] == chunk.output.shape[0]
        fake.view(chunk.output)[...] = fake.view(a) + fake.view(b)
    return add


# ---------------------------------------------------------------- CPU
@pytest.mark.parametrize("n, chunk_elems", [(1, 1), (1000, 1000), (1000, 1), (1000, 7), (1000, 999), (1000, 4096),
                                            (12_345, 1024)])
@pytest.mark.parametrize("streams, buffers", [(1, 1), (2, 2), (3, 2), (2, 5)])
@pytest.mark.parametrize("pinned", [True, False])
def test_vector_add_every_chunking(fake, n, chunk_elems, streams, buffers, pinned):
    rng = np.random.default_rng()
    a, b = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    if pinned:
        a, b = memory.pinned_like(a, copy=True), memory.pinned_like(b, copy=True)
    out = memory.pinned_empty(n, np.float32) if pinned else np.empty(n, np.float32)
    out[:] = np.nan  # poison
    result, report = pipeline((a, b), _fake_add(fake), outputs=out, chunk_bytes=4 * chunk_elems, streams=streams,
                              buffers=buffers)
    assert result is out
    np.testing.assert_array_equal(out, a + b)
    assert len(report.chunks) == math.ceil(n / chunk_elems)
    assert report.chunks[-1].rows[1] == n and report.chunks[0].rows[0] == 0
    assert report.bytes_h2d == 2 * 4 * n and report.bytes_d2h == 4 * n
    assert (report.staged_inputs, report.staged_outputs) == ((0, 0) if pinned else (2, 1))
    assert {c.stream for c in report.chunks} == set(range(min(streams, len(report.chunks))))


def test_round_trip_2d_rows_and_leaves_no_buffers(fake):
    rng = np.random.default_rng()
    host = rng.integers(0, 255, size=(37, 5, 3), dtype=np.uint8)
    before = live_device(), memory.live_pinned()[0]
    out, report = pipeline(host, None, chunk_bytes=2 * 15 + 1, streams=2)  # 2 rows per chunk
    np.testing.assert_array_equal(out, host)
    assert memory.is_pinned(out) and report.chunk_rows == 2 and len(report.chunks) == 19
    assert live_device() == before[0] and memory.live_pinned()[0] == before[1] + 1  # only `out` remains


def test_strided_pageable_input_is_staged(fake):
    base = np.arange(200, dtype=np.int64).reshape(100, 2)
    col = base[:, 1]  # not contiguous
    out, report = pipeline(col, None, chunk_bytes=8 * 9)
    np.testing.assert_array_equal(out, col)
    assert report.staged_inputs == 1


def test_kernel_sees_views_and_stream(fake):
    seen = []
    a = np.zeros((10, 4), np.float32)
    pipeline(a, lambda c: seen.append((c.index, c.start, c.stop, c.input.shape, c.output.shape, c.stream.device)),
             outputs=np.zeros((10, 2), np.float32), chunk_bytes=4 * 4 * 3, streams=2)
    assert seen == [(0, 0, 3, (3, 4), (3, 2), 0), (1, 3, 6, (3, 4), (3, 2), 0), (2, 6, 9, (3, 4), (3, 2), 0),
                    (3, 9, 10, (1, 4), (1, 2), 0)]


def test_empty_input(fake):
    out, report = pipeline(np.zeros((0, 3), np.float32), None)
    assert out.shape == (0, 3) and report.chunks == [] and report.total_ms == 0.0


def test_kernel_error_propagates_and_frees_everything(fake):
    before = live_device()

    def broken(chunk):
        raise RuntimeError("kernel exploded")

    with pytest.raises(RuntimeError, match="exploded"):
        pipeline(np.zeros(100, np.float32), broken, chunk_bytes=40)
    assert live_device() == before


@pytest.mark.parametrize("kwargs, match", [
    (dict(inputs=[np.zeros(4), np.zeros(5)], kernel=None), r"inputs\[1\]=.*5 rows but inputs\[0\] has 4"),
    (dict(inputs=[1, 2, 3], kernel=None), r"inputs\[0\]=.*numpy array"),
    (dict(inputs=np.float32(3), kernel=None), r"inputs\[0\]=.*numpy array"),
    (dict(inputs=np.array(3.0), kernel=None), "0-d"),
    (dict(inputs=[], kernel=None), "inputs=.*empty"),
    (dict(inputs=np.zeros(4), kernel="add"), "kernel=.*callable"),
    (dict(inputs=np.zeros(4), kernel=None, outputs=np.zeros(4, np.float32)), "round trip needs outputs"),
    (dict(inputs=np.zeros(4), kernel=print, outputs=np.zeros(5)), "outputs=.*differ"),
    (dict(inputs=np.zeros(4), kernel=print, outputs=np.broadcast_to(np.zeros(1), (4,))), r"outputs\[0\]=.*writable"),
    (dict(inputs=np.zeros(4), kernel=None, chunk_bytes=0), "chunk_bytes=0: must be a positive int"),
    (dict(inputs=np.zeros(4), kernel=None, streams=0), "streams=0"),
    (dict(inputs=np.zeros(4), kernel=None, buffers=-1), "buffers=-1"),
    (dict(inputs=np.zeros(4), kernel=None, streams=[]), "streams=.*empty"),
])
def test_bad_arguments(fake, kwargs, match):
    with pytest.raises(InvalidArgumentError, match=match):
        pipeline(**kwargs)
    assert not [c for c in fake.calls if c.startswith("cuMemcpy")]


def test_stream_from_another_device_is_refused(fake):
    with pytest.raises(InvalidArgumentError, match="streams=.*device 1, the pipeline runs on device 0"):
        pipeline(np.zeros(4), None, streams=[Stream(0), Stream(1)])


def test_freed_pinned_input_is_refused(fake):
    a = memory.pinned_empty(8, np.float32)
    a.base.close()
    with pytest.raises(InvalidArgumentError, match=r"inputs\[0\]=.*already freed"):
        pipeline(a, None)


def test_progress_bar_runs(fake):
    out, _ = pipeline(np.arange(50, dtype=np.float32), None, chunk_bytes=40, progress=True)
    np.testing.assert_array_equal(out, np.arange(50, dtype=np.float32))


def _report(chunks, total):
    return TransferReport(bytes_h2d=2_000_000_000, bytes_d2h=1_000_000_000, total_ms=total, chunks=chunks, streams=2,
                          buffers=2, chunk_rows=10)


def test_report_arithmetic():
    chunks = [ChunkTiming(0, 0, 0, (0, 10), (0.0, 10.0), (10.0, 12.0), (12.0, 17.0)),
              ChunkTiming(1, 1, 1, (10, 20), (10.0, 20.0), (20.0, 22.0), (22.0, 27.0))]
    r = _report(chunks, 27.0)
    assert (r.h2d_ms, r.kernel_ms, r.d2h_ms) == (20.0, 4.0, 10.0)
    assert r.sum_stages_ms == 34.0 and r.max_stage_ms == 20.0
    assert r.vs_ideal == pytest.approx(27 / 20) and r.speedup_vs_serial == pytest.approx(34 / 27)
    assert r.h2d_gbps == pytest.approx(100.0) and r.d2h_gbps == pytest.approx(100.0)
    text = r.summary()
    assert "100.0 GB/s" in text and "1.350x the ideal" in text
    rows = r.timeline_rows(27)
    assert [s for s, _ in rows] == [0, 1] and rows[0][1].startswith("H" * 10 + "KK" + "D" * 5)
    assert rows[1][1].startswith("." * 10 + "H" * 10)
    assert "stream  1 |" in r.timeline_text(40)
    with pytest.raises(InvalidArgumentError, match="width=3"):
        r.timeline_rows(3)
    with pytest.raises(InvalidArgumentError, match="stage="):
        r.stage_ms("compute")
    assert r.as_dict()["chunks"] == 2


def test_busy_time_is_a_union():
    assert _busy_ms([(0, 4), (2, 6), (10, 11)]) == 7
    assert _busy_ms([(0, 10), (2, 3)]) == 10
    assert _busy_ms([]) == 0


def test_print_timeline_with_rich():
    from rich.console import Console

    console = Console(record=True, width=100)
    _report([ChunkTiming(0, 0, 0, (0, 1), (0.0, 1.0), (1.0, 2.0), (2.0, 3.0))], 3.0).print_timeline(console=console)
    assert "stream  0 |" in console.export_text()


def test_png_timeline(tmp_path):
    r = _report([ChunkTiming(0, 0, 0, (0, 1), (0.0, 1.0), (1.0, 2.0), (2.0, 3.0))], 3.0)
    if importlib.util.find_spec("matplotlib") is None:
        with pytest.raises(ImportError, match=r"tmakit\[plot\]"):
            r.save_timeline_png(str(tmp_path / "t.png"))
    else:
        path = r.save_timeline_png(str(tmp_path / "t.png"))
        assert Path(path).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_example_exits_0_without_gpu(monkeypatch, capsys):
    from tmakit import _driver

    import tmakit

    def no_gpu(*_args, **_kwargs):
        raise tmakit.UnsupportedDeviceError("no CUDA GPU here (the test says so)")

    monkeypatch.setattr(_driver, "gpu_available", lambda: False)
    example = _load_example()
    monkeypatch.setattr(example.tmakit, "device_limits", no_gpu)  # what the example asks first, GPU or not
    assert example.main([]) == 0
    assert "no CUDA GPU" in capsys.readouterr().out


def _load_example():
    spec = importlib.util.spec_from_file_location("async_memcpy_overlap", ROOT / "examples" / "async_memcpy_overlap.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["async_memcpy_overlap"] = module
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------- GPU
@pytest.fixture(scope="module")
def vector_add():
    return _load_example().vector_add_kernel(0)


@pytest.mark.requires_gpu
@pytest.mark.parametrize("n, chunk_elems", [(1, 1), (1000, 7), (1 << 20, 1 << 20), ((1 << 20) + 3, 1 << 16),
                                            (3_000_001, 1 << 18)])
@pytest.mark.parametrize("streams", [1, 3])
@pytest.mark.parametrize("pinned", [True, False])
def test_gpu_vector_add(vector_add, n, chunk_elems, streams, pinned):
    rng = np.random.default_rng()
    a, b = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    if pinned:
        a, b = memory.pinned_like(a, copy=True), memory.pinned_like(b, copy=True)
    out = memory.pinned_empty(n, np.float32) if pinned else np.empty(n, np.float32)  # pageable: staged
    out[:] = np.nan  # poison
    _, report = pipeline((a, b), vector_add, outputs=out, chunk_bytes=4 * chunk_elems, streams=streams)
    np.testing.assert_array_equal(out, a + b)
    assert len(report.chunks) == math.ceil(n / chunk_elems) and report.total_ms > 0
    assert (report.staged_inputs, report.staged_outputs) == ((0, 0) if pinned else (2, 1))
    assert report.h2d_ms > 0 and report.d2h_ms > 0


@pytest.mark.requires_gpu
def test_gpu_round_trip_2d():
    host = np.random.default_rng().integers(-1000, 1000, size=(1001, 3, 7), dtype=np.int16)
    out, report = pipeline(host, None, chunk_bytes=4096, streams=2, buffers=3)
    np.testing.assert_array_equal(out, host)


@pytest.mark.requires_gpu
def test_gpu_torch_kernel_on_the_pipeline_stream():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng().standard_normal((5000, 8)).astype(np.float32)

    def square(chunk):
        with torch.cuda.stream(torch.cuda.ExternalStream(chunk.stream.handle)):
            src = torch.as_tensor(chunk.input, device="cuda")
            torch.mul(src, src, out=torch.as_tensor(chunk.output, device="cuda"))

    out, _ = pipeline(x, square, outputs=np.full_like(x, np.nan), chunk_bytes=32 * 333, streams=3)
    np.testing.assert_array_equal(out, x * x)


@pytest.mark.requires_gpu
def test_gpu_cupy_kernel_on_the_pipeline_stream():
    cupy = pytest.importorskip("cupy")
    x = np.random.default_rng().integers(0, 1 << 20, size=100_003, dtype=np.int32)

    adopt = getattr(cupy.cuda.Stream, "from_external", None)  # cupy 14 deprecates ExternalStream for it

    def negate(chunk):
        with (adopt(chunk.stream) if adopt else cupy.cuda.ExternalStream(chunk.stream.handle)):
            cupy.negative(cupy.asarray(chunk.input), out=cupy.asarray(chunk.output))

    out, _ = pipeline(x, negate, outputs=np.zeros_like(x), chunk_bytes=4 * 4099, streams=2)
    np.testing.assert_array_equal(out, -x)


@pytest.mark.requires_gpu
def test_gpu_example_runs_small():
    assert _load_example().main(["--gib", "0.0625", "--chunk-mib", "4"]) == 0
