"""describe_tensor / describe_im2col: CPU behaviour, errors, and (GPU) encoding torch tensors of every dtype."""
from __future__ import annotations

import numpy as np
import pytest

import tmakit
from tmakit import InvalidArgumentError, Swizzle, TensorMapError, describe_im2col, describe_tensor
from tmakit.tensormap.tensor_map import TensorMap


def test_describe_without_gpu_checks_and_sizes():
    tm = describe_tensor(shape=(4096, 4096), dtype="bf16", box=(64, 64), encode=False)
    assert tm.dims == (4096, 4096) and tm.strides == (8192,) and tm.box == (64, 64)
    assert tm.shape == (4096, 4096) and tm.box_shape == (64, 64)
    assert tm.swizzle is Swizzle.B128 and tm.box_bytes == 8192 and tm.smem_alignment == 1024
    assert not tm.encoded and tm.backend == "cp.async" and len(tm.box_params()) == 160
    assert "TensorMap(tiled, bf16" in repr(tm)


@pytest.mark.parametrize("dtype, inner, expected, padded", [
    ("f32", 32, Swizzle.B128, False), ("f32", 16, Swizzle.B64, False), ("f16", 16, Swizzle.B32, False),
    ("u8", 16, Swizzle.NONE, False), ("f64", 48, Swizzle.NONE, False), ("u8", 48, Swizzle.B64, True),
    ("f16", 24, Swizzle.B64, True),
])
def test_auto_swizzle_picks_the_smallest_span_holding_a_row(dtype, inner, expected, padded):
    tm = describe_tensor(shape=(256, 4096), dtype=dtype, box=(8, inner), encode=False)
    assert tm.swizzle is expected
    row = inner * tm.dtype.size
    pitch = max(row, tm.swizzle.span)
    assert tm.box_bytes == 8 * row and tm.smem_bytes == 8 * pitch
    assert (pitch > row) == padded and ("padded" in tm.swizzle_reason) == padded


def test_numpy_order_is_reversed_once():
    tm = describe_tensor(shape=(3, 40, 64), dtype="f32", box=(1, 8, 32), element_strides=(1, 2, 1), encode=False)
    assert tm.dims == (64, 40, 3) and tm.box == (32, 8, 1) and tm.element_strides == (1, 2, 1)
    assert tm.strides == (256, 256 * 40)


def test_padded_rows_are_reported():
    tm = describe_tensor(shape=(64, 64), dtype="f32", box=(16, 16), swizzle="128B", encode=False)
    assert tm.box_bytes == 1024 and tm.smem_bytes == 2048


def test_box_params_layout():
    import struct

    tm = describe_tensor(shape=(10, 48), dtype="f16", box=(4, 16), oob_fill="nan", l2_promotion="128B", encode=False)
    fields = struct.unpack("<Q5Q5Q5I5I6I2I", tm.box_params())
    assert fields[1:3] == (48, 10) and fields[6:8] == (2, 96)
    assert fields[11:13] == (16, 4) and fields[21:27] == (2, 2, int(tm.swizzle), 0, 1, 6)
    assert fields[27:29] == (2, 0)  # L2 promotion 128B (the cp.async prefetch hint), then the reserved word
    assert tm.__kernel_param__(160) == tm.box_params()
    with pytest.raises(tmakit.LaunchError, match="no encoded descriptor"):
        tm.__kernel_param__(128)


def test_all_violations_raise_together():
    with pytest.raises(TensorMapError) as err:
        describe_tensor(shape=(100, 4095), dtype="bf16", box=(300, 60), swizzle="32B", encode=False)
    rules = {v.rule for v in err.value.violations}
    assert {"strides.align16", "box.range", "box.inner_multiple_16", "box.inner_vs_swizzle"} <= rules
    assert "strides[0]" in str(err.value) and "Fix:" in str(err.value)


