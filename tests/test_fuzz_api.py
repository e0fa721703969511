"""Property-based fuzzing of the public API: invalid values raise a TmakitError naming the parameter; valid
variants (numpy integers, lists for tuples, generators, enum members for names) give the same result.

Two tiers. STRICT (everything that runs without a GPU: describe/check/encode with encode=False, the layout model,
the enums and Arch, the pinned-memory argument checks, the CLI): every invalid value must raise a TmakitError that
names the parameter. REACH (public names that need a GPU, fuzzed on this machine through their public names): an
invalid value must raise a TmakitError (on a machine without a GPU that may be the "no GPU" error), never another
exception. The last test prints "fuzz: N functions, M parameters, K cases, 0 escapes" and fails on any escape.
"""
from __future__ import annotations

import math
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from _fake_driver import FakeDeviceArray, FakeTorchTensor
import tmakit
from tmakit import (Arch, DataType, Interleave, L2Promotion, OOBFill, Swizzle, TensorMapError, TmakitError,
                    bank_conflicts, box_geometry, check_im2col, check_tiled, describe_im2col, describe_tensor,
                    encode_tiled, swizzle_offset, swizzle_pattern, tma_load_image, tma_store)
from tmakit.errors import InvalidArgumentError

COUNTS: dict = {"functions": set(), "parameters": set(), "cases": 0, "escapes": [], "reach_cases": 0, "variants": 0}
FUZZ = settings(max_examples=int(__import__("os").environ.get("TMAKIT_FUZZ_EXAMPLES", 25)), deadline=None, suppress_health_check=list(HealthCheck), database=None)
VARIANTS = settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck), database=None)

# ---- invalid values ------------------------------------------------------------------------------------------
NOT_INT = st.one_of(st.floats(allow_nan=True, allow_infinity=True).filter(lambda f: f != int(f) if math.isfinite(f)
                                                                          else True),
                    st.floats(-1e6, 1e6).map(lambda f: float(round(f)) + 0.0),  # 8.0 is still not an int
                    st.booleans(), st.none(), st.text(max_size=4), st.just(object()), st.just(b"8"),
                    st.just(1 + 2j), st.just(np.bool_(True)), st.just(np.float32(8.0)))
# Mappings and sets where a sequence belongs: iterating {64: 0, 32: 1} gives (64, 32), which must not pass as one
MAPPINGS = st.one_of(st.dictionaries(st.integers(0, 256), st.integers(0, 8), min_size=1, max_size=5),
                     st.frozensets(st.integers(0, 64), min_size=1, max_size=5), st.just({"a": 1}))
NOT_SEQ = st.one_of(st.none(), st.text(max_size=4), st.floats(), st.just(object()), MAPPINGS, st.booleans())
NOT_SEQ_NN = NOT_SEQ.filter(lambda v: v is not None)  # for parameters whose None means "the default"
NOT_ENUM_NN = st.one_of(st.text(min_size=1, max_size=6).filter(lambda t: not _is_a_name(t)),
                        st.floats(), st.booleans(), st.integers(16, 1 << 70), st.integers(-(1 << 70), -1),
                        st.just(object()), st.just([1]))
NOT_ENUM = st.one_of(NOT_ENUM_NN, st.none())
NOT_ARCH = st.one_of(st.sampled_from(["sm_9999", "sm_91", "(9, 0)", "sm_80a", "compute_", "x", "9.9", 99, 1000, -90,
                                      (99, 99), (9, 1), [9, 0, 0], 9.0, True, "sm_90b", object()]),
                     st.floats(), st.text(max_size=4).filter(lambda t: not any(c.isdigit() for c in t)))
_ENUM_WORDS = {"0", "1", "2", "3", "4", "5", "6", "32", "64", "128", "256", "16", "32B", "64B", "128B", "256B", "16B",
               "NONE", "NAN", "ZERO", "ZEROS", "AUTO", "B32", "B64", "B128", "B16", "U8", "U16", "U32", "U64", "I32",
               "I64", "F16", "F32", "F64", "BF16", "TF32", "FP8", "I8", "I16", "E4M3", "E5M2", "HALF", "FLOAT", "BOOL",
               "INT8", "INT16", "INT32", "INT64", "DOUBLE", "FP16", "FP32", "FP64", "UINT8", "UINT16", "UINT32",
               "UINT64", "FLOAT16", "FLOAT32", "FLOAT64", "BFLOAT16", "L2_64B", "L2_128B", "L2_256B"}


