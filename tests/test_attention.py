"""tmakit.ops.attention and cuda_src/attention.cu.

CPU: every variant compiles for both engines (sm_90a TMA + wgmma, sm_80 and forced cp.async + mma.sync), the
shared-memory budget refuses what does not fit with the numbers, and argument errors name the parameter.
GPU: sampled shapes (S in {1, 17, 128, 1000, 4096}, D in {64, 128}, causal or not, both layouts, both backends,
Sq != Sk) against a float32 reference on fresh random data, outputs poisoned with NaN first, lse checked.
"""
from __future__ import annotations

import importlib
import itertools
import math
import os
import random
import re
import secrets
import zlib
from dataclasses import replace

import numpy as np
import pytest

from tmakit.backend import Backend
from tmakit.build import compile_cuda
from tmakit.errors import InvalidArgumentError
from tmakit.ops import plan_attention
from tmakit.ops import describe_attention

attn_mod = importlib.import_module("tmakit.ops.attention")  # the module (tmakit.ops.attention is the function)
check_config, default_config = attn_mod.check_config, attn_mod.default_config

from _fake_driver import FakeDeviceArray, fake_launch  # noqa: F401 - fixture


# ----------------------------------------------------------------------------------------------------------
# CPU tier
# ----------------------------------------------------------------------------------------------------------

def _variants():
    out = []
    for backend, arch in ((Backend.TMA, "sm_90a"), (Backend.CP_ASYNC, "sm_80"), (Backend.CP_ASYNC, "sm_90a")):
        for d in (64, 128, 256):
            for bf16 in (True, False):
                out.append(pytest.param(backend, arch, d, bf16, id=f"{backend.value}-{arch}-d{d}-{'bf16' if bf16 else 'f16'}"))
    return out


@pytest.mark.parametrize("backend, arch, head_dim, bf16", _variants())
def test_attention_variants_compile(backend: Backend, arch: str, head_dim: int, bf16: bool) -> None:
    """Both entry points exist in every build; the one the build serves has the promised instructions, the other
    is a trap."""
    cfg = default_config(backend, head_dim, bf16)
    code = compile_cuda("attention.cu", arch=arch, defines={**backend.defines, **cfg.defines})
    assert sorted(code.entry_names()) == ["tmakit_attention_combine", "tmakit_attention_fwd_cp_async",
                                          "tmakit_attention_fwd_tma", "tmakit_attention_paged_maps",
                                          "tmakit_attention_varlen_maps"]
    parts = {re.match(r"\.visible \.entry (\w+)", p).group(1): p
             for p in re.split(r"(?=^\.visible \.entry )", code.ptx, flags=re.M) if p.startswith(".visible .entry")}
    combine = parts.pop("tmakit_attention_combine")  # key splits' second step: plain loads and stores, any build
    assert "trap;" not in combine and "ld.global" in combine and "mma" not in combine
    for name in ("tmakit_attention_varlen_maps", "tmakit_attention_paged_maps"):  # tma builds; a trap elsewhere
        maps = parts.pop(name)
        assert ("tensormap.replace" in maps) == (backend is Backend.TMA) and ("trap;" in maps) != (backend is Backend.TMA)
    ptx = parts.pop(cfg.entry)
    (other,) = parts.values()
    assert "trap;" in other and "mma" not in other
    if backend is Backend.TMA:
        assert "wgmma.mma_async" in ptx and "cp.async.bulk.tensor.4d" in ptx and "setmaxnreg" in ptx
    else:
        assert "mma.sync.aligned.m16n8k16" in ptx and "ldmatrix.sync.aligned.m8n8.x4.trans" in ptx
        assert "cp.async.cg.shared.global" in ptx


def test_head_dims_beyond_256_are_refused_and_256_fits() -> None:
    cfg = default_config(Backend.TMA, 256)
    assert (cfg.block_n, cfg.stages) == (64, 2) and cfg.shared_mem <= 232448  # 64 KiB Q + 2 x 64 KiB K and V
    check_config(cfg, 232448)
    sm80 = default_config(Backend.CP_ASYNC, 256, shared_mem_limit=166912)  # sm_80: fewer keys
    assert (sm80.warps, sm80.warp_rows, sm80.block_n) == (8, 16, 32)
    check_config(sm80, 166912)
    assert default_config(Backend.CP_ASYNC, 256, shared_mem_limit=232448).block_n == 64  # sm_90: 193 KiB
    small = default_config(Backend.CP_ASYNC, 256, shared_mem_limit=101376)  # sm_86/89: 8 warps of 16 keys
    assert (small.warps, small.block_n) == (8, 16)
    check_config(small, 101376)
    with pytest.raises(InvalidArgumentError, match=r"head_dim=512: must be one of \(64, 128, 256\).*D=512 needs"):
        check_config(default_config(Backend.TMA, 512), 232448)
    with pytest.raises(InvalidArgumentError, match=r"stages.*D=256 needs 128 KiB per stage"):
        check_config(default_config(Backend.TMA, 256, block_n=128), 232448)


def test_shared_memory_budget_refuses_too_many_stages() -> None:
    cfg = default_config(Backend.TMA, 128, stages=3)  # 32 KiB Q + 3 x 64 KiB + 32 KiB O staging
    with pytest.raises(InvalidArgumentError, match=r"stages.*D=128 needs 64 KiB per stage.*; 3 stages, the 32 KiB Q "
                       r"tile and the 32 KiB O staging tile need 257\.\d KiB, 227\.0 KiB available"):
        check_config(cfg, 232448)
    check_config(default_config(Backend.TMA, 128, stages=2), 232448)  # 192 KiB fits
    with pytest.raises(InvalidArgumentError, match="stages.*99.0 KiB available"):
        check_config(default_config(Backend.CP_ASYNC, 128, warps=8, stages=3), 101376)


