"""``describe_tensor`` and ``encode_tiled``: check every rule, then encode in the array's context.

The straight path, file by file: ``arrays.as_array_view`` reads the array (pointer, shape, byte strides,
dtype, device); this module parses the options and flips numpy order to driver order once
(``spec.to_driver_order``); ``rules.tiled_ok`` tests every rule with plain comparisons (``rules.collect_tiled``
builds the Violations, all of them, only when one fails); ``encode.encode_spec`` calls
cuTensorMapEncodeTiled in the array's context (``_driver.context_for``); ``tensor_map.TensorMap`` holds the
result and the array. Nothing is cached: every call does all of it (docs/CONTRACTS.md).

Public parameters are in numpy order (outermost first). Without a GPU everything but the encode works
(pass shape, dtype, strides). ``describe_im2col`` lives in ``im2col.py``.
"""
from __future__ import annotations

from typing import Any, Sequence

from .. import _driver
from ..arch import Arch
from ..arrays import ArrayView, as_array_view
from ..dtypes import DataType, dtype_from_any
from ..errors import InvalidArgumentError, TensorMapError, UnsupportedDeviceError
from . import rules
from . import encode as _encode
from .encode import encode_spec, raw_encoder
from .enums import Interleave, L2Promotion, OOBFill, Swizzle
from .rules import _SIZE, Violation
from .spec import Im2colSpec, TiledSpec, int_sequence, positive_ints, to_driver_order
from .suggest import tensor_map_error
from .tensor_map import TensorMap

_DEFAULT_ARCH = Arch(9, 0)
# enum members as module constants: an attribute of an Enum class costs a lookup through its metaclass
_IL_NONE, _IL_B32, _L2_NONE, _OOB_ZERO = Interleave.NONE, Interleave.B32, L2Promotion.NONE, OOBFill.NONE
_SW_NONE, _SW_B32, _SW_B64, _SW_B128 = Swizzle.NONE, Swizzle.B32, Swizzle.B64, Swizzle.B128


def auto_swizzle(inner_bytes: int, interleave: Interleave) -> tuple[Swizzle, str]:
    """The smallest swizzle span that holds a row of the box (the narrowest padding; rows that exactly fill the
    span are not padded). Wider spans would only pad more: TMA pads every row to the span."""
    if interleave is not _IL_NONE:
        return _SW_B32 if interleave is _IL_B32 else _SW_NONE, "interleave decides"
    full = _FULL_SPANS.get(inner_bytes)
    if full is not None:  # rows that fill a span exactly (the common boxes): the answer and its reason as constants
        return full
    if inner_bytes <= 16:
        return _SW_NONE, f"auto: {inner_bytes}-byte rows are narrower than any swizzle span"
    if inner_bytes > 128:
        return _SW_NONE, f"auto: {inner_bytes}-byte rows are wider than the 128B span"
    sw, span = (_SW_B32, 32) if inner_bytes <= 32 else (_SW_B64, 64) if inner_bytes <= 64 else (_SW_B128, 128)
    return sw, f"auto: {inner_bytes}-byte rows, padded to the {span}B span"


_FULL_SPANS = {span: (sw, f"auto: {span}-byte rows fill the {span}B span")
               for span, sw in ((32, _SW_B32), (64, _SW_B64), (128, _SW_B128))}


def parse_swizzle(swizzle: Any, inner_bytes: int, interleave: Interleave) -> tuple[Swizzle, str]:
    if type(swizzle) is str and swizzle.strip().lower() == "auto":
        return auto_swizzle(inner_bytes, interleave)
    return Swizzle.parse(swizzle, "swizzle"), "as requested"


def resolve_arch(arch: Any, device: int | None) -> Arch:
    if arch is not None:
        return Arch.parse(arch)
    if device is not None:
        try:
            return _driver.device_arch(device)
        except UnsupportedDeviceError:
            pass
    return _DEFAULT_ARCH