def _is_a_name(text: str) -> bool:
    """Whether some enum accepts ``text`` (the enums' words, and the 8-bit float names tmakit.dtypes accepts)."""
    from tmakit.dtypes import _FP8, _fp8_key

    return text.strip().upper() in _ENUM_WORDS or _FP8.fullmatch(_fp8_key(text)) is not None


NOT_FLAG = st.one_of(st.text(max_size=4), st.integers(), st.floats(), st.none(), st.just(object()))


def bad_ints(length: int, lo: int, hi: int, *, optional: bool = False, ranks: bool = False):
    """A sequence of ``length`` ints in [lo, hi] with one wrong entry, a wrong length, or no sequence at all.
    ``optional``: None is the default, so not drawn; ``ranks``: the length sets the rank, so only lengths no
    tensor map has (0, 6, 7) are wrong."""
    good = st.lists(st.integers(lo, hi), min_size=length, max_size=length)
    wrong_entry = st.one_of(NOT_INT, st.integers(hi + 1, max(hi + 1, 1 << 66)), st.integers(-(1 << 66), lo - 1))

    def spoil(values_and_bad):
        values, bad, i = values_and_bad
        values = list(values)
        values[i % length] = bad
        return values
    one_bad = st.tuples(good, wrong_entry, st.integers(0, 10)).map(spoil)
    wrong_length = st.lists(st.integers(lo, hi), min_size=0, max_size=7).filter(
        lambda v: len(v) != length and (not ranks or len(v) in (0, 6, 7)))
    return st.one_of(one_bad, wrong_length, NOT_SEQ_NN if optional else NOT_SEQ)


def bad_int(lo: int | None, hi: int | None):
    out = [NOT_INT]
    if lo is not None:
        out.append(st.integers(-(1 << 66), lo - 1))
    if hi is not None:
        out.append(st.integers(hi + 1, 1 << 66))
    return st.one_of(*out)


# ---- the checks ---------------------------------------------------------------------------------------------
def _names(err: BaseException, parameter: str) -> bool:
    aliases = {parameter, {"dims": "shape", "shape": "dims"}.get(parameter, parameter)}
    if isinstance(err, InvalidArgumentError):
        return any(err.parameter == a or err.parameter.startswith((a + "[", a + ".")) for a in aliases)
    if isinstance(err, TensorMapError):
        return any(v.parameter.split("[")[0] in aliases or v.parameter == "rank" and parameter in
                   ("box", "dims", "shape", "element_strides", "strides") for v in err.violations)
    return any(a in str(err) for a in aliases)


def _record(function: str, parameter: str) -> None:
    COUNTS["functions"].add(function)
    COUNTS["parameters"].add((function, parameter))
    COUNTS["cases"] += 1


def refused(function: str, parameter: str, call, *, returns_violations: bool = False) -> None:
    """``call()`` must raise a TmakitError naming ``parameter`` (or, for the check_* functions, return violations
    naming it)."""
    _record(function, parameter)
    try:
        result = call()
    except TmakitError as err:
        assert _names(err, parameter), f"{function}: the error does not name {parameter!r}: {err}"
        return
    except Exception as err:  # noqa: BLE001 - an escape is what this suite looks for
        COUNTS["escapes"].append((function, parameter, type(err).__name__, str(err)[:160]))
        raise AssertionError(f"{function}({parameter}=...) escaped as {type(err).__name__}: {err}") from err
    if returns_violations and result:
        assert any(v.parameter.split("[")[0] == parameter or v.parameter == "rank" for v in result), result
        return
    raise AssertionError(f"{function} accepted an invalid {parameter}")


def reached(function: str, parameter: str, call) -> None:
    """``call()`` with an invalid value raises some TmakitError (never another exception)."""
    _record(function, parameter)
    COUNTS["reach_cases"] += 1
    try:
        call()
    except TmakitError:
        return
    except Exception as err:  # noqa: BLE001
        COUNTS["escapes"].append((function, parameter, type(err).__name__, str(err)[:160]))
        raise AssertionError(f"{function}({parameter}=...) escaped as {type(err).__name__}: {err}") from err


