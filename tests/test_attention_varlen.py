"""tmakit.ops.plan_attention_varlen: packed sequences, each sequence's maps built on the device.

CPU: the maps kernel and the attention kernel's variable-length path compile with the device-side map edit;
argument errors name the parameter. GPU: seeded random batches (lengths 1 to 3,000 queries and keys, equal or not,
some sequences of one row), causal or not, grouped-query heads, D 64/128/256, outputs and lse poisoned with NaN,
against float32 attention per sequence; each case three times. The keys past the last sequence are NaN (a read of
them would show); a sequence's next neighbour's keys are finite and masked, so that boundary shows only in the
values compared.
"""
from __future__ import annotations

import math
import os
import random

import pytest

from tmakit.backend import Backend
from tmakit.build import compile_cuda
from tmakit.errors import InvalidArgumentError
from tmakit.ops import plan_attention_varlen
from tmakit.ops.attention import default_config

from _fake_driver import FakeDeviceArray


def test_varlen_kernels_compile_with_the_device_side_map_edit() -> None:
    cfg = default_config(Backend.TMA, 128, True)
    code = compile_cuda("attention.cu", arch="sm_90a", defines={**cfg.defines, "TMAKIT_ATTN_VARLEN": 1})
    assert "tmakit_attention_varlen_maps" in code.entry_names()
    assert "tensormap.replace.tile.global_dim.shared::cta.b1024.b32" in code.ptx
    assert "fence.proxy.tensormap::generic.acquire.gpu" in code.ptx
    from tmakit import lint

    for entry in ("tmakit_attention_fwd_tma", "tmakit_attention_varlen_maps"):  # its own maps: notes, no warnings
        report = lint(code, entry=entry)
        assert [f for f in report.findings if f.severity != "note"] == [], str(report)


def _fake(shape, typestr="<f2"):
    return FakeDeviceArray(shape, typestr)  # at address 0: viewed without a driver


@pytest.mark.parametrize("change, match", [
    ({"q": _fake((100, 4, 128, 1))}, r"q.*must be 3-D"),
    ({"k": _fake((90, 3, 128))}, r"k.*H_kv dividing q's 4 heads"),
    ({"k": _fake((90, 4, 96)), "v": _fake((90, 4, 96))}, r"k.*head dim"),
    ({"cu_seqlens_q": _fake((3,), "<i8")}, r"cu_seqlens_q.*int64.*must be contiguous int32"),
    ({"cu_seqlens_k": _fake((4,), "<i4")}, r"cu_seqlens_k.*must match cu_seqlens_q"),
    ({"max_seqlen_q": 0}, r"max_seqlen_q.*\[1, 100\]"),
    ({"max_seqlen_q": 101}, r"max_seqlen_q"),
    ({"causal": 1}, r"causal.*True or False"),
])
def test_argument_errors(change, match) -> None:
    args = dict(q=_fake((100, 4, 128)), k=_fake((90, 2, 128)), v=_fake((90, 2, 128)), cu_seqlens_q=_fake((3,), "<i4"),
                cu_seqlens_k=_fake((3,), "<i4"), max_seqlen_q=60)
    args.update(change)
    with pytest.raises(InvalidArgumentError, match=match):
        plan_attention_varlen(**args)


def _seed() -> int:
    return int(os.environ.get("TMAKIT_TEST_SEED", "20261126"))


def _cases(seed: int):
    rng = random.Random(seed)
    for i in range(10):
        n = rng.choice((1, 2, 3, 7, 16))
        lq = [rng.choice((1, rng.randint(1, 200), rng.randint(200, 3000))) for _ in range(n)]
        same = rng.random() < 0.5
        lk = list(lq) if same else [rng.choice((1, rng.randint(1, 3000))) for _ in range(n)]
        h = rng.choice((2, 4, 8))
        yield dict(lq=lq, lk=lk, h=h, hkv=rng.choice([x for x in (1, 2, h) if h % x == 0]),
                   d=(64, 128, 256)[i % 3], causal=rng.random() < 0.5, dtype=rng.choice(("bfloat16", "float16")))


@pytest.mark.requires_sm90
@pytest.mark.parametrize("i", range(10))
def test_varlen_matches_float32_attention_per_sequence(i) -> None:
    torch = pytest.importorskip("torch")
    case = list(_cases(_seed()))[i]
    lq, lk, h, hkv, d, causal = case["lq"], case["lk"], case["h"], case["hkv"], case["d"], case["causal"]
    tdt = getattr(torch, case["dtype"])
    gen = torch.Generator(device="cuda").manual_seed(_seed() + i)
    tq, tk = sum(lq), sum(lk)
    q = torch.randn(tq, h, d, device="cuda", generator=gen).to(tdt)
    kv = torch.randn(2, tk + 64, hkv, d, device="cuda", generator=gen).to(tdt)
    kv[:, tk:] = float("nan")  # rows past the last key: read, they would show
    k, v = kv[0, :tk], kv[1, :tk]
    cq = torch.tensor([0] + lq, device="cuda").cumsum(0).to(torch.int32)
    ck = torch.tensor([0] + lk, device="cuda").cumsum(0).to(torch.int32)
    out = torch.empty_like(q)
    lse = torch.empty(h, tq, device="cuda")
    # every other case holds two Q slots whatever its tiles (its default follows them)
    slots = 2 if d <= 128 and i % 2 else None
    plan = plan_attention_varlen(q, k, v, cq, ck, max(lq), out, causal=causal, lse=lse, q_slots=slots)
    assert slots is None or plan.config.q_slots == slots
    scale = 1.0 / math.sqrt(d)
    refs = []
    for b in range(len(lq)):
        qs = q[cq[b]:cq[b + 1]].float().transpose(0, 1)  # (H, lq, D)
        ks = k[ck[b]:ck[b + 1]].float().transpose(0, 1).repeat_interleave(h // hkv, 0)
        vs = v[ck[b]:ck[b + 1]].float().transpose(0, 1).repeat_interleave(h // hkv, 0)
        s = qs @ ks.transpose(-1, -2) * scale
        if causal:
            s = s.masked_fill(torch.ones(lq[b], lk[b], dtype=torch.bool, device="cuda").triu(1), float("-inf"))
        refs.append((torch.softmax(s, -1) @ vs, torch.logsumexp(s, -1)))
    for run in range(3):
        out.fill_(float("nan"))
        lse.fill_(float("nan"))
        plan()
        torch.cuda.synchronize()
        for b, (ro, rl) in enumerate(refs):
            got = out[cq[b]:cq[b + 1]].float().transpose(0, 1)
            gl = lse[:, cq[b]:cq[b + 1]]
            where = f"case {i} sequence {b} (lq {lq[b]}, lk {lk[b]}) run {run} (seed {_seed()})"
            rows_seen = torch.isfinite(rl)  # every row sees key 0 (top-left causal): all of them, in practice
            assert torch.equal(torch.isnan(got).any(-1), ~rows_seen), f"{where}: NaN rows differ"
            if rows_seen.any():
                err = ((got - ro)[rows_seen].norm() / ro[rows_seen].norm()).item()
                assert err < (1e-2 if case["dtype"] == "bfloat16" else 3e-3), f"{where}: relative error {err:.3g}"
                torch.testing.assert_close(gl[rows_seen], rl[rows_seen], rtol=1e-3, atol=2e-3)
