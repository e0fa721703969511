"""Arch.parse and the dtype names: unknown architectures and types are refused with the list of known ones."""
from __future__ import annotations

import numpy as np
import pytest

from tmakit import Arch, DataType, describe_tensor
from tmakit.errors import InvalidArgumentError


@pytest.mark.parametrize("value", [(99, 99), "sm_9999", "sm_91", 9.0, True, None, "abc", (9, 0, 1), "sm_80a"])
def test_unknown_architectures_are_refused_with_the_known_list(value):
    with pytest.raises(InvalidArgumentError, match=r"^arch=.*fix: .*sm_[89]0"):
        Arch.parse(value)
    if value is not None:  # None is describe_tensor's "this GPU's, else sm_90"
        with pytest.raises(InvalidArgumentError, match=r"^arch="):
            describe_tensor(shape=(64, 64), dtype="f32", box=(8, 8), arch=value)


@pytest.mark.parametrize("value", ["sm_90", "90", "9.0", (9, 0), [9, 0], 90, np.int64(90), Arch(9, 0),
                                   (np.int32(9), np.int64(0))])
def test_valid_architecture_forms_agree(value):
    assert Arch.parse(value) == Arch(9, 0)


def test_arch_error_suggests_a_form_the_cli_parses():
    with pytest.raises(InvalidArgumentError) as err:
        Arch.parse("sm_9999")
    assert "(9, 0)" not in str(err.value) and '"sm_90"' not in str(err.value).split("fix:")[0]


@pytest.mark.parametrize("alias, becomes", [("fp8", "u8"), ("e4m3", "u8"), ("e5m2", "u8"), ("i8", "u8"),
                                            ("int8", "u8"), ("i16", "u16")])
def test_dtype_aliases_say_what_they_become(alias, becomes):
    assert DataType.parse(alias).short == becomes
    note = DataType.alias_note(alias)
    assert note and f"moved as {becomes}" in note
    assert DataType.alias_note("bf16") is None


@pytest.mark.parametrize("name", ["fp8", "float8", "e4m3", "fp8_e4m3", "FP8-E5M2", "float8_e4m3fn", "float8_e4m3fnuz",
                                  "f8e5m2", "F8E4M3FN", "e5m2fnuz", "e8m0fnu", "float8_e8m0fnu"])
def test_every_fp8_name_that_says_its_format_is_moved_as_u8(name):
    assert DataType.parse(name, "dtype") is DataType.UINT8
    assert "moved as u8" in DataType.alias_note(name)
    assert describe_tensor(shape=(64, 64), dtype=name, box=(8, 64), encode=False).dtype is DataType.UINT8


@pytest.mark.parametrize("name, why", [("f8", "ambiguous: numpy's 'f8' is float64"), ("fp8x", "not a known DataType"),
                                       ("float8_e4m4", "not a known DataType")])
def test_unclear_fp8_names_are_refused_with_every_accepted_fp8_name(name, why):
    accepted = r"fp8, float8, e4m3, e4m3fn, e4m3fnuz, e5m2, e5m2fnuz, e8m0, e8m0fnu, the formats also prefixed fp8_, " \
               r"float8_ or f8"
    with pytest.raises(InvalidArgumentError, match=rf"^dtype='{name}': .*{why}.*fix: .*{accepted}"):
        describe_tensor(shape=(64, 64), dtype=name, box=(8, 64), encode=False)


@pytest.mark.parametrize("value", ["fp4", "float128", 2.5, True, 99])
def test_unknown_dtypes_are_refused_with_the_list(value):
    with pytest.raises(InvalidArgumentError, match=r"^dtype=.*fix: "):
        describe_tensor(shape=(64, 64), dtype=value, box=(8, 8))


@pytest.mark.parametrize("kwargs, parameter", [
    (dict(encode="yes"), "encode"), (dict(encode=1), "encode")])
def test_describe_flags_must_be_bools(kwargs, parameter):
    with pytest.raises(InvalidArgumentError, match=rf"^{parameter}="):
        describe_tensor(shape=(64, 64), dtype="f32", box=(8, 8), **kwargs)


def test_a_generator_box_works_whatever_is_cached():
    first = describe_tensor(shape=(64, 64), dtype="f32", box=(b for b in (8, 8)))
    again = describe_tensor(shape=(64, 64), dtype="f32", box=(b for b in (8, 8)))
    assert first.box_shape == again.box_shape == (8, 8)
    es = describe_tensor(shape=(64, 64), dtype="f32", box=[8, 8], element_strides=(e for e in (1, 1)))
    assert es.element_strides == (1, 1)


@pytest.mark.parametrize("shape", [(2**64, 2), (-1,), (1.5,), "12", None, (True,)])
def test_pinned_empty_refuses_bad_shapes_without_allocating(shape):
    from tmakit import pinned_empty

    with pytest.raises(InvalidArgumentError, match=r"^shape="):
        pinned_empty(shape)


def test_pinned_flags_are_checked():
    from tmakit import pinned_empty, pinned_like

    with pytest.raises(InvalidArgumentError, match=r"^portable="):
        pinned_empty((4,), portable="yes")
    with pytest.raises(InvalidArgumentError, match=r"^device="):
        pinned_empty((4,), device=-1)
    with pytest.raises(InvalidArgumentError, match=r"^copy="):
        pinned_like(np.zeros(4), copy="no")
    with pytest.raises(InvalidArgumentError, match=r"^array="):
        pinned_like(None)
