"""tmakit.ops.plan_grouped_gemm: cuda_src/gemm.cu built with TMAKIT_GEMM_GROUPED.

CPU: the grouped variant compiles with the device-side map edit it promises; argument errors name the parameter.
GPU: seeded random groups (sizes 0 to 3,000 rows, G from 1 to 128, both B majors, both dtypes, fp32 and 16-bit
outputs, N off 8 on a padded output), outputs poisoned with NaN against a float32 product per group, each case
run three times (the async proxy's races are invisible to the sanitizers); offsets out of order are clamped, never
read or written past the operands.
"""
from __future__ import annotations

import os
import random

import pytest

from tmakit.backend import Backend
from tmakit.build import compile_cuda
from tmakit.errors import InvalidArgumentError
from tmakit.ops import plan_grouped_gemm
from tmakit.ops.gemm import default_config

from _fake_driver import FakeDeviceArray


def test_grouped_variant_compiles_with_its_device_side_map_edit() -> None:
    for kmajor in (True, False):
        cfg = default_config(Backend.TMA, b_kmajor=kmajor, cluster=1, groups=64)
        ptx = compile_cuda("gemm.cu", arch="sm_90a", defines=cfg.defines).ptx
        assert "tensormap.replace.tile.global_dim.shared::cta.b1024.b32" in ptx
        assert "tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned" in ptx
        assert "fence.proxy.tensormap::generic.acquire.gpu" in ptx
        assert "cp.async.bulk.tensor.3d.shared::cluster.global.tile" in ptx  # B: the group is a coordinate
        assert "multicast::cluster" not in ptx
    assert default_config(Backend.TMA, groups=1024).shared_mem <= 232448


def _fake(shape, typestr="<f2", strides=None, ptr=0):  # at 0: viewed without a driver
    return FakeDeviceArray(shape, typestr, strides=strides, ptr=ptr)


@pytest.mark.parametrize("change, match", [
    ({"a": _fake((64, 64), "<f4")}, r"a.*dtype float32.*must be bfloat16 or float16"),
    ({"b": _fake((4, 64, 32))}, r"b.*shape \(4, 64, 32\).*\(G, N, 64\)"),
    ({"b": _fake((64, 64))}, r"b.*must be 3-D"),
    ({"offs": _fake((4,), "<i8")}, r"offs.*int64.*must be int32 of shape \(4,\)"),
    ({"offs": _fake((3,), "<i4")}, r"offs.*must be int32 of shape \(4,\)"),
    ({"b_major": "m"}, r"b_major"),
    ({"alpha": float("inf")}, r"alpha.*finite"),
    ({"out": _fake((64, 32))}, r"out.*must be \(64, 64\)"),
])
def test_argument_errors(change, match) -> None:
    args = {"a": _fake((64, 64)), "b": _fake((4, 64, 64)), "offs": _fake((4,), "<i4")}
    args.update(change)
    with pytest.raises(InvalidArgumentError, match=match):
        plan_grouped_gemm(**args)


def _seed() -> int:
    return int(os.environ.get("TMAKIT_TEST_SEED", "20261126"))


def _check(torch, sizes, n, k, *, kmajor, dtype, out_f32, pad=0, offs=None, runs=3, seed=0, **options) -> None:
    dt = getattr(torch, dtype)
    g = len(sizes)
    m = sum(sizes) + 5  # rows past the last end: never written
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, device="cuda", dtype=dt, generator=gen)
    b = torch.randn((g, n, k) if kmajor else (g, k, n), device="cuda", dtype=dt, generator=gen)
    if offs is None:
        offs = torch.tensor(sizes, device="cuda", dtype=torch.int64).cumsum(0).to(torch.int32)
    ends = offs.tolist()
    out_dt = torch.float32 if out_f32 else dt
    buf = torch.empty(m, n + pad, device="cuda", dtype=out_dt)
    out = buf[:, :n]
    plan = plan_grouped_gemm(a, b, offs, out, b_major="k" if kmajor else "n", **options)
    ref = torch.full((m, n), float("nan"), device="cuda")
    prev = 0
    for i in range(g):  # the kernel's clamp: each end to [the previous end, M]
        end = min(max(ends[i], prev), m)
        bi = b[i].float().T if kmajor else b[i].float()
        ref[prev:end] = a[prev:end].float() @ bi
        prev = end
    for run in range(runs):
        buf.fill_(float("nan"))
        plan()
        torch.cuda.synchronize()
        got = out.float()
        where = f"sizes {sizes} n {n} k {k} {dtype} {'k' if kmajor else 'n'}-major run {run} (seed {seed})"
        assert torch.equal(torch.isnan(got), torch.isnan(ref)), f"{where}: rows written outside their groups, or not"
        done = ~torch.isnan(ref)
        if done.any():
            scale = ref[done].abs().max().item() or 1.0
            err = (got[done] - ref[done]).abs().max().item() / scale
            assert err < (2e-3 if out_f32 else 1e-2), f"{where}: max error {err:.3g}"
        if pad:
            assert torch.isnan(buf[:, n:]).all(), f"{where}: a store went past N into the row padding"


