"""Multi-GPU GEMMs: all-gather + GEMM (plan_all_gather_gemm), GEMM + reduce-scatter (plan_gemm_reduce_scatter),
and what they are built on: plan_gemm(reduce="add") (TMA reduce-add stores), a peer output, sms=.

CPU: argument errors and the reduce-add build. One GPU: reduce-add into a filled C. Two or more GPUs, one process
driving every GPU: seeded random uneven shards, poisoned outputs, every GPU's result against a float32 product,
several runs each (a race between the copies and the GEMMs would show as a run that differs). Two processes
(torch.multiprocessing, NCCL, torch symmetric memory): the same plans on symmetric_views.
"""
from __future__ import annotations

import os
import random
import socket

import numpy as np
import pytest

from tmakit import InvalidArgumentError
from tmakit.backend import Backend
from tmakit.build.compile import compile_cuda
from tmakit.ops import plan_all_gather_gemm, plan_gemm, plan_gemm_reduce_scatter
from tmakit.ops.gemm import default_config

from _fake_driver import device_view, fake_launch  # noqa: F401 - fixture


def test_the_reduce_add_build_stores_by_tma_reduce_add() -> None:
    cfg = default_config(Backend.TMA)
    plain = compile_cuda("gemm.cu", arch="sm_90a", defines={**Backend.TMA.defines, **cfg.defines}).ptx
    cfg = cfg.__class__(**{**cfg.__dict__, "store_add": True})
    ptx = compile_cuda("gemm.cu", arch="sm_90a", defines={**Backend.TMA.defines, **cfg.defines}).ptx
    add = "cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group"
    assert add in ptx and add not in plain
    assert "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group" in plain


A, B, C = 0x100000, 0x200000, 0x300000


@pytest.mark.parametrize("kwargs, match", [
    ({"reduce": "mul"}, r"reduce='mul'.*None \(store C\) or \"add\""),
    ({"reduce": "add", "c": None}, r'c=None.*needed with reduce="add"'),
    ({"reduce": "add", "beta": 0.5}, r'beta=0.5.*must be 0 with reduce="add"'),
    ({"reduce": "add", "splits": 2}, r'splits=2.*must be 1 with reduce="add"'),
    ({"reduce": "add", "backend": "cp.async"}, r"backend='cp.async'.*no reducing store"),
    ({"reduce": "add", "n": 60}, r"c=.*rows of a multiple of 16 bytes"),
    ({"sms": 0}, r"sms=0.*\[1, 132\]"),
    ({"sms": 133}, r"sms=133.*\[1, 132\]"),
    ({"sms": 1, "cluster": 2}, r"sms=1.*at least the cluster's 2 CTAs"),
])
def test_reduce_and_sms_argument_errors(fake_launch, kwargs, match) -> None:
    n = kwargs.pop("n", 64)
    a, b = device_view(A, (64, 64), "float16"), device_view(B, (n, 64), "float16")
    c = kwargs.pop("c", device_view(C, (64, n), "float16", strides=(128, 2)))
    with pytest.raises(InvalidArgumentError, match=match):
        plan_gemm(a, b, c, **{"backend": "tma", **kwargs})


def test_all_gather_argument_errors(fake_launch, monkeypatch) -> None:
    import tmakit.ops.all_gather_gemm as agg

    monkeypatch.setattr(agg, "sm_count", lambda device: 132)
    b = device_view(B, (64, 64), "float16")
    out = device_view(C, (128, 64), "float16")
    s0, s1 = device_view(A, (64, 64), "float16"), device_view(A + 0x10000, (64, 64), "float16")
    cases = [
        (([], b), {}, r"a_shards='list'.*non-empty sequence"),
        (([s0, device_view(A + 0x10000, (64, 64), "float32")], b), {"out": out}, r"a_shards\[1\].*bfloat16 or float16"),
        (([s0, device_view(A + 0x10000, (64, 32), "float16")], b), {"out": out}, r"a_shards\[1\].*\(rows, K\), K = 64 as in a_shards\[0\]"),
        (([s0, s1], b), {"out": device_view(C, (100, 64), "float16")}, r"out=.*must be \(128, 64\)"),
        (([s0, s1], b), {"out": out}, r"rank=None.*must be given: 2 of a_shards are on GPU 0"),
        (([s0, s1], b), {"out": out, "rank": 2}, r"rank=2.*\[0, 2\)"),
        (([s0, s1], b), {"out": out, "rank": 0, "copy_blocks": 132}, r"copy_blocks=132.*\[1, 132\)"),
        (([s0, s1], b), {"out": out, "rank": 0, "overlap_rows": 65}, r"overlap_rows=65.*\[0, 64\]"),
        (([s0, s1], b), {"out": device_view(A + 0x1000, (128, 64), "float16"), "rank": 0}, r"out=.*overlaps a_shards\[0\]"),
        (([s0, s1], b), {"rank": 0}, r"out=None.*only for torch shards"),
    ]
    for args, kwargs, match in cases:
        with pytest.raises(InvalidArgumentError, match=match):
            plan_all_gather_gemm(*args, **kwargs)