def test_config_shared_memory_matches_kernel_layout() -> None:
    cfg = default_config(Backend.TMA, 128)
    # two Q slots, the K/V stages, O's staging tile; each Q slot's FULL and EMPTY barriers and tile number (8 bytes
    # for the two int32), the K and V rings' FULL/EMPTY: 225.1 KiB of the kernel's 227. The kernel asserts the same
    # sum (TMAKIT_ATTN_SHARED_MEM) whenever the plans' builds compile (the lint tests compile them on the CPU).
    assert cfg.q_slots == 2 and cfg.defines["TMAKIT_ATTN_Q_SLOTS"] == 2
    assert cfg.shared_mem == 2 * 32768 + 2 * 65536 + 32768 + 8 * (2 * 2 + 2 * 2 * 2) + 8 + 1024 <= 227 * 1024
    assert cfg.defines["TMAKIT_ATTN_SHARED_MEM"] == cfg.shared_mem
    assert "Q tile 128 x 128: 32.0 KiB x 2 slots" in "\n".join(cfg.budget_lines())
    assert "per stage (K + V tiles of 128 keys): 64.0 KiB x 2 stages" in "\n".join(cfg.budget_lines())
    assert "O staging tile: 32.0 KiB" in "\n".join(cfg.budget_lines())
    d256 = default_config(Backend.TMA, 256)
    assert d256.o_bytes == 0 and d256.q_slots == 1  # D = 256: O is staged in the (one) Q tile
    assert d256.shared_mem == 65536 + 2 * 65536 + 8 * (2 + 2 * 2 * 2) + 8 + 1024
    # D = 64: two slots with the default 4 stages (two or three consumers); with three consumers a fifth stage
    # leaves no room for a second
    assert default_config(Backend.TMA, 64, warps=16).q_slots == default_config(Backend.TMA, 64, warps=12).q_slots == 2
    five = default_config(Backend.TMA, 64, warps=16, stages=5)
    assert five.q_slots == 1 and five.shared_mem == 24576 + 5 * 32768 + 24576 + 8 * (2 + 4 * 5) + 8 + 1024
    assert default_config(Backend.TMA, 64, warps=12, stages=5).q_slots == 2  # 16 KiB Q tiles: 209.2 KiB
    assert default_config(Backend.CP_ASYNC, 128).q_slots == 1
    c2 = default_config(Backend.CP_ASYNC, 64, warps=4, warp_rows=16, block_n=64)
    assert (c2.block_m, c2.block_n, c2.threads, c2.shared_mem) == (64, 64, 128, 8192 + 2 * 16384 + 1024)
    c3 = default_config(Backend.CP_ASYNC, 128, shared_mem_limit=232448)  # 4 warps of 32 rows, two blocks an SM
    assert (c3.block_m, c3.block_n, c3.threads, c3.warp_rows) == (128, 64, 128, 32)
    assert c3.shared_mem == 32768 + 2 * 32768 + 1024
    c4 = default_config(Backend.CP_ASYNC, 128, shared_mem_limit=101376)  # sm_86/89: the same tile fits
    assert c4 == c3 and c4.shared_mem <= 101376
    c5 = default_config(Backend.CP_ASYNC, 64, shared_mem_limit=101376)
    assert (c5.block_m, c5.block_n, c5.warps, c5.shared_mem) == (128, 128, 4, 16384 + 2 * 32768 + 1024)
    assert default_config(Backend.TMA, 64).stages == 4 and default_config(Backend.TMA, 128).stages == 2


def test_block_n_and_warps_rules() -> None:
    with pytest.raises(InvalidArgumentError, match="block_n.*must be 64 or 128 on the tma backend"):
        check_config(default_config(Backend.TMA, 128, block_n=96), 232448)
    with pytest.raises(InvalidArgumentError, match="warps=4: must be 12.*or, at D=64, 16"):
        default_config(Backend.TMA, 128, warps=4)
    with pytest.raises(InvalidArgumentError, match="warps=16: must be 12.*or, at D=64, 16"):
        default_config(Backend.TMA, 128, warps=16)  # three consumers' registers hold only D=64's accumulators
    three = default_config(Backend.TMA, 64)
    assert (three.warps, three.block_m, three.threads, three.defines["TMAKIT_ATTN_CONSUMERS"]) == (16, 192, 512, 3)
    assert default_config(Backend.TMA, 64, warps=12).block_m == 128
    assert default_config(Backend.TMA, 64, sq=640).warps == 12 and default_config(Backend.TMA, 64, sq=641).warps == 16
    # causal: 128-row tiles where 192-row ones leave over 5% of the rows more empty (S 1024: 128 rows of 1152)
    warps = {s: default_config(Backend.TMA, 64, sq=s, causal=True).warps for s in (755, 1024, 1300, 2048, 4096)}
    assert warps == {755: 16, 1024: 12, 1300: 16, 2048: 16, 4096: 16}
    assert default_config(Backend.TMA, 64, sq=1024).warps == 16 and default_config(Backend.TMA, 128, sq=1024).warps == 12
    # a dense causal D=64 plan (batch x heads and SMs given): 64 keys a stage up to S 512
    dense = lambda s, bh, causal=True, **kw: default_config(Backend.TMA, 64, sq=s, causal=causal, bh=bh, sms=132,  # noqa: E731
                                                            **kw)
    assert [dense(s, 64).block_n for s in (143, 512, 513, 4096)] == [64, 64, 128, 128]
    assert dense(300, 64, block_n=128).block_n == 128
    assert default_config(Backend.TMA, 64, sq=300, causal=True).block_n == 128  # no bh: not a dense plan
    assert default_config(Backend.TMA, 64, sq=300, bh=64, sms=132).block_n == 128  # not causal
    # a dense D=64 plan: three consumers where 1.3 x the 192-row tiles' turns < the 128-row tiles' turns
    for s, bh, causal, warps in (
            (1327, 24, False, 12),  # 168 tiles of 192 rows (2 turns) against 264 of 128 (2 turns)
            (150, 72, False, 16),  # 72 (1 turn) against 144 (2)
            (1633, 30, False, 12),  # 270 (3) against 390 (3)
            (4331, 180, False, 16),  # many turns: 4140 (32) against 6120 (47)
            (734, 32, True, 16),  # 128 (1) against 192 (2), S < 1024
            (2328, 8, True, 12),  # 104 (1) against 152 (2), but causal from S 1024: the heaviest tile sets the time
            (1175, 130, True, 16),  # 910 (7) against 1300 (10)
            (715, 234, True, 16), (2190, 1, True, 12), (2190, 1, False, 12)):
        assert dense(s, bh, causal).warps == warps, (s, bh, causal)
    assert dense(1300, 11, warps=16).warps == 16  # asked for
    assert attn_mod.three_consumers_by_turns(1327, 24, 132, False) is False
    with pytest.raises(InvalidArgumentError, match="warps.*must be 1, 2, 4 or 8"):
        check_config(default_config(Backend.CP_ASYNC, 64, warps=3), 232448)


# (arch, head dim) -> (warps, warp_rows, block_n) of the cp.async default, with the architecture's shared memory per
# block and per SM: 8 warps an SM where a tile of at least half the default's keys allows it.
_TWIN_DEFAULTS = {("sm_90", 128): (4, 32, 64), ("sm_90", 64): (4, 32, 128), ("sm_90", 256): (8, 16, 64),
                  ("sm_80", 128): (4, 32, 48), ("sm_80", 64): (4, 32, 128), ("sm_80", 256): (8, 16, 32),
                  ("sm_86", 128): (4, 32, 64), ("sm_86", 64): (4, 32, 64), ("sm_86", 256): (8, 16, 16),
                  ("sm_89", 128): (4, 32, 64), ("sm_89", 64): (4, 32, 64), ("sm_89", 256): (8, 16, 16)}


