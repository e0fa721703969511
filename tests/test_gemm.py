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
import os
import random
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tmakit.backend import Backend
from tmakit.build import compile_cuda
from tmakit.errors import InvalidArgumentError, UnsupportedDeviceError
from tmakit.layout.wgmma import descriptor_define
from tmakit.ops import describe_gemm, plan_gemm
from tmakit.tensormap import describe_tensor

gemm_mod = importlib.import_module("tmakit.ops.gemm")
check_config, default_config = gemm_mod.check_config, gemm_mod.default_config

from _fake_driver import FakeDeviceArray, device_view, fake_launch  # noqa: E402, F401 - fixture


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


def _entries(ptx: str) -> dict[str, str]:
    """Each .entry's PTX text, by name."""
    parts = re.split(r"(?=^\.visible \.entry )", ptx, flags=re.M)
    return {re.match(r"\.visible \.entry (\w+)", p).group(1): p for p in parts if p.startswith(".visible .entry")}


@pytest.mark.parametrize("backend, arch, bf16, kmajor", _variants())
def test_gemm_variants_compile(backend: Backend, arch: str, bf16: bool, kmajor: bool) -> None:
    """Both entry points exist in every build (nvcc's host pass needs them); the one the build serves has the
    promised instructions, the other is a trap."""
    cfg = default_config(backend, bf16=bf16, b_kmajor=kmajor, shared_mem_limit=232448 if arch == "sm_90a" else 166912)
    code = compile_cuda("gemm.cu", arch=arch, defines={**backend.defines, **cfg.defines})
    assert sorted(code.entry_names()) == ["tmakit_gemm_cp_async", "tmakit_gemm_splitk_reduce", "tmakit_gemm_tma"]
    entries = _entries(code.ptx)
    ptx, other = entries[cfg.entry], entries[({"tmakit_gemm_tma", "tmakit_gemm_cp_async"} - {cfg.entry}).pop()]
    assert "trap;" in other and "mma" not in other and "cp.async" not in other
    if backend is Backend.TMA:
        assert f"wgmma.mma_async.sync.aligned.m64n256k16.f32.{'bf16' if bf16 else 'f16'}" in ptx
        assert "setmaxnreg.dec.sync.aligned.u32 40" in ptx and "setmaxnreg.inc.sync.aligned.u32 232" in ptx
        assert "multicast::cluster" in ptx and "cp.async.bulk.tensor.2d.global.shared::cta" in ptx
        assert "mapa.shared::cluster" in ptx and "barrier.cluster.arrive" in ptx
        assert "cp.async.bulk.wait_group.read 1" in ptx  # the epilogue's two slab buffers
        assert "stmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx  # 16-bit outputs staged as fragments
        assert "cp.async.bulk.tensor.2d.shared::cluster.global" in ptx  # C's slabs loaded for beta
    else:
        assert "mma.sync.aligned.m16n8k16" in ptx and "cp.async.cg.shared.global" in ptx
        assert ("ldmatrix.sync.aligned.m8n8.x4.trans" in ptx) == (not kmajor)
        assert "wgmma" not in ptx


@pytest.mark.parametrize("out_f32", [False, True], ids=["16-bit-out", "f32-out"])
def test_split_k_builds_compile(out_f32: bool) -> None:
    """A split-K plan's two builds: the GEMM into the rank-3 fp32 workspace (its stores 3-D), and its reduce's,
    which is the plan's build without split-K for C's output type."""
    cfg = default_config(Backend.TMA, m=64, n=4096, k=4096, sms=132, out_f32=out_f32)
    assert cfg.splits > 1
    main = compile_cuda("gemm.cu", arch="sm_90a", defines={**Backend.TMA.defines, **cfg.defines})
    assert "cp.async.bulk.tensor.3d.global.shared::cta" in _entries(main.ptx)["tmakit_gemm_tma"]
    reduce = compile_cuda("gemm.cu", arch="sm_90a", defines={**Backend.TMA.defines, **cfg.reduce_defines})
    single = default_config(Backend.TMA, m=64, n=4096, k=4096, sms=132, out_f32=out_f32, splits=1,
                            block_n=cfg.block_n, cluster=cfg.cluster, block_m=cfg.block_m, stages=cfg.stages)
    assert cfg.reduce_defines == single.defines
    assert "tmakit_gemm_splitk_reduce" in reduce.entry_names()


def _configs():
    """Every configuration plan_gemm can compile for the tma kernel."""
    for bf16, kmajor, out_f32, block_n, cluster, block_m in itertools.product(
            (True, False), (True, False), (False, True), (128, 192, 256), (1, 2), (128, 64)):
        if block_n == 192 and block_m == 64:
            continue  # refused: BM 64 halves BN
        yield default_config(Backend.TMA, bf16=bf16, b_kmajor=kmajor, out_f32=out_f32, block_n=block_n, cluster=cluster,
                             block_m=block_m)


def test_kernel_descriptors_are_the_ones_derived_from_its_maps() -> None:
    """What the tma kernel multiplies with (its TMAKIT_GEMM_DESC_* defines) is tmakit.wgmma_descriptors of the
    tensor maps the plan encodes, for every configuration; the kernel's built-in defaults are the default plan's."""
    for cfg in _configs():
        dtype = "float16"  # bf16 and fp16 describe alike (2-byte elements)
        a, c = device_view(0x10000, (300, 200), dtype), device_view(0x900000, (300, 520), "float32" if cfg.out_f32 else dtype)
        b = device_view(0x400000, (520, 200) if cfg.b_kmajor else (200, 520), dtype)
        maps = gemm_mod.gemm_tensor_maps(a, b, c, cfg, encode=False)
        want_a, want_b = gemm_mod.stage_descriptors(maps[0], maps[1], cfg)
        got = cfg.defines
        assert got["TMAKIT_GEMM_DESC_A"] == ", ".join(f"0x{d.value:016x}ull" for d in want_a), cfg
        assert got["TMAKIT_GEMM_DESC_B"] == ", ".join(f"0x{d.value:016x}ull" for d in want_b), cfg
        # the same derivation says the consumer rows 64-127 start 64 rows (8 core matrices) further on; at BM 64
        # both warpgroups read rows 0-63
        apart = 8 * 1024 if cfg.block_m == 128 else 0
        assert [d.start_address - w.start_address for d, w in zip(want_a[4:], want_a[:4])] == [apart] * 4
    source = (Path(__file__).resolve().parents[1] / "cuda_src" / "gemm.cu").read_text()
    defaults = default_config(Backend.TMA).defines
    for name in ("TMAKIT_GEMM_DESC_A", "TMAKIT_GEMM_DESC_B"):
        block = re.search(rf"#ifndef {name}\n#define {name}(.*?)#endif", source, re.S).group(1)
        assert re.findall(r"0x[0-9a-f]+ull", block) == defaults[name].split(", "), name


def test_defaults_are_the_tuned_plan() -> None:
    cfg = default_config(Backend.TMA)
    assert (cfg.block_n, cfg.stages, cfg.cluster, cfg.threads) == (256, 4, 2, 384)
    assert cfg.shared_mem <= 232448
    assert default_config(Backend.TMA, out_f32=True).stages == 4  # the fp32 epilogue slabs are 128 bytes too
    assert default_config(Backend.CP_ASYNC, shared_mem_limit=166912).stages == 3


def test_tile_choice_counts_the_turns_of_the_persistent_grid() -> None:
    """BN and the cluster are chosen per problem by the turns each resident CTA takes, weighted by a tile's cost;
    what the caller gives is kept."""
    turns = gemm_mod.tile_turns
    assert turns(8192, 8192, 256, 2, 132) == 16  # 64 x 32 tiles over 132 CTAs: 15.5 -> 16 turns
    assert turns(2000, 3000, 256, 2, 132) == 2 and turns(2000, 3000, 128, 2, 132) == 3  # 192 / 384 tiles
    assert turns(100, 100, 256, 2, 132) == 1  # one cluster (two CTAs, one of them past the rows)
    choose = gemm_mod.choose_tile
    assert choose(8192, 8192, 132) == (256, 2)  # whole turns either way: the wider tile
    assert choose(2000, 3000, 132, widths=(256, 128)) == (128, 2)  # 2 turns of 256 cost more than 3 of 128
    assert choose(2000, 3000, 132, widths=(256, 192, 128)) == (192, 2)  # and than 2 of 192 (256 tiles)
    assert choose(2000, 3000, 132, widths=(256, 192, 128), b_kmajor=False) == (192, 2)  # either B major
    assert choose(14096, 3144, 132, widths=(256, 192, 128)) == (256, 2)  # 192 saves 5% in the model: not taken
    assert choose(2000, 3000, 132, block_n=192, cluster=1, b_kmajor=False) == (192, 1)  # asked for: kept
    assert default_config(Backend.TMA, m=2000, n=3000, sms=132).block_n == 192
    assert default_config(Backend.TMA, m=2000, n=3000, sms=132, out_f32=True).block_n == 192
    assert choose(984, 480, 132)[0] == 128  # 16 tiles of 256 leave 116 SMs idle
    assert choose(984, 480, 132, block_n=256) == (256, 2) and choose(984, 480, 132, cluster=1) == (128, 1)
    assert default_config(Backend.TMA, m=984, n=480, sms=132).block_n == 128
    assert default_config(Backend.TMA, m=984, n=480, sms=132, block_n=256, cluster=1).block_n == 256
    assert default_config(Backend.TMA, m=984, n=480, sms=132, shared_mem_limit=101376).block_n == 128
    assert default_config(Backend.CP_ASYNC, m=984, n=480, sms=132) == default_config(Backend.CP_ASYNC)
    assert (default_config(Backend.TMA).block_n, default_config(Backend.TMA).cluster) == (256, 2)  # no problem given


def test_cluster_discount_is_judged_per_problem() -> None:
    """Two clustered options are compared on their turns and widths alone: a 128-wide tile of 5 turns does not
    get the many-turn discount against a 256-wide tile of 3 (N-major B with N < 640 keeps the per-option
    judgement, where 256-wide tiles measured slower)."""
    turns, choose = gemm_mod.tile_turns, gemm_mod.choose_tile
    assert turns(1376, 6664, 128, 2, 132) == 5 and turns(1376, 6664, 256, 2, 132) == 3
    assert choose(1376, 6664, 132, b_kmajor=False) == (256, 2)
    assert choose(3760, 2728, 132, widths=(256, 192, 128), k=7944) == (256, 2)
    assert turns(14128, 520, 128, 2, 132) == 5 and turns(14128, 520, 256, 2, 132) == 3
    assert choose(14128, 520, 132, b_kmajor=False) == (128, 2)
    assert choose(14128, 520, 132, b_kmajor=True) == (256, 2)
    assert choose(8192, 8192, 132) == (256, 2) and choose(2000, 3000, 132, widths=(256, 128)) == (128, 2)


def test_shared_memory_budget_refuses_too_many_stages() -> None:
    cfg = default_config(Backend.TMA, stages=5)
    with pytest.raises(InvalidArgumentError, match=r"stages.*48 KiB; 5 stages need 2\d\d\.\d KiB, 227\.0 KiB available"):
        check_config(cfg, 232448)


def test_cluster_on_cp_async_refused() -> None:
    with pytest.raises(InvalidArgumentError, match=r"cluster.*1 on the cp.async backend"):
        check_config(default_config(Backend.CP_ASYNC, cluster=2), 232448)
    with pytest.raises(InvalidArgumentError, match=r"block_n.*128 or 256"):
        check_config(default_config(Backend.CP_ASYNC, block_n=192), 232448)
    with pytest.raises(InvalidArgumentError, match=r"block_n.*128 or 256"):
        check_config(default_config(Backend.TMA, block_n=168), 232448)  # narrow widths are multiples of 16
    check_config(default_config(Backend.TMA, block_n=192), 232448)
    # N-major B in a cluster: B's three 64-column slabs split two and one between the CTAs
    check_config(default_config(Backend.TMA, block_n=192, cluster=2, b_kmajor=False), 232448)


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