def check_encode_flag(encode: Any) -> bool:
    if type(encode) is not bool:
        if type(encode).__module__ == "numpy" and type(encode).__name__ in ("bool", "bool_"):  # numpy's bool
            return bool(encode)
        raise InvalidArgumentError("encode", encode, "must be True or False", "encode=True (or False to skip the "
                                   "driver)")
    return encode


def source(array: Any, shape: Any, dtype: Any, strides: Any) -> tuple[ArrayView | None, DataType, tuple, tuple]:
    """(view, dtype, shape, byte strides in numpy order) from an array or from explicit values."""
    if array is not None:
        if shape is not None or strides is not None:
            raise InvalidArgumentError("shape" if shape is not None else "strides", shape if shape is not None else strides,
                                       "is taken from the array; it cannot be given with one",
                                       "drop shape=/strides=, or describe a view of the array")
        view = as_array_view(array, "array")
        dt = dtype_from_any(dtype if dtype is not None else view.dtype_name, "dtype")
        if dtype is not None and dt.size != view.itemsize:
            raise InvalidArgumentError("dtype", dtype, f"has {dt.size}-byte elements but the array's are {view.itemsize}",
                                       "leave dtype out to infer it from the array")
        return view, dt, view.shape, view.strides
    if shape is None or dtype is None:
        raise InvalidArgumentError("array", None, "needs a device array, or shape= and dtype= to describe without one",
                                   "pass a torch/cupy/tmakit array, or shape=(4096, 4096), dtype='bf16'")
    dt = dtype_from_any(dtype, "dtype")
    shp = positive_ints("shape", shape)
    if strides is None:
        acc, out = dt.size, []
        for d in reversed(shp):
            out.append(acc)
            acc *= max(d, 1)
        st = tuple(reversed(out))
    else:
        st = positive_ints("strides", strides, len(shp))
    return None, dt, shp, st


def split_strides(dt: DataType, shape: tuple, strides: tuple, parameter: str) -> tuple[int, ...]:
    """Numpy byte strides -> driver globalStrides (dims 1..rank-1); the innermost must be contiguous."""
    if not shape:
        raise InvalidArgumentError("shape", shape, "a 0-d array has no tensor map", "describe an array with >= 1 dim")
    for s in strides:
        if s < 0:
            raise InvalidArgumentError(parameter, tuple(strides), "negative strides (reversed views) cannot be "
                                       "described", "describe a forward view, or copy the array (x.flip(...).contiguous())")
    if shape[-1] > 1 and strides[-1] != dt.size:
        raise InvalidArgumentError(parameter, tuple(strides),
                                   f"the innermost dimension must be contiguous (stride {dt.size} bytes), not {strides[-1]}",
                                   "make it contiguous (x.contiguous()) or transpose so the last dim is contiguous")
    return tuple(strides[-2::-1])  # dims 1..rank-1, innermost first (to_driver_order of strides[:-1])


_ONES = {rank: (1,) * rank for rank in range(1, 6)}  # element_strides=None: every element, each rank


def _sizes(name: str, values: Any, rank: int) -> tuple[int, ...]:
    """``positive_ints`` with a fast path for the common form: a tuple of ``rank`` non-negative ints."""
    if type(values) is tuple and len(values) == rank:
        for v in values:
            if type(v) is not int or v < 0:
                break
        else:
            return values
    return positive_ints(name, values, rank)


def encode_or_explain(spec: TiledSpec | Im2colSpec, device: int) -> bytes:
    """The descriptor, encoded in the device's context; a driver refusal of a spec the checker passed is
    reported as a ``TensorMapError`` naming the parameter that, relaxed alone, makes the driver accept."""
    # One GPU: any current context is the device's, so encode at once (and, should the driver refuse, try once
    # more in the device's context before explaining). Several: make the device's own context current first.
    if _driver.device_count() == 1 or _driver.is_current(device):
        err, descriptor = encode_spec(spec)
        if descriptor is None:  # perhaps no context on this thread: once more in the device's own context
            with _driver.context_for(device):
                err, descriptor = encode_spec(spec)
    else:
        with _driver.context_for(device):
            err, descriptor = encode_spec(spec)
    if descriptor is not None:
        return descriptor
    call = "cuTensorMapEncodeTiled" if isinstance(spec, TiledSpec) else "cuTensorMapEncodeIm2col"
    if err.name != "CUDA_ERROR_INVALID_VALUE":
        _driver.check(call, (err,))
    with _driver.context_for(device):
        culprit = _find_culprit(spec, raw_encoder(spec), call)
    raise TensorMapError([culprit], header=f"{call} rejected parameters the checker accepted")


