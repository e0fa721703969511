"""One consistent fix: every invalid request whose tensor is valid gets the nearest valid one, proved by the
checker (which agrees with the driver on the committed corpus) and, on an sm_90 GPU, by the driver itself."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tmakit import Arch, DataType, TensorMapError, describe_im2col, describe_tensor, encode_tiled
from tmakit.tensormap.corpus import case_address
from tmakit.tensormap.enums import Interleave, L2Promotion, OOBFill, Swizzle
from tmakit.tensormap.spec import Im2colSpec, TiledSpec
from tmakit.tensormap.rules import check_spec
from tmakit.tensormap.suggest import suggest

CORPUS = Path(__file__).parent / "data" / "tensormap_corpus.jsonl"
# Rules about the tensor itself (address, shape, strides, type, rank, a GPU without TMA): no option fixes them.
TENSOR_RULES = ("address.", "dims.", "strides.", "rank.", "arch.no_tma", "arch.dtype_blackwell", "dtype.")


def spec_of(case):
    common = (Interleave(case["interleave"]), Swizzle(case["swizzle"]), L2Promotion(case["l2_promotion"]),
              OOBFill(case["oob_fill"]))
    dt, addr = DataType(case["dtype"]), case_address(case)
    if case["kind"] == "tiled":
        return TiledSpec(dt, addr, tuple(case["dims"]), tuple(case["strides"]), tuple(case["box"]),
                         tuple(case["element_strides"]), *common)
    return Im2colSpec(dt, addr, tuple(case["dims"]), tuple(case["strides"]), tuple(case["lower_corner"]),
                      tuple(case["upper_corner"]), case["channels_per_pixel"], case["pixels_per_column"],
                      tuple(case["element_strides"]), *common)


def rejected_cases_with_a_valid_tensor():
    lines = CORPUS.read_text().splitlines()
    arch = Arch.parse(json.loads(lines[0])["arch"])
    out = []
    for line in lines[1:]:
        case = json.loads(line)
        if case["verdict"] != "CUDA_ERROR_INVALID_VALUE" or len(case["dims"]) > 5 or len(case["dims"]) < 1:
            continue
        spec = spec_of(case)
        rules = [v.rule for v in check_spec(spec, arch)]
        # an im2col dimension of 2^31 or more wraps every bounding box in the driver's 32-bit arithmetic
        wraps = case["kind"] == "im2col" and any(d >= 1 << 31 for d in case["dims"])
        if rules and not any(r.startswith(TENSOR_RULES) for r in rules) and not wraps:
            out.append((case, spec))
    return arch, out


def test_every_rejected_corpus_case_with_a_valid_tensor_gets_a_suggestion_the_checker_accepts():
    arch, cases = rejected_cases_with_a_valid_tensor()
    assert len(cases) > 3000
    missing, wrong, slowest = [], [], 0.0
    for case, spec in cases:
        start = time.perf_counter()
        changes = suggest(spec, arch)
        slowest = max(slowest, time.perf_counter() - start)
        if changes is None:
            missing.append(case["id"])
            continue
        assert set(changes) <= {"box", "swizzle", "element_strides", "oob_fill", "interleave", "channels_per_pixel",
                                "pixels_per_column", "lower_corner", "upper_corner"}
        if check_spec(spec.replace(**changes), arch):
            wrong.append(case["id"])
    assert missing == [] and wrong == [], (missing[:5], wrong[:5])
    assert slowest < 0.1, f"slowest search {slowest * 1e3:.1f} ms"


def test_the_issue_example_gets_one_fix_that_every_rule_agrees_with():
    with pytest.raises(TensorMapError, match=r"try: box=\(64, 32\)") as err:
        describe_tensor(shape=(4096, 4096), dtype="bf16", box=(64, 300), swizzle="64B")
    e = err.value
    assert e.order == "numpy" and "numpy order" in str(e)
    assert e.suggestion["box"] == (64, 32) and e.suggestion["swizzle"] == "64B"
    assert {v.fix for v in e.violations} == {"use box=(64, 32): that one change repairs every violation"}
    assert all(v.parameter == "box[1]" for v in e.violations)  # numpy order: the inner entry is box[1]
    tm = describe_tensor(shape=(4096, 4096), dtype="bf16", **e.suggestion)
    assert tm.box_shape == (64, 32) and tm.swizzle is Swizzle.B64


def test_suggestions_prefer_the_box_then_the_swizzle():
    with pytest.raises(TensorMapError) as err:  # 2 changes would be needed without touching the box
        describe_tensor(shape=(1024, 1024), dtype="f32", box=(8, 64), swizzle="64B")
    assert err.value.suggestion_line == "try: box=(8, 16)"
    with pytest.raises(TensorMapError) as err:  # NaN fill on an integer type: only the fill can change
        describe_tensor(shape=(1024, 1024), dtype="i32", box=(8, 32), oob_fill="nan")
    assert err.value.suggestion_line == "try: oob_fill='zero'"
    with pytest.raises(TensorMapError) as err:  # element strides out of range
        describe_tensor(shape=(1024, 1024), dtype="f32", box=(8, 32), element_strides=(9, 1))
    assert err.value.suggestion["element_strides"] == (8, 1)


def test_auto_swizzle_requests_are_shown_the_swizzle_that_goes_with_the_box():
    with pytest.raises(TensorMapError) as err:
        describe_tensor(shape=(4096, 4096), dtype="bf16", box=(64, 60))
    line = err.value.suggestion_line
    assert line.startswith("try: box=(64, ") and "swizzle=" in line
    describe_tensor(shape=(4096, 4096), dtype="bf16", **err.value.suggestion)


def test_no_suggestion_when_the_tensor_itself_is_invalid():
    with pytest.raises(TensorMapError) as err:
        describe_tensor(shape=(4096, 4095), dtype="bf16", box=(1024, 64))
    assert err.value.suggestion is None and "try:" not in str(err.value)
    assert {v.parameter for v in err.value.violations} == {"strides[0]", "box[0]"}


def test_with_an_invalid_tensor_the_option_fixes_still_agree():
    with pytest.raises(TensorMapError) as err:  # the README example: a row pitch of 8190 bytes, and the box
        describe_tensor(shape=(4096, 4095), dtype="bf16", box=(64, 300), swizzle="64B")
    e = err.value
    assert e.suggestion is None and e.suggestion_proof is None
    fixes = {v.rule: v.fix for v in e.violations}
    assert fixes["strides.align16"].startswith("pad rows")
    assert {fixes[r] for r in ("box.range", "box.inner_multiple_16", "box.inner_vs_swizzle")} == {
        "use box=(64, 32) (with the tensor's own violations fixed, that one change repairs the rest)"}


def test_driver_order_apis_suggest_in_driver_order():
    with pytest.raises(TensorMapError) as err:
        encode_tiled("bf16", 1 << 20, (4096, 4096), (8192,), (300, 64), swizzle="64B", encode=False)
    e = err.value
    assert e.order == "driver" and "driver order" in str(e)
    assert e.suggestion["box"] == (32, 64) and all(v.parameter == "box[0]" for v in e.violations)
    assert encode_tiled("bf16", 1 << 20, (4096, 4096), (8192,), **e.suggestion, encode=False).box == (32, 64)


def test_im2col_errors_are_in_numpy_order_with_a_suggestion():
    with pytest.raises(TensorMapError) as err:
        describe_im2col(shape=(4, 32, 32, 64), dtype="bf16", pixels_per_column=64, channels_per_pixel=60,
                        swizzle="128B")
    e = err.value
    assert e.order == "numpy" and e.suggestion is not None
    describe_im2col(shape=(4, 32, 32, 64), dtype="bf16", **e.suggestion)


def test_order_translation_names_shape_and_strides_as_the_caller_passed_them():
    with pytest.raises(TensorMapError) as err:
        describe_tensor(shape=(3, 4096, 4095), dtype="bf16", box=(1, 8, 8))
    v = err.value.violations[0]
    assert v.parameter == "strides[1]" and v.value == 8190
    with pytest.raises(TensorMapError) as err:
        describe_tensor(shape=(2**33, 64), dtype="u8", box=(8, 64))
    assert err.value.violations[0].parameter == "shape[0]"


@pytest.mark.requires_sm90
def test_the_driver_accepts_every_corpus_suggestion():
    from tmakit import _driver
    from tmakit.tensormap.encode import encode_im2col_raw, encode_tiled_raw

    arch, cases = rejected_cases_with_a_valid_tensor()
    _driver.ensure_context(0)
    base = (int(_driver.call("cuMemAlloc", 1 << 20)) + 1023) // 1024 * 1024
    refused = []
    for case, spec in cases:
        fixed = spec.replace(address=base, **suggest(spec, arch))
        raw = encode_tiled_raw if isinstance(fixed, TiledSpec) else encode_im2col_raw
        err, _ = raw(*fixed.encode_args())
        if int(err) != 0:
            refused.append((case["id"], err.name))
    assert refused == [], f"{len(refused)} of {len(cases)} suggestions refused, e.g. {refused[:5]}"


def test_a_verifier_can_refuse_candidates_and_the_search_goes_on():
    spec = TiledSpec(DataType.BFLOAT16, 1 << 20, (4096, 4096), (8192,), (300, 64), (1, 1), swizzle=Swizzle.B64)
    first = suggest(spec, "sm_90")
    seen = []

    def refuse_first(candidate):
        seen.append(candidate)
        return len(seen) > 1
    second = suggest(spec, "sm_90", verify=refuse_first)
    assert first == {"box": (32, 64)} and second is not None and second != first
    assert not check_spec(spec.replace(**second), Arch(9, 0))
    assert suggest(spec, "sm_90", verify=lambda c: False) is None
    with pytest.raises(TensorMapError) as err:
        describe_tensor(shape=(4096, 4096), dtype="bf16", box=(64, 300), swizzle="64B")
    assert err.value.suggestion_proof == "rules"  # no array on a GPU: the rules prove it


@pytest.mark.requires_sm90
def test_on_a_gpu_the_driver_proves_the_suggestion_of_a_real_array():
    import numpy as np

    from tmakit import DeviceArray

    x = DeviceArray.from_host(np.zeros((256, 512), np.uint16))
    with pytest.raises(TensorMapError) as err:
        describe_tensor(x, dtype="bf16", box=(64, 300), swizzle="64B")
    assert err.value.suggestion_proof == "rules and driver" and err.value.suggestion["box"] == (64, 32)
    tm = describe_tensor(x, dtype="bf16", **err.value.suggestion)
    assert tm.encoded and tm.box_shape == (64, 32)


def test_check_tiled_and_check_im2col_fixes_agree_on_every_rejected_corpus_case():
    """The public driver-order checkers: every fix of a rejected request names the same one change (the
    suggestion where the tensor is valid, the nearest options otherwise), and that change passes every rule."""
    from tmakit import check_im2col, check_tiled

    lines = CORPUS.read_text().splitlines()
    arch = json.loads(lines[0])["arch"]
    checked, disagree, wrong = 0, [], []
    for line in lines[1:]:
        case = json.loads(line)
        if case["verdict"] != "CUDA_ERROR_INVALID_VALUE" or not 1 <= len(case["dims"]) <= 5:
            continue
        options = dict(interleave=case["interleave"], swizzle=case["swizzle"], l2_promotion=case["l2_promotion"],
                       oob_fill=case["oob_fill"], arch=arch)
        if case["kind"] == "tiled":
            found = check_tiled(case["dtype"], case_address(case), case["dims"], case["strides"], case["box"],
                                case["element_strides"], **options)
        else:
            found = check_im2col(case["dtype"], case_address(case), case["dims"], case["strides"], case["lower_corner"],
                                 case["upper_corner"], case["channels_per_pixel"], case["pixels_per_column"],
                                 case["element_strides"], **options)
        fixes = {v.fix for v in found if not v.rule.startswith(TENSOR_RULES)}
        if not fixes:
            continue
        checked += 1
        if len(fixes) != 1:
            disagree.append((case["id"], sorted(fixes)))
            continue
        changes = suggest(spec_of(case), arch) if not any(v.rule.startswith(TENSOR_RULES) for v in found) else None
        if changes is not None and check_spec(spec_of(case).replace(**changes), Arch.parse(arch)):
            wrong.append(case["id"])
    assert checked > 3000
    assert disagree == [] and wrong == [], (len(disagree), disagree[:3], wrong[:3])


def test_check_tiled_gives_the_issue_example_one_fix_in_driver_order():
    from tmakit import check_tiled
    from tmakit.tensormap import rules

    args = ("bf16", 1 << 20, [4096, 4096], [8192], [300, 64], [1, 1])
    raw = rules.check_tiled(*args, swizzle="64B")
    assert len({v.fix for v in raw}) == 3  # the per-rule fixes, each right alone, contradict each other
    found = check_tiled(*args, swizzle="64B")
    assert [v.rule for v in found] == [v.rule for v in raw]
    assert {v.fix for v in found} == {"use box=(32, 64): that one change repairs every violation"}
    assert check_tiled("bf16", 1 << 20, [4096, 4096], [8192], [32, 64], [1, 1], swizzle="64B") == []
