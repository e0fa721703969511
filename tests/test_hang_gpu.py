"""The hang doctor on the GPU: each seeded hang (tests/hang_kernels.py) launched with ``checked=True`` returns
within the timeout + 5 s with a HangError that names the barrier, the parity it waited for and the bytes of the
last expect_tx; the lint's findings for that barrier come with it; and the next launch in the same process (the
correct kernel, checked and unchecked) runs and loads exactly what the CPU model of TMA says.
"""
from __future__ import annotations

import secrets
import time

import numpy as np
import pytest
from hang_kernels import BOX, SCENARIOS, SOURCE, TILES

from tmakit import DeviceArray, HangError, describe_tensor, tma_load_image
from tmakit.build import compile_cuda

pytestmark = pytest.mark.requires_sm90
TIMEOUT = 1.0
TILE_BYTES = BOX[0] * BOX[1] * 2


def _kernel(scenario: int):
    code = compile_cuda(SOURCE, arch="sm_90a", defines={"SCENARIO": scenario}, options=["-lineinfo"],
                        name="hang.cu")
    return code.load(0).kernel("hang")


def _source():
    rng = np.random.default_rng(secrets.randbits(32))
    host = rng.integers(0, 1 << 16, size=(TILES * BOX[0], BOX[1]), dtype=np.uint16)  # bf16 bit patterns
    dev = DeviceArray.from_host(host)
    return host, dev, describe_tensor(dev, box=BOX, swizzle="128B", dtype="bf16")


def _launch_options(scenario: int) -> dict:
    blocks = 2 if scenario == 6 else 1
    return dict(grid=(blocks, 1, 1), block=(128, 1, 1), shared_mem=TILE_BYTES,
                cluster=(2, 1, 1) if scenario == 6 else None)


def _expected(tmap, host: np.ndarray) -> np.ndarray:
    memory = host.view(np.uint8).ravel()
    return np.concatenate([tma_load_image(tmap, memory, (0, k * BOX[0])) for k in range(TILES)])


def _check_twin_runs(tmap, host) -> None:
    """The correct kernel, unchecked then checked, in the same process: the context survived the hang."""
    twin = _kernel(0)
    for checked in (False, True):
        out = DeviceArray.zeros((TILES * TILE_BYTES,), np.uint8)
        launch = twin.bind(tmap, out, **_launch_options(0), checked=checked, timeout=TIMEOUT)
        launch()
        got = out.to_host()
        np.testing.assert_array_equal(got, _expected(tmap, host), err_msg=f"checked={checked}")


# what each hang must show: the barriers that may be the one recorded, the parity and bytes when it is `full`
EXPECT = {
    1: dict(barriers={"full"}, parity=0, tx=16384, rule="tx.too_many"),
    # too few bytes expected: phase 0 completes early if the TMA's complete_tx reaches the barrier in pieces (then
    # the wait for phase 1 hangs), or never if the 8192 bytes come as one (the tx-count passes zero): either parity
    2: dict(barriers={"full"}, parity=(0, 1), tx=4096, rule="tx.too_few"),
    3: dict(barriers={"full", "empty"}, parity=0, tx="none", rule=None),  # the producer hangs before any expect_tx
    4: dict(barriers={"full", "empty"}, parity=None, tx=8192, rule=None),
    5: dict(barriers={"empty"}, parity=0, tx=None, rule="arrivals.too_many"),
    6: dict(barriers={"full"}, parity=0, tx=8192, rule="tx.too_many"),
}