# ---- describe_tensor / describe_im2col / encode_tiled / check_* ----------------------------------------------
DESCRIBE = dict(shape=(256, 512), dtype="bf16", box=(64, 64), encode=False)
DESCRIBE_BAD = {
    "box": bad_ints(2, 1, 256), "shape": bad_ints(2, 1, 1 << 32, ranks=True, optional=True).filter(lambda v: not isinstance(v, float)),
    "dtype": NOT_ENUM_NN, "strides": bad_ints(2, 0, 1 << 30, optional=True), "swizzle": NOT_ENUM, "oob_fill": NOT_ENUM,
    "l2_promotion": NOT_ENUM, "interleave": NOT_ENUM, "element_strides": bad_ints(2, 1, 8, optional=True),
    "arch": NOT_ARCH,
    "encode": NOT_FLAG,
}


CAI_BAD = st.one_of(
    st.dictionaries(st.sampled_from(["typestr", "shape", "data", "strides", "version"]),
                    st.one_of(st.none(), st.text(max_size=4), st.integers(-5, 5), st.lists(st.integers(-3, 3)))),
    st.fixed_dictionaries({"typestr": st.sampled_from(["<f4", "<f2", "|u1", "<fx", "f", "<c16"]),
                           "shape": st.one_of(st.lists(st.integers(-4, 4), max_size=3), st.none(), st.text(max_size=2)),
                           "data": st.one_of(st.tuples(st.one_of(st.none(), st.floats(), st.integers(-9, -1)),
                                                       st.booleans()), st.none(), st.just(())),
                           "version": st.just(3)}),
    st.text(max_size=5), st.none())


@pytest.mark.parametrize("parameter", sorted(DESCRIBE_BAD))
@FUZZ
@given(data=st.data())
def test_describe_tensor_refuses_invalid_values(parameter, data):
    value = data.draw(DESCRIBE_BAD[parameter])
    # a well-formed stride pair only breaks the tensor's rules (or none): the rule tests cover those
    assume(not (parameter == "strides" and isinstance(value, list) and len(value) == 2 and all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)))
    refused("describe_tensor", parameter, lambda: describe_tensor(**{**DESCRIBE, parameter: value}))


def _spoiled_torch_like(spoil):
    """A FakeTorchTensor (64, 64) float32 with one attribute of the wrong type: what a look-alike may hold."""
    attribute, value = spoil
    tensor = FakeTorchTensor((64, 64))
    if attribute == "shape":
        tensor.shape = value
    elif attribute in ("data_ptr", "stride", "element_size", "get_device"):
        setattr(tensor, attribute, value)
    return tensor


WRONG_TYPES = st.one_of(st.text(max_size=3), st.none(), st.floats(), st.just(object()), st.just(["1", 2]),
                        st.integers(-(1 << 70), -1), st.just(b"8"))
TORCH_LIKE_BAD = st.one_of(
    st.tuples(st.just("shape"), st.one_of(WRONG_TYPES, st.tuples(st.just(64), WRONG_TYPES),
                                          st.lists(WRONG_TYPES, min_size=1, max_size=3), MAPPINGS)),
    st.tuples(st.sampled_from(["data_ptr", "stride", "element_size", "get_device"]),
              st.one_of(WRONG_TYPES.map(lambda v: (lambda: v)), WRONG_TYPES,
                        st.just(lambda: ("a", 1)), st.just(lambda: {64: 0, 32: 1}), st.just(lambda: True))),
    st.tuples(st.just("element_size"), st.just(lambda: 3))).map(_spoiled_torch_like)


@FUZZ
@given(array=TORCH_LIKE_BAD)
def test_a_torch_like_object_with_attributes_of_the_wrong_type_is_refused(array):
    refused("describe_tensor", "array", lambda: describe_tensor(array, box=(8, 8), encode=False))
    reference = describe_tensor(shape=(64, 64), dtype="f32", box=(8, 8), encode=False)
    refused("TensorMap.with_address", "array", lambda: reference.with_address(array))


@FUZZ
@given(array=st.one_of(CAI_BAD.map(FakeDeviceArray.of_interface), st.just(np.zeros((64, 64), np.float32)), st.integers(), st.text(max_size=3),
                       st.just(object())))
def test_describe_tensor_refuses_what_is_not_a_device_array(array):
    refused("describe_tensor", "array", lambda: describe_tensor(array, box=(8, 8)))