@pytest.mark.parametrize("kwargs, parameter", [
    (dict(shape=(4, -4), dtype="f32", box=(4, 4)), r"shape\[1\]"),
    (dict(shape=(64, 64), dtype="complex64", box=(8, 8)), "dtype"),
    (dict(shape=(64, 64), dtype="f32", box=(8,)), "box"),
    (dict(shape=(64, 64), dtype="f32", box=(8, 8), strides=(4, 256)), "strides"),
    (dict(shape=(64, 64), dtype="f32", box=(8, 8), swizzle="17B"), "swizzle"),
    (dict(shape=(64, 64), dtype="f32", box=(8, 8), oob_fill="inf"), "oob_fill"),
    (dict(shape=(64, 64), dtype="f32"), "box"),
    (dict(dtype="f32", box=(8, 8)), "array"),
    (dict(shape=(64, 64), dtype="f32", box=("8", 8)), r"box\[0\]"),
])
def test_bad_input_names_the_parameter(kwargs, parameter):
    with pytest.raises(InvalidArgumentError, match=rf"^{parameter}"):
        describe_tensor(encode=False, **kwargs)


def test_host_arrays_are_refused():
    with pytest.raises(InvalidArgumentError, match="host memory"):
        describe_tensor(np.zeros((64, 64), np.float32), box=(8, 8))


def test_non_contiguous_inner_dimension_is_refused():
    with pytest.raises(InvalidArgumentError, match="innermost dimension must be contiguous"):
        describe_tensor(shape=(64, 64), dtype="f32", strides=(4, 256), box=(8, 8), encode=False)


def test_sm80_has_no_tensor_maps():
    with pytest.raises(TensorMapError, match="arch.no_tma"):
        describe_tensor(shape=(64, 64), dtype="f32", box=(8, 8), arch="sm_80", encode=False)


def test_im2col_describe():
    tm = describe_im2col(shape=(8, 32, 32, 64), dtype="f16", pixels_per_column=128, lower_corner=(-1, -1),
                         upper_corner=(-1, -1), encode=False)
    assert tm.mode == "im2col" and tm.dims == (64, 32, 32, 8) and tm.box_bytes == 64 * 128 * 2
    assert tm.to_dict()["channels_per_pixel"] == 64
    with pytest.raises(TensorMapError, match="corners.empty_box"):
        describe_im2col(shape=(8, 32, 32, 64), dtype="f16", pixels_per_column=128, lower_corner=(40, 0),
                        upper_corner=(0, 0), encode=False)


TORCH_DTYPES = ["uint8", "int8", "int16", "float16", "bfloat16", "int32", "float32", "int64", "float64",
                "float8_e4m3fn", "float8_e5m2", "bool"]


