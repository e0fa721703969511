"""Each rule of the tensor-map checker (``tmakit.tensormap.rules``, each violation with its own per-rule fix): a
valid baseline passes, and each violation is reported with its id. The public ``check_tiled``/``check_im2col``
rewrite those fixes to agree with one suggestion: tests/test_suggest.py."""
from __future__ import annotations

import pytest

from tmakit import DataType, InvalidArgumentError, Swizzle
from tmakit.tensormap import Violation
from tmakit.tensormap.rules import check_im2col, check_tiled

BASE = dict(dtype="bf16", address=1 << 40, dims=[4096, 4096], strides=[8192], box=[64, 64], element_strides=[1, 1])
IM2COL = dict(dtype="f16", address=1 << 40, dims=[64, 32, 32, 8], strides=[128, 4096, 131072], lower_corner=[-1, -1],
              upper_corner=[-1, -1], channels_per_pixel=64, pixels_per_column=128, element_strides=[1, 1, 1, 1])


def tiled(**changes):
    kwargs = {**BASE}
    options = {k: changes.pop(k) for k in list(changes) if k in ("interleave", "swizzle", "l2_promotion", "oob_fill", "arch")}
    kwargs.update(changes)
    return check_tiled(kwargs.pop("dtype"), kwargs.pop("address"), kwargs.pop("dims"), kwargs.pop("strides"),
                       kwargs.pop("box"), kwargs.pop("element_strides"), **options)


def im2col(**changes):
    kwargs = {**IM2COL}
    options = {k: changes.pop(k) for k in list(changes) if k in ("interleave", "swizzle", "l2_promotion", "oob_fill", "arch")}
    kwargs.update(changes)
    return check_im2col(kwargs.pop("dtype"), kwargs.pop("address"), kwargs.pop("dims"), kwargs.pop("strides"),
                        kwargs.pop("lower_corner"), kwargs.pop("upper_corner"), kwargs.pop("channels_per_pixel"),
                        kwargs.pop("pixels_per_column"), kwargs.pop("element_strides"), **options)


def rules(violations: list[Violation]) -> set[str]:
    return {v.rule for v in violations}


def test_valid_baselines_pass():
    assert tiled() == []
    assert tiled(swizzle="128B") == []
    assert im2col() == []


@pytest.mark.parametrize("changes, rule, parameter", [
    (dict(arch="sm_80"), "arch.no_tma", "arch"),
    (dict(swizzle="128B_ATOM_32B"), "arch.swizzle_blackwell", "swizzle"),
    (dict(dtype="16U4_ALIGN8B", dims=[4096, 4096]), "arch.dtype_blackwell", "dtype"),
    (dict(dims=[2] * 6, strides=[16] * 5, box=[8] * 6, element_strides=[1] * 6), "rank.range", "rank"),
    (dict(dims=[], strides=[], box=[], element_strides=[]), "rank.range", "rank"),
    (dict(interleave="16B"), "rank.interleave", "rank"),
    (dict(address=(1 << 40) + 8), "address.align16", "address"),
    (dict(address=(1 << 40) + 16, interleave="32B", swizzle="32B", dims=[16, 64, 64], strides=[32, 2048],
          box=[16, 8, 8], element_strides=[1, 1, 1]), "address.align32", "address"),
    (dict(dims=[0, 4096]), "dims.range", "dims[0]"),
    (dict(dims=[4096, (1 << 32) + 1]), "dims.range", "dims[1]"),
    (dict(strides=[8200]), "strides.align16", "strides[0]"),
    (dict(strides=[1 << 40]), "strides.max", "strides[0]"),
    (dict(strides=[]), "strides.length", "strides"),
    (dict(box=[64, 0]), "box.range", "box[1]"),
    (dict(box=[64, 257]), "box.range", "box[1]"),
    (dict(box=[60, 64]), "box.inner_multiple_16", "box[0]"),
    (dict(box=[128, 64], swizzle="128B"), "box.inner_vs_swizzle", "box[0]"),
    (dict(box=[64, 64], swizzle="64B"), "box.inner_vs_swizzle", "box[0]"),
    (dict(element_strides=[1, 9]), "element_strides.range", "element_strides[1]"),
    (dict(element_strides=[0, 1]), "element_strides.range", "element_strides[0]"),
    (dict(element_strides=[1]), "element_strides.length", "element_strides"),
    (dict(dtype="i32", oob_fill="nan", box=[32, 64]), "oob_fill.nan_needs_float", "oob_fill"),
    (dict(box=[256, 256], dims=[4096, 4096, 4], strides=[8192, 8192 * 4096], element_strides=[1, 1, 1]),
     "box.length", "box"),
    (dict(dtype="f32", dims=[4096, 4096, 64], strides=[16384, 16384 * 4096], box=[64, 256, 8],
          element_strides=[1, 1, 1]), "box.smem_limit", "box"),
    (dict(interleave="16B", dims=[4, 64, 64], strides=[16, 1024], box=[4, 8, 8], element_strides=[1, 1, 1],
          dtype="u16"), "box.inner_multiple_16_interleaved", "box[0]"),
])
def test_each_tiled_rule_fires(changes, rule, parameter):
    found = tiled(**changes)
    assert rule in rules(found), found
    hit = next(v for v in found if v.rule == rule)
    assert hit.parameter == parameter
    assert hit.fix and hit.reference and hit.message
    assert parameter.split("[")[0] in str(hit)