IM2COL = dict(shape=(2, 16, 16, 64), dtype="bf16", pixels_per_column=64, channels_per_pixel=64, encode=False)
IM2COL_BAD = {
    "pixels_per_column": bad_int(1, 1024), "channels_per_pixel": bad_int(1, 256).filter(lambda v: v is not None),
    "lower_corner": bad_ints(2, -128, 127, optional=True), "upper_corner": bad_ints(2, -128, 127, optional=True),
    "swizzle": NOT_ENUM, "oob_fill": NOT_ENUM, "element_strides": bad_ints(4, 1, 8, optional=True),
    "arch": NOT_ARCH, "encode": NOT_FLAG, "dtype": NOT_ENUM_NN,
}


@pytest.mark.parametrize("parameter", sorted(IM2COL_BAD))
@FUZZ
@given(data=st.data())
def test_describe_im2col_refuses_invalid_values(parameter, data):
    value = data.draw(IM2COL_BAD[parameter])
    refused("describe_im2col", parameter, lambda: describe_im2col(**{**IM2COL, parameter: value}))


ENCODE = dict(dtype="bf16", address=1 << 20, dims=(512, 256), strides=(1024,), box=(64, 64), encode=False)
ENCODE_BAD = {
    "dtype": NOT_ENUM, "address": st.one_of(NOT_INT, st.integers(-(1 << 70), -1), st.integers(1 << 64, 1 << 70),
                                            st.integers(1, 1 << 40).map(lambda a: a * 16 + 8)),
    "dims": bad_ints(2, 1, 1 << 32, ranks=True), "strides": bad_ints(1, 16, 1 << 39).filter(lambda v: not (
        isinstance(v, list) and len(v) == 1 and isinstance(v[0], int) and not isinstance(v[0], bool)
        and v[0] >= 0 and v[0] % 16 == 0 and v[0] < 1 << 40)),
    "box": bad_ints(2, 1, 256), "element_strides": bad_ints(2, 1, 8, optional=True), "swizzle": NOT_ENUM,
    "interleave": NOT_ENUM, "l2_promotion": NOT_ENUM, "oob_fill": NOT_ENUM, "arch": NOT_ARCH, "encode": NOT_FLAG,
}


@pytest.mark.parametrize("parameter", sorted(ENCODE_BAD))
@FUZZ
@given(data=st.data())
def test_encode_tiled_refuses_invalid_values(parameter, data):
    value = data.draw(ENCODE_BAD[parameter])
    kwargs = {**ENCODE, parameter: value}
    refused("encode_tiled", parameter, lambda: encode_tiled(**kwargs))


CHECK = dict(dtype="bf16", address=1 << 20, dims=(512, 256), strides=(1024,), box=(64, 64), element_strides=(1, 1),
             arch="sm_90")


@pytest.mark.parametrize("parameter", sorted(set(ENCODE_BAD) - {"encode"}))
@FUZZ
@given(data=st.data())
def test_check_tiled_reports_or_refuses_invalid_values(parameter, data):
    value = data.draw(ENCODE_BAD[parameter])
    refused("check_tiled", parameter, lambda: check_tiled(**{**CHECK, parameter: value}), returns_violations=True)


CHECK_IM2COL = dict(dtype="bf16", address=1 << 20, dims=(64, 16, 16, 2), strides=(128, 2048, 32768),
                    lower_corner=(0, 0), upper_corner=(0, 0), channels_per_pixel=64, pixels_per_column=64,
                    element_strides=(1, 1, 1, 1), arch="sm_90")


@pytest.mark.parametrize("parameter", ["channels_per_pixel", "pixels_per_column", "lower_corner", "upper_corner",
                                       "dims", "dtype", "swizzle", "arch"])
@FUZZ
@given(data=st.data())
def test_check_im2col_reports_or_refuses_invalid_values(parameter, data):
    strategy = {**IM2COL_BAD, "dims": bad_ints(4, 1, 1 << 32, ranks=True), "lower_corner": bad_ints(2, -128, 127),
                "upper_corner": bad_ints(2, -128, 127)}[parameter]
    value = data.draw(strategy)
    refused("check_im2col", parameter, lambda: check_im2col(**{**CHECK_IM2COL, parameter: value}),
            returns_violations=True)