def _cases(n_cases: int, seed: int):
    rng = random.Random(seed)
    for i in range(n_cases):
        g = rng.choice((1, 2, 5, 8, 17, 64, 128))
        sizes = [rng.choice((0, rng.randint(1, 64), rng.randint(1, 600), rng.randint(600, 3000))) for _ in range(g)]
        if g > 17:
            sizes = [s // 8 for s in sizes]
        kmajor = i % 2 == 0
        n = rng.choice((8 * rng.randint(16, 512), rng.randint(100, 2000))) if kmajor else 8 * rng.randint(16, 512)
        k = 8 * rng.randint(8, 600)
        yield dict(sizes=sizes, n=n, k=k, kmajor=kmajor, dtype=rng.choice(("bfloat16", "float16")),
                   out_f32=i % 3 == 0, pad=(-n) % 8 + 8 if n % 8 else 0, block_n=rng.choice((None, 128, 256)))


@pytest.mark.requires_sm90
@pytest.mark.parametrize("kmajor", [True, False], ids=["k", "n"])
def test_grouped_gemm_chooses_192_wide_tiles_on_the_gpu(kmajor) -> None:
    """A grouped problem whose default tile is 192 wide (either B major, lone CTAs: three 64-column slabs of B an
    N-major stage), uneven groups and an empty one, against float32 on poisoned outputs, 3 runs."""
    torch = pytest.importorskip("torch")
    torch.backends.cuda.matmul.allow_tf32 = False
    sizes, n, k = [700, 0, 1, 1299], 1152, 1048
    assert default_config(Backend.TMA, b_kmajor=kmajor, m=sum(sizes) + 5, n=n, sms=132, splits=1, groups=4,
                          cluster=1).block_n == 192  # on 132 SMs (H100 SXM, H200)
    _check(torch, sizes, n, k, kmajor=kmajor, dtype="bfloat16", out_f32=False, seed=_seed(), block_n=192)
    _check(torch, sizes, n, k, kmajor=kmajor, dtype="float16", out_f32=True, seed=_seed() + 1)


@pytest.mark.requires_sm90
@pytest.mark.parametrize("i", range(16))
def test_grouped_gemm_on_the_gpu(i) -> None:
    torch = pytest.importorskip("torch")
    torch.backends.cuda.matmul.allow_tf32 = False
    case = list(_cases(16, _seed()))[i]
    _check(torch, seed=_seed() + i, **case)


@pytest.mark.requires_sm90
def test_offsets_out_of_order_are_clamped_to_the_operands() -> None:
    """A decreasing end makes an empty group, an end past M stops at M: nothing outside the operands is read or
    written, and no two groups write one row."""
    torch = pytest.importorskip("torch")
    torch.backends.cuda.matmul.allow_tf32 = False
    offs = torch.tensor([300, 100, 700, 10_000], device="cuda", dtype=torch.int32)
    _check(torch, [300, 0, 400, 5], 512, 256, kmajor=True, dtype="bfloat16", out_f32=False, offs=offs, seed=3)


@pytest.mark.requires_sm90
def test_repointing_to_another_output_dtype_is_refused() -> None:
    """The kernel was compiled for one output type: a float32 out for a bf16 plan (or the reverse) is an error,
    not a wrong result."""
    torch = pytest.importorskip("torch")
    a = torch.randn(300, 128, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(3, 256, 128, device="cuda", dtype=torch.bfloat16)
    offs = torch.tensor([100, 200, 300], device="cuda", dtype=torch.int32)
    plan = plan_grouped_gemm(a, b, offs, torch.empty(300, 256, device="cuda", dtype=torch.bfloat16))
    with pytest.raises(InvalidArgumentError, match=r"out.*float32.*plan's output dtype \(bfloat16\)"):
        plan(a, b, offs, torch.empty(300, 256, device="cuda", dtype=torch.float32))
    out = plan(a, b, offs, torch.full((300, 256), float("nan"), device="cuda", dtype=torch.bfloat16))
    torch.cuda.synchronize()
    ref = torch.cat([a[100 * g:100 * (g + 1)].float() @ b[g].float().T for g in range(3)])
    assert ((out.float() - ref).abs().max() / ref.abs().max()).item() < 1e-2
