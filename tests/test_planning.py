"""tmakit.ops.describe_gemm / describe_attention / describe_transpose: without a GPU they say what the plans decide.

CPU: the descriptions on their own (paths, tile plans fitted to each architecture's shared memory, maps), their
argument checks, and a transpose plan on the fake driver deciding as describe_transpose does. GPU: every plan
made on the device records the decision its description named (same backend, reason, tiles, config).
"""
from __future__ import annotations

import numpy as np
import pytest
from _fake_driver import device_view, fake_launch  # noqa: F401 - fixture

import tmakit
from tmakit import InvalidArgumentError, ops


@pytest.mark.parametrize("shape, dtype, backend, why", [
    ((10007, 10009), "float16", "tma", "TMA loads src as 8 row classes"),     # both pitches odd: row classes
    ((8192, 8192), "float32", "tma", "sm_90 has TMA"),
    ((1040, 528), "uint8", "tma", "sm_90 has TMA"),
    ((3, 7), "float16", "cp.async", "TMA cannot describe src"),               # fewer rows than a super-row
])
def test_describe_transpose_names_the_path(shape, dtype, backend, why):
    result = ops.describe_transpose(shape, dtype)
    assert result.backend.name == backend and why in result.reason, result
    assert result.tile_plan is not None and result.tiles[0] * result.tiles[1] > 0
    sm80 = ops.describe_transpose(shape, dtype, arch="sm_80")
    assert sm80.backend.name == "cp.async"
    # tile rows: 128 first on the TMA path (measured never slower on either Hopper card), 256 on cp.async
    assert (result.tile_plan.rows, sm80.tile_plan.rows) == (128 if backend == "tma" else 256, 256)


def test_describe_transpose_reads_the_offsets_as_the_plan_reads_addresses():
    aligned = ops.describe_transpose((4096, 4096), "float32")
    shifted = ops.describe_transpose((4096, 4096), "float32", dst_offset=16)  # dst rows 16 bytes into a sector
    assert aligned.sectors.shifted == 0 and shifted.sectors.shifted != 0
    assert ops.describe_transpose((4096, 4096), "float32", src_offset=64).lead == 16  # 64 bytes into a line
    assert ops.describe_transpose((0, 5), "float32").reason == "empty"


@pytest.mark.parametrize("rows, cols, dtype, dst_at, src_at", [
    (80, 96, "uint16", 0x100000, 0x200000), (1000, 1000, "float32", 0x100010, 0x800040),
    (257, 129, "uint8", 0x100000, 0x200003), (300, 200, "float64", 0x100000, 0x280000)])
def test_the_plan_decides_as_its_description(fake_launch, rows, cols, dtype, dst_at, src_at):
    """On the fake sm_90 (no tensor map encodes there: the cp.async path), plan_transpose's result equals
    describe_transpose's for buffers at the same places relative to 256 bytes."""
    plan = ops.plan_transpose(device_view(dst_at, (cols, rows), dtype), device_view(src_at, (rows, cols), dtype),
                              backend="cp.async")
    assert plan.result == ops.describe_transpose((rows, cols), dtype, backend="cp.async", src_offset=src_at % 256,
                                                 dst_offset=dst_at % 256)


@pytest.mark.parametrize("arch, backend, stages", [("sm_90", "tma", 4), ("sm_80", "cp.async", 3),
                                                   ("sm_86", "cp.async", 3)])