# ---- what the plans would decide, without a GPU (tmakit.ops.describe_*) ----------------------------------------
PLANNING_CALLS = {
    ("ops.describe_gemm", "m"): (bad_int(1, None), lambda v: tmakit.ops.describe_gemm(v, 64, 64)),
    ("ops.describe_gemm", "dtype"): (NOT_ENUM_NN, lambda v: tmakit.ops.describe_gemm(64, 64, 64, dtype=v)),
    ("ops.describe_gemm", "arch"): (NOT_ARCH, lambda v: tmakit.ops.describe_gemm(64, 64, 64, arch=v)),
    ("ops.describe_attention", "head_dim"): (bad_int(1, None), lambda v: tmakit.ops.describe_attention(1, 1, 64, v)),
    ("ops.describe_attention", "layout"): (NOT_ENUM, lambda v: tmakit.ops.describe_attention(1, 1, 64, 64, layout=v)),
    ("ops.describe_transpose", "shape"): (bad_ints(2, 0, 2**31 - 1024),
                                          lambda v: tmakit.ops.describe_transpose(v, "float32")),
    ("ops.describe_transpose", "src_offset"): (bad_int(0, None),
                                               lambda v: tmakit.ops.describe_transpose((64, 64), "f32", src_offset=v)),
    ("ops.describe_transpose", "l2_promotion"): (NOT_ENUM, lambda v: tmakit.ops.describe_transpose(
        (64, 64), "float32", l2_promotion=v)),
}


@pytest.mark.parametrize("function, parameter", sorted(PLANNING_CALLS))
@FUZZ
@given(data=st.data())
def test_descriptions_of_plans_refuse_invalid_values(function, parameter, data):
    strategy, call = PLANNING_CALLS[function, parameter]
    value = data.draw(strategy)
    if parameter == "l2_promotion" and isinstance(value, str) and value.strip().lower() == "auto":
        value = "autox"
    refused(function, parameter, lambda: call(value))


# ---- valid variants give the same result ---------------------------------------------------------------------
def _variants(values):
    """The same integers as a tuple, a list, numpy integers, a numpy array and a generator."""
    return [tuple(values), list(values), tuple(np.int64(v) for v in values), np.array(values),
            (v for v in values)]


@VARIANTS
@given(inner=st.sampled_from([8, 16, 32, 64]), outer=st.integers(1, 256), which=st.integers(0, 4),
       swizzle=st.sampled_from([("128B", Swizzle.B128, 3), ("64B", Swizzle.B64, 2), ("none", Swizzle.NONE, 0)]))
def test_describe_tensor_valid_variants_agree(inner, outer, which, swizzle):
    if swizzle[1].span and inner * 2 > swizzle[1].span:
        swizzle = ("none", Swizzle.NONE, 0)
    reference = describe_tensor(shape=(1024, 512), dtype="bf16", box=(outer, inner), swizzle=swizzle[0], encode=False)
    for sw in swizzle:
        for box in _variants((outer, inner)):
            got = describe_tensor(shape=_variants((1024, 512))[which], dtype=DataType.BFLOAT16, box=box, swizzle=sw,
                                  element_strides=_variants((1, 1))[which], encode=np.bool_(False), arch=Arch(9, 0))
            assert got.spec == reference.spec
    COUNTS["variants"] += 1


@VARIANTS
@given(coords=st.tuples(st.integers(-4, 8).map(lambda c: c * 4), st.integers(-10, 20)), which=st.integers(0, 4))
def test_layout_model_valid_variants_agree(coords, which):
    tm = describe_tensor(shape=(16, 64), dtype="f32", box=(8, 32), swizzle="128B", encode=False)
    memory = np.random.default_rng(1).integers(0, 256, 16 * 64 * 4, dtype=np.uint8)
    reference = tma_load_image(tm, memory, list(coords))
    assert np.array_equal(tma_load_image(tm.spec, memory, _variants(coords)[which], poison=np.uint8(0)), reference)
    assert box_geometry(tm) == box_geometry(tm.spec)
    offsets = [16 * c for c in range(32)]
    assert bank_conflicts(_variants(offsets)[which], np.int64(16)) == bank_conflicts(offsets, 16)
    COUNTS["variants"] += 1