def test_all_violations_are_reported_at_once():
    found = tiled(address=(1 << 40) + 4, strides=[8200], box=[60, 300], element_strides=[0, 1], swizzle="32B")
    assert {"address.align16", "strides.align16", "box.range", "box.inner_multiple_16", "box.inner_vs_swizzle",
            "element_strides.range"} <= rules(found)


def test_fixes_are_concrete():
    (v,) = tiled(strides=[3500])
    assert "3504" in v.fix
    (v,) = tiled(box=[64, 64], swizzle="64B")
    assert "128B" in v.fix and "box[0] <= 32" in v.fix


def test_observed_rules_are_marked_with_evidence():
    found = tiled(dtype="f32", dims=[4096, 4096, 64], strides=[16384, 16384 * 4096], box=[64, 256, 8],
                  element_strides=[1, 1, 1])
    (v,) = [v for v in found if v.rule == "box.smem_limit"]
    assert v.observed and "observed" in v.reference and "[observed]" in str(v)


def test_smem_limit_uses_the_drivers_floor_division():
    # 64 x 256 x 8 x f32 = 512 KiB, but the driver counts floor(8/9) = 0 along dim 2 and accepts it
    assert rules(tiled(dtype="f32", dims=[4096, 4096, 64], strides=[16384, 16384 * 4096], box=[64, 256, 8],
                       element_strides=[1, 1, 9])) == {"element_strides.range"}  # 9 > 8, but no smem_limit
    assert "box.smem_limit" not in rules(tiled(dtype="f32", dims=[4096, 4096, 64], strides=[16384, 16384 * 4096],
                                               box=[64, 256, 8], element_strides=[1, 1, 8]))


def test_blackwell_features_pass_on_sm100():
    assert tiled(swizzle="128B_ATOM_32B", arch="sm_100") == []
    assert "arch.swizzle_blackwell" in rules(tiled(swizzle="128B_ATOM_64B", arch=(9, 0)))


def test_nan_fill_allowed_for_floats():
    assert tiled(oob_fill="nan") == []
    assert tiled(oob_fill="CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA") == []


@pytest.mark.parametrize("changes, rule", [
    (dict(dims=[64, 32], strides=[128], lower_corner=[], upper_corner=[], element_strides=[1, 1]), "rank.range"),
    (dict(lower_corner=[-129, -1]), "lower_corner.range"),
    (dict(upper_corner=[-1, 128]), "upper_corner.range"),
    (dict(lower_corner=[-1]), "lower_corner.length"),
    (dict(lower_corner=[10, 0], upper_corner=[-30, 0]), "corners.empty_box"),
    (dict(channels_per_pixel=0), "channels.range"),
    (dict(channels_per_pixel=257), "channels.range"),
    (dict(channels_per_pixel=60), "box.inner_multiple_16"),
    (dict(pixels_per_column=0), "pixels.range"),
    (dict(pixels_per_column=1025), "pixels.range"),
    (dict(channels_per_pixel=256, pixels_per_column=1024, dims=[256, 32, 32, 8], strides=[512, 16384, 524288]),
     "im2col.smem_limit"),
    (dict(swizzle="64B"), "box.inner_vs_swizzle"),
])
def test_each_im2col_rule_fires(changes, rule):
    assert rule in rules(im2col(**changes))