def test_odd_operands_are_named_in_the_callers_order(fake_launch, monkeypatch) -> None:
    """Shards and B of the wrong rank, dtype or K, rows that break TMA's 16-byte rule: each a TmakitError naming
    the argument the caller passed (not a slice the plan would make of it), B before later arguments."""
    import tmakit.ops.all_gather_gemm as agg

    monkeypatch.setattr(agg, "sm_count", lambda device: 132)
    s0, s1 = device_view(A, (64, 64), "float16"), device_view(A + 0x10000, (64, 64), "float16")
    b, out = device_view(B, (64, 64), "float16"), device_view(C, (128, 64), "float16")
    gathered = device_view(0x900000, (128, 64), "float16")
    cases = [
        (([device_view(A, (64,), "float16"), s1], b), {"out": out}, r"a_shards\[0\].*must be 2-D"),
        (([s0, s1], device_view(B, (), "float16")), {"out": out}, r"b=.*must be 2-D"),
        (([s0, s1], device_view(B, (64, 64), "float32")), {"out": out}, r"b=.*must match the shards' dtype"),
        (([s0, s1], device_view(B, (64, 32), "float16")), {"out": out, "copy_blocks": 0},
         r"b=.*\(N, K\) with b_major=\"k\", K = 64"),
        (([device_view(A, (64, 60), "float16"), device_view(A + 0x10000, (64, 60), "float16")],
          device_view(B, (64, 60), "float16", strides=(128, 2))), {"out": out},
         r"a_shards=.*rows of 60 x 2 bytes.*multiple of 16"),
        (([s0, s1], device_view(B, (60, 64), "float16")), {"out": device_view(C, (128, 60), "float16")},
         r"out=.*row pitch 120 bytes"),
        (([s0, s1], b), {"out": out, "rank": 0, "gathered": gathered, "overlap_rows": -1}, r"overlap_rows=-1"),
    ]
    for args, kwargs, match in cases:
        with pytest.raises(InvalidArgumentError, match=match):
            plan_all_gather_gemm(*args, **kwargs)
    a = device_view(A, (128, 64), "float16")
    o0, o1 = device_view(C, (64, 64), "float16"), device_view(C + 0x10000, (64, 64), "float16")
    cases = [
        ((a, device_view(B, (64,), "float16"), [o0, o1]), {"rank": 0}, r"b=.*must be 2-D"),
        ((a, b, [device_view(C, (64, 32), "float16"), o1]), {"rank": 0}, r"outs\[0\]=.*must be \(rows, 64\)"),
        ((a, b, [o0, device_view(C + 0x10000, (64, 64), "float64")]), {"rank": 0},
         r"outs\[1\]=.*must be \(rows, 64\) of float16"),
        ((a, b, [o0, o1]), {"rank": 0, "out_dtype": "bfloat16"}, r"out_dtype='bfloat16'.*float16.*or float32"),
        ((device_view(A, (128, 64), "float32"), b, [o0, o1]), {"rank": 0}, r"a=.*must be bfloat16 or float16"),
    ]
    for args, kwargs, match in cases:
        with pytest.raises(InvalidArgumentError, match=match):
            plan_gemm_reduce_scatter(*args, **kwargs)