# ---- the layout model -----------------------------------------------------------------------------------------
MODEL_SPEC = describe_tensor(shape=(16, 64), dtype="f32", box=(8, 32), swizzle="128B", encode=False).spec
MODEL_MEMORY = np.zeros(16 * 64 * 4, np.uint8)
MODEL_CALLS = {
    ("tma_load_image", "spec"): (st.one_of(NOT_SEQ, st.integers(), st.builds(dict)),
                                 lambda v: tma_load_image(v, MODEL_MEMORY, [0, 0])),
    ("tma_load_image", "memory"): (st.one_of(NOT_SEQ, st.integers(), st.lists(st.integers(0, 255))),
                                   lambda v: tma_load_image(MODEL_SPEC, v, [0, 0])),
    ("tma_load_image", "coords"): (bad_ints(2, -(1 << 31), (1 << 31) - 1),
                                   lambda v: tma_load_image(MODEL_SPEC, MODEL_MEMORY, v)),
    ("tma_load_image", "poison"): (bad_int(0, 255).filter(lambda v: v is not None),
                                   lambda v: tma_load_image(MODEL_SPEC, MODEL_MEMORY, [0, 0], poison=v)),
    ("tma_store", "coords"): (st.one_of(bad_ints(2, 0, (1 << 31) - 1), st.tuples(st.integers(-100, -1), st.just(0))),
                              lambda v: tma_store(MODEL_SPEC, MODEL_MEMORY.copy(), v, np.zeros(1024, np.uint8))),
    ("tma_store", "image"): (st.one_of(NOT_SEQ, st.integers(1, 4096).filter(lambda n: n != 1024).map(
                                 lambda n: np.zeros(n, np.uint8)),
                                 st.sampled_from([np.zeros(1024, np.float32), np.zeros(256, np.float32),
                                                  np.zeros(1024, np.int64)])),
                             lambda v: tma_store(MODEL_SPEC, MODEL_MEMORY.copy(), [0, 0], v)),
    ("tma_store", "memory"): (st.one_of(NOT_SEQ, st.just(np.zeros(16, np.uint8)), st.just(MODEL_MEMORY[::2])),
                              lambda v: tma_store(MODEL_SPEC, v, [0, 0], np.zeros(1024, np.uint8))),
    ("box_geometry", "spec"): (st.one_of(NOT_SEQ, st.integers(), st.text()), box_geometry),
    ("swizzle_offset", "offset"): (st.one_of(bad_int(0, None), st.just(np.array([-16, 0])),
                                             st.just(np.array([1.5]))), lambda v: swizzle_offset(v, "128B")),
    ("swizzle_offset", "swizzle"): (st.one_of(NOT_ENUM, st.sampled_from(["128B_ATOM_32B", 5, Swizzle.B128_ATOM_64B])),
                                    lambda v: swizzle_offset(256, v)),
    ("swizzle_pattern", "swizzle"): (NOT_ENUM, lambda v: swizzle_pattern(v, 8)),
    ("swizzle_pattern", "rows"): (bad_int(1, 1 << 16).filter(lambda v: v is not None),
                                  lambda v: swizzle_pattern("128B", v)),
    ("bank_conflicts", "byte_offsets"): (st.one_of(NOT_SEQ, st.lists(
        st.one_of(NOT_INT.filter(lambda v: v is not None), st.integers(-(1 << 40), -1)), min_size=1, max_size=32),
        st.lists(st.just(0), min_size=33, max_size=40)), lambda v: bank_conflicts(v, 4)),
    ("bank_conflicts", "access_bytes"): (st.one_of(NOT_INT, st.integers().filter(lambda n: n not in (1, 2, 4, 8, 16))),
                                         lambda v: bank_conflicts([0, 16], v)),
}


@pytest.mark.parametrize("function, parameter", sorted(MODEL_CALLS))
@FUZZ
@given(data=st.data())
def test_layout_model_refuses_invalid_values(function, parameter, data):
    strategy, call = MODEL_CALLS[function, parameter]
    value = data.draw(strategy)
    refused(function, parameter, lambda: call(value))


# ---- enums, Arch, pinned memory -------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", [Arch, DataType, Swizzle, Interleave, L2Promotion, OOBFill])
@FUZZ
@given(value=NOT_ENUM, data=st.data())
def test_parse_refuses_what_is_not_a_member(kind, value, data):
    if kind is Arch:
        value = data.draw(NOT_ARCH)
    refused(f"{kind.__name__}.parse", "value", lambda: kind.parse(value, "value"))


@FUZZ
@given(shape=st.one_of(bad_ints(2, 0, 1 << 10).filter(lambda v: not isinstance(v, list) or not all(
           isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in v)),  # any rank is a valid shape
       st.tuples(st.integers(1 << 46, 1 << 70), st.integers(1, 4))),
       flag=st.sampled_from([None, "portable", "mapped", "write_combined", "device"]), bad=NOT_FLAG)