@pytest.mark.parametrize("arch, d", sorted(_TWIN_DEFAULTS))
def test_twin_default_keeps_eight_warps_an_sm(arch, d) -> None:
    from tmakit.device import device_limits
    from tmakit.device import blocks_per_sm

    limits = device_limits(arch=arch)
    cfg = default_config(Backend.CP_ASYNC, d, shared_mem_limit=limits.smem_per_block_optin,
                         shared_mem_per_sm=limits.smem_per_sm)
    assert (cfg.warps, cfg.warp_rows, cfg.block_n) == _TWIN_DEFAULTS[arch, d]
    check_config(cfg, limits.smem_per_block_optin)
    resident = blocks_per_sm(cfg.shared_mem, limits.smem_per_sm)
    assert resident >= 1 and cfg.accumulators <= 192
    # 8 warps an SM wherever a tile of at least half the default keys allows it
    half = default_config(Backend.CP_ASYNC, d, block_n=(128 if d == 64 else 64) // 2, warps=cfg.warps,
                          warp_rows=cfg.warp_rows)
    if blocks_per_sm(half.shared_mem, limits.smem_per_sm) * half.warps >= 8:
        assert resident * cfg.warps >= 8
    # the A100's 48-key tile fits twice exactly: 2 x (81 KiB + the driver's 1 KiB) = 164 KiB
    if (arch, d) == ("sm_80", 128):
        assert 2 * (cfg.shared_mem + 1024) == limits.smem_per_sm


def test_spilling_warp_plans_are_steered_or_refused() -> None:
    # a block_n whose 32-row warps would hold over 192 accumulators takes 16-row warps (8 of them) by default
    steered = default_config(Backend.CP_ASYNC, 128, block_n=128)
    assert (steered.warp_rows, steered.warps, steered.accumulators) == (16, 8, 128)
    assert default_config(Backend.CP_ASYNC, 128, block_n=64).warp_rows == 32  # 192: the default, no spill
    assert default_config(Backend.CP_ASYNC, 64, block_n=128).warp_rows == 32
    for d, n, rows, acc, fix in ((128, 80, 32, 208, "use warp_rows=16 or block_n <= 64"),
                                 (128, 128, 32, 256, "use warp_rows=16 or block_n <= 64"),
                                 (64, 128, 32, 192, None), (256, 32, 32, 288, "use warp_rows=16"),
                                 (256, 16, 32, 272, "use warp_rows=16"), (256, 64, 16, 160, None)):
        cfg = default_config(Backend.CP_ASYNC, d, block_n=n, warp_rows=rows, warps=4)
        assert cfg.accumulators == acc
        if fix is None:
            check_config(cfg, 232448)
            continue
        with pytest.raises(InvalidArgumentError, match=rf"warp_rows=32: holds {acc} fp32 accumulators a thread at "
                           rf"D={d} with block_n={n} .*spill.*fix: {fix}$"):
            check_config(cfg, 232448)
        # the fix yields a plan that passes
        fixed = default_config(Backend.CP_ASYNC, d, block_n=n, warp_rows=16, warps=4)
        check_config(fixed, 232448)
    # describe_attention refuses the same way before the shared-memory budget (D=256 on sm_86), with a fix that fits
    with pytest.raises(InvalidArgumentError, match=r"warp_rows=32: holds .*fix: use warp_rows=16$"):
        describe_attention(1, 8, 1024, 256, arch="sm_86", warp_rows=32)
    with pytest.raises(InvalidArgumentError, match=r"warp_rows=32: holds .*fix: use warp_rows=16 with block_n=32$"):
        describe_attention(1, 8, 1024, 256, arch="sm_86", warp_rows=32, block_n=64)
    describe_attention(1, 8, 1024, 256, arch="sm_86", warp_rows=16, block_n=32)  # the fix, applied
    with pytest.raises(InvalidArgumentError, match=r"fix: use warp_rows=16 or block_n <= 64$"):
        describe_attention(1, 8, 1024, 128, arch="sm_80", warp_rows=32, block_n=96)
    describe_attention(1, 8, 1024, 128, arch="sm_80", warp_rows=32, block_n=64)


def test_warp_rows_rules() -> None:
    """cp.async: warps of 16 or 32 query rows, the kernel's TMAKIT_ATTN_WARP_ROWS; refused on tma."""
    for rows in (16, 32):
        cfg = default_config(Backend.CP_ASYNC, 128, warps=4, warp_rows=rows)
        assert (cfg.block_m, cfg.warp_rows, cfg.defines["TMAKIT_ATTN_WARP_ROWS"]) == (4 * rows, rows, rows)
    assert default_config(Backend.CP_ASYNC, 128, warp_rows=16).warps == 8  # 16-row warps: 8 of them by default
    assert "TMAKIT_ATTN_WARP_ROWS" not in default_config(Backend.TMA, 128).defines
    with pytest.raises(InvalidArgumentError, match=r"warp_rows=24: must be 16 or 32 .*fix: use 32"):
        default_config(Backend.CP_ASYNC, 128, warp_rows=24)
    with pytest.raises(InvalidArgumentError, match=r"warp_rows=32: .*cp.async backend.*fix: leave warp_rows out"):
        default_config(Backend.TMA, 128, warp_rows=32)
    with pytest.raises(InvalidArgumentError, match=r"warp_rows=16.0: must be 16 or 32"):
        default_config(Backend.CP_ASYNC, 128, warp_rows=16.0)
    with pytest.raises(InvalidArgumentError, match=r"block_m=96: must be 16 or 32 query rows for each of the 4 warps"):
        check_config(attn_mod.AttentionConfig(Backend.CP_ASYNC, 128, True, 96, 64, 2, 4), 232448)
    check_config(default_config(Backend.CP_ASYNC, 128, warp_rows=16), 232448)


def _fake(shape, typestr="<f2", ptr=0):
    return FakeDeviceArray(shape, typestr, ptr=ptr)


def test_argument_errors_name_the_parameter() -> None:
    q = _fake((1, 2, 8, 64))
    with pytest.raises(InvalidArgumentError, match="k='dtype float32': must match q's dtype"):
        plan_attention(q, _fake((1, 2, 8, 64), "<f4"), _fake((1, 2, 8, 64), "<f4"))
    with pytest.raises(InvalidArgumentError, match="q='dtype float32': must be bfloat16 or float16"):
        plan_attention(_fake((1, 2, 8, 64), "<f4"), q, q)
    with pytest.raises(InvalidArgumentError, match="layout.*must be \"bhsd\""):
        plan_attention(q, q, q, layout="sbhd")
    with pytest.raises(InvalidArgumentError, match="q='shape \\(2, 8, 64\\)': must be 4-D"):
        plan_attention(_fake((2, 8, 64)), q, q)
    with pytest.raises(InvalidArgumentError, match="k='shape .*must have q's batch and head dim .* heads dividing q's 2"):
        plan_attention(q, _fake((1, 3, 8, 64)), _fake((1, 3, 8, 64)))
    with pytest.raises(InvalidArgumentError, match="k='shape .*must have q's batch and head dim"):
        plan_attention(q, _fake((2, 1, 8, 64)), _fake((2, 1, 8, 64)))
    with pytest.raises(InvalidArgumentError, match="v='shape .*must have k's shape"):
        plan_attention(q, q, _fake((1, 2, 9, 64)))
    with pytest.raises(InvalidArgumentError, match="k='array with shape .*must be C-contiguous"):
        plan_attention(q, FakeDeviceArray((1, 2, 8, 64), "<f2", strides=(2048, 128, 256, 2)), q)
    with pytest.raises(InvalidArgumentError, match="out='shape .*must have q's shape"):
        plan_attention(q, q, q, _fake((1, 2, 8, 32)))
    with pytest.raises(InvalidArgumentError, match="scale.*positive finite"):
        plan_attention(q, q, q, scale=-1.0)
    with pytest.raises(InvalidArgumentError, match="causal.*True or False"):
        plan_attention(q, q, q, causal=1)