def test_every_output_row_comes_once_from_its_own_source_row(monkeypatch) -> None:
    """plan_all_gather_gemm's pieces, over random ranks, shard sizes (empty ones too) and overlap cuts: the copies
    fill every row of the gathered A once, from the shard that holds it; the GEMMs write every output row once,
    the part beside the copies from the own shard (it is not yet in the gathered A), the rest from the gathered A
    at the same row."""
    import tmakit.ops.all_gather_gemm as agg

    class Quiet:  # streams and events: only their order matters, which the GPU tests check
        def __init__(self, *args, **kwargs): pass
        def record(self, *args): return self
        def wait(self, *args): pass
        def close(self): pass

    copies, gemms = [], []
    monkeypatch.setattr(agg, "sm_count", lambda device: 132)
    monkeypatch.setattr(agg, "Event", Quiet)
    monkeypatch.setattr(agg, "Stream", Quiet)
    monkeypatch.setattr(agg, "as_stream", lambda stream, device=None: Quiet())
    monkeypatch.setattr(agg._driver, "enable_peer_access", lambda device, peer: None)
    monkeypatch.setattr(agg, "plan_copy", lambda dst, src, **kw: copies.append((dst, src)) or (lambda: None))
    monkeypatch.setattr(agg, "plan_gemm", lambda a, b, c, **kw: gemms.append((a, c)) or (lambda: None))
    rng = random.Random(_seed())
    k, n, item = 64, 64, 2
    for _ in range(1500):
        world = rng.randint(1, 5)
        rows = [rng.choice((0, 1, 100, 256, 300, 512, 1000)) for _ in range(world)]
        own = rng.randrange(world)
        rows[own] = max(rows[own], rng.choice((0, 1, 700)))
        shards, at = [], 0x1000000
        for i, r in enumerate(rows):
            shards.append(device_view(at, (r, k), "float16", device=0 if i == own else 1))
            at += (r + 1) * k * item + 4096
        total = sum(rows)
        if not total:
            continue
        out = device_view(0x40000000, (total, n), "float16")
        gathered = device_view(0x60000000, (total, k), "float16")
        cut = rng.choice((None, 0, rows[own] // 2, rows[own]))
        copies.clear()
        gemms.clear()
        agg.plan_all_gather_gemm(shards, device_view(0x20000000, (n, k), "float16"), out, rank=own,
                                 gathered=gathered, overlap_rows=cut)
        starts = [sum(rows[:i]) for i in range(world)]
        filled = [0] * total
        for dst, src in copies:
            r0 = (dst.ptr - gathered.ptr) // (k * item)
            r = next(i for i, s in enumerate(shards) if s.ptr == src.ptr)
            assert r0 == starts[r] and dst.shape == src.shape == shards[r].shape, (rows, own, cut)
            for i in range(dst.shape[0]):
                filled[r0 + i] += 1
        assert filled == [1] * total, (rows, own, cut)
        written, after = [0] * total, 0
        for a, c in gemms:
            r0 = (c.ptr - out.ptr) // (n * item)
            assert a.shape[0] == c.shape[0] >= 1
            if gathered.ptr <= a.ptr < gathered.ptr + total * k * item:
                assert (a.ptr - gathered.ptr) // (k * item) == r0, (rows, own, cut)
                after += 1
            else:
                assert starts[own] + (a.ptr - shards[own].ptr) // (k * item) == r0, (rows, own, cut)
            for i in range(c.shape[0]):
                written[r0 + i] += 1
        assert written == [1] * total, (rows, own, cut)
        assert after <= 2 and (after <= 1 or cut != 0), (rows, own, cut, after)  # no cut: one GEMM of the rest


def test_reduce_scatter_argument_errors(fake_launch) -> None:
    a, b = device_view(A, (128, 64), "float16"), device_view(B, (64, 64), "float16")
    o0, o1 = device_view(C, (64, 64), "float16"), device_view(C + 0x10000, (64, 64), "float16")
    cases = [
        ((a, b, []), {}, r"outs='list'.*non-empty sequence"),
        ((a, b, [o0, device_view(C + 0x10000, (32, 64), "float16")]), {"rank": 0}, r"outs=.*rows \[64, 32\].*must add up to a's 128 rows"),
        ((a, b, [o0, o1]), {}, r"rank=None.*must be given: 2 of outs are on GPU 0"),
        ((a, b, [o0, device_view(C + 0x40, (64, 64), "float16")]), {"rank": 0}, r"outs\[0\]=.*overlaps outs\[1\]"),
        ((a, b, [o0, device_view(A, (64, 64), "float16")]), {"rank": 0}, r"outs\[1\]=.*overlaps a"),
        ((device_view(A, (128,), "float16"), b, [o0, o1]), {"rank": 0}, r"a=.*must be 2-D"),
    ]
    for args, kwargs, match in cases:
        with pytest.raises(InvalidArgumentError, match=match):
            plan_gemm_reduce_scatter(*args, **kwargs)


def test_the_overlap_hides_the_pulls_only_where_they_are_long() -> None:
    """choose_overlap: a whole number of cluster rows of the own shard (or all of it, or none); where the pulls take
    as long as the GEMM (small N) the whole own shard runs beside them, where they are short against one turn
    (large N) at most one step does, and the count falls as N grows."""
    from tmakit.ops.all_gather_gemm import choose_overlap

    for rows in ([2048, 2048], [2048, 1000, 3000, 512], [300, 5000]):
        for own in range(len(rows)):
            for n in (512, 1024, 4096, 16384, 65536):
                h = choose_overlap(rows, own, n, 8192, 2, 132, 116)
                assert h == rows[own] or (0 <= h < rows[own] and h % 256 == 0), (rows, own, n, h)
    counts = [choose_overlap([2048, 2048], 0, n, 8192, 2, 132, 116) for n in (1024, 4096, 16384, 65536)]
    assert counts[0] == 2048 and counts[-1] <= 256 and counts == sorted(counts, reverse=True), counts


def test_symmetric_views_need_torch_distributed() -> None:
    """Without torch (CI) the error names the tensor and torch.distributed; with torch but no process group, the
    group."""
    from tmakit.ops import symmetric_views

    try:
        import torch.distributed  # noqa: F401
    except ImportError:
        match = r"tensor=.*torch.distributed is not importable"
    else:
        match = r"group=None.*initialized torch.distributed process group"
    with pytest.raises(InvalidArgumentError, match=match):
        symmetric_views(object())


# ----------------------------------------------------------------------------------------------------------
# GPU tier
# ----------------------------------------------------------------------------------------------------------

RUNS = 3  # each case run several times on fresh poison: async-proxy races do not show in compute-sanitizer


def _seed() -> int:
    return int(os.environ.get("TMAKIT_TEST_SEED", "20261126"))


def _close(torch, got, want, k, what):
    err = (got.float() - want).abs().max().item()
    tol = 2e-2 * want.abs().max().item() + 1e-2 * k ** 0.5 / 8
    assert err <= tol, f"{what}: max error {err:.4g} > {tol:.4g}"


@pytest.mark.requires_sm90
def test_reduce_add_adds_into_c() -> None:
    """plan_gemm(reduce="add") twice into a C that holds values: C + 2 a @ b (bf16 and fp32 C)."""
    torch = pytest.importorskip("torch")
    g = torch.Generator(device="cuda").manual_seed(_seed())
    for (m, n, k), out_dtype in (((300, 264, 200), torch.bfloat16), ((1000, 520, 1000), torch.float32)):
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=g)
        c0 = torch.randn(m, n, device="cuda", dtype=out_dtype, generator=g)
        c = c0.clone()
        plan = plan_gemm(a, b, c, reduce="add", out_dtype=None if out_dtype is torch.bfloat16 else "float32")
        plan()
        plan()
        torch.cuda.synchronize()
        want = c0.float() + 2 * (a.float() @ b.float().t())
        _close(torch, c, want, k, f"reduce-add {m}x{n}x{k} {out_dtype}")
        with pytest.raises(InvalidArgumentError, match=r'c=None.*reduce="add"'):
            plan(a, b)  # re-pointed without C: nothing to add into


def _devices(torch):
    return list(range(torch.cuda.device_count()))


def _sync(torch):
    for d in _devices(torch):
        torch.cuda.synchronize(d)


@pytest.mark.requires_2gpus
def test_a_gemm_stores_into_a_peer_output() -> None:
    """C on GPU 1, A and B on GPU 0: the TMA stores go over the peer path (plain and reduce-add)."""
    torch = pytest.importorskip("torch")
    a = torch.randn(520, 256, device="cuda:0", dtype=torch.bfloat16)
    b = torch.randn(392, 256, device="cuda:0", dtype=torch.bfloat16)
    want = (a.float() @ b.float().t()).cpu()
    c = torch.full((520, 392), float("nan"), device="cuda:1", dtype=torch.bfloat16)
    plan_gemm(a, b, c)()
    _sync(torch)
    _close(torch, c.cpu(), want, 256, "peer output")
    plan_gemm(a, b, c, reduce="add")()
    _sync(torch)
    _close(torch, c.cpu(), 2 * want, 256, "peer reduce-add")


@pytest.mark.requires_2gpus
@pytest.mark.parametrize("case", range(4))
def test_all_gather_gemm_on_every_gpu(case) -> None:
    """Every rank's plan: out = concat(shards) @ B_r, the shards uneven (one may be empty). Ranks outnumber the GPUs
    by one (rank r's shard and plan on GPU r mod GPUs), so a middle rank's plan (its rest of the gathered A in two
    pieces around its own rows) runs too; poisoned out and gathered, several runs."""
    torch = pytest.importorskip("torch")
    rng = random.Random(_seed() + case)
    gpus = len(_devices(torch))
    world = gpus + 1
    at = [r % gpus for r in range(world)]
    k, n = 8 * rng.randint(8, 200), 8 * rng.randint(8, 300)
    rows = [rng.choice((0, 1, 8 * rng.randint(1, 160), rng.randint(1, 1500))) for _ in range(world)]
    rows[rng.randrange(world)] = max(rows[0], 64)
    b_major = rng.choice(("k", "n"))
    dtype = rng.choice((torch.bfloat16, torch.float16))
    gen = torch.Generator().manual_seed(_seed() + case)
    shards_host = [torch.randn(r, k, generator=gen).to(dtype) for r in rows]
    a_full = torch.cat(shards_host).float()
    shards = [s.to(f"cuda:{d}") for s, d in zip(shards_host, at)]
    plans, outs, gathered, wants = [], [], [], []
    for r, d in enumerate(at):
        bh = torch.randn(n, k, generator=gen).to(dtype)
        wants.append(a_full @ bh.float().t())
        b = (bh if b_major == "k" else bh.t().contiguous()).to(f"cuda:{d}")
        outs.append(torch.empty(sum(rows), n, device=f"cuda:{d}", dtype=dtype))
        mine = torch.empty(sum(rows), k, device=f"cuda:{d}", dtype=dtype) if r % 2 else None  # or the plan's
        split = rng.choice((None, 0, rows[r] // 2, rows[r]))  # the own shard's GEMM beside the copies: cut anywhere
        plans.append(plan_all_gather_gemm(shards, b, outs[-1], rank=r, gathered=mine, b_major=b_major,
                                          overlap_rows=split))
        gathered.append(plans[-1].gathered)
    for run in range(RUNS):
        for o, g in zip(outs, gathered):
            o.fill_(float("nan"))
            g.fill_(float("nan"))
        _sync(torch)
        for p in plans:
            p()
        _sync(torch)
        for r, (o, g, want) in enumerate(zip(outs, gathered, wants)):
            what = (f"seed {_seed() + case} run {run} rank {r} (GPU {at[r]}, overlap {plans[r].overlap_rows}): "
                    f"rows {rows} k {k} n {n} b_major {b_major}")
            assert torch.equal(g.cpu(), torch.cat(shards_host)), f"{what}: gathered A differs"
            _close(torch, o.cpu(), want, k, what)


@pytest.mark.requires_2gpus
@pytest.mark.parametrize("case", range(4))
def test_gemm_reduce_scatter_on_every_gpu(case) -> None:
    """Rank g adds chunk r of a_g @ b_g into rank r's chunk for every r; each chunk ends as the sum's rows. Ranks
    outnumber the GPUs by one (rank r on GPU r mod GPUs): a GPU adds from two ranks, some chunks are its own."""
    torch = pytest.importorskip("torch")
    rng = random.Random(_seed() + 100 + case)
    gpus = len(_devices(torch))
    at = [r % gpus for r in range(gpus + 1)]
    n = 8 * rng.randint(8, 300)
    rows = [rng.choice((1, 8 * rng.randint(1, 160), rng.randint(1, 1500))) for _ in at]
    ks = [8 * rng.randint(8, 150) for _ in at]  # each rank's K slice (uneven)
    out_f32 = case % 2 == 1
    gen = torch.Generator().manual_seed(_seed() + 100 + case)
    a_h = [torch.randn(sum(rows), kk, generator=gen).to(torch.bfloat16) for kk in ks]
    b_h = [torch.randn(n, kk, generator=gen).to(torch.bfloat16) for kk in ks]
    want = sum(a.float() @ b.float().t() for a, b in zip(a_h, b_h))
    dtype = torch.float32 if out_f32 else torch.bfloat16
    outs = [torch.empty(r, n, device=f"cuda:{d}", dtype=dtype) for r, d in zip(rows, at)]
    plans = [plan_gemm_reduce_scatter(a.to(f"cuda:{d}"), b.to(f"cuda:{d}"), outs, rank=r,
                                      out_dtype="float32" if out_f32 else None)
             for r, (a, b, d) in enumerate(zip(a_h, b_h, at))]
    starts = np.cumsum([0] + rows)
    for run in range(RUNS):
        for o in outs:
            o.zero_()
        _sync(torch)
        for p in plans:
            p()
        _sync(torch)
        for r, o in enumerate(outs):
            what = f"seed {_seed() + 100 + case} run {run} chunk {r}: rows {rows} ks {ks} n {n} fp32 {out_f32}"
            _close(torch, o.cpu(), want[starts[r]:starts[r + 1]], sum(ks), what)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ranked(rank: int, world: int, port: int) -> None:
    """One process per GPU: symmetric-memory shards and chunks, the plans on symmetric_views, checked against a
    float32 product of the same (seeded) data."""
    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    from tmakit.ops import symmetric_views

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    try:
        m, n, k = 384, 520, 264
        gen = torch.Generator().manual_seed(_seed())
        a_h = [torch.randn(m, k, generator=gen).to(torch.bfloat16) for _ in range(world)]
        b_h = torch.randn(n, k, generator=gen).to(torch.bfloat16)
        pad = symm_mem.empty(1000, dtype=torch.uint8, device=f"cuda:{rank}")  # the shard is not first in its pool
        both = symm_mem.empty((2, m, k), dtype=torch.bfloat16, device=f"cuda:{rank}")
        both[0].fill_(-7)
        shard = both[1]  # a slice: every rank's view must start at the same offset
        shard.copy_(a_h[rank])
        views = symmetric_views(shard)
        handle = symm_mem.rendezvous(shard, dist.group.WORLD.group_name)
        handle.barrier(channel=0)
        torch.cuda.synchronize()
        assert all(torch.equal(v.cpu(), a) for v, a in zip(views, a_h)), "symmetric views show other bytes"
        with pytest.raises(InvalidArgumentError, match=r"must come from torch.distributed._symmetric_memory.empty"):
            symmetric_views(torch.empty(4, device=f"cuda:{rank}"))  # torch's allocator, not symmetric memory
        with pytest.raises(InvalidArgumentError, match=r"tensor=.*must be contiguous"):
            symmetric_views(shard.t())
        out = torch.full((world * m, n), float("nan"), device=f"cuda:{rank}", dtype=torch.bfloat16)
        plan_all_gather_gemm(views, b_h.to(f"cuda:{rank}"), out, rank=rank)()
        torch.cuda.synchronize()
        _close(torch, out.cpu(), torch.cat(a_h).float() @ b_h.float().t(), k, f"rank {rank} all-gather GEMM")
        # reduce-scatter: every rank's a (world m, k) @ b; rank r owns rows [r m, (r + 1) m) of the sum
        chunk = symm_mem.empty((m, n), dtype=torch.bfloat16, device=f"cuda:{rank}")
        chunk.zero_()
        chunks = symmetric_views(chunk)
        mine = torch.cat(a_h).roll(rank, 1)  # a different partial per rank
        plan = plan_gemm_reduce_scatter(mine.to(f"cuda:{rank}"), b_h.to(f"cuda:{rank}"), chunks, rank=rank)
        hc = symm_mem.rendezvous(chunk, dist.group.WORLD.group_name)
        hc.barrier(channel=0)  # every chunk zeroed before anyone adds
        plan()
        hc.barrier(channel=0)  # every rank's adds issued and done before anyone reads
        torch.cuda.synchronize()
        want = sum(torch.cat(a_h).roll(r, 1).float() @ b_h.float().t() for r in range(world))
        _close(torch, chunk.cpu(), want[rank * m:(rank + 1) * m], k * world, f"rank {rank} reduce-scatter")
        del pad
    finally:
        dist.destroy_process_group()


@pytest.mark.requires_2gpus
def test_one_process_per_gpu_on_symmetric_memory() -> None:
    torch = pytest.importorskip("torch")
    import torch.multiprocessing as mp

    world = torch.cuda.device_count()
    mp.spawn(_ranked, args=(world, _free_port()), nprocs=world, join=True)
