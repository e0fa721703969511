"""tmakit.ops.gemm and cuda_src/gemm.cu.

CPU: every variant compiles for both engines (sm_90a TMA + wgmma, sm_80 and forced cp.async + mma.sync) with the
instructions the design promises, the shared-memory budget refuses what does not fit, argument errors name the
parameter. GPU: sampled shapes (M, N, K in {1, 17, 127, 1000, 4097}), both B majors, both dtypes, both backends,
fp32 and 16-bit outputs, alpha/beta, outputs poisoned with NaN (padding included: clipped stores leave it)
against a float32 reference.
"""
from __future__ import annotations

import importlib
import itertools
import random

import pytest

from tmakit.backend import Backend
from tmakit.build import compile_cuda
from tmakit.errors import InvalidArgumentError
from tmakit.ops import plan_gemm

gemm_mod = importlib.import_module("tmakit.ops.gemm")
check_config, default_config = gemm_mod.check_config, gemm_mod.default_config

from _fake_driver import FakeDeviceArray  # noqa: E402


# ----------------------------------------------------------------------------------------------------------
# CPU tier
# ----------------------------------------------------------------------------------------------------------

def _variants():
    out = []
    for backend, arch in ((Backend.TMA, "sm_90a"), (Backend.CP_ASYNC, "sm_80"), (Backend.CP_ASYNC, "sm_90a")):
        for bf16, kmajor in itertools.product((True, False), (True, False)):
            out.append(pytest.param(backend, arch, bf16, kmajor,
                                    id=f"{backend.value}-{arch}-{'bf16' if bf16 else 'f16'}-{'k' if kmajor else 'n'}"))
    return out


@pytest.mark.parametrize("backend, arch, bf16, kmajor", _variants())
def test_gemm_variants_compile(backend: Backend, arch: str, bf16: bool, kmajor: bool) -> None:
    cfg = default_config(backend, bf16=bf16, b_kmajor=kmajor, shared_mem_limit=232448 if arch == "sm_90a" else 166912)
    code = compile_cuda("gemm.cu", arch=arch, defines={**backend.defines, **cfg.defines})
    assert code.entry_names() == [cfg.entry]
    if backend is Backend.TMA:
        ptx = code.ptx
        assert f"wgmma.mma_async.sync.aligned.m64n256k16.f32.{'bf16' if bf16 else 'f16'}" in ptx
        assert "setmaxnreg.dec.sync.aligned.u32 40" in ptx and "setmaxnreg.inc.sync.aligned.u32 232" in ptx
        assert "multicast::cluster" in ptx and "cp.async.bulk.tensor.2d.global.shared::cta" in ptx
        assert "mapa.shared::cluster" in ptx and "barrier.cluster.arrive" in ptx
    else:
        assert "mma.sync.aligned.m16n8k16" in code.ptx and "cp.async.cg.shared.global" in code.ptx
        assert ("ldmatrix.sync.aligned.m8n8.x4.trans" in code.ptx) == (not kmajor)
        assert "wgmma" not in code.ptx


def test_defaults_are_the_tuned_plan() -> None:
    cfg = default_config(Backend.TMA)
    assert (cfg.block_n, cfg.stages, cfg.cluster, cfg.threads) == (256, 4, 2, 384)
    assert cfg.shared_mem <= 232448
    assert default_config(Backend.TMA, out_f32=True).stages == 4  # the fp32 epilogue slabs are 128 bytes too
    assert default_config(Backend.CP_ASYNC, shared_mem_limit=166912).stages == 3


def test_shared_memory_budget_refuses_too_many_stages() -> None:
    cfg = default_config(Backend.TMA, stages=5)
    with pytest.raises(InvalidArgumentError, match=r"stages.*48 KiB; 5 stages need 2\d\d\.\d KiB, 227\.0 KiB available"):
        check_config(cfg, 232448)


def test_cluster_on_cp_async_refused() -> None:
    with pytest.raises(InvalidArgumentError, match=r"cluster.*1 on the cp.async backend"):
        check_config(default_config(Backend.CP_ASYNC, cluster=2), 232448)
    with pytest.raises(InvalidArgumentError, match=r"block_n.*128 or 256"):
        check_config(default_config(Backend.TMA, block_n=192), 232448)


def _fake(shape, typestr="<f2", strides=None, ptr=0):
    return FakeDeviceArray(shape, typestr, strides=strides, ptr=ptr)


@pytest.mark.parametrize("kwargs, match", [
    ({"a": ((64, 64), "<f4")}, r"a.*dtype float32.*must be bfloat16 or float16"),
    ({"b": ((64, 64), "<f4")}, r"b.*dtype float32.*must match a's dtype"),
    ({"b": ((64, 32),)}, r'b.*shape \(64, 32\).*must be \(N, 64\) with b_major="k"'),
    ({"a": ((64, 17),), "b": ((64, 17),)}, r"a.*row pitch 34 bytes.*multiple of 16 bytes.*padded"),
    ({"a": ((0, 64),)}, r"a.*every dimension must be at least 1"),
    ({"b_major": "m"}, r'b_major.*"k".*"n"'),
    ({"alpha": float("nan")}, r"alpha.*finite"),
    ({"beta": 1.0}, r"c.*needed with beta != 0"),
    ({"out_dtype": "int8"}, r"out_dtype"),
])
def test_argument_errors(kwargs, match) -> None:
    a = _fake(*kwargs.pop("a", ((64, 64),)))
    b = _fake(*kwargs.pop("b", ((64, 64),)))
    with pytest.raises(InvalidArgumentError, match=match):
        plan_gemm(a, b, **kwargs)


