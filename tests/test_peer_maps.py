"""Peer tensor maps: a map encoded for kernels on GPU 0 over an array in GPU 1's memory (describe_tensor(device=)).

CPU: the argument checks. Two or more GPUs: >= 1,000 random peer maps (every rank, type, swizzle, element stride,
partial and out-of-bounds boxes) spread over every ordered pair of GPUs (i, j), over a buffer of fresh random bytes on
GPU j, each box loaded by TMA on GPU i and compared with tmakit.layout.tma_load_image byte for byte; the map keeps
the peer array alive; copies between GPU 0 and the last GPU.
"""
from __future__ import annotations

import gc
import os
import random

import numpy as np
import pytest

from tmakit import InvalidArgumentError, describe_tensor

from _fake_driver import FakeDeviceArray


def test_device_must_be_a_gpu_ordinal_and_needs_an_array() -> None:
    with pytest.raises(InvalidArgumentError, match="device=-1: must be a GPU ordinal"):
        describe_tensor(FakeDeviceArray((64, 64), "<f4"), box=(8, 8), device=-1)
    with pytest.raises(InvalidArgumentError, match="device=True"):
        describe_tensor(FakeDeviceArray((64, 64), "<f4"), box=(8, 8), device=True)
    with pytest.raises(InvalidArgumentError, match="device=0: is only for a map of an array"):
        describe_tensor(shape=(64, 64), dtype="float32", box=(8, 8), device=0)