def test_pinned_empty_refuses_invalid_values_before_allocating(shape, flag, bad):
    if flag is None:
        refused("pinned_empty", "shape", lambda: tmakit.pinned_empty(shape))
    else:
        if flag == "device" and isinstance(bad, int) and not isinstance(bad, bool) and bad >= 0:
            bad = -1 - bad
        refused("pinned_empty", flag, lambda: tmakit.pinned_empty((4,), **{flag: bad}))


@FUZZ
@given(array=st.one_of(NOT_SEQ, st.lists(st.integers())), copy=NOT_FLAG)
def test_pinned_like_refuses_invalid_values(array, copy):
    refused("pinned_like", "array", lambda: tmakit.pinned_like(array))
    refused("pinned_like", "copy", lambda: tmakit.pinned_like(np.zeros(4), copy=copy))


# ---- the CLI --------------------------------------------------------------------------------------------------
CLI_BAD = {
    "--shape": st.sampled_from(["", "a,b", "4096,-4096", "0,64", "1.5,2", "99999999999999,2", "x"]),
    "--box": st.sampled_from(["", "a", "64,-1", "0,64", "64,300", "1.5"]),
    "--dtype": st.text(min_size=1, max_size=5).filter(lambda t: not _is_a_name(t) and not t.startswith("-")),
    "--swizzle": st.sampled_from(["96B", "yes", "-1", "7", "128B_ATOM_32B"]),
    "--arch": st.sampled_from(["sm_9999", "(99, 99)", "x", "sm_80a", "9.9", "sm_90b"]),
    "--element-strides": st.sampled_from(["9,1", "0,1", "a", "1,1,1"]),
    "--rows": st.one_of(st.integers(-(1 << 40), 0), st.integers(257, 1 << 40)).map(str),
}


@pytest.mark.parametrize("option", sorted(CLI_BAD))
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(data=st.data())
def test_cli_refuses_invalid_options_with_exit_2_and_json(option, data, capsys):
    import json

    from tmakit.cli import main

    value = data.draw(CLI_BAD[option])
    if option == "--rows":
        argv = ["swizzle", "128B", f"--rows={value}", "--json"]
    else:
        args = {"--shape": "256,512", "--dtype": "bf16", "--box": "64,64"}
        args[option] = value
        argv = ["describe"] + [f"{k}={v}" for k, v in args.items()] + ["--json"]
    _record("tmakit (CLI)", option)
    try:
        code = main(argv)
    except SystemExit as exc:  # only --help/--version exit
        raise AssertionError(f"{argv} exited through SystemExit({exc.code})") from exc
    except Exception as err:  # noqa: BLE001
        COUNTS["escapes"].append(("tmakit (CLI)", option, type(err).__name__, str(err)[:160]))
        raise
    doc = json.loads(capsys.readouterr().out)
    assert code == 2 and doc["valid"] is False