def test_kernel_descriptors_are_the_ones_derived_from_its_maps() -> None:
    """What the tma kernel multiplies with (TMAKIT_ATTN_DESC_Q/K/V) is tmakit.wgmma_descriptors of the tensor maps
    the plan encodes, for every head dim, key block and dtype; the kernel's built-in defaults are the default plan's."""
    from pathlib import Path

    from _fake_driver import device_view

    for d, block_n, bf16 in itertools.product((64, 128), (64, 128), (True, False)):
        cfg = default_config(Backend.TMA, d, bf16, block_n=block_n)
        views = [attn_mod._bhsd_view(device_view(0x100000 * (i + 1), (2, 3, 1000, d), "float16"), "bhsd") for i in range(3)]
        maps = [attn_mod._tile_map(v, rows, encode=False) for v, rows in zip(views, (cfg.block_m, block_n, block_n))]
        want = attn_mod.stage_descriptors(*[m for m in maps], cfg)
        for name, descs in zip("QKV", want):
            assert cfg.defines[f"TMAKIT_ATTN_DESC_{name}"] == ", ".join(f"0x{x.value:016x}ull" for x in descs), (cfg, name)
    source = (Path(__file__).resolve().parents[1] / "cuda_src" / "attention.cu").read_text()
    defaults = default_config(Backend.TMA, 128).defines
    for name in ("TMAKIT_ATTN_DESC_Q", "TMAKIT_ATTN_DESC_K", "TMAKIT_ATTN_DESC_V"):
        block = re.search(rf"#ifndef {name}\n#define {name}(.*?)#endif", source, re.S).group(1)
        assert re.findall(r"0x[0-9a-f]+ull", block) == defaults[name].split(", "), name


def test_descriptor_defines_that_do_not_describe_the_build_are_refused() -> None:
    """attention.cu checks the descriptors it is given against its tiles at compile time: head dim 64 with the
    built-in (head dim 128) defaults stops the compile."""
    from tmakit.errors import CompileError

    with pytest.raises(CompileError, match=r"TMAKIT_ATTN_DESC_Q/K/V do not describe this build's tiles"):
        compile_cuda("attention.cu", arch="sm_90a", defines={"TMAKIT_ATTN_HEAD_DIM": 64})


def test_outputs_overlapping_inputs_are_refused(fake_launch) -> None:
    """out or lse sharing bytes with q, k or v (or each other) would be written while loads of them are in flight."""
    from _fake_driver import device_view

    q, k, v = (device_view(0x100000 * (i + 1), (1, 2, 64, 64), "float16") for i in range(3))
    lse = device_view(0x800000, (1, 2, 64), "float32")
    for out_at, which in ((0x100000, "q"), (0x200000 + 4096, "k"), (0x300000 - 64, "v")):
        with pytest.raises(InvalidArgumentError, match=rf"out=.*overlaps {which}"):
            plan_attention(q, k, v, device_view(out_at, (1, 2, 64, 64), "float16"), lse=lse, backend="cp.async")
    out = device_view(0x600000, (1, 2, 64, 64), "float16")
    with pytest.raises(InvalidArgumentError, match=r"out=.*overlaps lse"):
        plan_attention(q, k, v, out, lse=device_view(0x600000 + 512, (1, 2, 64), "float32"), backend="cp.async")
    plan = plan_attention(q, k, v, out, lse=lse, backend="cp.async")  # apart: accepted
    with pytest.raises(InvalidArgumentError, match=r"lse=.*overlaps k"):
        plan(q, k, v, out, lse=device_view(0x200000, (1, 2, 64), "float32"))


