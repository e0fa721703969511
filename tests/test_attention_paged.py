"""tmakit.ops.plan_attention_paged: K and V from a paged cache through a block table.

CPU: the paged build compiles and lints; argument errors name the parameter. GPU: seeded random caches whose every
slot outside the sequences' keys is NaN (a read of one would show), block tables of shuffled page ids padded with
ids past the cache, lengths ending inside or at the end of a page, decode (Sq = 1) and causal prefill, page sizes
16 to 128, grouped-query heads, D 64/128/256, against float32 attention on the gathered keys; three runs each.
"""
from __future__ import annotations

import math
import os
import random

import pytest

from tmakit.backend import Backend
from tmakit.build import compile_cuda
from tmakit.errors import InvalidArgumentError
from tmakit.ops import plan_attention_paged
from tmakit.ops.attention import default_config

from _fake_driver import FakeDeviceArray


def test_paged_build_compiles_and_lints() -> None:
    from tmakit import lint

    cfg = default_config(Backend.TMA, 128, True)
    code = compile_cuda("attention.cu", arch="sm_90a", defines={**cfg.defines, "TMAKIT_ATTN_PAGED": 1})
    assert "tensormap.replace.tile.global_dim" in code.ptx
    for entry in ("tmakit_attention_fwd_tma", "tmakit_attention_paged_maps"):
        report = lint(code, entry=entry)
        assert [f for f in report.findings if f.severity != "note"] == [], str(report)


def _fake(shape, typestr="<f2"):
    return FakeDeviceArray(shape, typestr)


@pytest.mark.parametrize("change, match", [
    ({"k_cache": _fake((10, 24, 2, 128)), "v_cache": _fake((10, 24, 2, 128))}, r"k_cache.*page size 24"),
    ({"k_cache": _fake((10, 16, 3, 128)), "v_cache": _fake((10, 16, 3, 128))}, r"k_cache.*H_kv dividing"),
    ({"block_table": _fake((3, 4), "<i4")}, r"block_table.*\(2, max_pages\)"),
    ({"seqlens_k": _fake((2,), "<i8")}, r"seqlens_k.*int64"),
    ({"q": _fake((2, 1, 4, 128, 1))}, r"q.*must be 4-D"),
])
def test_argument_errors(change, match) -> None:
    args = dict(q=_fake((2, 1, 4, 128)), k_cache=_fake((10, 16, 2, 128)), v_cache=_fake((10, 16, 2, 128)),
                block_table=_fake((2, 4), "<i4"), seqlens_k=_fake((2,), "<i4"))
    args.update(change)
    with pytest.raises(InvalidArgumentError, match=match):
        plan_attention_paged(**args)


def _seed() -> int:
    return int(os.environ.get("TMAKIT_TEST_SEED", "20261126"))


def _cases(seed: int):
    rng = random.Random(seed)
    for i in range(10):
        d = (64, 128, 256)[i % 3]
        page = rng.choice((16, 32, 64) if d == 256 else (16, 32, 64, 128))
        b = rng.choice((1, 3, 8))
        lens = [rng.choice((1, page, rng.randint(1, 3000))) for _ in range(b)]
        decode = i % 2 == 0
        h = rng.choice((4, 8))
        yield dict(d=d, page=page, lens=lens, decode=decode, h=h, hkv=rng.choice((1, 2, h)),
                   dtype=rng.choice(("bfloat16", "float16")))


@pytest.mark.requires_sm90
@pytest.mark.parametrize("i", range(10))
def test_paged_matches_float32_attention_on_the_gathered_keys(i) -> None:
    _check_paged(list(_cases(_seed()))[i], i)


# decodes of few sequences on long tables: packed grouped heads, keys split, and sequences of 1 or 17 keys whose
# splits are mostly empty (lse -inf, weight 0 in the combine)
SPLIT_CASES = [dict(d=128, page=16, lens=[1, 5000, 17, 1, 3000], decode=True, h=8, hkv=2, dtype="bfloat16"),
               dict(d=256, page=32, lens=[4000, 1], decode=True, h=4, hkv=4, dtype="float16"),
               dict(d=64, page=128, lens=[9000, 300, 2], decode=True, h=16, hkv=1, dtype="bfloat16")]


@pytest.mark.requires_sm90
@pytest.mark.parametrize("i", range(len(SPLIT_CASES)))
def test_paged_decode_split_over_the_keys(i) -> None:
    plan = _check_paged(SPLIT_CASES[i], 100 + i)
    assert plan.kv_splits > 1 and plan.packed == (SPLIT_CASES[i]["hkv"] < SPLIT_CASES[i]["h"])


