"""tmakit.ops.plan_fp8_gemm: e4m3 operands with per-128 block scales (DeepGEMM's layout), bf16 out.

CPU: the fp8 build compiles with e4m3 k32 wgmma and lints; argument errors name the parameter. GPU: seeded random
shapes (M, N, K from 1 to 5,000; K a multiple of 16, tails of every tile and k-block), random block scales over
six orders of magnitude, a NaN-poisoned output, against a float32 product of the dequantized operands; three runs.
"""
from __future__ import annotations

import os
import random

import pytest

from tmakit.backend import Backend
from tmakit.build import compile_cuda
from tmakit.errors import InvalidArgumentError
from tmakit.ops import plan_fp8_gemm
from tmakit.ops.gemm import default_config

from _fake_driver import FakeDeviceArray


def _fp8_config(cluster: int = 1):
    return default_config(Backend.TMA, bf16=True, b_kmajor=True, block_n=128, cluster=cluster, splits=1, fp8=True)


@pytest.mark.parametrize("cluster", [1, 2])
def test_fp8_build_compiles_and_lints(cluster) -> None:
    from tmakit import lint

    cfg = _fp8_config(cluster)
    assert cfg.fp8 and cfg.stage_bytes == 33 * 1024  # A and B 16 KiB each, 512 bytes of row scales, 1024-aligned
    assert cfg.stages == 5 and cfg.shared_mem <= 232448  # as many 33 KiB stages as the H100 holds (the results: s5)
    code = compile_cuda("gemm.cu", arch="sm_90a", defines=cfg.defines)
    assert "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3" in code.ptx
    report = lint(code, entry="tmakit_gemm_tma")
    assert [f for f in report.findings if f.severity != "note"] == [], str(report)


def _fake(shape, typestr="|u1", strides=None):
    return FakeDeviceArray(shape, typestr, strides=strides)


@pytest.mark.parametrize("change, match", [
    ({"a": _fake((256, 256), "<f2")}, r"a.*float16.*float8_e4m3fn"),
    ({"b": _fake((128, 128))}, r"b.*must be \(N, 256\)"),
    ({"scale_a": _fake((256, 2), "<f4")}, r"scale_a.*column-major"),
    ({"scale_b": _fake((2, 3), "<f4")}, r"scale_b.*\(2, 2\)"),
    ({"out": _fake((256, 256), "<f4")}, r"out.*bfloat16"),
])
def test_argument_errors(change, match) -> None:
    args = dict(a=_fake((256, 256)), b=_fake((256, 256)), scale_a=_fake((256, 2), "<f4", strides=(4, 1024)),
                scale_b=_fake((2, 2), "<f4"))
    args.update(change)
    with pytest.raises(InvalidArgumentError, match=match):
        plan_fp8_gemm(**args)


def _seed() -> int:
    return int(os.environ.get("TMAKIT_TEST_SEED", "20261126"))


def quantized(torch, m, n, k, gen):
    """e4m3 operands, DeepGEMM-layout scales, and the float32 product of the dequantized operands."""
    kb, nb = -(-k // 128), -(-n // 128)
    a = (torch.randn(m, k, device="cuda", generator=gen) * 2).to(torch.float8_e4m3fn)
    b = (torch.randn(n, k, device="cuda", generator=gen) * 2).to(torch.float8_e4m3fn)
    sa_buf = torch.empty(kb, -(-m // 4) * 4, device="cuda")
    sa = sa_buf.T[:m]
    sa.copy_(torch.exp2(torch.randint(-10, 10, (m, kb), device="cuda", generator=gen).float()))
    sb = torch.exp2(torch.randint(-10, 10, (nb, kb), device="cuda", generator=gen).float())
    a_deq = a.float() * sa.repeat_interleave(128, 1)[:, :k]
    b_deq = b.float() * sb.repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)[:, :k]
    return a, b, sa, sb, a_deq @ b_deq.T


@pytest.mark.requires_sm90
@pytest.mark.parametrize("i", range(8))
def test_fp8_gemm_matches_the_dequantized_product(i) -> None:
    torch = pytest.importorskip("torch")
    torch.backends.cuda.matmul.allow_tf32 = False
    rng = random.Random(_seed() + i)
    m, n = rng.choice((1, 17, 128, rng.randint(1, 5000))), rng.choice((8, 136, rng.randint(1, 600) * 8))
    k = rng.choice((16, 128, 16 * rng.randint(1, 320)))
    gen = torch.Generator(device="cuda").manual_seed(_seed() + i)
    a, b, sa, sb, ref = quantized(torch, m, n, k, gen)
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    plan = plan_fp8_gemm(a, b, sa, sb, out)
    for run in range(3):
        out.fill_(float("nan"))
        plan()
        torch.cuda.synchronize()
        where = f"{m}x{n}x{k} run {run} (seed {_seed() + i})"
        assert not torch.isnan(out).any(), f"{where}: NaN (a tile left unwritten)"
        err = ((out.float() - ref).abs().max() / ref.abs().max()).item()
        assert err < 1e-2, f"{where}: max error {err:.3g} relative to the largest entry"


@pytest.mark.requires_sm90
@pytest.mark.parametrize("k", [16, 128, 256, 384, 512, 656])
def test_fp8_gemm_every_count_of_k_blocks(k) -> None:
    """The consumers promote one k-block while the next one's wgmma run, two partial accumulators alternating:
    1 to 6 k-blocks (odd and even counts, a tail) each end on the right partial."""
    torch = pytest.importorskip("torch")
    gen = torch.Generator(device="cuda").manual_seed(_seed() + k)
    a, b, sa, sb, ref = quantized(torch, 200, 264, k, gen)
    out = torch.full((200, 264), float("nan"), device="cuda", dtype=torch.bfloat16)
    plan_fp8_gemm(a, b, sa, sb, out)()
    torch.cuda.synchronize()
    err = ((out.float() - ref).abs().max() / ref.abs().max()).item()
    assert err < 1e-2, f"200x264x{k}: max error {err:.3g} relative to the largest entry"