# ----------------------------------------------------------------------------------------------------------
# GPU tier
# ----------------------------------------------------------------------------------------------------------

SIZES = (1, 17, 127, 1000, 4097)


def _padded(torch, rows, cols, dtype, fill=None):
    """A (rows, cols) view of a buffer whose rows are padded to 16 bytes (plus 8 more elements)."""
    per = 16 // torch.empty((), dtype=dtype).element_size()
    pitch = -(-cols // per) * per + per
    buf = torch.empty(rows, pitch, device="cuda", dtype=dtype)
    if fill is None:
        buf.uniform_(-1, 1)
    else:
        buf.fill_(fill)
    return buf, buf[:, :cols]


def _cases():
    rng = random.Random(20)
    cases = []
    combos = [(b, d, kmaj) for b in ("tma", "cp.async") for d in ("bfloat16", "float16") for kmaj in (True, False)]
    for i, (backend, dtype, kmajor) in enumerate(combos * 3):
        m, n, k = (rng.choice(SIZES) for _ in range(3))
        out_f32 = i % 5 == 4
        ab = ((1.0, 0.0), (0.5, 0.0), (1.5, -0.75))[i % 3]
        cases.append((backend, dtype, kmajor, m, n, k, out_f32, ab))
    # the large-tile paths: full tiles, several k-blocks, cluster pairs and a cluster-less tma plan
    cases.append(("tma", "bfloat16", True, 1024, 2048, 1000, False, (1.0, 0.0)))
    cases.append(("tma", "bfloat16", False, 384, 768, 4097, False, (1.0, 1.0)))
    cases.append(("cp.async", "bfloat16", True, 1024, 1000, 1024, False, (1.0, 0.0)))
    return cases


@pytest.mark.requires_sm90
@pytest.mark.parametrize("backend, dtype, kmajor, m, n, k, out_f32, ab", _cases(),
                         ids=lambda v: str(v) if not isinstance(v, tuple) else "ab" + "_".join(map(str, v)))
def test_gemm_matches_float32_reference(backend, dtype, kmajor, m, n, k, out_f32, ab) -> None:
    torch = pytest.importorskip("torch")
    tdt = getattr(torch, dtype)
    odt = torch.float32 if out_f32 else tdt
    alpha, beta = ab
    _, a = _padded(torch, m, k, tdt)
    _, b = _padded(torch, n, k, tdt) if kmajor else _padded(torch, k, n, tdt)
    cbuf, c = _padded(torch, m, n, odt)
    c0 = c.float().clone()
    if beta == 0.0:
        cbuf.fill_(float("nan"))  # poisoned: every element must be written
    pad = cbuf[:, n:].clone()
    plan = plan_gemm(a, b, c, alpha=alpha, beta=beta, b_major="k" if kmajor else "n", backend=backend)
    plan()
    torch.cuda.synchronize()
    bm = b.float().T if kmajor else b.float()
    ref = alpha * (a.float() @ bm) + beta * c0
    got = c.float()
    assert not torch.isnan(got).any(), "unwritten (poisoned) outputs"
    assert torch.equal(torch.isnan(cbuf[:, n:]), torch.isnan(pad)), "a store went past N into the row padding"
    scale = max(1.0, ref.abs().max().item())
    tol = 1e-3 if out_f32 else (8e-3 if dtype == "bfloat16" else 2e-3)
    err = (got - ref).abs().max().item() / scale
    assert err <= tol, f"max error {err:.3g} (relative to {scale:.3g}) > {tol}"


@pytest.mark.requires_sm90
def test_plan_repoints_and_cluster_one() -> None:
    torch = pytest.importorskip("torch")
    a = torch.randn(300, 256, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(520, 256, device="cuda", dtype=torch.bfloat16)
    plan = plan_gemm(a, b, cluster=1, block_n=128, stages=3)
    out1 = plan().float().clone()
    a2, b2 = torch.randn_like(a), torch.randn_like(b)
    out2 = plan(a2, b2)
    torch.cuda.synchronize()
    for x, y, o in ((a, b, out1), (a2, b2, out2.float())):
        ref = x.float() @ y.float().T
        assert (o - ref).abs().max().item() <= 8e-3 * max(1.0, ref.abs().max().item())
    assert plan.maps[0].address == a2.data_ptr()


def test_example_runs_without_a_gpu_or_checks_with_one() -> None:
    """examples/gemm.py: without a GPU it compiles both backends and explains the maps (exit 0); with one it
    also launches and checks a small shape."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, str(root / "examples" / "gemm.py"), "--shape", "300,520,200", "--check"],
                       capture_output=True, text=True, timeout=600, cwd=root, env={**__import__("os").environ, "PYTHONPATH": str(root)})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "wgmma descriptors of stage 0" in r.stdout and "rule wgmma.k_advance" in r.stdout
    assert "nothing launched" in r.stdout or "check: max" in r.stdout