# 40 sequences (the ranking warp walks them in two rounds of 32 lanes), ties among them
ORDER_CASE = dict(d=128, page=16, lens=[16, 300, 16, 5000, 1, 300, 64, 2] * 5, decode=True, h=4, hkv=4,
                  dtype="bfloat16")


@pytest.mark.requires_sm90
def test_paged_walks_the_sequences_longest_first() -> None:
    """The maps kernel's order (after the maps in the plan's workspace): every sequence once, by keys descending,
    ties by index; the outputs right whatever the order."""
    plan = _check_paged(ORDER_CASE, 200)
    lens, b = ORDER_CASE["lens"], len(ORDER_CASE["lens"])
    order = plan._maps_workspace.to_host().reshape(-1)[2 * b * 128:2 * b * 128 + 4 * b].view("<i4").tolist()
    assert order == sorted(range(b), key=lambda j: (-lens[j], j))


def _check_paged(case: dict, i: int):
    """The case's paged attention against float32 attention on each sequence's gathered keys, 3 runs on NaN-poisoned
    out and lse; returns the plan."""
    torch = pytest.importorskip("torch")
    d, page, lens, h, hkv = case["d"], case["page"], case["lens"], case["h"], case["hkv"]
    tdt = getattr(torch, case["dtype"])
    rng = random.Random(_seed() + i)
    gen = torch.Generator(device="cuda").manual_seed(_seed() + i)
    b = len(lens)
    need = [-(-n // page) for n in lens]
    pages = sum(need) + 3
    ids = list(range(pages))
    rng.shuffle(ids)
    max_pages = max(need) + 1
    table = torch.full((b, max_pages), pages + 7, dtype=torch.int32)  # padding past the cache
    k_cache = torch.full((pages, page, hkv, d), float("nan"), dtype=tdt, device="cuda")
    v_cache = torch.full_like(k_cache, float("nan"))
    keys, values = [], []
    for s, n in enumerate(lens):
        kk = torch.randn(n, hkv, d, device="cuda", generator=gen).to(tdt)
        vv = torch.randn(n, hkv, d, device="cuda", generator=gen).to(tdt)
        mine = [ids.pop() for _ in range(need[s])]
        for j, pid in enumerate(mine):
            table[s, j] = pid
            rows = min(page, n - j * page)
            k_cache[pid, :rows] = kk[j * page:j * page + rows]
            v_cache[pid, :rows] = vv[j * page:j * page + rows]
        keys.append(kk)
        values.append(vv)
    sq = 1 if case["decode"] else max(lens)
    causal = not case["decode"]
    q = torch.randn(b, sq, h, d, device="cuda", generator=gen).to(tdt)
    out = torch.empty_like(q)
    lse = torch.empty(b, h, sq, device="cuda")
    # every other pair of cases holds two Q slots whatever its tiles (its default follows them): decodes and
    # prefills alike (the cases alternate), and the packed split decode 102
    slots = 2 if d <= 128 and (i // 2) % 2 else None
    plan = plan_attention_paged(q, k_cache, v_cache, table.cuda(), torch.tensor(lens, dtype=torch.int32).cuda(), out,
                                causal=causal, lse=lse, q_slots=slots)
    assert slots is None or plan.config.q_slots == slots
    scale = 1.0 / math.sqrt(d)
    refs = []
    for s, n in enumerate(lens):
        qs = q[s].float().transpose(0, 1)
        ks = keys[s].float().transpose(0, 1).repeat_interleave(h // hkv, 0)
        vs = values[s].float().transpose(0, 1).repeat_interleave(h // hkv, 0)
        sc = qs @ ks.transpose(-1, -2) * scale
        if causal:
            sc = sc.masked_fill(torch.ones(sq, n, dtype=torch.bool, device="cuda").triu(1), float("-inf"))
        refs.append((torch.softmax(sc, -1) @ vs, torch.logsumexp(sc, -1)))
    for run in range(3):
        out.fill_(float("nan"))
        lse.fill_(float("nan"))
        plan()
        torch.cuda.synchronize()
        for s, (ro, rl) in enumerate(refs):
            got = out[s].float().transpose(0, 1)
            where = f"case {i} sequence {s} ({lens[s]} keys, pages of {page}) run {run} (seed {_seed()})"
            assert not torch.isnan(got).any(), f"{where}: NaN (a stale cache slot was read, or a row unwritten)"
            err = ((got - ro).norm() / ro.norm()).item()
            assert err < (1e-2 if case["dtype"] == "bfloat16" else 3e-3), f"{where}: relative error {err:.3g}"
            torch.testing.assert_close(lse[s], rl, rtol=1e-3, atol=2e-3)
    return plan