# ---- public names that need a GPU: invalid values raise a TmakitError, nothing else ----------------------------
REACH = {
    ("choose_backend", "requested"): (NOT_ENUM, lambda v: tmakit.choose_backend(v)),
    ("choose_backend", "device"): (bad_int(0, None), lambda v: tmakit.choose_backend("auto", device=v)),
    ("as_stream", "obj"): (st.one_of(st.text(max_size=3), st.floats(), st.just(object())), tmakit.as_stream),
    ("Stream", "device"): (bad_int(0, None), lambda v: tmakit.Stream(v)),
    ("Event", "device"): (bad_int(0, None), lambda v: tmakit.Event(v)),
    ("copy_h2d", "src"): (NOT_SEQ, lambda v: tmakit.copy_h2d(object(), v)),
    ("copy_d2h", "dst"): (NOT_SEQ, lambda v: tmakit.copy_d2h(v, object())),
    ("copy_d2d", "dst"): (NOT_SEQ, lambda v: tmakit.copy_d2d(v, object())),
    ("is_pinned", "array"): (st.one_of(st.text(max_size=3), st.floats(), st.just(object())), tmakit.is_pinned),
    ("use_device", "device"): (bad_int(0, None), tmakit.use_device),
    ("compile_cuda", "arch"): (NOT_ARCH,
                               lambda v: tmakit.compile_cuda("extern \"C\" __global__ void k() {}", arch=v)),
    ("compile_cuda", "defines"): (st.one_of(st.text(max_size=3), st.integers(), st.just([("A", object())]),
                                            st.just({"A": object()}), st.just({"1BAD": 1}), st.just({"A": None})),
                                  lambda v: tmakit.compile_cuda("extern \"C\" __global__ void k() {}", arch="sm_90a",
                                                                defines=v)),
    ("compile_cuda", "options"): (st.one_of(st.integers(), st.just("-O3"), st.just([5]), st.just(["--nope"])),
                                  lambda v: tmakit.compile_cuda("extern \"C\" __global__ void k() {}", arch="sm_90a",
                                                                options=v)),
    ("compile_cuda", "name"): (st.one_of(st.integers(), st.just(object()), st.just(b"x")),
                               lambda v: tmakit.compile_cuda("extern \"C\" __global__ void k() {}", arch="sm_90a",
                                                             name=v)),
    ("compile_cuda", "source"): (st.one_of(st.none(), st.integers(), st.floats(), st.just(object())),
                                 tmakit.compile_cuda),
    ("DeviceArray.empty", "shape"): (st.one_of(bad_ints(1, 0, 1 << 20).filter(lambda v: not isinstance(v, list) or not
                                                all(type(d) is int and d >= 0 for d in v)),
                                                st.tuples(st.integers(1 << 46, 1 << 80))),
                                      lambda v: tmakit.DeviceArray.empty(v)),
    ("DeviceArray.from_host", "array"): (NOT_SEQ, tmakit.DeviceArray.from_host),
    ("pipeline", "inputs"): (NOT_SEQ, tmakit.pipeline),
    ("pipeline", "chunk_bytes"): (bad_int(1, None), lambda v: tmakit.pipeline(np.zeros(4), chunk_bytes=v)),
    ("registered", "array"): (NOT_SEQ, lambda v: tmakit.registered(v).__enter__()),
    ("elapsed_ms", "start"): (NOT_SEQ, lambda v: tmakit.elapsed_ms(v, v)),
    ("timed", "stream"): (st.one_of(st.floats(), st.text(max_size=3), st.just(object())),
                          lambda v: tmakit.timed(v).__enter__()),
    ("ops.ptx_tile_copy", "dst"): (NOT_SEQ, lambda v: tmakit.ops.ptx_tile_copy(v, np.zeros(4))),
    ("ops.copy", "dst"): (NOT_SEQ, lambda v: tmakit.ops.copy(v, np.zeros(4))),
    ("ops.transpose", "src"): (NOT_SEQ, lambda v: tmakit.ops.transpose(np.zeros(4), v)),
    ("ops.load_tiles", "coords"): (NOT_SEQ, lambda v: tmakit.ops.load_tiles(np.zeros((64, 64)), v, box=(8, 8))),
    ("ops.copy", "src"): (TORCH_LIKE_BAD, lambda v: tmakit.ops.copy(FakeTorchTensor((64, 64)), v)),
    ("ops.transpose", "dst"): (TORCH_LIKE_BAD, lambda v: tmakit.ops.transpose(v, FakeTorchTensor((64, 64)))),
    ("copy_d2d", "src"): (TORCH_LIKE_BAD, lambda v: tmakit.copy_d2d(FakeTorchTensor((64, 64)), v)),
}


@pytest.mark.parametrize("function, parameter", sorted(REACH))
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(data=st.data())
def test_gpu_side_public_names_raise_only_tmakit_errors(function, parameter, data):
    strategy, call = REACH[function, parameter]
    value = data.draw(strategy)
    reached(function, parameter, lambda: call(value))


# ---- the count (keep last) -------------------------------------------------------------------------------------
def test_zz_fuzz_summary(capsys):
    functions, parameters = len(COUNTS["functions"]), len(COUNTS["parameters"])
    line = (f"fuzz: {functions} functions, {parameters} parameters, {COUNTS['cases']} cases, "
            f"{len(COUNTS['escapes'])} escapes")
    with capsys.disabled():
        print(f"\n{line} ({COUNTS['reach_cases']} of the cases on GPU-side names; {COUNTS['variants']} valid-variant "
              "cases agreed)")
    assert COUNTS["escapes"] == [], COUNTS["escapes"][:5]
    # The whole module ran in this process (not a -k subset, not one xdist worker's share).
    if COUNTS["cases"] and not os.environ.get("PYTEST_XDIST_WORKER"):
        assert functions >= 20 and parameters >= 60, line