@pytest.mark.requires_sm90
@pytest.mark.parametrize("name", TORCH_DTYPES)
def test_describe_encodes_torch_tensors_of_every_dtype(name):
    torch = pytest.importorskip("torch")
    dtype = getattr(torch, name)
    x = torch.zeros((256, 512), dtype=dtype, device="cuda")
    inner = max(1, 128 // x.element_size())
    tm = describe_tensor(x, box=(32, min(inner, 256)))
    assert tm.encoded and len(tm.descriptor) == 128 and tm.device == 0 and tm.owner is x
    assert tm.dtype.size == x.element_size() and tm.address == x.data_ptr()
    again = describe_tensor(x, box=(32, min(inner, 256)))
    assert again.descriptor == tm.descriptor and again.owner is x and again.spec == tm.spec  # from the cache
    sliced = describe_tensor(x[:, 64:], box=(32, min(inner, 256)))
    assert sliced.address == x.data_ptr() + 64 * x.element_size() and sliced.descriptor != tm.descriptor


@pytest.mark.requires_sm90
def test_describe_accepts_cupy_and_tmakit_arrays():
    cupy = pytest.importorskip("cupy")
    a = cupy.zeros((128, 256), dtype=cupy.float32)
    tm = describe_tensor(a, box=(16, 32))
    assert tm.encoded and tm.address == a.data.ptr
    from tmakit import DeviceArray

    with DeviceArray.empty((64, 64), np.float16) as d:
        assert describe_tensor(d, box=(8, 64)).encoded


@pytest.mark.requires_sm90
def test_describe_im2col_encodes_on_gpu():
    torch = pytest.importorskip("torch")
    x = torch.zeros((4, 16, 16, 64), dtype=torch.float16, device="cuda")
    tm = describe_im2col(x, pixels_per_column=64, lower_corner=(-1, -1), upper_corner=(-1, -1))
    assert tm.encoded and len(tm.descriptor) == 128


@pytest.mark.requires_sm90
def test_driver_rejection_after_checker_pass_names_a_culprit(monkeypatch):
    """Simulate a driver rule the checker does not know: the relaxation search must name the parameter."""
    torch = pytest.importorskip("torch")
    from tmakit.tensormap import describe as describe_mod, encode

    real = encode.encode_tiled_raw

    def strict_about_l2(*args):
        if args[8] != 0:  # pretend the driver refuses any L2 promotion
            err, _ = real(args[0], args[1], args[2], args[3], [0] + list(args[4][1:]), *args[5:])
            return err, None
        return real(*args)

    real_prepared = encode.encode_prepared
    calls = []

    def first_try_fails(prepared, address):  # the fast path's encode fails; later (raw) encodes are real
        from tmakit import _driver

        calls.append(address)
        if len(calls) == 1:
            return _driver.bindings().CUresult.CUDA_ERROR_INVALID_VALUE, None
        return real_prepared(prepared, address)

    monkeypatch.setattr(encode, "encode_tiled_raw", strict_about_l2)
    monkeypatch.setattr(encode, "encode_prepared", first_try_fails)
    describe_mod.clear_cache()
    x = torch.zeros((64, 64), dtype=torch.float32, device="cuda")
    with pytest.raises(TensorMapError, match="l2_promotion"):
        describe_tensor(x, box=(8, 32), l2_promotion="128B", cache=False)


@pytest.mark.requires_sm90
def test_fresh_tensors_of_a_known_shape_match_a_full_encode():
    """The per-shape fast path (cuTensorMapReplaceAddress on a stored descriptor) equals a full encode."""
    torch = pytest.importorskip("torch")
    x = torch.empty((1024, 512), dtype=torch.float16, device="cuda")
    for rows in (0, 8, 77, 500):
        view = x[rows:rows + 256]
        fast = describe_tensor(view, box=(64, 64), swizzle="128B")
        full = describe_tensor(view, box=(64, 64), swizzle="128B", cache=False)
        assert fast.address == view.data_ptr() and fast.descriptor == full.descriptor
    with pytest.raises(TensorMapError, match="address.align16"):
        describe_tensor(x.view(-1)[3:3 + 256 * 512].view(256, 512), box=(64, 64))


@pytest.mark.parametrize("kwargs, parameter", [
    (dict(shape=(64, 64), dtype="f32", box=(8, 8), swizzle=["128B"]), "swizzle"),
    (dict(shape=(), dtype="bf16", box=()), "shape"),
    (dict(shape=(64, 64), dtype="f32", box=(8.0, 8)), r"box\[0\]"),
    (dict(shape=(64, 64), dtype="f32", box=(True, 8)), r"box\[0\]"),
])
def test_bad_input_is_refused_whatever_is_cached(kwargs, parameter):
    describe_tensor(shape=(64, 64), dtype="f32", box=(8, 8), encode=False)  # warm the cache with the good twin
    describe_tensor(shape=(64, 64), dtype="f32", box=(1, 8), encode=False)
    with pytest.raises(InvalidArgumentError, match=rf"^{parameter}"):
        describe_tensor(encode=False, **kwargs)


def test_negative_strides_and_addresses_are_refused():
    from tmakit.tensormap import check_tiled

    with pytest.raises(InvalidArgumentError, match="^strides.*negative"):
        describe_tensor(shape=(64, 64), dtype="f32", strides=(-256, 4), box=(8, 8), encode=False)
    assert "strides.negative" in {v.rule for v in check_tiled("f32", 1 << 40, [64, 64], [-256], [8, 8], [1, 1])}
    with pytest.raises(InvalidArgumentError, match="^address"):
        check_tiled("f32", -16, [64], [], [4], [1])


def test_encode_tiled_and_im2col_validate_their_inputs():
    from tmakit import encode_tiled

    with pytest.raises(InvalidArgumentError, match=r"^dims\[0\]"):
        encode_tiled("f32", 1 << 40, ["a"], [], [4], encode=False)
    with pytest.raises(InvalidArgumentError, match="^address"):
        encode_tiled("f32", None, [64], [], [4], encode=False)
    with pytest.raises(InvalidArgumentError, match="^pixels_per_column"):
        describe_im2col(shape=(8, 32, 32, 64), dtype="f16", pixels_per_column=2.7, encode=False)
    with pytest.raises(InvalidArgumentError, match="^lower_corner"):
        describe_im2col(shape=(8, 32, 32, 64), dtype="f16", pixels_per_column=8, lower_corner="ab", encode=False)
    with pytest.raises(InvalidArgumentError, match="^shape"):
        describe_im2col(shape=(8, 64), dtype="f16", pixels_per_column=8, encode=False)


class _TorchLike:
    """Enough of a CUDA torch tensor for describe_tensor's per-array cache (no GPU: encode=False)."""

    class _Device:
        type, index = "cuda", 0

    def __init__(self, shape, ptr=1 << 20, dtype="float32", itemsize=4):
        self.shape, self._ptr, self.dtype, self._itemsize = tuple(shape), ptr, f"torch.{dtype}", itemsize
        self.device = self._Device()
        self._strides = tuple(int(x) for x in np.cumprod((1,) + self.shape[:0:-1])[::-1])

    def data_ptr(self):
        return self._ptr

    def stride(self):
        return self._strides

    def element_size(self):
        return self._itemsize

    def get_device(self):
        return 0


@pytest.fixture(params=["default", "python"])
def lookup_implementation(request, monkeypatch):
    """describe_tensor's request cache through the implementation in use and through the Python twin."""
    from tmakit import _hotpath
    from tmakit.tensormap.describe import clear_cache

    from tmakit.tensormap import describe as describe_module

    if request.param == "python":
        _hotpath.py_bind_tensor_map(TensorMap, ())
        monkeypatch.setattr(_hotpath, "lookup_request", _hotpath.py_lookup_request)
    clear_cache()
    yield describe_tensor if request.param == "default" else describe_module._describe_tensor
    clear_cache()


def test_per_array_cache_answers_repeats_and_never_bad_input(lookup_implementation):
    """A repeated request for a torch-like array is served from the cache; a changed pointer or layout is
    described again; an invalid twin of a cached request (64.0, True) is still refused."""
    describe_tensor = lookup_implementation
    x = _TorchLike((256, 512))
    first = describe_tensor(x, box=(64, 32), encode=False)
    again = describe_tensor(x, box=(64, 32), encode=False)
    assert again is not first and again.spec == first.spec and again.owner is x
    x._ptr += 4096  # e.g. tensor.set_(): the cached entry no longer applies
    moved = describe_tensor(x, box=(64, 32), encode=False)
    assert moved.address == x._ptr
    x._ptr += 8  # misaligned now: the address rule is checked again
    with pytest.raises(TensorMapError, match="address"):
        describe_tensor(x, box=(64, 32), encode=False)
    x._ptr -= 8
    for bad, parameter in (((64.0, 32), r"box\[0\]"), ((True, 32), r"box\[0\]"), ((np.float64(64), 32), r"box\[0\]")):
        with pytest.raises(InvalidArgumentError, match=rf"^{parameter}"):
            describe_tensor(x, box=bad, encode=False)
    with pytest.raises(InvalidArgumentError, match="^swizzle"):
        describe_tensor(x, box=(64, 32), swizzle=True, encode=False)
    again = describe_tensor(x, box=[64, 32], encode=False)  # a list box is the same request
    assert again.address == x._ptr and again.box_shape == (64, 32)
    with pytest.raises(InvalidArgumentError, match="^shape"):
        describe_tensor(x, box=(64, 32), shape=(256, 512), encode=False)  # even when the request is cached
    x.shape, x._strides = (512, 256), (256, 1)  # e.g. tensor.resize_(): described again
    assert describe_tensor(x, box=(64, 32), encode=False).shape == (512, 256)


def test_lookup_request_twins_agree():
    """The C request cache and its Python twin give the same answer for every kind of request."""
    import weakref

    from tmakit import _hotpath

    if _hotpath.IMPLEMENTATION != "native":
        pytest.skip(f"the C extension is not in use: {_hotpath.STATUS}")
    _hotpath.py_bind_tensor_map(TensorMap, ())
    native, python = _hotpath._native.lookup_request, _hotpath.py_lookup_request
    x = _TorchLike((256, 512))
    requests: dict = {}
    good = ((64, 32), "auto", "zero", "none", "none", None, None, None, False)
    cases = [good, ([64, 32],) + good[1:], ((64.0, 32),) + good[1:], ((True, 32),) + good[1:],
             ((np.int64(64), 32),) + good[1:], (np.array([64, 32]),) + good[1:], (range(2),) + good[1:],
             ((64, 32), True) + good[2:], ((64, 32), "auto", 1.0) + good[3:], ((64, 32), ["128B"]) + good[2:],
             good[:5] + ([1, 1],) + good[6:], good[:5] + ((1.0, 1),) + good[6:], good[:6] + ("bf16", "sm_90", True)]
    for case in cases:
        assert native(requests, x, *case) == python(requests, x, *case), case
    request, ptr, layout = native(requests, x, *good)
    assert request[0] == id(x) and ptr == x._ptr and layout == (x.shape, x.stride())
    requests[request] = (weakref.ref(x), ptr, layout, ("spec", "arch", 0, b"descriptor", "why"))
    hits = native(requests, x, *good), python(requests, x, *good)
    for hit in hits:
        assert type(hit) is TensorMap and hit.owner is x and hit.source_layout == layout
        assert (hit.spec, hit.arch, hit.device, hit.descriptor, hit.swizzle_reason) == ("spec", "arch", 0, b"descriptor", "why")
    x._ptr += 1024  # moved: a miss with the new pointer
    assert native(requests, x, *good) == python(requests, x, *good) == (request, x._ptr, layout)
    y = _TorchLike((256, 512))  # another array: never another's entry, even at the same id after a free
    requests[(id(y),) + request[1:]] = (weakref.ref(x), y._ptr, layout, ("spec", "arch", 0, b"d", "why"))
    assert type(native(requests, y, *good)) is tuple and type(python(requests, y, *good)) is tuple


def test_native_repoint_rewrites_the_stored_descriptor():
    """repoint calls the entry point with the stored descriptor's address and returns its 128 bytes."""
    import ctypes
    import struct

    from tmakit import _hotpath

    if _hotpath.IMPLEMENTATION != "native":
        pytest.skip(f"the C extension is not in use: {_hotpath.STATUS}")
    stored_bytes = ctypes.create_string_buffer(bytes(range(128)), 128)
    refuse = []

    @ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
    def replace_address(tensor_map, address):  # stands in for cuTensorMapReplaceAddress
        if refuse:
            return 201  # CUDA_ERROR_INVALID_CONTEXT
        ctypes.memmove(tensor_map, struct.pack("<Q", address), 8)
        return 0

    stored = (None, ctypes.addressof(stored_bytes), ctypes.cast(replace_address, ctypes.c_void_p).value)
    out = _hotpath._native.repoint(stored, 0x7F0000001000)
    assert out == struct.pack("<Q", 0x7F0000001000) + bytes(range(8, 128))
    refuse.append(True)
    assert _hotpath._native.repoint(stored, 0x2000) is None
    with pytest.raises(TypeError):
        _hotpath._native.repoint((1, 2), 0x2000)


def test_describe_tensor_keeps_its_name_docstring_and_signature():
    import inspect

    from tmakit.tensormap import describe as describe_module

    assert describe_tensor.__name__ == "describe_tensor"
    assert describe_tensor.__doc__ == describe_module._describe_tensor.__doc__
    params = inspect.signature(describe_tensor).parameters
    assert list(params)[:2] == ["array", "box"] and params["swizzle"].default == "auto"


def test_describe_front_answers_positional_and_keyword_box_alike(lookup_implementation):
    """The front's call shapes (x, box) and (x, box=box) give what the Python function gives. Here with
    encode=False among the front's defaults, since this machine may have no driver to encode with."""
    import functools

    from tmakit import _hotpath
    from tmakit.tensormap import describe as d

    defaults = tuple(d._describe_tensor.__kwdefaults__[k] for k in d._OPTIONS[:-1]) + (False,)
    front = _hotpath.describe_front(lookup_implementation, d._torch_request, d._TORCH_LIKE, d._REQUESTS, defaults)
    if front is lookup_implementation:  # no C front: its twin is the function itself
        front = functools.partial(lookup_implementation, encode=False)
    x = _TorchLike((128, 256))
    first = lookup_implementation(x, (32, 64), encode=False)  # the Python path
    for call in (lambda: front(x, (32, 64)), lambda: front(x, box=(32, 64)), lambda: front(x, box=[32, 64]),
                 lambda: front(x, box=(32, 64))):
        got = call()
        assert got.box_shape == (32, 64) and got.owner is x and got.address == x._ptr and got.spec == first.spec
    x._ptr += 4096
    assert front(x, (32, 64)).address == x._ptr  # moved: a miss, built from the shape template
    with pytest.raises(InvalidArgumentError, match=r"^box\[0\]"):
        front(x, box=(32.0, 64))
    with pytest.raises(TypeError):
        front(x, bx=(32, 64))


def test_describe_front_recent_table_is_exact_and_keeps_nothing_alive():
    """The C front's table of recent requests answers only what the requests dict would: the same live
    array at the same pointer and layout with an equal box; a held previous result comes back as itself;
    colliding slots, forget(), a dead array's reused id, and a failing metadata read all stay correct."""
    import gc
    import weakref

    from tmakit import _hotpath
    from tmakit.tensormap import describe as d

    if _hotpath.IMPLEMENTATION != "native":
        pytest.skip(f"the C extension is not in use: {_hotpath.STATUS}")
    d.clear_requests()
    defaults = tuple(d._describe_tensor.__kwdefaults__[k] for k in d._OPTIONS[:-1]) + (False,)
    front = _hotpath.describe_front(d._describe_tensor, d._torch_request, d._TORCH_LIKE, d._REQUESTS, defaults)
    x = _TorchLike((128, 256))
    reference = d._describe_tensor(x, (32, 64), encode=False)  # registers the type; the Python path
    held = front(x, (32, 64))  # a miss: built, stored, remembered in the table
    assert front(x, (32, 64)) is held and front(x, box=(32, 64)) is held  # the previous result, while alive
    assert front(x, tuple([32, 64])) is held  # an equal box, another tuple object
    for bad in ((32.0, 64), (True, 64), (np.int64(32), 64.5)):  # an equal-looking bad box is never a hit
        with pytest.raises(InvalidArgumentError, match=r"^box\[\d\]"):
            front(x, bad)
    assert held.spec == reference.spec and held.owner is x
    del held
    fresh = front(x, (32, 64))  # the previous one died: a new TensorMap of the same request
    assert fresh.spec == reference.spec and fresh.owner is x
    assert front(x, (64, 64)).box_shape == (64, 64) and front(x, (32, 64)).box_shape == (32, 64)
    x._ptr += 4096  # moved: never the stale entry
    assert front(x, (32, 64)).address == x._ptr
    x.shape, x._strides = (256, 128), (128, 1)  # resized
    assert front(x, (32, 64)).shape == (256, 128)
    arrays = [_TorchLike((128, 256), ptr=(1 << 24) + i * 65536) for i in range(20)]  # more than the slots
    for _ in range(3):
        for a in arrays:
            got = front(a, (32, 64))
            assert got.owner is a and got.address == a._ptr
    front.forget()
    assert front(arrays[3], (32, 64)).address == arrays[3]._ptr  # from the dict, then the table again
    assert front(arrays[3], [32, 64]).address == arrays[3]._ptr  # a list box: through the dict
    probe = weakref.ref(arrays[5])
    del arrays, got
    gc.collect()
    assert probe() is None  # neither the table nor the dict keeps an array alive
    for i in range(50):  # dead arrays whose ids are reused by new ones at other addresses
        y = _TorchLike((128, 256), ptr=(1 << 28) + i * 4096)
        assert front(y, (32, 64)).address == y._ptr
        del y

    class Broken(_TorchLike):
        fail = False

        def data_ptr(self):
            if self.fail:
                raise RuntimeError("data_ptr failed")
            return super().data_ptr()

    b = Broken((128, 256))
    d._describe_tensor(b, (32, 64), encode=False)  # registers Broken
    front(b, (32, 64))
    b.fail = True
    with pytest.raises(RuntimeError, match="data_ptr failed"):
        front(b, (32, 64))


def test_describe_front_recent_table_survives_reentry_from_the_collector():
    """Allocations in the front can run a garbage collection, and with it Python code that calls the front
    for another array sharing a slot; every answer must still belong to the array asked about."""
    import gc

    from tmakit import _hotpath
    from tmakit.tensormap import describe as d

    if _hotpath.IMPLEMENTATION != "native":
        pytest.skip(f"the C extension is not in use: {_hotpath.STATUS}")
    d.clear_requests()
    defaults = tuple(d._describe_tensor.__kwdefaults__[k] for k in d._OPTIONS[:-1]) + (False,)
    front = _hotpath.describe_front(d._describe_tensor, d._torch_request, d._TORCH_LIKE, d._REQUESTS, defaults)
    xs = [_TorchLike((128, 256), ptr=(1 << 24) + i * 65536) for i in range(9)]  # 9 arrays, 8 slots: some share
    d._describe_tensor(xs[0], (32, 64), encode=False)  # registers the type
    state = {"other": None, "calls": 0}

    def meddle(phase, info):  # once per armed call: describe another array in the middle of the front's work
        other, state["other"] = state["other"], None
        if phase == "start" and other is not None:
            state["calls"] += 1
            assert front(other, (32, 64)).owner is other

    threshold = gc.get_threshold()
    gc.callbacks.append(meddle)
    try:
        for x in xs:
            for y in xs:
                if y is x:
                    continue
                front.forget()
                tm_y = front(y, (32, 64))
                front(x, (32, 64))  # x's entry in the table; its TensorMap dropped
                state["other"] = y
                gc.set_threshold(1)  # the next allocation collects, and the collector describes y
                tm_x = front(x, (32, 64))
                gc.set_threshold(*threshold)
                assert tm_x.owner is x
                again = front(y, (32, 64))  # never x's TensorMap from a slot that y refilled meanwhile
                assert again.owner is y and again.address == y._ptr
                del tm_y, tm_x, again
    finally:
        gc.callbacks.remove(meddle)
        gc.set_threshold(*threshold)
    assert state["calls"] > 0


@pytest.mark.requires_sm90
def test_describe_front_on_torch_equals_a_full_encode():
    torch = pytest.importorskip("torch")
    x = torch.empty((512, 1024), dtype=torch.bfloat16, device="cuda")
    for rows in (0, 64, 256):
        view = x[rows:rows + 256]
        full = describe_tensor(view, box=(64, 64), cache=False)
        for _ in range(3):  # a miss, then hits
            fast = describe_tensor(view, (64, 64))
            assert fast.descriptor == full.descriptor and fast.owner is view and fast.address == view.data_ptr()