@pytest.mark.requires_2gpus
def test_peer_boxes_equal_the_cpu_model() -> None:
    from test_tma_hardware import BUFFER_BYTES, random_case

    torch = pytest.importorskip("torch")
    from tmakit import encode_tiled, tma_load_image
    from tmakit.ops import load_tiles
    from tmakit.ops.load_tiles import POISON

    seed = int(os.environ.get("TMAKIT_HW_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    host = np.random.default_rng(seed).integers(0, 256, BUFFER_BYTES, dtype=np.uint8)
    # every ordered pair of GPUs (2 on two GPUs, 12 on four): a kernel on GPU i loads from GPU j's memory
    n = torch.cuda.device_count()
    pairs = [(i, j) for i in range(n) for j in range(n) if i != j]
    per_pair = max(100, -(-1000 // len(pairs)))
    boxes = equal = maps = 0
    for at, home in pairs:
        buf = torch.from_numpy(host).to(f"cuda:{home}")
        # a peer map of the whole buffer: checks and enables GPU at's access to GPU home (encode_tiled below
        # encodes raw addresses in GPU at's context and enables nothing)
        whole = describe_tensor(buf, box=(256,), device=at)
        assert whole.device == at and whole.owner is buf and whole.descriptor is not None
        done = 0
        while done < per_pair:
            case = random_case(rng)
            if case["interleave"].value:
                continue
            tm = encode_tiled(case["dtype"], buf.data_ptr() + case["offset"], case["dims"], case["strides"],
                              case["box"], case["es"], swizzle=case["swizzle"], oob_fill=case["oob"], device=at,
                              owner=buf)
            coords = [list(reversed(c)) for c in case["coords"]]
            got = load_tiles(tm, coords, backend="tma")
            for i, c in enumerate(case["coords"]):
                want = tma_load_image(tm, host[case["offset"]:], c, poison=POISON)
                boxes += 1
                same = bool(np.array_equal(got.images[i], want))
                equal += same
                assert same or boxes - equal < 5, f"TMAKIT_HW_SEED={seed}: GPU {at} from GPU {home}: boxes differ"
            done += 1
        maps += done
    assert maps >= 1000 and boxes >= 3000
    assert equal == boxes, f"TMAKIT_HW_SEED={seed}: {boxes - equal} of {boxes} peer boxes differ from the model"


@pytest.mark.requires_2gpus
def test_a_peer_map_of_a_torch_tensor_keeps_it_alive_and_loads_on_gpu0() -> None:
    torch = pytest.importorskip("torch")
    from tmakit.ops import load_tiles

    x = torch.arange(256 * 256, dtype=torch.float32, device="cuda:1").reshape(256, 256)
    want = x[32:48, 64:96].cpu().numpy()
    tm = describe_tensor(x, box=(16, 32), swizzle="none", device=0)
    assert tm.device == 0 and tm.owner is x
    del x
    gc.collect()
    torch.cuda.empty_cache()
    got = load_tiles(tm, [[32, 64]], backend="tma").typed()[0]
    assert np.array_equal(got[:, :32], want)


@pytest.mark.requires_2gpus
def test_arrays_on_the_second_gpu_are_seen_there() -> None:
    """A DeviceArray made on GPU 1 (and a cupy-like array known only by its pointer) is viewed on GPU 1: its copies
    run there, and a peer map of it from GPU 0 loads its bytes."""
    from tmakit import DeviceArray, _driver
    from tmakit.arrays import as_array_view
    from tmakit.ops import load_tiles

    host = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)
    with DeviceArray.from_host(host, device=1) as a:
        assert a.device == 1 and as_array_view(a).device == 1 and _driver.pointer_device(a.ptr) == 1
        assert np.array_equal(a.to_host(), host)
        tm = describe_tensor(a, box=(8, 16), swizzle="none", device=0)
        got = load_tiles(tm, [[8, 16]], backend="tma").typed()[0]
        assert np.array_equal(got[:, :16], host[8:16, 16:32])


@pytest.mark.requires_2gpus
@pytest.mark.parametrize("across", ["pull", "push"])
@pytest.mark.parametrize("dst_device, src_device", [(0, 1), (1, 0), (0, -1), (-1, 0)],
                         ids=["0<-1", "1<-0", "0<-last", "last<-0"])
def test_copies_across_gpus_move_every_byte(dst_device, src_device, across) -> None:
    """tmakit.ops.copy between GPUs (dst's GPU pulls over the peer path), odd sizes and offsets, poisoned dst;
    -1: the last GPU (on more than two GPUs, a pair other than 0 and 1)."""
    from tmakit import DeviceArray, _driver, ops

    count = _driver.device_count()
    dst_device, src_device = dst_device % count, src_device % count

    rng = np.random.default_rng(dst_device * 7 + 1)
    for nbytes in (1, 4097, (1 << 20) + 48, 3 << 22):
        host = rng.integers(0, 256, nbytes, dtype=np.uint8)
        with DeviceArray.from_host(host, device=src_device) as src, \
                DeviceArray.from_host(np.full(nbytes, 0xA5, np.uint8), device=dst_device) as dst:
            result = ops.copy(dst, src, across=across)
            with _driver.context_for(dst_device if across == "pull" else src_device):
                _driver.call("cuCtxSynchronize")
            assert np.array_equal(dst.to_host(), host), f"{nbytes} bytes GPU {src_device} -> {dst_device} ({result})"


@pytest.mark.requires_2gpus
def test_a_plan_launches_on_its_gpu_whatever_context_torch_left_current() -> None:
    """torch's work on GPU 1 makes GPU 1's context current on this thread; a plan of GPU 0 still launches."""
    torch = pytest.importorskip("torch")
    from tmakit.ops import plan_copy

    src = torch.randint(0, 256, (1 << 20,), dtype=torch.uint8, device="cuda:0")
    dst = torch.empty_like(src)
    plan = plan_copy(dst, src)
    torch.zeros(4, device="cuda:1").add_(1)  # GPU 1 current now
    torch.cuda.set_device(1)
    plan()
    torch.cuda.synchronize(0)
    assert torch.equal(dst, src)


@pytest.mark.requires_2gpus
def test_events_and_waits_on_a_default_stream_of_another_gpu() -> None:
    """GPU 1's default stream, used while GPU 0's context is current (torch's last device): the event is recorded
    and waited for in GPU 1's context (the default stream is the current context's; it was an invalid handle)."""
    torch = pytest.importorskip("torch")
    from tmakit import Event, Stream
    from tmakit.streams import as_stream

    s1 = as_stream(None, device=1)
    side = Stream(1)
    torch.zeros(4, device="cuda:0").add_(1)
    torch.cuda.set_device(0)
    e = Event(1, timing=False).record(s1)
    side.wait(e)
    s1.wait(Event(1, timing=False).record(side))
    s1.sync()
    assert e.query()


@pytest.mark.requires_2gpus
@pytest.mark.parametrize("across", ["pull", "push"])
@pytest.mark.parametrize("dst_device, src_device", [(0, 1), (1, 0)], ids=["0<-1", "1<-0"])
def test_transposes_across_gpus_move_every_element(dst_device, src_device, across) -> None:
    """plan_transpose with src on another GPU: pulled (dst's GPU reads src over the peer path) or pushed (src's GPU
    writes dst over it); odd shapes and pitches, every element size, poisoned dst, each run twice; a plan
    re-pointed to other buffers of the same geometry."""
    from tmakit import DeviceArray, _driver
    from tmakit.ops import plan_transpose

    rng = np.random.default_rng(dst_device * 10 + src_device)
    for dtype, shape in ((np.uint8, (1031, 2053)), (np.uint16, (517, 1000)), (np.float32, (2048, 300)),
                         (np.float64, (33, 4097))):
        host = rng.integers(0, 255, shape).astype(dtype)
        with DeviceArray.from_host(host, device=src_device) as src, \
                DeviceArray.from_host(np.full(shape[::-1], 0xA5, dtype), device=dst_device) as dst:
            plan = plan_transpose(dst, src, across=across)
            runs_on = dst_device if across == "pull" else src_device
            for _ in range(2):
                plan()
                with _driver.context_for(runs_on):
                    _driver.call("cuCtxSynchronize")
                assert np.array_equal(dst.to_host(), host.T), f"{dtype.__name__} {shape} GPU {src_device} -> {dst_device}"
            with DeviceArray.from_host(host[::-1].copy(), device=src_device) as src2:
                plan(dst, src2)
                with _driver.context_for(runs_on):
                    _driver.call("cuCtxSynchronize")
                assert np.array_equal(dst.to_host(), host[::-1].T), f"re-pointed {dtype.__name__} {shape}"