def _find_culprit(spec: TiledSpec | Im2colSpec, raw: Any, call: str) -> Violation:
    """Re-encode with one parameter relaxed at a time; the first that makes the driver accept is the culprit."""
    relaxations: list[tuple[str, dict]] = [
        ("swizzle", {"swizzle": Swizzle.NONE}), ("interleave", {"interleave": Interleave.NONE}),
        ("l2_promotion", {"l2_promotion": L2Promotion.NONE}), ("oob_fill", {"oob_fill": OOBFill.NONE}),
        ("element_strides", {"element_strides": (1,) * spec.rank}),
        ("address", {"address": (spec.address + 1023) // 1024 * 1024 or 1024}),
        ("dtype", {"dtype": DataType.UINT8}),
    ]
    if isinstance(spec, TiledSpec):
        relaxations.append(("box", {"box": tuple(min(b, 16) for b in spec.box)}))
    else:
        relaxations += [("pixels_per_column", {"pixels_per_column": 1}),
                        ("lower_corner/upper_corner", {"lower_corner": (0,) * len(spec.lower_corner),
                                                       "upper_corner": (0,) * len(spec.upper_corner)})]
    for name, change in relaxations:
        err, _ = raw(*spec.replace(**change).encode_args())
        if int(err) == 0:
            value = getattr(spec, name.split("/")[0])
            return Violation("driver.unexplained", name, getattr(value, "short", value),
                             f"{call} rejected this set although every known rule passed; with {name} relaxed to "
                             f"{change} the driver accepts it, so {name} breaks a rule the driver does not document",
                             f"change {name}; please report the parameters (repr of the spec) to tmakit",
                             "culprit found by re-encoding with one parameter relaxed at a time", observed=True)
    return Violation("driver.unexplained", "spec", repr(spec), f"{call} rejected this set; no single relaxed "
                     "parameter made it pass", "report the parameters to tmakit", "re-encoding search", observed=True)


def finish(spec: TiledSpec | Im2colSpec, arch: Arch, device: int | None, encode: bool, reason: str,
           owner: Any) -> TensorMap:
    """Encode (when a GPU can and ``encode``) and wrap a spec whose rules all passed."""
    descriptor = None
    if encode and device is not None and arch.has_tma:
        descriptor = encode_or_explain(spec, device)
    return TensorMap(spec, arch, device, descriptor, reason, owner)


_AUTO, _ZERO, _NONE = "auto", "zero", "none"  # describe_tensor's defaults: recognised by identity, no parsing
_ARRAY_DTYPES = DataType._names()  # array element-type names ("bfloat16", "float32", ...) -> DataType
_new_spec = object.__new__
tiled_ok = rules.tiled_ok


def _check_device(device: Any) -> None:
    if isinstance(device, bool) or not isinstance(device, int) or device < 0:
        raise InvalidArgumentError("device", device, "must be a GPU ordinal (an int >= 0)",
                                   "pass the device whose kernels use the map, e.g. device=0")


def _no_array_device(device: int) -> int:
    raise InvalidArgumentError("device", device, "is only for a map of an array (a peer map of another GPU's array)",
                               "pass the array, or leave device out")


def describe_tensor(array: Any = None, box: Sequence[int] | None = None, *, swizzle: Any = _AUTO,
                    oob_fill: Any = _ZERO, l2_promotion: Any = _NONE, interleave: Any = _NONE,
                    element_strides: Sequence[int] | None = None, arch: Any = None, encode: bool = True,
                    shape: Sequence[int] | None = None, dtype: Any = None,
                    strides: Sequence[int] | None = None, device: int | None = None) -> TensorMap:
    """Build a tiled tensor map for ``array`` (or for ``shape``/``dtype``/``strides`` without one).

    ``box``, ``shape``, ``strides`` (bytes) and ``element_strides`` are in numpy order (outermost first).
    ``swizzle="auto"`` picks the smallest swizzle span that holds a row (rows are padded to it when narrower).
    Every rule is checked on every call; a ``TensorMapError`` lists all violations. With a GPU of sm_90+, the
    descriptor is encoded in the array's context. The returned TensorMap holds ``array`` (``tm.owner``).
    ``device``: the GPU whose kernels will use the map, when not the array's (a peer map: the array lives on another
    GPU of this host): peer access from ``device`` to the array's GPU is checked and enabled, the map is encoded in
    ``device``'s context and ``tm.device`` is ``device``; a GPU pair without a peer path is an error naming both.
    """
    if type(encode) is not bool:
        encode = check_encode_flag(encode)
    wanted = device  # the parameter; `device` below is the array's until a peer map replaces it
    if array is not None and shape is None and strides is None and dtype is None:  # the common call
        view = as_array_view(array, "array")
        address, shp, st, dtype_name, _, device, _ = view  # unpacked at once: cheaper than 5 field look-ups
        dt = _ARRAY_DTYPES.get(dtype_name) or dtype_from_any(dtype_name, "dtype")
    else:
        view, dt, shp, st = source(array, shape, dtype, strides)
        address, device = (view.ptr, view.device) if view is not None else (0, None)
    if wanted is not None:  # a map for kernels on another GPU than the array's (a peer map)
        if view is None:
            _no_array_device(wanted)
        _check_device(wanted)
        if wanted != device:
            _driver.enable_peer_access(wanted, device)  # raises, naming both GPUs, when there is no peer path
            device = wanted
    rank = len(shp)
    if box is None:
        raise InvalidArgumentError("box", None, "is required", "pass the tile to load, e.g. box=(64, 64)")
    if not 1 <= rank <= 5:
        raise InvalidArgumentError("shape", shp, f"a {rank}-d array has no tensor map (rank 1 to 5)",
                                   "describe an array of 1 to 5 dims (merge or split dims, or add a unit dim)")
    box_np = _sizes("box", box, rank)
    es_np = _ONES[rank] if element_strides is None else _sizes("element_strides", element_strides, rank)
    il = _IL_NONE if interleave is _NONE else Interleave.parse(interleave, "interleave")
    size = _SIZE[dt]
    if swizzle is _AUTO:
        sw, reason = auto_swizzle(box_np[-1] * size, il)
    elif type(swizzle) is Swizzle:  # a member (the ops pass one): nothing to parse
        sw, reason = swizzle, "as requested"
    else:
        sw, reason = parse_swizzle(swizzle, box_np[-1] * size, il)
    l2 = _L2_NONE if l2_promotion is _NONE or l2_promotion is _L2_NONE else L2Promotion.parse(l2_promotion,
                                                                                              "l2_promotion")
    oob = _OOB_ZERO if oob_fill is _ZERO else OOBFill.parse(oob_fill, "oob_fill")
    if arch is None and device is not None:
        try:
            resolved = _driver.device_arch(device)
        except UnsupportedDeviceError:
            resolved = _DEFAULT_ARCH
    else:
        resolved = resolve_arch(arch, device)
    # numpy order -> driver order (what spec.to_driver_order does, as slices): dims, box, traversal strides,
    # and globalStrides = the byte strides of dims 1..rank-1 (the innermost must be the element size)
    if shp[-1] > 1 and st[-1] != size:
        split_strides(dt, shp, st, "strides")  # raises, naming the non-contiguous stride (or a negative one)
    for s in st:  # a loop: cheaper than min() on a short tuple
        if s < 0:
            split_strides(dt, shp, st, "strides")  # raises, naming the negative stride
    dims, gstrides, box_d = shp[::-1], st[-2::-1], box_np[::-1]
    es_d = es_np if element_strides is None else es_np[::-1]
    if type(gstrides) is not tuple:
        gstrides = tuple(gstrides)
    spec = _new_spec(TiledSpec)  # TiledSpec.checked, inline: every value above is parsed and checked
    spec.__dict__.update({"dtype": dt, "address": address, "dims": dims, "strides": gstrides, "box": box_d,
                          "element_strides": es_d, "interleave": il, "swizzle": sw, "l2_promotion": l2,
                          "oob_fill": oob})  # a dict display: cheaper than keyword arguments
    if not tiled_ok(dt, address, dims, gstrides, box_d, es_d, il, sw, oob, resolved):
        # numpy order, with the one suggestion (suggest.py), proved by the driver too where a GPU encodes
        violations = rules.collect_tiled(dt, address, dims, gstrides, box_d, es_d, il, sw, oob, resolved)
        gpu = (device, address) if encode and device is not None else None
        raise tensor_map_error(spec, resolved, violations, order="numpy", auto_swizzle=swizzle is _AUTO
                               or reason.startswith("auto"), driver_at=gpu)
    descriptor = None
    if encode and device is not None and resolved.major >= 9:
        if _driver.device_count() == 1:  # encode_or_explain's first step, inline: one GPU, encode at once
            err, descriptor = _encode.encode_tiled_raw(dt, address, dims, gstrides, box_d, es_d, il, sw, l2, oob)
            if int(err) != 0:
                descriptor = None
        if descriptor is None:
            descriptor = encode_or_explain(spec, device)
    return TensorMap(spec, resolved, device, descriptor, reason, array)


def encode_tiled(dtype: Any, address: int, dims: Sequence[int], strides: Sequence[int], box: Sequence[int],
                 element_strides: Sequence[int] | None = None, *, interleave: Any = "none", swizzle: Any = "none",
                 l2_promotion: Any = "none", oob_fill: Any = "none", device: int | None = 0, arch: Any = None,
                 encode: bool = True, owner: Any = None) -> TensorMap:
    """Driver-order twin of ``describe_tensor`` for raw addresses (dims/box innermost first, byte strides).

    The map holds ``owner`` when given; otherwise the caller owns the memory at ``address`` and must keep it
    alive while the map is used (its repr says so)."""
    encode = check_encode_flag(encode)
    dt = DataType.parse(dtype, "dtype") if not isinstance(dtype, DataType) else dtype
    if isinstance(address, bool) or not hasattr(address, "__index__"):
        raise InvalidArgumentError("address", address, "must be an integer device address", "pass array.data_ptr()")
    if not 0 <= int(address) < 1 << 64:
        raise InvalidArgumentError("address", address, "must be a 64-bit unsigned device address",
                                   "pass array.data_ptr()")
    dims_ = tuple(int_sequence("dims", dims))
    es = tuple(int_sequence("element_strides", element_strides)) if element_strides is not None else (1,) * len(dims_)
    spec = TiledSpec(dt, int(address), dims_, tuple(int_sequence("strides", strides)),
                     tuple(int_sequence("box", box)), es,
                     Interleave.parse(interleave, "interleave"), Swizzle.parse(swizzle, "swizzle"),
                     L2Promotion.parse(l2_promotion, "l2_promotion"), OOBFill.parse(oob_fill, "oob_fill"))
    on_gpu = encode and device is not None and _driver.gpu_available()
    resolved = resolve_arch(arch, device if on_gpu else None)
    violations = rules.check_spec(spec, resolved)
    if violations:
        raise tensor_map_error(spec, resolved, violations, order="driver",
                               driver_at=(device, int(address)) if on_gpu else None)
    return finish(spec, resolved, device, on_gpu, "as requested", owner)