def test_describe_gemm_fits_the_tile_plan_to_the_architecture(arch, backend, stages):
    plan = ops.describe_gemm(4096, 4096, 4096, arch=arch)
    assert plan.backend.name == backend and plan.config.stages == stages
    assert plan.config.shared_mem <= plan.limits.smem_per_block_optin == tmakit.device_limits(arch=arch).smem_per_block_optin
    assert plan.tile[0] == 128 and plan.defines["TMAKIT_GEMM_STAGES"] == stages
    if backend == "tma":
        a, b, c = plan.maps
        assert a.box_shape == (128, 64) and b.box_shape == (plan.config.block_n // 2, 64) and not a.encoded
        assert plan.expect_tx == a.box_bytes + plan.config.block_n * 64 * 2 and plan.compile_arch.sm == "sm_90a"
    else:
        assert plan.maps == () and "TMAKIT_FORCE_CP_ASYNC" in plan.defines


def test_describe_attention_says_how_a_decode_packs_and_splits():
    said = ops.describe_attention(8, 32, 1, 128, kv_seqlen=20000, kv_heads=8, layout="bshd", sms=132)
    assert isinstance(said, ops.AttentionDescription) and said.packed
    assert said.kv_splits == 5  # 8 x 8 packed tiles on 132 SMs: ceil(264 / 64)
    assert ops.describe_attention(8, 32, 1, 128, kv_seqlen=20000, kv_heads=8, sms=264).kv_splits == 9
    assert said.maps[0].shape == (8, 8, 4, 128) and said.maps[3].shape == (8, 8, 4, 128)  # (B, H_kv, group, D)
    causal = ops.describe_attention(8, 32, 1, 128, kv_seqlen=20000, kv_heads=8, causal=True, sms=132)
    assert not causal.packed and causal.kv_splits == 1 and causal.maps[0].shape == (8, 32, 1, 128)
    prefill = ops.describe_attention(4, 16, 4096, 128, sms=132)
    assert not prefill.packed and prefill.kv_splits == 1
    with pytest.raises(tmakit.InvalidArgumentError, match="causal=1: must be True or False"):
        ops.describe_attention(1, 1, 8, 64, causal=1)
    with pytest.raises(tmakit.InvalidArgumentError, match=r"sms=0: must be an int >= 1; fix: pass e.g. sms=132"):
        ops.describe_attention(1, 1, 8, 64, sms=0)


def test_describe_attention_fits_the_key_tile_to_the_architecture():
    tma = ops.describe_attention(4, 16, 4096, 128)
    assert tma.backend.name == "tma" and [m.box_shape for m in tma.maps] == [(1, 1, 128, 64)] * 3 + [(1, 1, 64, 64)]
    small = ops.describe_attention(4, 16, 4096, 128, arch="sm_86", layout="bshd")
    assert small.backend.name == "cp.async" and small.config.block_n == 64 and small.maps == ()
    assert small.config.shared_mem <= 99 * 1024


@pytest.mark.parametrize("call, match", [
    (lambda: ops.describe_gemm(0, 8, 8), r"m=0: must be an int >= 1"),
    (lambda: ops.describe_gemm(8, 8, 8, dtype="f32"), r"dtype='f32': must be bfloat16 or float16"),
    (lambda: ops.describe_gemm(8, 8, 8, b_major="x"), r"b_major='x'"),
    (lambda: ops.describe_attention(1, 1, 8, 96), r"head_dim=96: must be one of"),
    (lambda: ops.describe_attention(1, 1, 8, 64, layout="nchw"), r"layout='nchw'"),
    (lambda: ops.describe_transpose((8,), "float32"), r"shape=\(8,\): must be \(rows, cols\)"),
    (lambda: ops.describe_transpose((8, 8), "complex128"), r"dtype='complex128': must have 1, 2, 4 or 8-byte"),
    (lambda: ops.describe_transpose((8, 8), "float32", src_offset=-1), r"src_offset=-1"),
    (lambda: ops.describe_transpose((8, 8), "float32", arch="sm_101"), r"arch='sm_101': has no entry"),
])
def test_descriptions_refuse_bad_arguments(call, match):
    with pytest.raises(InvalidArgumentError, match=match):
        call()


# ---- GPU: the plans decide what their descriptions said --------------------------------------------------------

@pytest.mark.requires_sm80
@pytest.mark.parametrize("rows, cols, dtype", [(10007, 10009, np.float16), (1040, 528, np.float32),
                                               (257, 129, np.uint8), (999, 4097, np.float64), (3, 7, np.float16)])
def test_transpose_plans_on_the_gpu_decide_as_described(rows, cols, dtype):
    gpu = tmakit.device_limits(0)
    with tmakit.DeviceArray.empty((rows, cols), dtype) as src, tmakit.DeviceArray.empty((cols, rows), dtype) as dst:
        plan = ops.plan_transpose(dst, src)
        said = ops.describe_transpose((rows, cols), dtype, arch=gpu.arch, src_offset=src.ptr % 256,
                                      dst_offset=dst.ptr % 256)
        assert plan.result == said, (plan.result, said)


@pytest.mark.requires_sm80
@pytest.mark.parametrize("b_major", ["k", "n"])
def test_gemm_and_attention_plans_on_the_gpu_decide_as_described(b_major):
    gpu = tmakit.device_limits(0)
    m, n, k = 1000, 520, 264
    with tmakit.DeviceArray.empty((m, k), np.float16) as a, \
            tmakit.DeviceArray.empty((n, k) if b_major == "k" else (k, n), np.float16) as b, \
            tmakit.DeviceArray.empty((m, n), np.float16) as c:
        plan = ops.plan_gemm(a, b, c, b_major=b_major)
        said = ops.describe_gemm(m, n, k, dtype="float16", b_major=b_major, arch=gpu.arch)
        assert (plan.backend, plan.config) == (said.backend, said.config)
    shape = (1, 2, 300, 64)
    with tmakit.DeviceArray.empty(shape, np.float16) as q, tmakit.DeviceArray.empty(shape, np.float16) as kv, \
            tmakit.DeviceArray.empty(shape, np.float16) as out:
        plan = ops.plan_attention(q, kv, kv, out)
        said = ops.describe_attention(*shape, dtype="float16", arch=gpu.arch)
        assert (plan.backend, plan.config) == (said.backend, said.config)
        assert [m.box_shape for m in plan.maps] == [m.box_shape for m in said.maps]
    # a grouped decode: packed, and split on this GPU's SMs as described for its architecture's table
    with tmakit.DeviceArray.empty((2, 1, 16, 128), np.float16) as q, \
            tmakit.DeviceArray.empty((2, 3000, 4, 128), np.float16) as kv, \
            tmakit.DeviceArray.empty((2, 1, 16, 128), np.float16) as out:
        plan = ops.plan_attention(q, kv, kv, out, layout="bshd")
        said = ops.describe_attention(2, 16, 1, 128, kv_seqlen=3000, kv_heads=4, layout="bshd", dtype="float16",
                                      arch=gpu.arch, sms=gpu.sm_count)
        assert (plan.packed, [m.shape for m in plan.maps]) == (said.packed, [m.shape for m in said.maps])
        assert plan.kv_splits == said.kv_splits and (said.kv_splits > 1) == (plan.config.backend.value == "tma")