def test_decode_packs_the_query_heads_of_each_kv_head() -> None:
    """Sq = 1 without a mask and H_kv < H: the kernel sees H_kv heads of H / H_kv query rows (the tiles, its head
    and row arguments, q's and out's maps); otherwise the geometry as given."""
    from tmakit.arrays import ArrayView

    def work(sq, heads, kv_heads, causal):  # the plans' tile decisions, without a device
        return attn_mod.TileGeometry(attn_mod.default_config(Backend.TMA, 128), 3, heads, kv_heads, sq, causal)

    plan = work(1, 32, 8, False)
    assert plan.packed and plan.tiles == (1, 8, 3) and plan.kernel_geometry() == (8, 4, 1)
    assert work(1, 256, 1, False).tiles == (2, 1, 3)  # 256 query heads: two 128-row tiles
    for unpacked in (work(1, 32, 8, True), work(2, 32, 8, False), work(1, 8, 8, False)):
        assert not unpacked.packed and unpacked.kernel_geometry() == (unpacked.heads, unpacked.sq, unpacked.heads // unpacked.kv_heads)
    for layout, shape in (("bshd", (3, 1, 32, 128)), ("bhsd", (3, 32, 1, 128))):
        q = ArrayView(0x100000, shape, (32 * 256, 32 * 256, 256, 2) if layout == "bshd" else (32 * 256, 256, 256, 2),
                      "bfloat16", 2, 0)
        packed = attn_mod.query_heads_as_rows(q, layout, 8)
        assert packed.shape == (3, 8, 4, 128) and packed.strides == (32 * 256, 4 * 256, 256, 2)  # head 4 kv + j
        tmap = attn_mod._tile_map(packed, 128, oob_fill="zero", encode=False, arch=(9, 0))
        assert tmap.shape == (3, 8, 4, 128) and tmap.box == (64, 128, 1, 1)  # innermost first; rows past the group: zeros, clipped


def test_bshd_dims_and_strides() -> None:
    from tmakit.arrays import ArrayView

    v = ArrayView(0, (2, 100, 8, 64), (100 * 8 * 64 * 2, 8 * 64 * 2, 64 * 2, 2), "bfloat16", 2, 0)
    assert attn_mod._dims(v, "bshd") == (2, 8, 100, 64)
    assert attn_mod._bhsd_strides(v, "bshd") == (100 * 8 * 128, 128, 8 * 128, 2)


# ----------------------------------------------------------------------------------------------------------
# GPU tier
# ----------------------------------------------------------------------------------------------------------

# (backend, D, Sq, Sk, causal, layout, dtype): a sample of the product, every value of each axis present.
GPU_CASES = [
    ("tma", 128, 4096, 4096, False, "bhsd", "bfloat16"),
    ("tma", 128, 4096, 4096, True, "bshd", "bfloat16"),
    ("tma", 64, 1000, 1000, True, "bhsd", "bfloat16"),
    ("tma", 64, 17, 128, False, "bshd", "float16"),
    ("tma", 128, 1, 1000, False, "bhsd", "float16"),
    ("tma", 128, 128, 17, True, "bhsd", "bfloat16"),
    ("tma", 64, 1000, 17, True, "bshd", "bfloat16"),
    ("tma", 128, 17, 1, True, "bshd", "bfloat16"),
    ("tma", 64, 128, 4096, True, "bhsd", "float16"),
    ("cp.async", 128, 4096, 4096, True, "bhsd", "bfloat16"),
    ("cp.async", 64, 1000, 1000, False, "bshd", "bfloat16"),
    ("cp.async", 128, 17, 128, True, "bshd", "float16"),
    ("cp.async", 64, 1, 17, False, "bhsd", "bfloat16"),
    ("cp.async", 128, 1000, 4096, False, "bhsd", "bfloat16"),
    ("cp.async", 64, 128, 1, True, "bhsd", "float16"),
    ("cp.async", 128, 4096, 1000, True, "bshd", "bfloat16"),
    ("tma", 256, 1000, 1000, True, "bhsd", "bfloat16"),
    ("tma", 256, 17, 2000, False, "bshd", "float16"),
    ("tma", 256, 2048, 333, True, "bshd", "bfloat16"),
    ("cp.async", 256, 1000, 1000, True, "bhsd", "bfloat16"),
    ("cp.async", 256, 17, 300, False, "bshd", "float16"),
]


def reference(q, k, v, causal: bool, scale: float, layout: str):
    """float32 attention and lse on the GPU, (B, H, S, D) in and out, top-left causal alignment."""
    import torch

    if layout == "bshd":
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    s = torch.matmul(q.float(), k.float().transpose(-1, -2)) * scale
    if causal:
        sq, sk = s.shape[-2:]
        s = s.masked_fill(torch.ones(sq, sk, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    o = torch.matmul(torch.softmax(s, dim=-1), v.float())
    return (o.transpose(1, 2) if layout == "bshd" else o), lse


@pytest.mark.requires_sm80
@pytest.mark.parametrize("backend, d, sq, sk, causal, layout, dtype", GPU_CASES,
                         ids=[f"{c[0]}-d{c[1]}-q{c[2]}-k{c[3]}-{'causal' if c[4] else 'full'}-{c[5]}-{c[6]}" for c in GPU_CASES])
def test_attention_matches_float32_reference(backend, d, sq, sk, causal, layout, dtype, gpu) -> None:
    torch = pytest.importorskip("torch")
    if backend == "tma" and gpu.major < 9:
        pytest.skip(f"the tma backend needs sm_90; {gpu.name} is sm_{gpu.major}{gpu.minor}")
    seed = secrets.randbits(31)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    b, h = (1, 4) if max(sq, sk) >= 4096 else (2, 3)
    tdt = getattr(torch, dtype)

    def make(s):
        shape = (b, h, s, d) if layout == "bhsd" else (b, s, h, d)
        return torch.randn(shape, generator=gen, device="cuda", dtype=torch.float32).to(tdt)

    q, k, v = make(sq), make(sk), make(sk)
    out = torch.full_like(q, float("nan"))
    lse = torch.full((b, h, sq), float("nan"), device="cuda")
    scale = 1.0 / math.sqrt(d)
    plan = plan_attention(q, k, v, out, causal=causal, layout=layout, backend=backend, lse=lse)
    plan()
    torch.cuda.synchronize()
    ref_o, ref_lse = reference(q, k, v, causal, scale, layout)
    assert not torch.isnan(out).any(), f"seed {seed}: NaN (unwritten or poisoned) in out"
    assert not torch.isnan(lse).any(), f"seed {seed}: NaN in lse"
    rel = ((out.float() - ref_o).norm() / ref_o.norm()).item()
    assert rel < (1e-2 if dtype == "bfloat16" else 3e-3), f"seed {seed}: relative error {rel:.3g}"
    assert (out.float() - ref_o).abs().max().item() < 0.06, f"seed {seed}"
    torch.testing.assert_close(lse, ref_lse, rtol=1e-3, atol=2e-3, msg=lambda m: f"seed {seed}: lse {m}")
    # re-pointed to new buffers of the same geometry
    q2, k2, v2 = make(sq), make(sk), make(sk)
    out2 = torch.full_like(q, float("nan"))
    o2, lse2 = plan(q2, k2, v2, out2)
    torch.cuda.synchronize()
    ref_o2, ref_lse2 = reference(q2, k2, v2, causal, scale, layout)
    assert o2 is out2 and ((o2.float() - ref_o2).norm() / ref_o2.norm()).item() < 1e-2
    torch.testing.assert_close(lse2, ref_lse2, rtol=1e-3, atol=2e-3)


# (backend, H, H_kv, D, Sq, Sk, causal, layout, dtype): grouped-query (H_kv < H) and multi-query (H_kv = 1) heads
GQA_CASES = [
    ("tma", 8, 2, 128, 1000, 1000, True, "bhsd", "bfloat16"),
    ("tma", 6, 1, 64, 300, 2000, False, "bshd", "float16"),
    ("tma", 4, 4, 128, 17, 129, False, "bhsd", "bfloat16"),
    ("tma", 12, 3, 256, 700, 700, True, "bshd", "bfloat16"),
    ("tma", 32, 8, 128, 2048, 2048, True, "bhsd", "bfloat16"),
    ("cp.async", 8, 2, 128, 1000, 1000, True, "bhsd", "bfloat16"),
    ("cp.async", 6, 1, 64, 300, 2000, False, "bshd", "float16"),
    # decode (Sq = 1, no mask): the query heads of each K/V head packed as one tile's rows
    ("tma", 32, 8, 128, 1, 3000, False, "bshd", "bfloat16"),
    ("tma", 16, 1, 64, 1, 517, False, "bhsd", "float16"),
    ("tma", 8, 2, 256, 1, 1000, False, "bshd", "bfloat16"),
    ("tma", 256, 1, 128, 1, 300, False, "bshd", "bfloat16"),  # 256 query heads on one K/V head: two tiles
    ("tma", 8, 2, 128, 1, 100, True, "bhsd", "bfloat16"),  # causal decode: not packed (query 0 sees key 0)
    ("cp.async", 32, 8, 128, 1, 3000, False, "bshd", "bfloat16"),
    ("cp.async", 12, 4, 64, 1, 200, False, "bhsd", "float16"),
]


@pytest.mark.requires_sm80
@pytest.mark.parametrize("backend, h, hkv, d, sq, sk, causal, layout, dtype", GQA_CASES,
                         ids=[f"{c[0]}-h{c[1]}-kv{c[2]}-d{c[3]}-q{c[4]}-k{c[5]}-{'causal' if c[6] else 'full'}-{c[7]}"
                              for c in GQA_CASES])
def test_grouped_query_heads_read_their_kv_head(backend, h, hkv, d, sq, sk, causal, layout, dtype, gpu) -> None:
    """Query head i reads K/V head i // (H / H_kv): against float32 attention on K and V repeated per query head,
    NaN-poisoned outputs, three runs."""
    torch = pytest.importorskip("torch")
    if backend == "tma" and gpu.major < 9:
        pytest.skip(f"the tma backend needs sm_90; {gpu.name} is sm_{gpu.major}{gpu.minor}")
    seed = secrets.randbits(31)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    tdt = getattr(torch, dtype)
    hdim = 1 if layout == "bhsd" else 2

    def make(s, heads):
        shape = (2, heads, s, d) if layout == "bhsd" else (2, s, heads, d)
        return torch.randn(shape, generator=gen, device="cuda", dtype=torch.float32).to(tdt)

    q, k, v = make(sq, h), make(sk, hkv), make(sk, hkv)
    out = torch.empty_like(q)
    lse = torch.empty((2, h, sq), device="cuda")
    plan = plan_attention(q, k, v, out, causal=causal, layout=layout, backend=backend, lse=lse)
    assert plan.packed == (sq == 1 and not causal and hkv < h)
    ref_o, ref_lse = reference(q, k.repeat_interleave(h // hkv, hdim), v.repeat_interleave(h // hkv, hdim), causal,
                               1.0 / math.sqrt(d), layout)
    for run in range(3):
        _poisoned_run_matches(torch, plan, out, lse, ref_o, ref_lse, dtype, f"seed {seed} run {run}")


def _poisoned_run_matches(torch, plan, out, lse, ref_o, ref_lse, dtype: str, where: str) -> None:
    """Run the plan on NaN-poisoned out and lse; both written everywhere and close to the float32 reference."""
    out.fill_(float("nan"))
    lse.fill_(float("nan"))
    plan()
    torch.cuda.synchronize()
    assert not torch.isnan(out).any() and not torch.isnan(lse).any(), f"{where}: NaN"
    rel = ((out.float() - ref_o).norm() / ref_o.norm()).item()
    assert rel < (1e-2 if dtype == "bfloat16" else 3e-3), f"{where}: relative error {rel:.3g}"
    torch.testing.assert_close(lse, ref_lse, rtol=1e-3, atol=2e-3, msg=lambda m: f"{where}: lse {m}")


# (B, H, H_kv, D, Sq, Sk, layout, dtype): few work tiles and long keys, so the keys are split (flash-decoding)
SPLIT_CASES = [
    (1, 2, 2, 128, 1, 9000, "bhsd", "bfloat16"),  # decode without grouped heads
    (1, 32, 8, 128, 1, 20000, "bshd", "bfloat16"),  # grouped decode: packed and split
    (2, 4, 1, 256, 1, 9001, "bshd", "float16"),
    (3, 8, 2, 64, 1, 4097, "bhsd", "float16"),
    (1, 1, 1, 128, 48, 20000, "bhsd", "bfloat16"),  # a short query: 48 rows of one tile, 16 splits
    (2, 3, 3, 64, 64, 3000, "bshd", "bfloat16"),
    (2, 8, 8, 128, 1, 65536, "bhsd", "bfloat16"),  # 16 tiles x 16 splits: more work items than SMs
]
# each case as planned, and those of D <= 128 with two Q slots asked for (D = 256 holds one)
SPLIT_RUNS = [(*c, None) for c in SPLIT_CASES] + [(*c, 2) for c in SPLIT_CASES if c[3] <= 128]


def test_keys_are_split_for_few_tiles_and_long_keys() -> None:
    choose = attn_mod.choose_kv_splits
    assert choose(8, 200, 132, False, 1) == 16  # 2 x 132 / 8 = 33 splits wanted, at most 16
    assert choose(40, 69, 132, False, 4) == 7  # ceil(264 / 40)
    assert choose(40, 12, 132, False, 64) == 3  # at least 4 key blocks a split
    assert choose(40, 3, 132, False, 1) == 1
    assert choose(132, 1000, 132, False, 1) == 1 and choose(8, 200, 132, True, 1) == 1  # full SMs; a causal mask
    assert choose(8, 200, 132, False, 65) == 1  # many query rows: their fp32 partials cost more than idle SMs


@pytest.mark.requires_sm90
@pytest.mark.parametrize("b, h, hkv, d, sq, sk, layout, dtype, q_slots", SPLIT_RUNS,
                         ids=[f"b{c[0]}-h{c[1]}-kv{c[2]}-d{c[3]}-q{c[4]}-k{c[5]}-{c[6]}-slots{c[8] or 'auto'}"
                              for c in SPLIT_RUNS])
def test_split_keys_match_float32_attention(b, h, hkv, d, sq, sk, layout, dtype, q_slots) -> None:
    """Split keys (each split's O and lse into a workspace, then the combine kernel): against float32 attention on K
    and V repeated per query head, NaN-poisoned out and lse, three runs, and again after a re-point."""
    torch = pytest.importorskip("torch")
    seed = secrets.randbits(31)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    tdt = getattr(torch, dtype)
    hdim = 1 if layout == "bhsd" else 2

    def make(s_, heads):
        shape = (b, heads, s_, d) if layout == "bhsd" else (b, s_, heads, d)
        return torch.randn(shape, generator=gen, device="cuda", dtype=torch.float32).to(tdt)

    q, k, v = make(sq, h), make(sk, hkv), make(sk, hkv)
    out, lse = torch.empty_like(q), torch.empty((b, h, sq), device="cuda")
    plan = plan_attention(q, k, v, out, layout=layout, lse=lse, q_slots=q_slots)
    assert plan.kv_splits > 1, f"{plan.tiles} tiles, {plan.kv_splits} splits"
    assert q_slots is None or plan.config.q_slots == q_slots
    assert plan.packed == (sq == 1 and hkv < h)
    for run in range(4):
        if run == 3:  # re-pointed: the combine writes the new out and lse
            q, k, v = make(sq, h), make(sk, hkv), make(sk, hkv)
            out, lse = torch.empty_like(q), torch.empty((b, h, sq), device="cuda")
            plan(q, k, v, out, lse=lse)
        ref_o, ref_lse = reference(q, k.repeat_interleave(h // hkv, hdim), v.repeat_interleave(h // hkv, hdim),
                                   False, 1.0 / math.sqrt(d), layout)
        _poisoned_run_matches(torch, plan, out, lse, ref_o, ref_lse, dtype, f"seed {seed} run {run}")
    workspace = plan._splits_workspace
    plan.close()  # frees the workspace and the tile counter once the launches are done
    assert workspace.closed and plan._counter.closed


def _sweep(n_cases: int, seed: int) -> list[dict]:
    """Random attention problems: B, H, Sq, Sk from small to multi-wave grids (B * H * Sq / 128 of 3 waves and more on
    132 SMs), D 64 or 128, causal or not, both layouts and dtypes, both backends, scales other than 1/sqrt(D), and one
    case in five with huge logits (q and k scaled so that scale * q.k reaches thousands)."""
    rng = random.Random(seed)
    cases = []
    for i in range(n_cases):
        waves = i % 4 == 0  # a grid of at least 3 waves of 132 blocks
        b, h = (rng.randint(2, 4), rng.randint(8, 16)) if waves else (rng.randint(1, 3), rng.randint(1, 6))
        sq = rng.randint(max(1, 3 * 132 * 128 // (b * h)), 4096) if waves else int(2 ** rng.uniform(0, 12))
        sk = rng.choice((sq, int(2 ** rng.uniform(0, 12)), rng.randint(1, 4096)))
        d = rng.choice((64, 128))
        cases.append(dict(backend="tma" if i % 3 else "cp.async", b=b, h=h, sq=max(1, sq), sk=max(1, sk), d=d,
                          causal=rng.random() < 0.5, layout=rng.choice(("bhsd", "bshd")),
                          dtype=rng.choice(("bfloat16", "float16")),
                          scale=rng.choice((None, 0.05, 0.3, 1.0)), huge=i % 5 == 2))
    return cases


@pytest.mark.requires_sm90
@pytest.mark.parametrize("chunk", range(4))
def test_attention_sweep(chunk) -> None:
    """120 random problems (30 per chunk), each run 3 times on NaN-poisoned outputs, against float32 attention: no
    NaN where torch has none (huge logits included), O and lse within bf16/fp16 tolerance."""
    torch = pytest.importorskip("torch")
    torch.backends.cuda.matmul.allow_tf32 = False
    seed = int(os.environ.get("TMAKIT_TEST_SEED", "20261126"))
    for case in _sweep(120, seed)[30 * chunk:30 * (chunk + 1)]:
        gen = torch.Generator(device="cuda").manual_seed(seed + zlib.crc32(str(case).encode()) % 1000)
        tdt = getattr(torch, case["dtype"])
        b, h, d = case["b"], case["h"], case["d"]

        def make(s, amplitude=1.0):
            shape = (b, h, s, d) if case["layout"] == "bhsd" else (b, s, h, d)
            return (amplitude * torch.randn(shape, generator=gen, device="cuda")).to(tdt)

        amp = 12.0 if case["huge"] else 1.0
        q, k, v = make(case["sq"], amp), make(case["sk"], amp), make(case["sk"])
        scale = case["scale"] or 1.0 / math.sqrt(d)
        ref_o, ref_lse = reference(q, k, v, case["causal"], scale, case["layout"])
        out = torch.empty_like(q)
        lse = torch.empty((b, h, case["sq"]), device="cuda")
        plan = plan_attention(q, k, v, out, causal=case["causal"], scale=case["scale"], layout=case["layout"],
                              backend=case["backend"], lse=lse)
        for run in range(3):
            out.fill_(float("nan"))
            lse.fill_(float("nan"))
            plan()
            torch.cuda.synchronize()
            where = f"case {case} run {run} (seed {seed})"
            assert torch.equal(torch.isnan(out), torch.isnan(ref_o)), f"{where}: NaN in out where float32 has none"
            assert not torch.isnan(lse).any(), f"{where}: NaN in lse"
            rel = ((out.float() - ref_o).norm() / ref_o.norm().clamp_min(1e-30)).item()
            assert rel < (1.5e-2 if case["dtype"] == "bfloat16" else 5e-3), f"{where}: relative error {rel:.3g}"
            worst = (out.float() - ref_o).abs().max().item()  # a few wrong rows would hide in the norm
            assert worst < (0.06 if case["dtype"] == "bfloat16" else 0.02), f"{where}: max error {worst:.3g}"
            torch.testing.assert_close(lse, ref_lse, rtol=1e-3, atol=2e-3 * max(1.0, ref_lse.abs().max().item() / 100),
                                       msg=lambda m: f"{where}: lse {m}")


def _check_tile_plan(d: int, seed: int, batch: int = 2, **plan_kwargs) -> None:
    """One tile plan on causal and full problems with partial blocks (``batch`` x 3 heads, 777 queries, 1031 keys),
    3 runs each on poisoned outputs, against float32 attention."""
    torch = pytest.importorskip("torch")
    torch.backends.cuda.matmul.allow_tf32 = False
    gen = torch.Generator(device="cuda").manual_seed(seed)
    for causal, dtype in ((False, torch.bfloat16), (True, torch.float16)):
        q, k, v = (torch.randn(batch, 3, s, d, generator=gen, device="cuda").to(dtype) for s in (777, 1031, 1031))
        ref_o, ref_lse = reference(q, k, v, causal, 1.0 / math.sqrt(d), "bhsd")
        out, lse = torch.empty_like(q), torch.empty(batch, 3, 777, device="cuda")
        plan = plan_attention(q, k, v, out, lse=lse, causal=causal, **plan_kwargs)
        for key in ("block_n", "stages", "warps", "warp_rows", "q_slots"):
            if plan_kwargs.get(key) is not None:
                assert getattr(plan.config, key) == plan_kwargs[key], f"{key}: the plan took {plan.config}"
        for run in range(3):
            out.fill_(float("nan"))
            lse.fill_(float("nan"))
            plan()
            torch.cuda.synchronize()
            where = f"d{d} {plan_kwargs} causal={causal} run {run}"
            assert not torch.isnan(out).any(), f"{where}: unwritten outputs"
            assert (out.float() - ref_o).abs().max().item() < 0.06, where
            torch.testing.assert_close(lse, ref_lse, rtol=1e-3, atol=2e-3, msg=lambda m: f"{where}: lse {m}")


@pytest.mark.requires_sm90
@pytest.mark.parametrize("d, block_n, stages, warps", [(64, 64, 2, None), (64, 128, 4, None), (64, 128, 4, 12),
                                                        (128, 64, 2, None), (128, 128, 2, None), (128, 64, 3, None),
                                                        (256, 64, 2, None)])
def test_every_tma_tile_plan_on_the_gpu(d, block_n, stages, warps) -> None:
    """The tile plans beside the defaults (64-key blocks, other ring depths, D=64 with two consumer warpgroups
    instead of three: their descriptors and barriers)."""
    _check_tile_plan(d, d + block_n + stages, block_n=block_n, stages=stages, warps=warps, backend="tma")


@pytest.mark.requires_sm90
@pytest.mark.parametrize("d, block_n, stages, warps", [(64, 64, 2, None), (64, 128, 4, None), (64, 128, 4, 12),
                                                        (128, 64, 2, None), (128, 128, 2, None), (128, 64, 3, None)])
def test_tma_tile_plans_with_two_q_slots_on_the_gpu(d, block_n, stages, warps) -> None:
    """The same plans holding two Q slots, asked for: on a one-turn problem (2 x 3 heads: at most 42 tiles, one a CTA,
    where the default is one slot) and on one of several turns (24 x 3 heads: 360-504 tiles), where each CTA walks
    its tiles through both slots in turn."""
    for batch in (2, 24):
        _check_tile_plan(d, d + block_n + stages + batch, batch=batch, block_n=block_n, stages=stages, warps=warps,
                         backend="tma", q_slots=2)


@pytest.mark.requires_sm80
@pytest.mark.parametrize("d, warps, warp_rows, block_n, stages", [
    (128, 8, 16, 128, 2), (128, 4, 32, 64, 3), (128, 4, 32, 48, 2), (128, 2, 32, 32, 2), (64, 8, 32, 64, 2),
    (64, 4, 32, 64, 2), (64, 8, 16, 16, 2), (256, 8, 16, 16, 2), (256, 4, 16, 32, 2), (256, 1, 16, 32, 2)])
def test_every_cp_async_tile_plan_on_the_gpu(d, warps, warp_rows, block_n, stages) -> None:
    """The cp.async twin's tile plans beside the defaults: warps of 16 rows and of 32 (two m16 tiles sharing each
    K and V fragment), key blocks of 16-128 (a tile of fewer rows than a load pass), other ring depths and warp
    counts."""
    _check_tile_plan(d, d + warps + warp_rows + block_n + stages, block_n=block_n, stages=stages, warps=warps,
                     warp_rows=warp_rows, backend="cp.async")

def test_attention_sweep_covers_what_it_promises() -> None:
    cases = _sweep(120, int(os.environ.get("TMAKIT_TEST_SEED", "20261126")))
    assert len(cases) >= 100 and {c["backend"] for c in cases} == {"tma", "cp.async"}
    assert sum(c["b"] * c["h"] * -(-c["sq"] // 128) >= 3 * 132 for c in cases) >= 20  # multi-wave grids
    assert any(c["huge"] for c in cases) and {c["scale"] for c in cases} >= {None, 0.05, 0.3, 1.0}
    assert {c["d"] for c in cases} == {64, 128} and {c["causal"] for c in cases} == {True, False}
    assert any(c["sq"] != c["sk"] for c in cases) and {c["layout"] for c in cases} == {"bhsd", "bshd"}


@pytest.mark.requires_sm80
def test_attention_one_shot_matches_sdpa() -> None:
    torch = pytest.importorskip("torch")
    from tmakit.ops import attention

    q, k, v = (torch.randn(2, 4, 300, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    out, lse = attention(q, k, v, causal=True)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert ((out.float() - ref.float()).norm() / ref.float().norm()).item() < 1e-2
    assert lse.shape == (2, 4, 300) and lse.dtype == torch.float32


def test_example_runs(capsys) -> None:
    """examples/attention.py: without a GPU it compiles both backends and shows the maps; with one it checks."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    try:
        example = importlib.import_module("attention")
    finally:
        sys.path.pop(0)
    assert example.main(["--batch", "1", "--heads", "2", "--seqlen", "300", "--dim", "64", "--causal",
                         "--layout", "bshd", "--check"]) == 0
    text = capsys.readouterr().out
    assert "per stage (K + V tiles of" in text and ("PASSED" in text or "no CUDA GPU here" in text)


def test_one_q_slot_where_each_cta_takes_one_work_tile() -> None:
    # a second Q slot loads the next work tile's Q; where the persistent grid's CTAs take one tile each there is none
    many = describe_attention(17, 19, 327, 128, arch="sm_90a", sms=132)  # 969 tiles of 128 rows
    assert many.config.q_slots == 2 and many.defines["TMAKIT_ATTN_Q_SLOTS"] == 2
    one = describe_attention(4, 2, 832, 64, arch="sm_90a", sms=132)  # 56 tiles: one a CTA
    assert one.config.slots == 1 and one.config.q_slots == 1 and one.defines["TMAKIT_ATTN_Q_SLOTS"] == 1
    assert one.config.shared_mem == 16384 + 4 * 32768 + 16384 + 8 * (2 + 4 * 4) + 8 + 1024
    # asked for, the slots stay whatever the tiles: two on the one-turn problem, one on the many-turn one
    assert describe_attention(4, 2, 832, 64, arch="sm_90a", sms=132, q_slots=2).config.q_slots == 2
    assert describe_attention(17, 19, 327, 128, arch="sm_90a", sms=132, q_slots=1).config.q_slots == 1
    assert describe_attention(4, 2, 832, 64, arch="sm_90a", sms=20).config.q_slots == 2  # two turns on 20 SMs
    # a decode whose keys are split: the splits' ranges are the work tiles (B2 H8 decode: 16 tiles x 16 ranges)
    split = describe_attention(2, 8, 1, 128, kv_seqlen=65536, arch="sm_90a", sms=132)
    assert split.kv_splits > 1 and split.config.q_slots == 2


def test_q_slots_asked_for_are_checked() -> None:
    for bad in (0, 3, -1, True, 2.0, "2", [2]):
        with pytest.raises(InvalidArgumentError, match=r"q_slots.*must be 1 or 2"):
            default_config(Backend.TMA, 128, q_slots=bad)
    assert default_config(Backend.TMA, 128, q_slots=np.int64(1)).q_slots == 1  # an int of any kind
    with pytest.raises(InvalidArgumentError, match=r"q_slots=1: is the tma backend's.*this plan runs cp.async"):
        default_config(Backend.CP_ASYNC, 128, q_slots=1)
    with pytest.raises(InvalidArgumentError, match=r"q_slots=3: must be 1 or 2, on the tma backend"):
        check_config(replace(default_config(Backend.TMA, 128), slots=3), 232448)  # a config built by hand
    # D = 256 stages O in the Q tile: one slot only
    with pytest.raises(InvalidArgumentError, match=r"q_slots.*must be 1 at D=256: O is staged in the Q tile"):
        check_config(default_config(Backend.TMA, 256, q_slots=2), 232448)
    # two asked for where only one fits: q_slots is named, with its fix; where neither fits, the stages are
    with pytest.raises(InvalidArgumentError, match=r"q_slots=2: .*two 24 KiB Q tiles \(q_slots=2\) and the 24 KiB O "
                       r"staging tile need 233\.\d KiB.*fix: use q_slots=1$"):
        check_config(default_config(Backend.TMA, 64, warps=16, stages=5, q_slots=2), 232448)
    with pytest.raises(InvalidArgumentError, match=r"stages=3: .*two 32 KiB Q tiles \(q_slots=2\).*need 289\.\d KiB.*"
                       r"fix: use fewer stages or a smaller block_n"):
        check_config(default_config(Backend.TMA, 128, stages=3, q_slots=2), 232448)
    # left out, a block smaller than the kernel's 227 KiB takes one slot where two would not fit it (sm_120: 99 KiB)
    small = describe_attention(4, 16, 4096, 64, arch="sm_120", block_n=64, stages=3, warps=16)
    assert small.config.q_slots == 1 and small.config.shared_mem <= 99 * 1024
