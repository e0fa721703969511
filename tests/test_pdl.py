"""GPU tier: programmatic dependent launch (``pdl=True``). The TMA plans launch every kernel with it, so each may
start while the kernel before it in the stream still runs. The tests that show each wait holds put a predecessor
in front that lets its dependents launch at once and writes their input 300 us later (``late_copy``; a control
reader without the wait sees the old bytes): the GEMM, split-K reduce, attention, combine, grouped, paged and
varlen launches must see the new ones. The chains (each plan's input the previous plan's NaN-poisoned output, all
queued without a host wait) and the back-to-back launches of one plan are regression tests of the same ordering
where the predecessor does not trigger early. Each runs several times: such races are timing-bound.
"""
from __future__ import annotations

import math
import os

import pytest

from tmakit.ops import plan_attention, plan_attention_paged, plan_attention_varlen, plan_gemm, plan_grouped_gemm

ROUNDS = 4


def _seed() -> int:
    return int(os.environ.get("TMAKIT_TEST_SEED", "20261126"))


def _rel(got, ref) -> float:
    return ((got.float() - ref).norm() / ref.norm()).item()


@pytest.mark.requires_sm90
@pytest.mark.parametrize("m, n, beta, dtype", [(256, 256, 0.0, "bfloat16"), (2048, 1536, 0.0, "float16"),
                                               (1000, 768, 0.5, "float32"), (4096, 4096, 1.0, "bfloat16")])
def test_gemm_chain(m, n, beta, dtype) -> None:
    """D_i = D_{i-1} @ B_i (+ beta C_i) for 6 plans back to back: each reads what the one before it wrote (an fp32
    output is cast into the next stage's input by a torch kernel between them). The GEMM does not trigger its
    dependents early, so this chain is a regression test; the late predecessor below is the test of the wait."""
    torch = pytest.importorskip("torch")
    gen = torch.Generator(device="cuda").manual_seed(_seed())
    in_dtype = torch.bfloat16 if dtype == "float32" else getattr(torch, dtype)
    out_dtype = getattr(torch, dtype)
    bs = [(torch.randn(n, n, device="cuda", generator=gen) / math.sqrt(n)).to(in_dtype) for _ in range(6)]
    cs = [torch.randn(m, n, device="cuda", generator=gen).to(out_dtype) for _ in range(6)]
    outs = [torch.empty(m, n, device="cuda", dtype=out_dtype) for _ in range(6)]
    ins = [torch.randn(m, n, device="cuda", generator=gen).to(in_dtype)]
    ins += [torch.empty(m, n, device="cuda", dtype=in_dtype) for _ in range(5)] if dtype == "float32" else outs[:5]
    plans = [plan_gemm(ins[i], bs[i], outs[i], beta=beta) for i in range(6)]
    assert all(p.config.backend.name == "TMA" for p in plans)
    for r in range(ROUNDS):
        for out, c in zip(outs, cs):
            if beta:
                out.copy_(c)  # C, read by the GEMM: a stale read finds the previous round's D
            else:
                out.fill_(float("nan"))
        for i, plan in enumerate(plans):
            plan()
            if dtype == "float32" and i < 5:
                ins[i + 1].copy_(outs[i])
        torch.cuda.synchronize()
        for i in range(6):
            ref = ins[i].float() @ bs[i].float().T + beta * cs[i].float()
            err = _rel(outs[i], ref)
            assert err < 2e-2, f"{m}x{n} beta {beta} {dtype}: stage {i} round {r}: relative error {err:.3g} (seed {_seed()})"