def test_im2col_corner_range_depends_on_rank():
    dims3 = dict(dims=[64, 4096, 8], strides=[128, 128 * 4096], lower_corner=[-32768], upper_corner=[0],
                 element_strides=[1, 1, 1])
    assert im2col(**dims3) == []
    assert "lower_corner.range" in rules(im2col(**{**dims3, "lower_corner": [-32769]}))


def test_im2col_extent_wraps_like_the_driver():
    # dims[1] + upper - lower exceeds 2^32 and wraps to a small positive value: the driver accepts it
    big = dict(dims=[64, (1 << 32) - 1, 32, 8], lower_corner=[-2, 0], upper_corner=[1, 0])
    assert "corners.empty_box" not in rules(im2col(**big))
    assert "corners.empty_box" in rules(im2col(**{**big, "lower_corner": [2, 0], "upper_corner": [-2, 0]}))


@pytest.mark.parametrize("kwargs, parameter", [
    (dict(dtype="complex64"), "dtype"),
    (dict(swizzle="96B"), "swizzle"),
    (dict(oob_fill="maybe"), "oob_fill"),
    (dict(interleave=7), "interleave"),
    (dict(arch="hopper"), "arch"),
    (dict(dims="4096"), "dims"),
    (dict(box=[64.5, 64]), "box[0]"),
    (dict(address="0x0"), "address"),
])
def test_bad_types_raise_naming_the_parameter(kwargs, parameter):
    with pytest.raises(InvalidArgumentError, match=rf"^{parameter.replace('[', '.').replace(']', '.')}"):
        tiled(**kwargs)


def test_enum_inputs_accept_driver_members_and_names():
    drv = pytest.importorskip("cuda.bindings.driver")
    assert tiled(swizzle=drv.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
                 dtype=drv.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                 l2_promotion="CU_TENSOR_MAP_L2_PROMOTION_L2_128B", oob_fill="nan") == []
    assert DataType.parse("bf16") is DataType.BFLOAT16 and Swizzle.parse("128B") is Swizzle.B128


def test_enum_parse_is_repeatable_and_strict():
    """A repeated str/int parses to the same member; a refused value is refused every time,
    naming the parameter the caller gave; bool is never taken for an int."""
    for _ in range(2):
        assert Swizzle.parse(" 128b ") is Swizzle.B128 and Swizzle.parse(3) is Swizzle.B128
        assert DataType.parse("bf16") is DataType.BFLOAT16
        with pytest.raises(InvalidArgumentError, match="^swizzle=.*'96B'"):
            Swizzle.parse("96B", "swizzle")
        with pytest.raises(InvalidArgumentError, match="^mode=True"):
            Swizzle.parse(True, "mode")


def test_pass_test_agrees_with_the_full_checker():
    """rules.tiled_ok (describe's straight-line pass test) says True exactly when the full collector reports
    nothing: on every tiled case of the driver corpus and on random near-valid requests, on three archs."""
    import json
    import random
    from pathlib import Path

    from tmakit import Arch
    from tmakit.tensormap.corpus import case_address, generate
    from tmakit.tensormap.enums import Interleave, OOBFill
    from tmakit.tensormap.rules import collect_tiled, tiled_ok

    corpus = Path(__file__).parent / "data" / "tensormap_corpus.jsonl"
    cases = [json.loads(line) for line in corpus.read_text().splitlines()[1:]]
    cases = [c for c in cases if c["kind"] == "tiled"] + generate("tiled", 3000, seed=random.randrange(1 << 30))
    checked = passed = 0
    for case in cases:
        try:
            parsed = (DataType(case["dtype"]), case_address(case), tuple(case["dims"]), tuple(case["strides"]),
                      tuple(case["box"]), tuple(case["element_strides"]), Interleave(case["interleave"]),
                      Swizzle(case["swizzle"]), OOBFill(case["oob_fill"]))
        except ValueError:
            continue
        for arch in (Arch(9, 0), Arch(10, 0), Arch(8, 0)):
            full = collect_tiled(*parsed, arch)
            assert tiled_ok(*parsed, arch) == (not full), (case, arch, [v.rule for v in full])
            checked += 1
            passed += not full
    assert checked > 3000 and passed > 300