@pytest.mark.parametrize("scenario", list(SCENARIOS), ids=list(SCENARIOS.values()))
def test_seeded_hang_returns_with_the_barrier_parity_and_bytes(scenario):
    host, dev, tmap = _source()
    out = DeviceArray.zeros((2 * TILES * TILE_BYTES,), np.uint8)
    launch = _kernel(scenario).bind(tmap, out, **_launch_options(scenario), checked=True, timeout=TIMEOUT)
    start = time.perf_counter()
    with pytest.raises(HangError) as err:
        launch()
    elapsed = time.perf_counter() - start
    assert elapsed < TIMEOUT + 5, f"{SCENARIOS[scenario]}: returned after {elapsed:.1f} s"
    record, want = err.value.record, EXPECT[scenario]
    role = "full" if record.barrier.endswith("4full") else "empty" if record.barrier.endswith("5empty") else "?"
    assert role in want["barriers"], str(err.value)
    assert record.barrier in str(err.value) and f"for parity {record.parity}" in str(err.value)
    assert record.elapsed_ms >= TIMEOUT * 1000 * 0.9 and record.thread[0] < 128
    assert record.parity == record.phase, "a hung wait waits for the phase in progress"
    if want["parity"] is not None and role in ("full", "empty") and (role == "full" or scenario == 5):
        assert record.parity in (want["parity"] if isinstance(want["parity"], tuple) else (want["parity"],)), \
            str(err.value)
    if scenario == 6:
        assert record.rank == 1 and record.block == (1, 0, 0), str(err.value)
    if role == "full" and want["tx"] == "none":
        assert record.last_expect is None and "no expect_tx was posted" in str(err.value), str(err.value)
    elif role == "full" and want["tx"] is not None:
        assert record.last_expect is not None and record.last_expect[0] == want["tx"], str(err.value)
        assert f"posted {want['tx']} bytes" in str(err.value)
    if want["rule"] is not None:
        assert want["rule"] in {f.rule for f in err.value.findings}, str(err.value)
    _check_twin_runs(tmap, host)


def test_a_launch_without_a_hang_is_not_reported():
    host, _, tmap = _source()
    _check_twin_runs(tmap, host)


@pytest.mark.parametrize("op", ["gemm", "attention"])
def test_the_checked_twins_of_the_tensor_core_kernels_compute_what_the_unchecked_do(op):
    # plan_gemm / plan_attention(checked=True) bind the instrumented twin of the real kernel: same bytes out,
    # fresh random data, poisoned outputs, and a second launch of each.
    torch = pytest.importorskip("torch", reason="torch makes the operands")
    import tmakit

    torch.manual_seed(secrets.randbits(31))
    for _ in range(2):
        if op == "gemm":
            a = torch.randn(777, 1000, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(1000, 520, device="cuda", dtype=torch.bfloat16).T.contiguous()  # (N, K)
            outs = [torch.full((777, 520), float("nan"), device="cuda", dtype=torch.bfloat16) for _ in range(2)]
            for out, checked in zip(outs, (False, True)):
                tmakit.ops.plan_gemm(a, b, out, b_major="k", checked=checked)()
        else:
            q, k, v = (torch.randn(1, 4, 700, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            outs = [torch.full_like(q, float("nan")) for _ in range(2)]
            for out, checked in zip(outs, (False, True)):
                tmakit.ops.plan_attention(q, k, v, out, causal=True, checked=checked)()
        torch.cuda.synchronize()
        assert not outs[1].isnan().any()
        assert torch.equal(outs[0], outs[1])


def test_a_deferred_checked_launch_reports_the_hang_from_check_and_the_context_lives_on():
    host, dev, tmap = _source()
    out = DeviceArray.zeros((2 * TILES * TILE_BYTES,), np.uint8)
    launch = _kernel(1).bind(tmap, out, **_launch_options(1), checked="deferred", timeout=TIMEOUT)
    start = time.perf_counter()
    launch()  # returns without waiting for the kernel
    assert time.perf_counter() - start < TIMEOUT
    with pytest.raises(HangError) as err:
        launch.check()
    assert time.perf_counter() - start < TIMEOUT + 5
    assert err.value.record.last_expect is not None and err.value.record.last_expect[0] == 16384, str(err.value)
    _check_twin_runs(tmap, host)