@pytest.mark.requires_sm90
@pytest.mark.parametrize("causal, s", [(False, 512), (True, 1000)])
def test_attention_chain(causal, s) -> None:
    """out_i is q of attention i + 1, 5 plans back to back."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    gen = torch.Generator(device="cuda").manual_seed(_seed() + 1)
    b, h, d = 2, 8, 128
    k, v = (torch.randn(b, h, s, d, device="cuda", generator=gen).bfloat16() for _ in range(2))
    qs = [torch.randn(b, h, s, d, device="cuda", generator=gen).bfloat16()]
    qs += [torch.empty_like(qs[0]) for _ in range(5)]
    plans = [plan_attention(qs[i], k, v, qs[i + 1], causal=causal) for i in range(5)]
    for r in range(ROUNDS):
        for x in qs[1:]:
            x.fill_(float("nan"))
        for plan in plans:
            plan()
        torch.cuda.synchronize()
        for i in range(5):
            ref = F.scaled_dot_product_attention(qs[i].float(), k.float(), v.float(), is_causal=causal)
            err = _rel(qs[i + 1], ref)
            assert err < 1e-2, f"causal {causal} S {s}: stage {i} round {r}: relative error {err:.3g} (seed {_seed()})"


@pytest.mark.requires_sm90
def test_paged_decode_chain() -> None:
    """Paged decodes whose q is the previous decode's out (maps kernel, attention launch, combine of the split keys,
    per stage), the lengths new each round: a regression test of the chain (the late predecessor below is the test
    of each wait)."""
    torch = pytest.importorskip("torch")
    gen = torch.Generator(device="cuda").manual_seed(_seed() + 2)
    b, h, hkv, d, page, max_pages = 6, 8, 2, 128, 16, 40
    pages = b * max_pages
    k_cache, v_cache = (torch.randn(pages, page, hkv, d, device="cuda", generator=gen).bfloat16() for _ in range(2))
    table = torch.randperm(pages, device="cuda", generator=gen).int().reshape(b, max_pages)
    lens = torch.empty(b, dtype=torch.int32, device="cuda")
    qs = [torch.randn(b, 1, h, d, device="cuda", generator=gen).bfloat16()] + [
        torch.empty(b, 1, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
    plans = [plan_attention_paged(qs[i], k_cache, v_cache, table, lens, qs[i + 1]) for i in range(4)]
    for r in range(ROUNDS):
        lengths = torch.randint(1, max_pages * page + 1, (b,), device="cuda", generator=gen, dtype=torch.int32)
        for x in qs[1:]:
            x.fill_(float("nan"))
        lens.copy_(lengths)
        for plan in plans:
            plan()
        torch.cuda.synchronize()
        host = lengths.tolist()
        for i in range(4):
            for s in range(b):
                ids = table[s].long()
                kk = k_cache[ids].reshape(-1, hkv, d)[:host[s]].float().transpose(0, 1).repeat_interleave(h // hkv, 0)
                vv = v_cache[ids].reshape(-1, hkv, d)[:host[s]].float().transpose(0, 1).repeat_interleave(h // hkv, 0)
                qq = qs[i][s].float().transpose(0, 1)  # (h, 1, d)
                ref = torch.softmax(qq @ kk.transpose(-1, -2) / math.sqrt(d), -1) @ vv
                err = _rel(qs[i + 1][s].transpose(0, 1), ref)
                assert err < 1e-2, (f"stage {i} sequence {s} ({host[s]} keys) round {r}: relative error {err:.3g} "
                                    f"(seed {_seed()})")


@pytest.mark.requires_sm90
def test_grouped_gemm_after_its_offsets_change() -> None:
    """A grouped GEMM reads its group ends on the device at every launch: new ends copied in before each one."""
    torch = pytest.importorskip("torch")
    gen = torch.Generator(device="cuda").manual_seed(_seed() + 3)
    groups, n, k, m = 4, 512, 256, 1024
    a = torch.randn(m, k, device="cuda", generator=gen).bfloat16()
    b = (torch.randn(groups, n, k, device="cuda", generator=gen) / math.sqrt(k)).bfloat16()
    offs = torch.empty(groups, dtype=torch.int32, device="cuda")
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    plan = plan_grouped_gemm(a, b, offs, out)
    for r in range(2 * ROUNDS):
        cuts = sorted(torch.randint(0, m + 1, (groups - 1,), generator=torch.Generator().manual_seed(_seed() + r)).tolist())
        ends = cuts + [m]
        out.fill_(float("nan"))
        offs.copy_(torch.tensor(ends, dtype=torch.int32))
        plan()
        torch.cuda.synchronize()
        start = 0
        for g, end in enumerate(ends):
            if end > start:
                ref = a[start:end].float() @ b[g].float().T
                err = _rel(out[start:end], ref)
                assert err < 2e-2, f"round {r} group {g} rows {start}..{end}: relative error {err:.3g} (seed {_seed()})"
            start = end


# A predecessor that lets its dependents launch at once, then spins before it writes: a kernel launched after it
# with pdl=True that touched memory before griddepcontrol.wait reads the old contents.
LATE_COPY = r"""
#include "tmakit/grid_dependency.cuh"
#include "tmakit/mbarrier.cuh"
extern "C" __global__ void late_copy(unsigned int* dst, const unsigned int* src, long long words,
                                     unsigned long long spin_ns) {
  tmakit::griddepcontrol_launch_dependents();
  const unsigned long long start = tmakit::globaltimer_ns();
  while (tmakit::globaltimer_ns() - start < spin_ns) {
  }
  for (long long i = blockIdx.x * 256ll + threadIdx.x; i < words; i += gridDim.x * 256ll) dst[i] = src[i];
}
// The control: a reader with no griddepcontrol.wait.
extern "C" __global__ void copy_without_wait(unsigned int* dst, const unsigned int* src, long long words) {
  for (long long i = blockIdx.x * 256ll + threadIdx.x; i < words; i += gridDim.x * 256ll) dst[i] = src[i];
}
"""
SPIN_NS = 300_000


@pytest.fixture(scope="module")
def late_module():
    from tmakit.build import load_module

    module = load_module(LATE_COPY)
    yield module
    module.close()


def _late_copy(module, dst, src, spin_ns: int = SPIN_NS) -> None:
    """dst <- src (torch tensors, or (pointer, bytes) pairs), 300 us after the launch lets its dependents start."""
    (dst_ptr, nbytes), src_ptr = (dst if isinstance(dst, tuple) else (dst.data_ptr(), dst.numel() * dst.element_size()),
                                  src[0] if isinstance(src, tuple) else src.data_ptr())
    module.kernel("late_copy")(dst_ptr, src_ptr, nbytes // 4, spin_ns, grid=4, block=256)


@pytest.mark.requires_sm90
def test_pdl_overlaps_and_the_control_reads_early(late_module) -> None:
    """The control: a reader launched with pdl=True and no wait finds the old contents (so the tests below, whose
    kernels wait, are not vacuous); launched without pdl it always finds the new ones. The overlap is the
    driver's to grant (on a GPU shared with other processes it may not come at once), so the early read must
    happen in one of 8 tries, the predecessor spinning longer each time."""
    torch = pytest.importorskip("torch")
    src = torch.arange(1 << 16, dtype=torch.int32, device="cuda")
    dst, seen = torch.full_like(src, -1), torch.empty_like(src)
    reader = late_module.kernel("copy_without_wait")
    early = []
    for attempt in range(8):
        for pdl in (True, False):
            dst.fill_(-1)
            _late_copy(late_module, dst, src, SPIN_NS << min(attempt, 4))
            reader(seen.data_ptr(), dst.data_ptr(), src.numel(), grid=4, block=256, pdl=pdl)
            torch.cuda.synchronize()
            if pdl:
                early.append(not torch.equal(seen, src))
            else:
                assert torch.equal(seen, src), f"try {attempt}: serialized, the reader saw the old contents"
        if early[-1]:
            break
    assert any(early), "a reader launched with pdl=True never started before its predecessor wrote (8 tries)"


@pytest.mark.requires_sm90
@pytest.mark.parametrize("what", ["gemm", "gemm_beta", "gemm_splitk", "attention", "grouped", "paged", "varlen",
                                  "copy", "transpose", "transpose_odd"])
def test_plans_wait_for_a_late_predecessor(late_module, what) -> None:
    """The input (or C, or the group ends) arrives from a predecessor that triggers its dependents first and writes
    300 us later: the plan's result is the new input's."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    gen = torch.Generator(device="cuda").manual_seed(_seed() + 4)
    for r in range(ROUNDS):
        if what.startswith("gemm"):
            beta = 1.0 if what == "gemm_beta" else 0.0
            m, n, k = (384, 344, 8800) if what == "gemm_splitk" else (1536, 2048, 1024)
            a_new = torch.randn(m, k, device="cuda", generator=gen).bfloat16()
            b = torch.randn(n, k, device="cuda", generator=gen).bfloat16()
            c_new = torch.randn(m, n, device="cuda", generator=gen).bfloat16()
            a, c = torch.full_like(a_new, float("nan")), torch.full_like(c_new, float("nan"))
            splits = 11 if what == "gemm_splitk" else 1  # forced: the reduce launch (pdl) after the GEMM
            plan = plan_gemm(a if not beta else a_new, b, c, beta=beta, splits=splits)
            _late_copy(late_module, c if beta else a, c_new if beta else a_new)
            plan()
            ref = a_new.float() @ b.float().T + beta * c_new.float()
            got = c
        elif what == "attention":
            q = torch.randn(2, 8, 1024, 128, device="cuda", generator=gen).bfloat16()
            k_new = torch.randn_like(q)
            k = torch.full_like(q, float("nan"))
            got = torch.empty_like(q)
            plan = plan_attention(q, k, q, got)
            _late_copy(late_module, k, k_new)
            plan()
            ref = F.scaled_dot_product_attention(q.float(), k_new.float(), q.float())
        elif what in ("copy", "transpose", "transpose_odd"):
            from tmakit.ops import plan_copy, plan_transpose

            shape = (1031, 2053) if what == "transpose_odd" else (2048, 4096)
            new = torch.randn(shape, device="cuda", generator=gen)
            src = torch.full_like(new, float("nan"))
            got = torch.full_like(new, float("nan")) if what == "copy" else torch.full(shape[::-1], float("nan"),
                                                                                        device="cuda")
            plan = plan_copy(got, src) if what == "copy" else plan_transpose(got, src)
            _late_copy(late_module, src, new)
            plan()
            ref = new if what == "copy" else new.T
        elif what == "varlen":
            # the sequence offsets arrive late: all sequences empty (nothing written) until the copy lands
            lens = [300, 17, 1000, 128]
            total, h, d = sum(lens), 8, 128
            q, k_new, v = (torch.randn(total, h, d, device="cuda", generator=gen).bfloat16() for _ in range(3))
            cu_new = torch.tensor([0] + lens, device="cuda").cumsum(0).int()
            cu = torch.zeros_like(cu_new)
            got = torch.full_like(q, float("nan"))
            plan = plan_attention_varlen(q, k_new, v, cu, cu, max(lens), got)
            _late_copy(late_module, cu, cu_new)
            plan()
            refs, start = [], 0
            for n_ in lens:
                qq, kk, vv = (x[start:start + n_].float().transpose(0, 1) for x in (q, k_new, v))
                refs.append((torch.softmax(qq @ kk.transpose(-1, -2) / math.sqrt(d), -1) @ vv).transpose(0, 1))
                start += n_
            ref = torch.cat(refs)
        elif what == "paged":
            # the lengths arrive late: the maps kernel (pdl) waits for them, the attention launch for the maps, the
            # combine of the split keys for the attention
            b, h, hkv, d, page, max_pages = 4, 8, 2, 128, 16, 64
            k_cache, v_cache = (torch.randn(b * max_pages, page, hkv, d, device="cuda", generator=gen).bfloat16()
                                for _ in range(2))
            table = torch.randperm(b * max_pages, device="cuda", generator=gen).int().reshape(b, max_pages)
            lens_new = torch.randint(1, max_pages * page + 1, (b,), device="cuda", generator=gen, dtype=torch.int32)
            lens = torch.zeros_like(lens_new)
            q = torch.randn(b, 1, h, d, device="cuda", generator=gen).bfloat16()
            got = torch.full_like(q, float("nan"))
            plan = plan_attention_paged(q, k_cache, v_cache, table, lens, got)
            if plan.kv_splits == 1:  # 8 packed tiles split their keys wherever there are more SMs than that
                pytest.skip("this GPU's SMs take the decode's tiles whole: no combine launch to test")
            _late_copy(late_module, lens, lens_new)
            plan()
            refs = []
            for s_, n_ in enumerate(lens_new.tolist()):
                ids = table[s_].long()
                kk = k_cache[ids].reshape(-1, hkv, d)[:n_].float().transpose(0, 1).repeat_interleave(h // hkv, 0)
                vv = v_cache[ids].reshape(-1, hkv, d)[:n_].float().transpose(0, 1).repeat_interleave(h // hkv, 0)
                qq = q[s_].float().transpose(0, 1)
                refs.append((torch.softmax(qq @ kk.transpose(-1, -2) / math.sqrt(d), -1) @ vv).transpose(0, 1))
            ref = torch.stack(refs)
        else:
            a = torch.randn(1024, 512, device="cuda", generator=gen).bfloat16()
            b = torch.randn(4, 768, 512, device="cuda", generator=gen).bfloat16()
            ends = torch.tensor([100, 100, 700, 1024], dtype=torch.int32, device="cuda")
            offs = torch.zeros(4, dtype=torch.int32, device="cuda")  # every group empty until the copy lands
            got = torch.full((1024, 768), float("nan"), dtype=torch.bfloat16, device="cuda")
            plan = plan_grouped_gemm(a, b, offs, got)
            _late_copy(late_module, offs, ends)
            plan()
            bounds = [0] + ends.tolist()
            ref = torch.cat([a[s:e].float() @ b[g].float().T for g, (s, e) in enumerate(zip(bounds, bounds[1:]))])
        torch.cuda.synchronize()
        err = _rel(got, ref)
        assert err < 2e-2, f"{what} round {r}: relative error {err:.3g}: read before the predecessor wrote (seed {_seed()})"


@pytest.mark.requires_sm90
@pytest.mark.parametrize("what", ["reduce", "combine"])
def test_second_launches_wait_for_a_late_predecessor(late_module, what) -> None:
    """The split-K reduce and the attention combine read partials their own plan's first launch wrote; here the
    partials arrive from a late predecessor instead (NaN until it writes), and the second launch alone runs."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    gen = torch.Generator(device="cuda").manual_seed(_seed() + 5)
    for r in range(ROUNDS):
        if what == "reduce":
            a = torch.randn(384, 8800, device="cuda", generator=gen).bfloat16()
            b = torch.randn(344, 8800, device="cuda", generator=gen).bfloat16()
            got = torch.empty(384, 344, device="cuda", dtype=torch.bfloat16)
            plan = plan_gemm(a, b, got, splits=11)
            ref, second, workspace = a.float() @ b.float().T, plan._reduce, plan._workspace
        else:
            q = torch.randn(4, 8, 1, 128, device="cuda", generator=gen).bfloat16()
            k, v = (torch.randn(4, 8, 8192, 128, device="cuda", generator=gen).bfloat16() for _ in range(2))
            got = torch.empty_like(q)
            plan = plan_attention(q, k, v, got)
            if plan.kv_splits == 1:  # 32 tiles split their keys wherever there are more SMs than that
                pytest.skip("this GPU's SMs take the decode's tiles whole: no combine launch to test")
            ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float())
            second, workspace = plan._combine, plan._splits_workspace
        plan()
        torch.cuda.synchronize()
        saved = torch.empty(workspace.nbytes // 4, dtype=torch.int32, device="cuda")
        _late_copy(late_module, (saved.data_ptr(), workspace.nbytes), (workspace.ptr,), spin_ns=0)  # the partials
        torch.cuda.synchronize()
        poison = torch.full_like(saved, -1)  # NaN as float32
        _late_copy(late_module, (workspace.ptr, workspace.nbytes), (poison.data_ptr(),), spin_ns=0)
        got.fill_(float("nan"))
        _late_copy(late_module, (workspace.ptr, workspace.nbytes), (saved.data_ptr(),))
        second()
        torch.cuda.synchronize()
        err = _rel(got, ref)
        assert err < 2e-2, f"{what} round {r}: relative error {err:.3g}: read before the partials landed (seed {_seed()})"


@pytest.mark.requires_sm90
def test_one_plan_back_to_back() -> None:
    """One plan launched again before its last launch ended (re-pointed to a second NaN-poisoned output, no host
    wait): its tile counter, reset by the last CTA, and its workspaces serve each launch in turn."""
    torch = pytest.importorskip("torch")
    gen = torch.Generator(device="cuda").manual_seed(_seed() + 6)
    q, k, v = (torch.randn(2, 8, 777, 128, device="cuda", generator=gen).bfloat16() for _ in range(3))
    outs = [torch.empty_like(q) for _ in range(2)]
    plan = plan_attention(q, k, v, outs[0], causal=True)
    a = torch.randn(1000, 768, device="cuda", generator=gen).bfloat16()
    b = torch.randn(512, 768, device="cuda", generator=gen).bfloat16()
    cs = [torch.empty(1000, 512, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    gemm = plan_gemm(a, b, cs[0])
    import torch.nn.functional as F

    ref_o = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    ref_c = a.float() @ b.float().T
    for r in range(ROUNDS):
        for x in outs + cs:
            x.fill_(float("nan"))
        for i in range(2 * 8):
            plan(q, k, v, outs[i % 2])
            gemm(a, b, cs[i % 2])
        torch.cuda.synchronize()
        for i in range(2):
            assert _rel(outs[i], ref_o) < 1e-2 and _rel(cs[i], ref_c) < 2e-2, f"round {r} output {i} (seed {_seed()})"