def test_column_slices_of_one_buffer_are_apart() -> None:
    """C written into columns of the buffer A's columns come from (a fused projection's output, say) shares no byte
    with A: accepted; C one column into A's columns is refused. The row-by-row check agrees with the byte sets on
    random column slices."""
    from tmakit.ops._checks import _rows_apart, refuse_overlap

    buf = 0x100000
    a, c = device_view(buf, (64, 64), "float16", strides=(256, 2)), device_view(buf + 128, (64, 64), "float16", strides=(256, 2))
    refuse_overlap([("c", c)], [("a", a)])
    with pytest.raises(InvalidArgumentError, match=r"c=.*overlaps a"):
        refuse_overlap([("c", device_view(buf + 126, (64, 64), "float16", strides=(256, 2)))], [("a", a)])
    rng = random.Random(5)
    for _ in range(3000):
        pitch, item = rng.choice((32, 48, 64, 128)), rng.choice((1, 2, 4))

        def view():
            return device_view(0x1000 + rng.randrange(0, 3 * pitch // item) * item,
                               (rng.randint(1, 6), rng.randint(1, pitch // item)), f"u{item}", strides=(pitch, item))

        v, w = view(), view()
        held = [set(range(x.ptr + r * pitch, x.ptr + r * pitch + x.shape[1] * item)) for x in (v, w) for r in range(x.shape[0])]
        vs, ws = set().union(*held[:v.shape[0]]), set().union(*held[v.shape[0]:])
        assert _rows_apart(v, w) == (not vs & ws), (v, w)


def test_descriptor_defines_that_do_not_describe_the_build_are_refused() -> None:
    """gemm.cu checks the descriptors it is given against its own stages at compile time: N-major B with the
    built-in (K-major) defaults stops the compile, naming the function that derives the right ones."""
    from tmakit.errors import CompileError

    with pytest.raises(CompileError, match=r"TMAKIT_GEMM_DESC_A/B do not describe this build's stages.*descriptor_defines"):
        compile_cuda("gemm.cu", arch="sm_90a", defines={"TMAKIT_GEMM_B_KMAJOR": 0})


def test_odd_slab_counts_take_a_16_bit_c_read() -> None:
    """Builds of an odd number of 16-bit slabs a warpgroup (BN 192: three; BM 64 at BN 128: one) and narrow widths
    (a part slab) read C with beta != 0 (the C read-ahead follows the store pipeline's rotation across tiles): asked
    for, they are planned as asked (test_c_read_of_odd_slab_counts_on_the_gpu runs them)."""
    for options in (dict(block_n=192), dict(block_m=64, block_n=128), dict(block_n=144)):
        d = describe_gemm(300, 296, 64, dtype="fp16", beta=1.0, **options)
        assert all(getattr(d.config, key) == value for key, value in options.items()), options


def test_block_m_64_arguments(fake_launch) -> None:
    """BM 64: tma only, BN 128 or 256, no groups; the plan's maps load 64-row A boxes and both warpgroups read the
    same rows."""
    cfg = default_config(Backend.TMA, block_m=64, block_n=128)
    assert (cfg.block_m, cfg.stages, cfg.defines["TMAKIT_GEMM_BM"]) == (64, 6, 64)
    defs = gemm_mod.descriptor_defines(cfg)["TMAKIT_GEMM_DESC_A"].split(", ")
    assert defs[:4] == defs[4:]  # both warpgroups: the same 64 rows
    for bad, match in (({"block_m": 32}, r"block_m=32: must be 128, or 64 on tma"),
                       ({"block_m": 64.0}, r"block_m=64.0: must be 128"),
                       ({"block_m": 0}, r"block_m=0: must be 128"), ({"block_m": "64"}, r"block_m='64': must be 128"),
                       ({"block_m": 64, "block_n": 192}, r"block_m=64: must be 128, or 64 on tma with block_n 128"),
                       ({"block_m": 64, "groups": 4, "cluster": 1}, r"block_m=64: .*no groups")):
        with pytest.raises(InvalidArgumentError, match=match):
            check_config(default_config(Backend.TMA, **bad), 232448)
    with pytest.raises(InvalidArgumentError, match=r"block_m=64: must be 128, or 64 on tma"):
        check_config(default_config(Backend.CP_ASYNC, block_m=64, block_n=128), 166912)
    with pytest.raises(InvalidArgumentError, match=r"block_m=0: must be 128"):
        describe_gemm(48, 512, 4096, block_m=0)
    d = describe_gemm(300, 256, 64, dtype="fp16", block_m=64, block_n=128, cluster=1)
    assert d.tile == (64, 128, 64) and d.maps[0].box == (64, 64) and d.expect_tx == 24 * 1024
    assert gemm_mod.persistent_grid(300, 256, d.config, 132) == (10, 1, 1)  # 5 x 2 tiles of 64 x 128


def test_swapped_operands_arguments(fake_launch) -> None:
    """``swap_ab``: C^T = B^T A^T, chosen where the turn model says the tiles of C^T cost at most 0.9 of C's (the
    cluster's discount counted from K = 3072), a 16-bit output only; the maps are B's (MN-major slabs where B is
    N-major), A's and C's own; given where the kernel cannot build it, refused naming what it lacks."""
    d = describe_gemm(1000, 4097, 2048)  # 33 x 4 lone 128 x 256 tiles of C^T: one turn; C's 8 x 33 of 128 x 128: two
    assert d.config.swap_ab and (d.config.block_m, d.config.block_n, d.config.cluster, d.config.splits) == (128, 256, 1, 1)
    assert [m.shape for m in d.maps] == [(4097, 2048), (1000, 2048), (1000, 4097)]  # B feeds the kernel's A stages
    assert d.maps[0].box == (64, 128) and d.maps[1].box == (64, 256) and d.defines["TMAKIT_GEMM_SWAP_AB"] == 1
    plain = describe_gemm(1000, 4097, 2048, swap_ab=False).config
    assert not plain.swap_ab and (plain.block_n, plain.cluster) == (128, 2)
    assert gemm_mod.plan_turn_cost(d.config, 4097, 1000, 132) == 1.0
    assert abs(gemm_mod.plan_turn_cost(plain, 1000, 4097, 132) - 2 * 0.6 * 0.95) < 1e-9
    nmajor = describe_gemm(1000, 4097, 2048, b_major="n")  # B (K, N): the kernel's A in MN-major (64, 64) slabs
    assert nmajor.config.swap_ab and not nmajor.config.a_kmajor and nmajor.config.b_kmajor
    assert nmajor.maps[0].shape == (2048, 4097) and nmajor.maps[0].box == (64, 64)
    assert nmajor.config.caller_b_kmajor is False and d.config.caller_b_kmajor is True
    assert nmajor.defines["TMAKIT_GEMM_A_KMAJOR"] == 0 and d.defines["TMAKIT_GEMM_A_KMAJOR"] == 1
    for kwargs in (dict(out_dtype="float32"), dict(splits=1), dict(block_n=128), dict(stages=3), dict(tail_rows=0),
                   dict(sms=8), dict(arch="sm_100")):  # fp32, a tile given, few SMs or an unknown count: plain
        assert not describe_gemm(1000, 4097, 2048, **kwargs).config.swap_ab, kwargs
    assert describe_gemm(1000, 4097, 2048, stages=5).config.stages == 5  # given stages: the plain plan, which fits
    assert not describe_gemm(8192, 8192, 8192).config.swap_ab
    assert describe_gemm(12120, 632, 256).config.swap_ab  # short K: lone swapped CTAs for clustered ones
    assert not describe_gemm(9448, 640, 9656).config.swap_ab  # long K: the pairs' discount keeps the plain plan
    given = describe_gemm(300, 500, 64, swap_ab=True, block_n=208, cluster=2)
    assert given.config.swap_ab and given.tile == (128, 208, 64) and given.maps[0].shape == (500, 64)
    for kwargs, match in ((dict(b_major="n", multicast="a"), r"multicast='a': cannot share A with swapped operands"),
                          (dict(out_dtype="float32"), r"swap_ab=True: is not built with an fp32 output"),
                          (dict(splits=2), r"swap_ab=True: is not built with split-K \(splits=2\)"),
                          (dict(tail_rows=128), r"tail_rows=128: must be 0 with swap_ab=True"),
                          (dict(backend="cp.async"), r"swap_ab=True: is not built with the cp.async backend")):
        with pytest.raises(InvalidArgumentError, match=match):
            describe_gemm(1000, 4097, 2048, swap_ab=True, **kwargs)
    with pytest.raises(InvalidArgumentError, match=r"swap_ab='yes': must be True, False or None"):
        describe_gemm(1000, 4097, 2048, swap_ab="yes")
    # given, split-K not asked for is left out: these problems' C^T would take it
    for m, n, k in ((64, 4096, 8192), (200, 1000, 8192), (7, 4097, 4096)):
        assert describe_gemm(m, n, k, swap_ab=True).config.splits == 1
    for bad, why in ((dict(store_add=True), 'reduce="add"'), (dict(groups=4, cluster=1), "groups"),
                     (dict(tail_rows=128), r"a tail \(tail_rows=128\)"), (dict(b_kmajor=False), "an N-major kernel B")):
        with pytest.raises(InvalidArgumentError, match=rf"swap_ab=True: is not built with {why}"):
            check_config(replace(default_config(Backend.TMA), swap_ab=True, **bad), 232448)
    with pytest.raises(InvalidArgumentError, match=r"a_kmajor=False: needs swap_ab"):
        check_config(replace(default_config(Backend.TMA), a_kmajor=False), 232448)
    swapped = compile_cuda("gemm.cu", arch="sm_90a", defines={**Backend.TMA.defines, **d.defines})
    ptx = _entries(swapped.ptx)["tmakit_gemm_tma"]
    assert "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in ptx  # each slab staged transposed
    assert ".trans" not in _entries(compile_cuda("gemm.cu", arch="sm_90a", defines={
        **Backend.TMA.defines, **plain.defines}).ptx)["tmakit_gemm_tma"].split("stmatrix", 1)[1].split("\n", 1)[0]


def test_multicast_a_arguments(fake_launch) -> None:
    """``multicast="a"``: a 2-CTA cluster on horizontally adjacent tiles sharing A (the A box half the tile rows, B's
    box the whole tile), refused without a cluster of two on tma, with groups or fp8; "b" is the vertical pair."""
    cfg = default_config(Backend.TMA, block_n=128, multicast_a=True)
    assert (cfg.cluster, cfg.multicast_a, cfg.defines["TMAKIT_GEMM_MULTICAST_A"]) == (2, True, 1)
    assert gemm_mod._operand_boxes(cfg) == ((64, 64), (128, 64))  # (rows, K): half of A, the whole B tile
    assert gemm_mod._operand_boxes(replace(cfg, multicast_a=False)) == ((128, 64), (64, 64))
    assert gemm_mod._operand_boxes(default_config(Backend.TMA, block_m=64, multicast_a=True))[0] == (32, 64)
    # the stages are laid out alike, so the wgmma descriptors derived from the maps of the shared A are the build's
    for shared in (cfg, default_config(Backend.TMA, block_m=64, block_n=256, multicast_a=True),
                   default_config(Backend.TMA, block_n=192, b_kmajor=False, multicast_a=True)):
        box_a, box_b = gemm_mod._operand_boxes(shared)
        a_map = describe_tensor(shape=(2 * shared.block_m, 128), dtype="bf16", box=box_a, swizzle="128B", encode=False)
        b_map = describe_tensor(shape=(2 * max(box_b), 2 * max(box_b)), dtype="bf16", box=box_b, swizzle="128B",
                                encode=False)
        a, b = gemm_mod.stage_descriptors(a_map, b_map, shared)
        defines = gemm_mod.descriptor_defines(shared)
        assert (defines["TMAKIT_GEMM_DESC_A"], defines["TMAKIT_GEMM_DESC_B"]) == (descriptor_define(a),
                                                                               descriptor_define(b))
    # 11 x 12 tiles of 128 x 128: pairs along N make 11 x 6 clusters (one turn), pairs along M 6 x 12 (two)
    assert gemm_mod.persistent_grid(1288, 1432, cfg, 132) == (132, 1, 1)
    assert gemm_mod.tile_turns(1288, 1432, 128, 2, 132, multicast_a=True) == 1
    assert gemm_mod.tile_turns(1288, 1432, 128, 2, 132) == 2
    assert gemm_mod._tile_ctas(300, 300, 128, 2, multicast_a=True) == 3 * 4  # 3 x 3 tiles: columns padded to pairs
    for bad, match in (({"cluster": 1}, r"multicast='a': needs a 2-CTA cluster on tma.*cluster=1"),
                       ({"groups": 4, "cluster": 2}, r"multicast='a': .*groups"),
                       ({"fp8": True, "block_n": 128, "cluster": 2}, r"multicast='a': .*fp8")):
        with pytest.raises(InvalidArgumentError, match=match):
            check_config(default_config(Backend.TMA, multicast_a=True, **bad), 232448)
    with pytest.raises(InvalidArgumentError, match=r"multicast='a': needs a 2-CTA cluster on tma"):
        check_config(default_config(Backend.CP_ASYNC, multicast_a=True), 166912)
    with pytest.raises(InvalidArgumentError, match=r"cluster=3: must be 1 or 2"):  # the cluster's own rule first
        check_config(default_config(Backend.TMA, multicast_a=True, cluster=3), 232448)
    a, b = device_view(0x100000, (1288, 3832), "float16"), device_view(0x4000000, (1432, 3832), "float16")
    c = device_view(0x8000000, (1288, 1432), "float16")
    for bad, match in ((dict(multicast="c"), r"multicast='c': must be \"a\""), (dict(multicast=1), r"multicast=1"),
                       (dict(multicast="a", cluster=1), r"multicast='a': needs a 2-CTA cluster")):
        with pytest.raises(InvalidArgumentError, match=match):
            plan_gemm(a, b, c, backend="cp.async" if bad.get("multicast") == "a" else "tma", **bad)
    d = describe_gemm(1288, 1432, 3832, multicast="b")
    assert (d.config.block_n, d.config.cluster, d.config.multicast_a) == (128, 1, False)  # the plan before the rule
    d = describe_gemm(1288, 1432, 3832)
    assert (d.config.block_n, d.config.cluster, d.config.multicast_a) == (128, 2, True)
    assert d.maps[0].box == (64, 64) and d.maps[1].box == (64, 128) and d.expect_tx == 32 * 1024
    d = describe_gemm(4096, 4096, 4096, multicast="A", block_n=256)  # asked for: kept, a 2-CTA cluster
    assert (d.config.cluster, d.config.multicast_a, d.maps[0].box, d.maps[1].box) == (2, True, (64, 64), (64, 256))
    # a tail keeps whole tile rows of the first plan, not pairs of them, with pairs along N
    gemm_mod._check_tail_rows(136, cfg, 1288)  # 1152 rows: 9 tile rows
    with pytest.raises(InvalidArgumentError, match=r"tail_rows=136: must leave the first plan whole cluster rows.*of 256"):
        gemm_mod._check_tail_rows(136, replace(cfg, multicast_a=False), 1288)


def test_multicast_a_is_chosen_for_long_k_on_few_tiles() -> None:
    """``choose_multicast_a``: lone 128-row plans whose pairs along N add no turn, K >= 3584, and one turn of
    128-wide tiles, or several turns of at most 640 rows with N-major B (docs/PERFORMANCE.md, GEMM)."""
    choose = gemm_mod.choose_multicast_a
    assert choose(1288, 1432, 3832, 128, True, 132)  # 132 lone tiles: 66 pairs along N, one turn
    assert not choose(1288, 1432, 3072, 128, True, 132)  # K too short (measured losses below 3584)
    assert not choose(1288, 1432, 3832, 128, True, 130)  # 130 SMs: two turns either way, K-major B
    assert not choose(128, 8192, 8192, 128, True, 132)  # one tile row (M <= 128)
    assert choose(296, 13080, 14376, 192, False, 132)  # 3 x 69 tiles of 192: 2 turns either way, N-major
    assert not choose(296, 13080, 14376, 192, True, 132)  # K-major B over several turns: measured losses
    assert not choose(1000, 13080, 14376, 192, False, 132)  # more than 640 rows
    assert not choose(2000, 1432, 3832, 128, True, 132)  # two turns of 128-wide tiles
    cfg = default_config(Backend.TMA, m=1288, n=1432, k=3832, sms=132)
    assert (cfg.block_n, cfg.cluster, cfg.multicast_a) == (128, 2, True)
    assert default_config(Backend.TMA, m=1288, n=1432, k=3832, sms=132, multicast_a=False).cluster == 1
    # a tile or cluster given is kept as given
    assert not default_config(Backend.TMA, m=1288, n=1432, k=3832, sms=132, block_n=128).multicast_a
    assert not default_config(Backend.TMA, m=1288, n=1432, k=3832, sms=132, cluster=1).multicast_a
    assert not default_config(Backend.TMA, m=328, n=1784, k=3056, sms=132).multicast_a  # K below 3584
    assert default_config(Backend.TMA, m=8192, n=8192, k=8192, sms=132).multicast_a is False


def test_narrow_width_arguments(fake_launch) -> None:
    """A narrow BN (a multiple of 16 from 64 to 240 besides 128 and 192): tma, either B major and output type, beta
    0, BM 128, no split-K or reduce-add; anything else is refused naming the rule. K-major, its B box is a CTA's share
    of BN rows and its stage holds BN rows of B; N-major, the stage holds BN's 64-column slabs, the last one whole."""
    cfg = default_config(Backend.TMA, block_n=144, cluster=2)
    assert cfg.narrow and cfg.splits == 1 and cfg.defines["TMAKIT_GEMM_BN"] == 144
    assert cfg.stage_bytes == (128 + 144) * 128 and not default_config(Backend.TMA, block_n=192).narrow
    d = describe_gemm(4000, 296, 2048, block_n=144, cluster=2)
    assert d.tile == (128, 144, 64) and d.maps[1].box == (64, 72) and d.config.splits == 1  # (K, a CTA's rows)
    assert describe_gemm(4000, 296, 2048, block_n=80, cluster=1).expect_tx == (128 + 80) * 128
    nmajor = describe_gemm(4000, 296, 2048, block_n=176, cluster=2, b_major="n")
    assert nmajor.maps[1].box == (64, 64) and nmajor.expect_tx == (128 + 192) * 128  # three whole slabs of 64 x 64
    assert nmajor.config.stage_bytes == (128 + 192) * 128 and nmajor.config.narrow
    for bad, match in ((dict(block_n=72), r"block_n=72: must be 128 or 256, or on tma 192 or a multiple of 16"),
                       (dict(block_n=272), r"block_n=272: must be"), (dict(block_n=48), r"block_n=48: must be"),
                       (dict(block_n=144, block_m=64), r"block_n=144: a narrow width .* block_m=64"),
                       (dict(block_n=144, splits=2), r"block_n=144: a narrow width .* split-K \(splits=2\)")):
        with pytest.raises(InvalidArgumentError, match=match):
            check_config(default_config(Backend.TMA, **bad), 232448)
    with pytest.raises(InvalidArgumentError, match=r"block_n=144: must be 128 or 256"):
        check_config(default_config(Backend.CP_ASYNC, block_n=144), 166912)
    a, b = device_view(0x100000, (300, 64), "float16"), device_view(0x200000, (296, 64), "float16")
    c = device_view(0x300000, (300, 296), "float16")
    with pytest.raises(InvalidArgumentError, match=r"block_n=144: a narrow width .* reduce=\"add\""):
        plan_gemm(a, b, c, block_n=144, reduce="add", backend="tma")
    # left out, a reduce-add plan takes a usual width where a plain one would take a narrow one: it is accepted
    a2, b2 = device_view(0x10000000, (8192, 4096), "float16"), device_view(0x20000000, (400, 4096), "float16")
    c2 = device_view(0x30000000, (8192, 400), "float16")
    assert describe_gemm(8192, 400, 4096, dtype="fp16").config.narrow
    try:
        added = plan_gemm(a2, b2, c2, reduce="add", backend="tma")
    except UnsupportedDeviceError:  # no GPU to encode its tensor maps: the config was accepted before that
        added = None
    assert added is None or (not added.config.narrow and added.config.store_add)
    d = describe_gemm(300, 296, 64, block_n=160, cluster=1)
    assert gemm_mod.persistent_grid(300, 296, d.config, 132) == (6, 1, 1)  # 3 tile rows x 2 columns of 160


def test_gemm_maps_promote_128_byte_lines() -> None:
    """A's, B's and C's maps ask for 128-byte L2 promotion: with 256 a 128-byte box row of a pitch that is not a
    multiple of 128 bytes (two lines) read about twice the DRAM bytes (docs/PERFORMANCE.md, GEMM, L2 promotion)."""
    from tmakit import L2Promotion

    for shape, major in (((8512, 10728, 11896), "n"), ((8192, 8192, 8192), "k"), ((1000, 4104, 2056), "k")):
        d = describe_gemm(*shape, dtype="float16", b_major=major, beta=0.5, out_dtype="float32")
        assert [m.l2_promotion for m in d.maps] == [L2Promotion.L2_128B] * 3, shape


def test_narrow_widths_are_chosen_where_they_do_less_work() -> None:
    """A chosen 192- or 256-wide tile gives way to N cut into as many tiles as 256-wide ones (rounded up to 16) where
    that is narrower, at most 224, with K >= 512, beta 0 (either output type) and no split-K or tail; a chosen
    128-wide tile in a cluster does too (either B major) where the narrow width's turns cost less and K >= 1536;
    describe_gemm says the same."""
    assert gemm_mod.narrow_width(888) == 224 and gemm_mod.narrow_width(272) == 144
    assert gemm_mod.narrow_width(456) is None and gemm_mod.narrow_width(370) is None  # 240; 192 (a usual width)
    cfg = default_config(Backend.TMA, m=10240, n=888, k=3696, sms=132)
    assert (cfg.block_n, cfg.cluster, cfg.splits, cfg.narrow) == (224, 2, 1, True)  # 4 tiles of 256 -> 4 of 224
    assert default_config(Backend.TMA, m=14368, n=272, k=1952, sms=132).block_n == 144  # 2 of 192 -> 2 of 144
    # N-major: a chosen 192 (in a cluster) likewise; a chosen 128 in a cluster from K 1536 (below: the loop next)
    assert default_config(Backend.TMA, m=12608, n=280, k=1504, sms=132, b_kmajor=False).block_n == 144
    assert default_config(Backend.TMA, m=8776, n=584, k=1536, sms=132, b_kmajor=False).block_n == 208
    # K-major too: 3 turns of 128 -> 2 of 224
    assert default_config(Backend.TMA, m=8976, n=632, k=7656, sms=132).block_n == 224
    assert describe_gemm(10240, 888, 3696, beta=0.5).config.block_n == 224  # a C read takes the same width
    for kwargs in (dict(m=4728, n=432, k=8168),  # 3 of 192 -> 2 of 224: wider, not taken
                   dict(m=10240, n=888, k=448),  # short K
                   dict(m=8192, n=8192, k=8192),
                   dict(m=8776, n=584, k=1504, b_kmajor=False),  # N-major 128 in a cluster: K below 1536
                   dict(m=4864, n=312, k=10000, b_kmajor=False)):  # one turn either way
        assert not default_config(Backend.TMA, sms=132, **kwargs).narrow, kwargs
    # a chosen 128 in a cluster: 4 turns of 128 -> 3 of 224 is dearer (2.64 > 2.4), so more tiles: 3 turns of 160
    # (2.04); N = 1848 has no narrow width of 8 tiles (240), so 9 of 208: 8 turns of 128 -> 5 of 208
    for (m, n, k, kmajor), width in (((11600, 640, 7232, False), 160), ((12160, 560, 1536, True), 144),
                                     ((8504, 1848, 4776, True), 208), ((8504, 1848, 1536, False), 208)):
        assert gemm_mod.choose_tile(m, n, 132, widths=(256, 192, 128), k=k, b_kmajor=kmajor) == (128, 2)
        cfg = default_config(Backend.TMA, m=m, n=n, k=k, sms=132, b_kmajor=kmajor)
        assert (cfg.block_n, cfg.cluster, cfg.narrow) == (width, 2, True), (m, n, k)
        assert gemm_mod.choose_narrow(m, n, k, 128, 2, 132) == width
    assert gemm_mod.narrow_width(640, 4) == 160 and gemm_mod.narrow_width(1848) is None
    assert gemm_mod.choose_narrow(12160, 560, 1024, 128, 2, 132) is None  # K below 1536
    assert gemm_mod.choose_narrow(12160, 560, 1536, 128, 1, 132) is None  # lone CTAs
    assert describe_gemm(12160, 560, 1536, beta=1.0, sms=132).config.block_n == 144  # a C read too
    assert default_config(Backend.TMA, m=10240, n=888, k=3696, sms=132, block_n=256).block_n == 256  # given: kept
    f32 = default_config(Backend.TMA, m=10240, n=888, k=3696, sms=132, out_f32=True)  # an fp32 output, beta 0
    assert (f32.block_n, f32.narrow) == (224, True)  # seven 32-column slabs
    nmajor = default_config(Backend.TMA, m=10240, n=888, k=3696, sms=132, b_kmajor=False)
    assert (nmajor.block_n, nmajor.cluster, nmajor.narrow) == (224, 2, True)  # as K-major
    # 192 in a cluster -> 176, 2 turns each
    nmajor = default_config(Backend.TMA, m=14256, n=328, k=4264, sms=132, b_kmajor=False)
    assert (nmajor.block_n, nmajor.cluster, nmajor.block_m, nmajor.narrow) == (176, 2, 128, True)
    for kwargs in (dict(store_add=True), dict(shared_mem_limit=101376)):
        # reduce-add, or a GPU of 99 KiB of shared memory a block (no 4 stages of a 176-wide tile)
        assert not default_config(Backend.TMA, m=14256, n=328, k=4264, sms=132, b_kmajor=False, **kwargs).narrow
    for n in range(144, 1200, 8):  # whatever the rule picks on a small GPU, check_config accepts
        small = default_config(Backend.TMA, m=12769, n=n, k=3625, sms=84, b_kmajor=False, shared_mem_limit=101376)
        check_config(small, 101376, 3625)
    added = default_config(Backend.TMA, m=10240, n=888, k=3696, sms=132, store_add=True)  # reduce="add"
    assert not added.narrow and added.store_add
    assert gemm_mod.narrow_width(40) is None  # below 64
    assert gemm_mod.tile_cost(256) == 1.0 and abs(gemm_mod.tile_cost(224) - 0.88) < 1e-9  # between 192 and 256
    assert abs(gemm_mod.tile_cost(160) - 0.68) < 1e-9 and gemm_mod.tile_cost(80) == 0.6  # below 128: as 128
    d = describe_gemm(10240, 888, 3696)
    assert d.tile == (128, 224, 64) and d.config.tail_rows == 0


@pytest.mark.parametrize("c_at, which", [(0x100000, "a"), (0x100000 + 64 * 64 * 2 - 16, "a"), (0x200800, "b")])
def test_output_overlapping_an_input_is_refused(fake_launch, c_at, which) -> None:
    """C sharing bytes with A or B would be written while TMA loads of them are in flight."""
    a, b = device_view(0x100000, (64, 64), "float16"), device_view(0x200000, (64, 64), "float16")
    with pytest.raises(InvalidArgumentError, match=rf"c=.*overlaps {which} \(bytes"):
        plan_gemm(a, b, device_view(c_at, (64, 64), "float16"), backend="cp.async")
    plan = plan_gemm(a, b, device_view(0x300000, (64, 64), "float16"), backend="cp.async")  # apart: accepted
    with pytest.raises(InvalidArgumentError, match=r"c=.*overlaps a"):
        plan(a, b, device_view(0x100040, (64, 64), "float16"))


# ----------------------------------------------------------------------------------------------------------
# GPU tier
# ----------------------------------------------------------------------------------------------------------

def _padded(torch, rows, cols, dtype, fill=None, extra=None):
    """A (rows, cols) view of a buffer whose rows are padded to 16 bytes (plus `extra` elements, default 8)."""
    per = 16 // torch.empty((), dtype=dtype).element_size()
    pitch = -(-cols // per) * per + (per if extra is None else extra)
    buf = torch.empty(rows, pitch, device="cuda", dtype=dtype)
    if fill is None:
        buf.uniform_(-1, 1)
    else:
        buf.fill_(fill)
    return buf, buf[:, :cols]


def _seed() -> int:
    """The sweep's seed: TMAKIT_TEST_SEED, or a fixed default (printed by the failing assertion either way)."""
    return int(os.environ.get("TMAKIT_TEST_SEED", "20261126"))


def _sweep(n_cases: int, backend: str, seed: int) -> list[tuple]:
    """Random GEMMs: M, N, K log-uniform in 1..9000 (a few K = 16), N % 256 in each of the eight 32-wide bands and
    N % 8 in every residue, both dtypes and B majors, 16-bit or fp32 out, alpha in {0, 1, -2}, beta in {0, 0.5, 1},
    C's rows padded (one case in three by a whole extra 16 bytes or more), NaN/Inf planted in A, B or C one case in
    four."""
    rng = random.Random(seed)

    def size() -> int:
        return max(1, min(9000, int(round(2 ** rng.uniform(0, 13.14)))))

    cases = []
    for i in range(n_cases):
        band, residue = i % 8, (i // 8) % 8
        n = 256 * rng.randrange(0, 35) + 32 * band + 8 * rng.randrange(0, 4) + residue
        n = max(1, min(9000, n))
        k = 16 if i % 17 == 5 else size()
        cases.append(dict(backend=backend, dtype=rng.choice(("bfloat16", "float16")), kmajor=rng.random() < 0.5,
                          m=size(), n=n, k=k, out_f32=rng.random() < 0.4, alpha=rng.choice((0.0, 1.0, -2.0)),
                          beta=rng.choice((0.0, 0.5, 1.0)), pad=rng.choice((0, 8, 24)),
                          special=rng.choice(("nan_a", "inf_b", "nan_c", "inf_a")) if i % 4 == 3 else None))
    return cases


def _check_gemm(torch, case: dict, runs: int, seed: int, **plan_options) -> Any:
    """Run the case `runs` times on NaN-poisoned outputs and compare each with torch.addmm in float32 (NaN and Inf
    where torch has them, nowhere else), the row padding of C untouched; returns the plan."""
    tdt = getattr(torch, case["dtype"])
    odt = torch.float32 if case["out_f32"] else tdt
    m, n, k, alpha, beta = case["m"], case["n"], case["k"], case["alpha"], case["beta"]
    _, a = _padded(torch, m, k, tdt)
    _, b = _padded(torch, n, k, tdt) if case["kmajor"] else _padded(torch, k, n, tdt)
    cbuf, c = _padded(torch, m, n, odt, extra=case["pad"] or None)
    special = case["special"]
    g = torch.Generator(device="cuda").manual_seed(seed)
    if special:
        target = {"a": a, "b": b, "c": c}[special[-1]]
        count = max(1, target.numel() // 5000)
        rows = torch.randint(0, target.shape[0], (count,), device="cuda", generator=g)
        cols = torch.randint(0, target.shape[1], (count,), device="cuda", generator=g)
        target[rows, cols] = float("nan") if special.startswith("nan") else float("inf")
    c0 = c.clone()
    ref = torch.addmm(c0.float(), a.float(), (b.float().T if case["kmajor"] else b.float()), beta=beta, alpha=alpha)
    plan = plan_gemm(a, b, c, alpha=alpha, beta=beta, b_major="k" if case["kmajor"] else "n", backend=case["backend"],
                     **plan_options)
    scale = max(1.0, ref[torch.isfinite(ref)].abs().max().item() if torch.isfinite(ref).any() else 1.0)
    tol = 1e-4 if case["out_f32"] else (8e-3 if case["dtype"] == "bfloat16" else 2e-3)
    for run in range(runs):
        cbuf.fill_(float("nan"))  # poisoned: every element of C must be written, and nothing past N
        if beta != 0:
            c.copy_(c0)  # beta reads C: its old contents again (the padding stays NaN); beta 0 ignores them
        plan()
        torch.cuda.synchronize()
        got = c.float()
        where = f"case {case} run {run} (seed {seed})"
        assert torch.equal(torch.isnan(got), torch.isnan(ref)), f"{where}: NaN where torch has none, or none where it has"
        assert torch.equal(torch.isinf(got) & (got > 0), torch.isinf(ref) & (ref > 0)), f"{where}: +Inf differs"
        assert torch.equal(torch.isinf(got) & (got < 0), torch.isinf(ref) & (ref < 0)), f"{where}: -Inf differs"
        assert torch.isnan(cbuf[:, n:]).all(), f"{where}: a store went past N into the row padding"
        finite = torch.isfinite(ref)
        err = (got[finite] - ref[finite]).abs().max().item() / scale if finite.any() else 0.0
        assert err <= tol, f"{where}: max error {err:.3g} (relative to {scale:.3g}) > {tol}"
    return plan


@pytest.mark.requires_sm90
@pytest.mark.parametrize("shape", [(8192, 3000, 256), (8192, 4196, 512)], ids=["8192x3000x256", "8192x4196x512"])
def test_fp32_out_epilogue_race_is_gone(shape) -> None:
    """The race of the fp32-output epilogue: slabs past N wrote a buffer and committed no store group, so a later
    slab overwrote a buffer a TMA store was still reading (exact zeros in C, 14 runs in 20 on an H100). 50 runs,
    poisoned each time."""
    torch = pytest.importorskip("torch")
    torch.backends.cuda.matmul.allow_tf32 = False
    m, n, k = shape
    _check_gemm(torch, dict(backend="tma", dtype="bfloat16", kmajor=True, m=m, n=n, k=k, out_f32=True, alpha=1.0,
                            beta=0.0, pad=0, special=None), runs=50, seed=_seed())


@pytest.mark.requires_sm90
@pytest.mark.parametrize("cfg", list(_configs()), ids=lambda c: f"{'bf16' if c.bf16 else 'f16'}-{'k' if c.b_kmajor else 'n'}-"
                         f"{'f32' if c.out_f32 else '16'}-bm{c.block_m}-bn{c.block_n}-c{c.cluster}")
def test_every_tma_configuration_on_the_gpu(cfg) -> None:
    """Every configuration the tma kernel compiles for (its descriptors, slabs and cluster) on one random shape
    with partial tiles, 3 runs on poisoned outputs."""
    torch = pytest.importorskip("torch")
    torch.backends.cuda.matmul.allow_tf32 = False
    rng = random.Random(hash((cfg.bf16, cfg.b_kmajor, cfg.out_f32, cfg.block_n, cfg.cluster, cfg.block_m)) % 1000)
    m, n, k = rng.randint(300, 1100), rng.randint(300, 1100), rng.randint(100, 700)
    case = dict(backend="tma", dtype="bfloat16" if cfg.bf16 else "float16", kmajor=cfg.b_kmajor, m=m, n=n, k=k,
                out_f32=cfg.out_f32, alpha=1.0, beta=rng.choice((0.0, 0.5)), pad=8, special=None)
    _check_gemm(torch, case, runs=3, seed=_seed(), block_n=cfg.block_n, cluster=cfg.cluster, block_m=cfg.block_m)


@pytest.mark.requires_sm90
@pytest.mark.parametrize("i", range(16))
def test_split_k_on_the_gpu(i) -> None:
    """Split-K (chosen or forced): small outputs with long K, every dtype, major, output type, tile and cluster,
    N off 4 (the workspace's last slab stored from registers) and off 8 (padded C), alpha/beta; from case 12 on,
    decode-like M of 1-128 rows (each split's slice of the workspace is M rows: TMA clips its tiles there); 3 runs
    on poisoned outputs each."""
    torch = pytest.importorskip("torch")
    torch.backends.cuda.matmul.allow_tf32 = False
    rng = random.Random(1000 + i)
    m, n, k = rng.randint(1, 700), rng.choice((rng.randint(1, 700), 8 * rng.randint(1, 80))), rng.randint(600, 9000)
    if i >= 12:
        m, n = rng.choice((1, 2, 7, 8, 33, 64, rng.randint(1, 128))), 8 * rng.randint(8, 600) + rng.choice((0, 3))
    case = dict(backend="tma", dtype=rng.choice(("bfloat16", "float16")), kmajor=i % 2 == 0, m=m, n=n, k=k,
                out_f32=i % 3 == 0, alpha=rng.choice((1.0, -2.0, 0.0)), beta=rng.choice((0.0, 0.5)),
                pad=rng.choice((0, 8)), special=None)
    options = dict(block_n=(128, 256)[i % 2], cluster=(1, 2)[(i // 2) % 2])
    if i % 4 == 3:
        options["splits"] = min(-(-k // 64), rng.randint(2, 24))  # forced, past the chosen count
    _check_gemm(torch, case, runs=3, seed=_seed(), **options)


def test_few_tile_problems_take_64_row_tiles() -> None:
    """choose_block_m: 64 where 128 x 128 lone tiles fill at most half the SMs in one turn; not where the chosen
    tile is wider or clustered; given ones are kept."""
    choose = gemm_mod.choose_block_m
    assert choose(344, 344, 128, 1, 132) == 64  # 9 tiles of 128 x 128
    assert choose(1288, 1432, 128, 1, 132) == 128  # 132 tiles: 64-row ones would take two turns
    assert choose(16, 14336, 128, 1, 132) == 64 and choose(65, 14336, 128, 1, 132) == 128  # one row of 64 either way
    assert choose(488, 264, 128, 2, 132) == 128 and choose(344, 344, 256, 1, 132) == 128
    assert describe_gemm(344, 344, 896, beta=0.5, sms=132).config.block_m == 64  # a 16-bit C read too
    cfg = default_config(Backend.TMA, m=344, n=344, k=896, sms=132)
    assert (cfg.block_m, cfg.block_n, cfg.cluster, cfg.splits) == (64, 128, 1, 1)
    assert default_config(Backend.TMA, m=8, n=4096, k=4096, sms=132).block_m == 64
    assert default_config(Backend.TMA, m=344, n=344, k=896, sms=132, block_m=128).block_m == 128
    assert default_config(Backend.TMA, m=8192, n=8192, k=8192, sms=132).block_m == 128
    assert default_config(Backend.CP_ASYNC, m=344, n=344, k=896, sms=132).block_m == 128
    assert describe_gemm(344, 344, 896).tile == (64, 128, 64)


def test_few_rows_take_more_ring_stages() -> None:
    """64-row tiles take 6 stages, 8 up to 8 rows (B's bytes in flight bound them); 128-wide tiles of 128 rows up
    to 64 rows 6; else 4; as many as fit; given ones are kept."""
    assert default_config(Backend.TMA, m=8, n=4096, k=4096, sms=132).stages == 8  # 64-row tiles (24 KiB stages)
    assert default_config(Backend.TMA, m=64, n=1024, k=16384, sms=132, out_f32=True).stages == 6
    assert default_config(Backend.TMA, m=128, n=4096, k=4096, sms=132, block_m=128).stages == 4
    assert default_config(Backend.TMA, m=128, n=4096, k=4096, sms=132).stages == 6
    assert default_config(Backend.TMA, m=9, n=4096, k=4096, sms=132).stages == 6
    assert default_config(Backend.TMA, m=8, n=4096, k=4096, sms=132, block_m=128, block_n=128).stages == 6
    assert default_config(Backend.TMA, m=8, n=4096, k=4096, sms=132, block_n=256).stages == 4
    assert default_config(Backend.TMA, m=8, n=4096, k=4096, sms=132, stages=3).stages == 3
    assert describe_gemm(8, 4096, 4096).config.stages == 8
    cfg = describe_gemm(1, 8192, 8192).config
    assert cfg.stages == 8 and cfg.shared_mem <= 232448  # what an H100 or H200 block holds


@pytest.mark.requires_sm90
@pytest.mark.parametrize("i", range(10))
def test_block_m_64_on_the_gpu(i) -> None:
    """64-row tiles at seeded random shapes: both dtypes and B majors, BN 128 and 256 (the two warpgroups' halves),
    clusters of 1 and 2, 16-bit and fp32 outputs with beta 0, 0.5 or 1, split-K
    forced on some, M of 1-2000 (tiles past M, odd tile rows in a cluster), N off 8; 3 runs on poisoned outputs."""
    torch = pytest.importorskip("torch")
    torch.backends.cuda.matmul.allow_tf32 = False
    rng = random.Random(2000 + i)
    bn, out_f32 = (128, 256)[i % 2], i % 3 == 0
    case = dict(backend="tma", dtype=rng.choice(("bfloat16", "float16")), kmajor=(i // 2) % 2 == 0,
                m=rng.choice((1, 63, 65, rng.randint(1, 2000))), n=rng.randint(1, 1500), k=rng.randint(16, 3000),
                out_f32=out_f32, alpha=rng.choice((1.0, -2.0)), beta=rng.choice((0.0, 0.5, 1.0)),
                pad=rng.choice((0, 8)), special=None)
    options = dict(block_m=64, block_n=bn, cluster=(1, 2)[(i // 4) % 2])
    if i % 5 == 4:
        options["splits"] = min(-(-case["k"] // 64), 3)
    plan = _check_gemm(torch, case, runs=3, seed=_seed(), **options)
    assert plan.config.block_m == 64


# (BM, BN) of the builds whose warpgroups have an odd number of 16-bit slabs (BN 192: three; BM 64 at BN 128: one)
# or a part slab (the narrow widths)
ODD_SLAB_TILES = [(128, 192), (64, 128), (128, 144), (128, 208), (128, 224), (128, 80)]


@pytest.mark.requires_sm90
@pytest.mark.parametrize("i", range(12))
def test_c_read_of_odd_slab_counts_on_the_gpu(i) -> None:
    """A C read (beta 0.5 or 1) on the builds of an odd 16-bit slab count or a part slab, at seeded random shapes:
    every tile in clusters of 1 and 2, both dtypes and B majors, 16-bit outputs and some fp32 ones (a narrow width's
    part slab), N off 8 (direct slabs) or a multiple of 8, 2-8 SMs so that each CTA takes many tiles in turn (the
    read-ahead's buffers and barriers rotate across tiles); 5 runs on outputs poisoned up to their row padding."""
    torch = pytest.importorskip("torch")
    torch.backends.cuda.matmul.allow_tf32 = False
    rng = random.Random(5000 + i)
    bm, bn = ODD_SLAB_TILES[i % len(ODD_SLAB_TILES)]
    n = (8 * rng.randint(8, 180), rng.randint(64, 1500) | 1)[(i + i // len(ODD_SLAB_TILES)) % 2]  # each tile both
    case = dict(backend="tma", dtype=rng.choice(("bfloat16", "float16")), kmajor=rng.random() < 0.5,
                m=rng.randint(1, 1500), n=n, k=rng.randint(16, 1200), out_f32=i % 4 == 3,
                alpha=rng.choice((1.0, -2.0)), beta=rng.choice((0.5, 1.0)), pad=8, special=None)
    options = dict(block_m=bm, block_n=bn, cluster=(1, 2)[(i // len(ODD_SLAB_TILES)) % 2], sms=rng.choice((2, 4, 8)))
    plan = _check_gemm(torch, case, runs=5, seed=_seed(), **options)
    assert (plan.config.block_m, plan.config.block_n) == (bm, bn)


@pytest.mark.requires_sm90
@pytest.mark.parametrize("i", range(12))
def test_deferred_stores_across_tiles_on_the_gpu(i) -> None:
    """A 16-bit output with beta 0 on 192- and 256-wide tiles: the slabs past the two store buffers are stored under
    the next tile's first k-block. On 1-8 SMs (each CTA takes many tiles in turn), clusters of 1 and 2, both dtypes
    and B majors, alpha 1, -2 or 0, N a multiple of 8 or not (a last tile column with slabs stored from registers,
    which is not deferred, between deferred ones); 5 runs on poisoned outputs."""
    torch = pytest.importorskip("torch")
    torch.backends.cuda.matmul.allow_tf32 = False
    rng = random.Random(6000 + i)
    bn, cl = (192, 256)[i % 2], (1, 2)[(i // 2) % 2]
    n = rng.choice((8 * rng.randint(8, 200), rng.randint(64, 1600)))
    case = dict(backend="tma", dtype=rng.choice(("bfloat16", "float16")), kmajor=(i // 4) % 2 == 0,
                m=rng.randint(1, 1800), n=n, k=rng.randint(16, 900), out_f32=False,
                alpha=rng.choice((1.0, -2.0, 0.0)), beta=0.0, pad=8, special=None)
    sms = max(cl, rng.choice((1, 2, 3, 4, 8)))
    plan = _check_gemm(torch, case, runs=5, seed=_seed(), block_m=128, block_n=bn, cluster=cl, splits=1, sms=sms)
    assert (plan.config.block_n, plan.config.splits, plan.config.tail_rows) == (bn, 1, 0) and plan.grid[0] <= sms


# (BM, BN) of the swapped kernel's tiles (rows along C's N, BN along its M): the usual widths (BN 192 and 256 defer
# their last slabs with beta 0), 64-row tiles, and narrow widths (a part slab of C's rows stored from registers)
SWAP_TILES = [(128, 256), (128, 192), (128, 128), (64, 128), (64, 256), (128, 208), (128, 80), (128, 144)]


@pytest.mark.requires_sm90
@pytest.mark.parametrize("i", range(24))
def test_swapped_operands_on_the_gpu(i) -> None:
    """swap_ab=True (C^T = B^T A^T, each slab stored transposed) on every tile the swapped kernel takes, clusters
    of 1 and 2 (two of them sharing A), at seeded random shapes: both dtypes and B majors (N-major: MN-major A
    stages), alpha 1 or -2, beta 0 (deferred slabs), 0.5 or 1 (C read by TMA, then element by element in the
    transposed slab), each tile with each beta, N a multiple of 8 or not (a warpgroup's rows past N stored from
    registers), 1-8 SMs so that each CTA takes many tiles in turn; NaN planted in A one case in four; 5 runs on
    outputs poisoned up to their row padding."""
    torch = pytest.importorskip("torch")
    torch.backends.cuda.matmul.allow_tf32 = False
    rng = random.Random(7000 + i)
    bm, bn = SWAP_TILES[i % len(SWAP_TILES)]
    cl = (1, 2)[(i // len(SWAP_TILES)) % 2]
    n = rng.choice((8 * rng.randint(1, 200), rng.randint(1, 1600)))
    shared = "a" if i in (8, 10) else None  # pairs sharing the kernel's A (the caller's K-major B) by multicast
    case = dict(backend="tma", dtype=rng.choice(("bfloat16", "float16")), kmajor=shared == "a" or i % 3 != 1,
                m=rng.randint(1, 1800), n=n, k=rng.randint(16, 900), out_f32=False, alpha=rng.choice((1.0, -2.0)),
                beta=(0.0, 0.5, 1.0)[(i // len(SWAP_TILES) + i) % 3], pad=rng.choice((8, 24)),
                special="nan_a" if i % 4 == 1 else None)
    sms = max(cl, rng.choice((1, 2, 3, 4, 8)))
    plan = _check_gemm(torch, case, runs=5, seed=_seed(), swap_ab=True, block_m=bm, block_n=bn, cluster=cl, sms=sms,
                       multicast=shared)
    assert plan.config.swap_ab and (plan.config.block_m, plan.config.block_n) == (bm, bn) and plan.grid[0] <= sms
    assert plan.config.multicast_a == (shared == "a") and plan.config.a_kmajor == case["kmajor"]


@pytest.mark.requires_sm90
@pytest.mark.parametrize("m, n, k, kmajor, swapped", [(1000, 4097, 2048, True, True), (8976, 632, 7656, True, False),
                                                      (12120, 632, 256, True, True), (7, 4097, 64, True, False),
                                                      (8592, 272, 6776, False, True), (1320, 7160, 1624, False, True)])
def test_swapped_operands_chosen_on_the_gpu(m, n, k, kmajor, swapped) -> None:
    """The plan chosen by default on the 132 SMs of an H100 or H200: swapped where ``choose_swap_ab`` says so
    (1000 x 4097: one turn of 33 x 4 tiles of C^T; N-major B too), not at long K in pairs or for the 7-row decode;
    its output matches the float32 reference, 3 runs on poisoned outputs; then re-pointed to new buffers, and as the
    one-shot op."""
    torch = pytest.importorskip("torch")
    torch.backends.cuda.matmul.allow_tf32 = False
    from tmakit import ops

    case = dict(backend="tma", dtype="bfloat16", kmajor=kmajor, m=m, n=n, k=k, out_f32=False, alpha=1.0, beta=0.0,
                pad=8, special=None)
    plan = _check_gemm(torch, case, runs=3, seed=_seed(), sms=min(132, torch.cuda.get_device_properties(0).multi_processor_count))
    if plan.sms == 132:
        assert plan.config.swap_ab == swapped
    _, a = _padded(torch, m, k, torch.bfloat16)
    _, b = _padded(torch, n, k, torch.bfloat16) if kmajor else _padded(torch, k, n, torch.bfloat16)
    cbuf, c = _padded(torch, m, n, torch.bfloat16, fill=float("nan"))
    want = a.float() @ (b.float().T if kmajor else b.float())
    major = "k" if kmajor else "n"
    for run in (lambda: plan(a, b, c), lambda: ops.gemm(a, b, c, b_major=major, swap_ab=plan.config.swap_ab)):
        cbuf.fill_(float("nan"))
        assert run() is c
        torch.cuda.synchronize()
        err = ((c.float() - want).abs().max() / want.abs().max()).item()
        assert err <= 8e-3 and torch.isnan(cbuf[:, n:]).all(), err


@pytest.mark.requires_sm90
@pytest.mark.parametrize("i", range(16))
def test_multicast_a_on_the_gpu(i) -> None:
    """Clusters that share A (``multicast="a"``: the pair on horizontally adjacent tiles, each loading half of A's
    tile rows) at seeded random shapes: BM 64 and 128, BN 128, 192, 256 and narrow widths, both dtypes and B majors,
    16-bit and fp32 outputs with beta 0, 0.5 or 1, split-K on some, an odd count of tile
    columns (the last pair's second tile past N) and N off 8; 3 runs on poisoned outputs, nothing past N."""
    torch = pytest.importorskip("torch")
    torch.backends.cuda.matmul.allow_tf32 = False
    rng = random.Random(4000 + i)
    bm, bn = ((128, 128), (128, 256), (64, 128), (128, 192), (64, 256), (128, 144), (128, 208), (128, 128))[i % 8]
    tiles_n = rng.choice((1, 3, 5, rng.randint(1, 12)))
    n = max(1, tiles_n * bn - rng.choice((0, 7, bn // 2, bn - 1)))
    out_f32 = i % 3 == 0
    case = dict(backend="tma", dtype=rng.choice(("bfloat16", "float16")), kmajor=(i // 8) % 2 == 0,
                m=rng.choice((1, 127, 129, rng.randint(1, 3000))), n=n, k=rng.randint(16, 3000), out_f32=out_f32,
                alpha=rng.choice((1.0, -2.0)), beta=rng.choice((0.0, 0.5, 1.0)), pad=rng.choice((0, 8)), special=None)
    options = dict(block_m=bm, block_n=bn, cluster=2, multicast="a")
    probe = default_config(Backend.TMA, block_m=bm, block_n=bn, cluster=2, out_f32=out_f32, multicast_a=True)
    if i % 5 == 4 and not probe.narrow:
        options["splits"] = min(-(-case["k"] // 64), 3)
    plan = _check_gemm(torch, case, runs=3, seed=_seed(), **options)
    assert plan.config.multicast_a and plan.config.cluster == 2


# (M, N, K, options, case overrides): a C read (beta) for a tile wholly past N with N a multiple of 8 (the slab's
# TMA load and store out of bounds), 16-bit and fp32, BM 64; few SMs (many tiles a CTA); a tail given that only
# pairs sharing A accept (640 rows: 5 tile rows, not whole pairs of them)
MULTICAST_A_EDGES = [
    (300, 384, 500, dict(block_n=128), dict(beta=0.5)),
    (300, 384, 500, dict(block_n=128), dict(beta=1.0, out_f32=True)),
    (200, 768, 700, dict(block_n=256, block_m=64), dict(beta=0.5, out_f32=True)),
    (1000, 1000, 300, dict(block_n=128, sms=4), dict(beta=0.5)),
    (900, 520, 1200, dict(block_n=128, tail_rows=260), dict(beta=0.0)),
    (129, 1400, 4000, dict(block_n=192, splits=3), dict(beta=1.0, out_f32=True)),
]


@pytest.mark.requires_sm90
@pytest.mark.parametrize("m, n, k, options, override", MULTICAST_A_EDGES,
                         ids=["beta-past-n", "beta-f32-past-n", "bm64-beta-f32", "4-sms", "tail-260", "split-beta"])
def test_multicast_a_edges_on_the_gpu(m, n, k, options, override) -> None:
    """Pairs sharing A at their edges: 3 runs on poisoned outputs each; and a reduce-add into C with them."""
    torch = pytest.importorskip("torch")
    torch.backends.cuda.matmul.allow_tf32 = False
    case = dict(backend="tma", dtype="bfloat16", kmajor=True, m=m, n=n, k=k, out_f32=False, alpha=1.0, beta=0.0, pad=8,
                special=None)
    case.update(override)
    plan = _check_gemm(torch, case, runs=3, seed=_seed(), cluster=2, multicast="a", **options)
    assert plan.config.multicast_a and plan.config.tail_rows == options.get("tail_rows", 0)


@pytest.mark.requires_sm90
def test_multicast_a_reduce_add_on_the_gpu() -> None:
    torch = pytest.importorskip("torch")
    torch.backends.cuda.matmul.allow_tf32 = False
    g = torch.Generator(device="cuda").manual_seed(_seed())
    m, n, k = 300, 384, 704  # rows of 16-byte multiples (reduce-add: C's too)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=g)
    c = torch.randn(m, n, device="cuda", dtype=torch.bfloat16, generator=g)
    want = c.float() + a.float() @ b.float().T
    added = plan_gemm(a, b, c, reduce="add", block_n=128, multicast="a")
    assert added.config.multicast_a and added.config.store_add
    added()
    torch.cuda.synchronize()
    assert ((c.float() - want).abs().max() / want.abs().max()).item() < 1e-2


@pytest.mark.requires_sm90
@pytest.mark.parametrize("i", range(30))
def test_narrow_widths_on_the_gpu(i) -> None:
    """Narrow BN (64-240, multiples of 16 besides 128 and 192) at seeded random shapes: both dtypes, either B major
    (N-major: the last 64-column slab of B loaded whole, split unevenly in a cluster where the slabs are odd), a
    16-bit or an fp32 output (32-column slabs: a part one where BN is an odd multiple of 16),
    clusters of 1 and 2, M of 1-3000 (tiles past M), N below, at and past one or several tiles (the last tile's part
    slab clipped at N, or past it), N off 8 with padded rows, alpha 1 or -2; 3 runs on poisoned outputs, nothing
    written past N."""
    torch = pytest.importorskip("torch")
    torch.backends.cuda.matmul.allow_tf32 = False
    rng = random.Random(3000 + i)
    bn = (64, 80, 96, 112, 144, 160, 176, 208, 224, 240, 144, 80, 176, 144, 80, 208, 240, 112, 160, 224, 96, 64,
          144, 160, 80, 240, 208, 112, 176, 224)[i]
    n = rng.choice((bn - 8, bn + 8, 2 * bn - 24, rng.randint(1, 4 * bn), rng.randint(1, 2000)))
    case = dict(backend="tma", dtype=rng.choice(("bfloat16", "float16")), kmajor=i < 12 or (i >= 22 and i % 2 == 0),
                m=rng.choice((1, 127, 129, rng.randint(1, 3000))), n=max(1, n), k=rng.randint(16, 3000),
                out_f32=i >= 22, alpha=rng.choice((1.0, -2.0)), beta=0.0, pad=rng.choice((0, 8)), special=None)
    cluster = (1, 2)[(i // 2) % 2 if i >= 22 else i % 2]
    plan = _check_gemm(torch, case, runs=3, seed=_seed(), block_n=bn, cluster=cluster)
    assert plan.config.narrow and plan.config.block_n == bn


# (shape, chosen (BN, cluster), K-major B); the last four replace a chosen 128 x 128 tile in a cluster (the last two
# by a narrow width of more tiles than 256-wide ones), the rest a chosen 192- or 256-wide one
# (test_chosen_narrow_cases_replace_what_they_say)
CHOSEN_NARROW = [((5658, 264, 512), (144, 2), True), ((3493, 520, 512), (176, 2), True),
                 ((4100, 784, 512), (208, 1), True), ((5645, 424, 512), (224, 2), True),
                 ((3493, 520, 512), (176, 2), False), ((11717, 264, 1536), (144, 2), False),
                 ((6666, 776, 1536), (208, 2), True), ((6703, 776, 1536), (208, 2), False),
                 ((6910, 1080, 1536), (160, 2), True), ((12160, 560, 1536), (144, 2), False)]
CHOSEN_NARROW_IDS = ["144c2", "176c2", "208c1", "224c2", "n176c2", "n144c2", "208c2_from128", "n208c2_from128",
                     "160c2_from128_more_tiles", "n144c2_from128_more_tiles"]


def _cfg_width(m: int, n: int, k: int, kmajor: bool) -> int:
    return default_config(Backend.TMA, m=m, n=n, k=k, sms=132, b_kmajor=kmajor).block_n


def test_chosen_narrow_cases_replace_what_they_say() -> None:
    for ((m, n, k), width, kmajor), case_id in zip(CHOSEN_NARROW, CHOSEN_NARROW_IDS, strict=True):
        usual = gemm_mod.choose_tile(m, n, 132, widths=(256, 192, 128), k=k, b_kmajor=kmajor)
        from128 = "from128" in case_id
        assert ("more_tiles" in case_id) == (_cfg_width(m, n, k, kmajor) != gemm_mod.narrow_width(n)), case_id
        assert (usual == (128, 2)) == from128 and (usual[0] in (192, 256)) != from128, (m, n, k, usual)
        cfg = default_config(Backend.TMA, m=m, n=n, k=k, sms=132, b_kmajor=kmajor)
        assert (cfg.block_n, cfg.cluster, cfg.narrow) == (*width, True)


@pytest.mark.requires_sm90
@pytest.mark.parametrize("shape, width, kmajor", CHOSEN_NARROW, ids=CHOSEN_NARROW_IDS)
def test_chosen_narrow_plans_on_the_gpu(shape, width, kmajor) -> None:
    """Plans whose default is a narrow width (the rule's widths and clusters, either B major, in place of a chosen
    192-, 256- or clustered 128-wide tile; padded rows of C): 3 runs on poisoned outputs; the same shapes with
    reduce="add" take a usual width (a narrow tile's part slab is stored, not added) and add into C. The plain
    plan's choice (swap_ab=False: 5645x424x512 takes C^T's tiles by default)."""
    torch = pytest.importorskip("torch")
    torch.backends.cuda.matmul.allow_tf32 = False
    m, n, k = shape
    case = dict(backend="tma", dtype="bfloat16", kmajor=kmajor, m=m, n=n, k=k, out_f32=False, alpha=1.0, beta=0.0,
                pad=8, special=None)
    plan = _check_gemm(torch, case, runs=3, seed=_seed(), swap_ab=False)
    assert (plan.config.block_n, plan.config.cluster) == width and plan.config.narrow
    g = torch.Generator(device="cuda").manual_seed(_seed())
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g)
    if kmajor:
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=g)
    else:  # (K, N) with its rows padded to 16 bytes
        b = torch.randn(k, -(-n // 8) * 8, device="cuda", dtype=torch.bfloat16, generator=g)[:, :n]
    c = torch.randn(m, -(-n // 8) * 8, device="cuda", dtype=torch.bfloat16, generator=g)[:, :n]
    want = c.float() + a.float() @ (b.float().T if kmajor else b.float())
    added = plan_gemm(a, b, c, reduce="add", b_major="k" if kmajor else "n")
    assert not added.config.narrow and added.config.store_add
    added()
    torch.cuda.synchronize()
    assert ((c.float() - want).abs().max() / want.abs().max()).item() < 1e-2


def test_chosen_plans_pass_their_own_checks() -> None:
    """Every plan the rules choose (tile, narrow width, split, the 256-wide split tiles, a tail and its plan), on
    seeded random problems, GPUs of several SM counts and both shared-memory sizes, is one check_config
    accepts; a tile asked for is kept."""
    rng = random.Random(11)
    for _ in range(3000):
        m, n, k = (rng.choice((rng.randint(1, 300), rng.randint(1, 20000))) for _ in range(3))
        sms, limit = rng.choice((132, 114, 78, 16, 1)), rng.choice((232448, 101376))
        out_f32 = rng.random() < 0.4
        cfg = default_config(Backend.TMA, m=m, n=n, k=k, sms=sms, b_kmajor=rng.random() < 0.5, out_f32=out_f32,
                             shared_mem_limit=limit)
        where = (m, n, k, sms, limit, out_f32, cfg)
        check_config(cfg, limit, k)
        tail = gemm_mod.choose_tail_rows(cfg, m, n, k, sms, shared_mem_limit=limit) if cfg.splits == 1 else 0
        if tail:
            assert 0 < tail < m and (m - tail) % (cfg.block_m * cfg.cluster) == 0, where
            t = gemm_mod.tail_config(cfg, tail, n, k, sms, shared_mem_limit=limit)
            check_config(t, limit, k)
        assert cfg.cluster == 1 or sms >= 2, where  # plan_gemm refuses sms below the cluster's CTAs
        given = default_config(Backend.TMA, m=m, n=n, k=k, sms=sms, block_n=128, cluster=1, block_m=128, splits=1,
                               out_f32=out_f32, shared_mem_limit=limit)
        assert (given.block_n, given.cluster, given.block_m, given.splits) == (128, 1, 128, 1), where


def test_split_k_is_chosen_for_few_tiles_and_long_k() -> None:
    choose = gemm_mod.choose_splits
    assert choose(384, 344, 8800, 128, 2, 132) == 11  # 12 CTAs: 11 ranges fill the SMs
    assert choose(560, 376, 1208, 128, 1, 132) == 4  # 19 k-blocks split: ranges of >= 4 k-blocks
    assert choose(552, 1024, 928, 128, 1, 132) == 1  # 15 k-blocks: too few to split (a second launch)
    assert choose(8, 4096, 4096, 128, 1, 132) == 4  # 32 tiles: 4 ranges fill the SMs
    assert choose(8192, 8192, 8192, 256, 2, 132) == 1  # the tiles fill the SMs
    assert choose(384, 344, 300, 128, 2, 132) == 1  # 5 k-blocks: nothing to split
    assert choose(128, 128, 100000, 128, 1, 132) == 16  # at most 16 slices
    # tiles filling more than half the SMs in one turn: the split the turn model (split_cost_us) finds cheapest,
    # where it saves 15%: 2312x416x11816, 80 CTAs of 128 x 128 in clusters, 3 ranges in 2 turns
    assert choose(2312, 416, 11816, 128, 2, 132) == 3
    assert choose(392, 2264, 14952, 128, 2, 132) == 5
    cost = [gemm_mod.split_cost_us(2312, 416, 185, 128, 2, 132, 128, s) for s in (1, 2, 3)]
    assert cost[2] < 0.85 * cost[0] and cost[1] > cost[0]  # 2 ranges: 2 turns of half the k-blocks, no gain
    assert choose(2312, 416, 3000, 128, 2, 132) == 1  # 47 k-blocks: the reduce and fills outweigh the split
    assert choose(1288, 1432, 3832, 128, 1, 132) == 1  # a full turn
    assert choose(2312, 416, 11816, 128, 2, 64) == 1  # 80 CTAs past one turn of 64 SMs: a tail plan's business
    # ... and there 256-wide tiles in the same cluster take 3 ranges in one turn (40 CTAs), cheaper in the model
    assert gemm_mod.choose_split_width(2312, 416, 11816, 2, 132, 3) == (256, 3)
    assert gemm_mod.choose_split_width(3292, 318, 13000, 2, 132, 3) == (128, 3)  # 2 of 256 waste 38% of N
    # over at most half the SMs: 128-wide tiles in clusters in 2 ranges -> 256-wide ones in more, N padded alike
    assert gemm_mod.choose_split_width(424, 1504, 15336, 2, 132, 2) == (256, 5)  # 1536 columns either way
    assert gemm_mod.choose_split_width(2352, 304, 5576, 2, 132, 2) == (128, 2)  # 512 columns against 384
    assert gemm_mod.choose_split_width(424, 1504, 15336, 2, 132, 3) == (128, 3)  # 3 ranges: kept
    assert gemm_mod.choose_split_width(424, 1504, 15336, 1, 132, 2) == (128, 2)  # lone CTAs: kept
    cfg = default_config(Backend.TMA, m=2312, n=416, k=11816, sms=132)
    assert (cfg.block_n, cfg.cluster, cfg.splits, cfg.stages) == (256, 2, 3, 4)
    # any of block_n, cluster, block_m or splits given: the usual plan of the rest (128-wide tiles), not the rule's
    for kwargs in (dict(block_n=128), dict(cluster=2), dict(block_m=128), dict(splits=3)):
        assert default_config(Backend.TMA, m=2312, n=416, k=11816, sms=132, **kwargs).block_n == 128, kwargs
    cfg = default_config(Backend.TMA, m=384, n=344, k=8800, sms=132)
    assert (cfg.block_n, cfg.cluster, cfg.splits, cfg.defines["TMAKIT_GEMM_OUT_F32"]) == (128, 2, 11, 1)
    assert default_config(Backend.TMA, m=384, n=344, k=8800, sms=132, splits=1).splits == 1
    assert default_config(Backend.CP_ASYNC, m=384, n=344, k=8800, sms=132).splits == 1
    for bad in (0, 65, 2.0, True):
        with pytest.raises(InvalidArgumentError, match=r"splits=.*must be an int in \[1, 64\]"):
            check_config(gemm_mod.GemmConfig(Backend.TMA, True, True, False, 128, 4, 2, 8, bad), 232448)

    with pytest.raises(InvalidArgumentError, match=r"splits=4: must be at most the 1 k-blocks of K=64"):
        describe_gemm(128, 128, 64, splits=4)  # what plan_gemm refuses, describe refuses
    with pytest.raises(InvalidArgumentError, match=r"splits=2: .*1 on the cp.async backend"):
        check_config(gemm_mod.GemmConfig(Backend.CP_ASYNC, True, True, False, 128, 2, 1, 8, 2), 232448)


def test_tail_rows_are_chosen_where_the_last_turn_is_nearly_empty() -> None:
    """C's last rows go to a split-K plan of their own where the first plan's last turn would be nearly empty and K
    is long enough to split; they leave the first plan whole cluster rows of tiles; describe_gemm says the same."""
    from tmakit.ops.planning import describe_gemm

    cfg = default_config(Backend.TMA, b_kmajor=False, m=5936, n=4352, k=9720, sms=132)
    assert (cfg.block_n, cfg.cluster) == (256, 2) and gemm_mod.tile_turns(5936, 4352, 256, 2, 132) == 7
    tail = gemm_mod.choose_tail_rows(cfg, 5936, 4352, 9720, 132)
    # 46 tile rows x 17 columns fill 6 turns; the last 48 rows: 34 lone 64 x 128 tiles, K split 3 ways
    assert tail == 5936 - 46 * 128
    assert gemm_mod.tail_config(cfg, tail, 4352, 9720, 132).splits == 3
    assert describe_gemm(5936, 4352, 9720, b_major="n").config.tail_rows == tail
    assert describe_gemm(5936, 4352, 9720, b_major="n", block_n=256).config.tail_rows == 0  # a tile asked for
    # 8192^3: a last turn half full saves < 10%; 8192x8192x1024 likewise; 12608x280x1504: K too short for the
    # reduce to pay; 300x300x8000: split-K already
    for m, n, k in ((8192, 8192, 8192), (8192, 8192, 1024), (12608, 280, 1504), (300, 300, 8000)):
        c = default_config(Backend.TMA, m=m, n=n, k=k, sms=132)
        assert gemm_mod.choose_tail_rows(c, m, n, k, 132) == 0
    assert gemm_mod.choose_tail_rows(default_config(Backend.CP_ASYNC), 5936, 4352, 9720, 132) == 0
    assert describe_gemm(5936, 4352, 9720, b_major="n", arch="sm_100").config.tail_rows == 0  # no SM count known
    given = describe_gemm(5936, 4352, 9720, b_major="n", tail_rows=5936 - 2560, arch="sm_90a", sms=132).config
    assert (given.tail_rows, given.splits) == (3376, 1) and describe_gemm(5936, 4352, 9720, b_major="n",
                                                                         tail_rows=0).config.tail_rows == 0
    assert gemm_mod.tail_config(cfg, 208, 4096, 512, 1).cluster == 1  # one SM: no cluster for the tail


def test_unsplit_tails_from_long_k_after_clusters() -> None:
    """A tail whose own plan fills the SMs without split-K (a second launch of whole tiles) is taken from K >= 5120
    on, after a first plan in clusters, where the turn model saves 10% (docs/PERFORMANCE.md, GEMM)."""
    cfg = default_config(Backend.TMA, m=1664, n=3992, k=16128, sms=132)
    assert (cfg.block_n, cfg.cluster, gemm_mod.tile_turns(1664, 3992, 256, 2, 132)) == (256, 2, 2)
    tail = gemm_mod.choose_tail_rows(cfg, 1664, 3992, 16128, 132)
    assert tail == 1664 - 8 * 128  # 8 tile rows x 16 columns: one turn; the last 640 rows a plan of their own
    t = gemm_mod.tail_config(cfg, tail, 3992, 16128, 132)
    assert (t.block_n, t.cluster, t.splits) == (192, 2, 1)  # 3 pairs x 21 columns: one turn, whole K
    assert gemm_mod.choose_tail_rows(cfg, 1664, 3992, 5000, 132) == 0  # K below 5120: the same plan takes no tail
    lone = default_config(Backend.TMA, m=1664, n=3992, k=16128, sms=132, cluster=1)
    assert gemm_mod.choose_tail_rows(lone, 1664, 3992, 16128, 132) == 0  # after lone CTAs: not measured, none
    # a narrow width keeps its place (it was measured against the usual plan without such tails)
    cfg = default_config(Backend.TMA, m=5104, n=1344, k=7904, sms=132, b_kmajor=False)
    assert (cfg.block_n, cfg.cluster) == (224, 2) and gemm_mod.choose_tail_rows(cfg, 5104, 1344, 7904, 132) == 0
    usual = replace(cfg, block_n=256)
    assert gemm_mod.choose_tail_rows(usual, 5104, 1344, 7904, 132) == 5104 - 22 * 128
    assert gemm_mod.choose_tail_rows(usual, 5104, 1344, 7904, 132, whole_tails=False) == 0


@pytest.mark.parametrize("tail_rows, options, match", [
    (-1, {}, r"tail_rows=-1: must be an int in \[0, 1000\)"),
    (1000, {}, r"tail_rows=1000: must be an int in \[0, 1000\)"),
    (True, {}, r"tail_rows=True: must be an int"),
    (100, {"cluster": 2}, r"tail_rows=100: must leave the first plan whole cluster rows of tiles: M - tail_rows a "
                          r"multiple of 256 \(M = 1000, .*cluster=1 for multiples of 128"),
    (232, {"splits": 2}, r"tail_rows=232: must be 0 with split-K \(splits=2\).*fix: leave splits out"),
    (232, {"reduce": "add"}, r"tail_rows=232: must be 0 with reduce=\"add\""),
    (232, {"backend": "cp.async"}, r"tail_rows=232: must be 0 on the cp.async backend"),
])
def test_tail_rows_errors(fake_launch, tail_rows, options, match) -> None:
    a, b = device_view(0x100000, (1000, 640), "float16"), device_view(0x200000, (520, 640), "float16")
    c = device_view(0x300000, (1000, 520), "float16")
    with pytest.raises(InvalidArgumentError, match=match):
        plan_gemm(a, b, c, tail_rows=tail_rows, **{"backend": "tma", **options})
    gemm_mod._check_tail_rows(0, default_config(Backend.TMA, cluster=2), 1000)  # 0: none, whatever M


def test_tail_launches_after_the_first_plan_on_its_rows(fake_launch, monkeypatch) -> None:
    """A plan with a tail launches its kernel over the first M - tail_rows rows, then the tail's split-K kernel on
    A's and C's last rows and its reduce into them; re-pointing moves the tail with the buffers."""
    import types

    import tmakit.device_array as device_array
    from _fake_driver import FakeBoundLaunch

    monkeypatch.setattr(gemm_mod, "gemm_tensor_maps", lambda a, b, c, cfg: (("A", a.ptr, a.shape), ("B", b.ptr),
                                                                          ("C", c.ptr, c.shape)))
    monkeypatch.setattr(device_array.DeviceArray, "empty",  # the split-K workspace, an address only
                        classmethod(lambda cls, shape, dtype, device=0: types.SimpleNamespace(ptr=0x70000000)))
    order: list = []
    monkeypatch.setattr(FakeBoundLaunch, "__call__", lambda launch: order.append(launch))
    m, n, k = 5936, 4352, 9720
    for base in (0x1000000, 0x90000000):
        a = device_view(base, (m, k), "float16")
        b, c = device_view(base + 0x20000000, (k, n), "float16"), device_view(base + 0x40000000, (m, n), "float16")
        if base == 0x1000000:
            plan = plan_gemm(a, b, c, b_major="n", backend="tma")
            plan()
        else:
            plan(a, b, c)
        first = m - plan.config.tail_rows
        assert plan.config.tail_rows == 48 and plan.tail.config.splits > 1
        main, tail, reduce = order[-3:]
        assert [x.kernel.entry for x in (main, tail, reduce)] == ["tmakit_gemm_tma", "tmakit_gemm_tma",
                                                                  "tmakit_gemm_splitk_reduce"]
        assert main.args[0] == ("A", a.ptr, (m, k)) and main.args[4] == first  # the kernel's M: whole tile rows
        assert tail.args[0] == ("A", a.ptr + first * k * 2, (48, k)) and tail.args[1] == ("B", b.ptr)
        assert reduce.args[3] == c.ptr + first * n * 2 and reduce.args[4] == 48  # the sum into C's last rows


@pytest.mark.requires_sm90
@pytest.mark.parametrize("i", range(8))
def test_tail_rows_on_the_gpu(i) -> None:
    """A tail forced at random shapes: both dtypes and B majors, 16-bit and fp32 outputs each with beta 0 and 0.5,
    first plans of 128- and 256-wide tiles in clusters of 1 and 2, tails of one to several tile rows (whole or
    split-K, in a cluster or not, as chosen for them), padded C. The two plans' rows together equal torch, 3 runs on
    poisoned outputs each."""
    torch = pytest.importorskip("torch")
    torch.backends.cuda.matmul.allow_tf32 = False
    rng = random.Random(2000 + i)
    cl, bn = (1, 2)[i % 2], (128, 256)[(i // 2) % 2]
    m = 128 * cl * rng.randint(2, 8) + rng.randint(0, 127)
    case = dict(backend="tma", dtype=("bfloat16", "float16")[(i // 4) % 2], kmajor=rng.random() < 0.5, m=m,
                n=rng.choice((rng.randint(1, 900), 8 * rng.randint(1, 200))), k=rng.choice((512, rng.randint(700, 5000))),
                out_f32=i % 3 == 0, alpha=rng.choice((1.0, -2.0)), beta=(0.0, 0.5)[(i // 2) % 2 ^ i % 3 % 2],
                pad=rng.choice((0, 8)), special=None)
    whole = 128 * cl * rng.randint(1, (m - 1) // (128 * cl))  # the first plan: at least one cluster row of tiles
    plan = _check_gemm(torch, case, runs=3, seed=_seed(), block_n=bn, cluster=cl, tail_rows=m - whole)
    assert plan.config.tail_rows == m - whole and plan.tail is not None and plan.tail.m == m - whole
    assert plan.config.splits == 1 and plan.grid[0] <= -(-whole // plan.config.block_m) * -(-case["n"] // bn)


# (M, N, K, dtype, K-major B, fp32 output, beta, (BN, splits, tail_rows, the tail's BN and splits) chosen on 132
# SMs): 128-wide tiles filling more than half the SMs in one turn split by the turn model (choose_splits), 256-wide
# ones in their place where they cost less (choose_split_width), a tail of such, and 128-wide tiles in clusters
# over at most half the SMs cut in two replaced by 256-wide ones cut in more
SPLIT_ONE_TURN = [(2312, 416, 11816, "bfloat16", True, False, 0.0, (256, 3, 0, 0, 0)),
                  (1128, 800, 14744, "float16", False, True, 0.5, (256, 3, 0, 0, 0)),
                  (392, 2264, 14952, "bfloat16", True, False, 1.0, (256, 3, 0, 0, 0)),
                  (3292, 318, 13000, "float16", True, False, 0.5, (128, 3, 0, 0, 0)),
                  (2842, 283, 15992, "bfloat16", False, True, 0.0, (128, 5, 0, 0, 0)),
                  (1752, 2488, 15792, "float16", False, False, 0.0, (192, 1, 472, 256, 3)),
                  (664, 944, 3696, "float16", False, True, 0.5, (256, 5, 0, 0, 0)),
                  (2352, 304, 5576, "bfloat16", True, False, 0.5, (128, 2, 0, 0, 0)),
                  (904, 2088, 16032, "bfloat16", False, False, 0.0, (192, 3, 0, 0, 0))]
SPLIT_ONE_TURN_IDS = ["2312x416", "1128x800_f32_beta", "392x2264_beta1", "3292x318_128_beta", "2842x283_128_f32",
                      "1752x2488_tail", "664x944_from_k2_f32_beta", "2352x304_k2_kept_beta", "904x2088_192_split"]


def test_split_one_turn_cases_choose_what_they_say() -> None:
    for m, n, k, dtype, kmajor, out_f32, beta, (bn, splits, tail, tail_bn, tail_splits) in SPLIT_ONE_TURN:
        d = describe_gemm(m, n, k, dtype=dtype, b_major="k" if kmajor else "n", beta=beta,
                          out_dtype="float32" if out_f32 else None, arch="sm_90a", sms=132)
        assert (d.config.block_n, d.config.splits, d.config.tail_rows) == (bn, splits, tail), (m, n, k)
        if tail:
            t = gemm_mod.tail_config(d.config, tail, n, k, 132)
            assert (t.block_n, t.splits) == (tail_bn, tail_splits)


@pytest.mark.requires_sm90
@pytest.mark.parametrize("m, n, k, dtype, kmajor, out_f32, beta, chosen", SPLIT_ONE_TURN, ids=SPLIT_ONE_TURN_IDS)
def test_split_one_turn_chosen_on_the_gpu(m, n, k, dtype, kmajor, out_f32, beta, chosen) -> None:
    """The default plans of SPLIT_ONE_TURN (split-K over more than half the SMs, 128-, 192- or 256-wide, or a split
    tail) against torch.addmm in float32, padded C, 3 runs on poisoned outputs; on 132 SMs they take the plan the
    case says (elsewhere the plan differs and only the product is checked: the CPU test pins the plans)."""
    torch = pytest.importorskip("torch")
    torch.backends.cuda.matmul.allow_tf32 = False
    case = dict(backend="tma", dtype=dtype, kmajor=kmajor, m=m, n=n, k=k, out_f32=out_f32, alpha=1.0, beta=beta,
                pad=8, special=None)
    plan = _check_gemm(torch, case, runs=3, seed=_seed())
    if gemm_mod.sm_count(0) == 132:
        assert (plan.config.block_n, plan.config.splits, plan.config.tail_rows) == chosen[:3]
        assert plan.tail is None or (plan.tail.config.block_n, plan.tail.config.splits) == chosen[3:]


@pytest.mark.requires_sm90
def test_tail_rows_chosen_and_repointed_on_the_gpu() -> None:
    """The chosen tail (5936x4352x9720, N-major) against torch, then the plan re-pointed to new buffers."""
    torch = pytest.importorskip("torch")
    torch.backends.cuda.matmul.allow_tf32 = False
    a = torch.randn(5936, 9720, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(9720, 4352, device="cuda", dtype=torch.bfloat16)
    c = torch.full((5936, 4352), float("nan"), device="cuda", dtype=torch.bfloat16)
    plan = plan_gemm(a, b, c, b_major="n")
    sms = gemm_mod.sm_count(0)
    want = gemm_mod.choose_tail_rows(replace(plan.config, tail_rows=0), 5936, 4352, 9720, sms)
    assert plan.config.tail_rows == want and (want == 48 or sms != 132)  # 48 on 132 SMs (H100 SXM, H200)
    if not want:  # another SM count: the tail asked for, to test it all the same
        plan = plan_gemm(a, b, c, b_major="n", tail_rows=48)
    assert plan.tail is not None
    for run in range(3):
        if run == 2:
            a, b = torch.randn_like(a), torch.randn_like(b)
            c = torch.full_like(c, float("nan"))
            plan(a, b, c)
        else:
            c.fill_(float("nan"))
            plan()
        torch.cuda.synchronize()
        ref = a.float() @ b.float()
        assert not torch.isnan(c).any(), f"run {run}: rows left unwritten"
        err = (c.float() - ref).abs().max().item() / ref.abs().max().item()
        assert err <= 8e-3, f"run {run}: max error {err:.3g}"


@pytest.mark.requires_sm90
@pytest.mark.parametrize("chunk", range(6))
def test_gemm_sweep_tma(chunk) -> None:
    """300 random GEMMs on the tma backend (50 per chunk), each run 5 times on poisoned outputs."""
    torch = pytest.importorskip("torch")
    torch.backends.cuda.matmul.allow_tf32 = False
    seed = _seed()
    for case in _sweep(300, "tma", seed)[50 * chunk:50 * (chunk + 1)]:
        _check_gemm(torch, case, runs=5, seed=seed)


@pytest.mark.requires_sm80
@pytest.mark.parametrize("chunk", range(2))
def test_gemm_sweep_cp_async(chunk) -> None:
    """100 random GEMMs on the cp.async twin (forced on sm_90), each run 5 times on poisoned outputs."""
    torch = pytest.importorskip("torch")
    torch.backends.cuda.matmul.allow_tf32 = False
    seed = _seed() + 1
    for case in _sweep(100, "cp.async", seed)[50 * chunk:50 * (chunk + 1)]:
        _check_gemm(torch, case, runs=5, seed=seed)


def test_sweep_covers_what_it_promises() -> None:
    """The sweep's cases cover every N % 256 band and N % 8 residue, K = 16, every alpha and beta, both dtypes,
    majors and output types, and sizes from 1 to 9000."""
    cases = _sweep(300, "tma", _seed())
    assert {(c["n"] % 256) // 32 for c in cases} == set(range(8)) and {c["n"] % 8 for c in cases} == set(range(8))
    assert any(c["k"] == 16 for c in cases) and {c["alpha"] for c in cases} == {0.0, 1.0, -2.0}
    assert {c["beta"] for c in cases} == {0.0, 0.5, 1.0} and {c["dtype"] for c in cases} == {"bfloat16", "float16"}
    assert {c["kmajor"] for c in cases} == {True, False} and {c["out_f32"] for c in cases} == {True, False}
    sizes = [c[d] for c in cases for d in "mnk"]
    assert min(sizes) <= 4 and max(sizes) >= 6000 and all(1 <= x <= 9000 for x in sizes)
    assert {c["special"] for c in cases} >= {"nan_a", "inf_b", "nan_c", "inf_a"}


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
