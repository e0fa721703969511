"""``describe_tensor`` / ``describe_im2col``: check every rule, then encode in the array's context.

Public parameters are in numpy order (outermost first); the conversion to driver order happens once, in
``spec.to_driver_order``. Without a GPU everything but the encode works (pass shape, dtype, strides).
"""
from __future__ import annotations

import threading
import weakref
from ctypes import string_at as _string_at
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Sequence

from .. import _driver, _hotpath
from ..arch import Arch
from ..arrays import TORCH_LIKE as _TORCH_LIKE
from ..arrays import ArrayView, device_array_view
from ..arrays import is_torch_like as _is_torch_like
from ..dtypes import DataType, dtype_from_any
from ..errors import InvalidArgumentError, TensorMapError, UnsupportedDeviceError
from .enums import Interleave, L2Promotion, OOBFill, Swizzle
from .rules import Violation
from .spec import Im2colSpec, TiledSpec, int_sequence, positive_ints, to_driver_order
from .suggest import tensor_map_error
from .tensor_map import DESCRIPTOR_SIZE, TensorMap

# Two caches, both keyed by the request as given (no parsing on a hit). _REQUESTS answers a repeated identical
# request for the same live array (held weakly, so the cache never keeps an array alive) with the encoded
# descriptor, in a TensorMap that holds the array (the C front returns the previous one while it is alive:
# tmakit/_hotpath.py). _TEMPLATES keeps, per shape class
# (everything but the address), the checked spec and the driver-typed encode arguments, so a new tensor of a
# known shape costs an alignment test and one driver call.
_REQUESTS: dict[tuple, tuple] = {}
_hotpath.bind_tensor_map(TensorMap, tuple(f.name for f in fields(TensorMap)))  # hits build TensorMaps in C
_TEMPLATES: dict[tuple, "_Template"] = {}
_CACHE_LIMIT = 4096


@dataclass
class _Template:
    spec: TiledSpec  # address 0: every address-independent rule already passed
    arch: Arch
    reason: str
    prepared: tuple | None  # encode arguments for the driver, when a GPU encode applies
    alignment: int  # the address alignment the spec needs (16, or 32 with interleave 32B / packed types)
    # Per thread: a CUtensorMap of this shape class and its address, re-pointed by cuTensorMapReplaceAddress
    # (per thread, so no lock is needed between re-pointing it and reading its bytes).
    local: threading.local = field(default_factory=threading.local)

    def descriptor_at(self, address: int, device: int) -> bytes | None:
        """The descriptor at ``address``: the driver's address replacement on this thread's stored descriptor
        (one cheap call instead of re-encoding, with no context switch), else a full encode in the device's
        context. None when the driver refuses."""
        from .encode import encode_prepared

        local = self.local
        stored = getattr(local, "stored", None)
        if stored is not None:
            descriptor = _hotpath.repoint(stored, address)
            if descriptor is not None:
                return descriptor
            # e.g. CUDA_ERROR_INVALID_CONTEXT on a thread with no current context: encode afresh below
        with _driver.context_for(device):
            err, tmap = encode_prepared(self.prepared, address)
        if int(err) != 0:
            return None
        local.stored = (tmap, int(tmap.getPtr()), _driver.entry_point("cuTensorMapReplaceAddress"))
        return _string_at(local.stored[1], DESCRIPTOR_SIZE)


def clear_requests() -> None:
    """Forget every remembered request (the shape templates stay): the dict and the C front's recent table."""
    _REQUESTS.clear()
    forget = getattr(describe_tensor, "forget", None)  # only the C front has one
    if forget is not None:
        forget()


def clear_cache() -> None:
    clear_requests()
    _TEMPLATES.clear()


def _remember(table: dict, key: tuple, value: Any) -> None:
    if len(table) >= _CACHE_LIMIT:
        table.clear()
    table[key] = value


def _with_address(spec: TiledSpec, address: int) -> TiledSpec:
    """``spec`` at another address, without dataclasses.replace's cost (this is on the per-call path)."""
    new = object.__new__(TiledSpec)
    new.__dict__.update(spec.__dict__)
    new.__dict__["address"] = address
    return new


def _auto_swizzle(inner_bytes: int, interleave: Interleave) -> tuple[Swizzle, str]:
    """The smallest swizzle span that holds a row of the box (the narrowest padding; rows that exactly fill the
    span are not padded). Wider spans would only pad more: TMA pads every row to the span."""
    if interleave is not Interleave.NONE:
        return Swizzle.B32 if interleave is Interleave.B32 else Swizzle.NONE, "interleave decides"
    for sw in (Swizzle.B32, Swizzle.B64, Swizzle.B128):
        if inner_bytes <= sw.span and inner_bytes * 2 > sw.span:
            if inner_bytes == sw.span:
                return sw, f"auto: {inner_bytes}-byte rows fill the {sw.short} span"
            return sw, f"auto: {inner_bytes}-byte rows, padded to the {sw.short} span"
    if inner_bytes < 32:
        return Swizzle.NONE, f"auto: {inner_bytes}-byte rows are narrower than any swizzle span"
    return Swizzle.NONE, f"auto: {inner_bytes}-byte rows are wider than the 128B span"


def _resolve_arch(arch: Any, device: int | None) -> Arch:
    if arch is not None:
        return Arch.parse(arch)
    if device is not None:
        try:
            return _driver.device_arch(device)
        except UnsupportedDeviceError:
            pass
    return Arch(9, 0)


def _array_info(array: Any, shape: Any, dtype: Any, strides: Any) -> tuple[ArrayView | None, DataType, tuple, tuple, int]:
    """(view, dtype, shape, byte strides in numpy order, address) from an array or from explicit values."""
    if array is not None:
        if shape is not None or strides is not None:
            raise InvalidArgumentError("shape" if shape is not None else "strides", shape if shape is not None else strides,
                                       "is taken from the array; it cannot be given with one",
                                       "drop shape=/strides=, or describe a view of the array")
        view = device_array_view(array, "array")
        dt = dtype_from_any(dtype if dtype is not None else view.dtype_name, "dtype")
        if dtype is not None and dt.size != view.itemsize:
            raise InvalidArgumentError("dtype", dtype, f"has {dt.size}-byte elements but the array's are {view.itemsize}",
                                       "leave dtype out to infer it from the array")
        return view, dt, view.shape, view.strides, view.ptr
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
    return None, dt, shp, st, 0


def _split_strides(dt: DataType, shape: tuple, strides: tuple, parameter: str) -> tuple[int, ...]:
    """Numpy byte strides -> driver globalStrides (dims 1..rank-1); the innermost must be contiguous."""
    if not shape:
        raise InvalidArgumentError("shape", shape, "a 0-d array has no tensor map", "describe an array with >= 1 dim")
    if any(s < 0 for s in strides):
        raise InvalidArgumentError(parameter, tuple(strides), "negative strides (reversed views) cannot be described",
                                   "describe a forward view, or copy the array (x.flip(...).contiguous())")
    if shape[-1] > 1 and strides[-1] != dt.size:
        raise InvalidArgumentError(parameter, tuple(strides),
                                   f"the innermost dimension must be contiguous (stride {dt.size} bytes), not {strides[-1]}",
                                   "make it contiguous (x.contiguous()) or transpose so the last dim is contiguous")
    return to_driver_order(strides[:-1])


def _encode_or_explain(spec: TiledSpec | Im2colSpec, device: int) -> bytes:
    from .encode import descriptor_bytes, encode_im2col_raw, encode_tiled_raw

    raw = encode_tiled_raw if isinstance(spec, TiledSpec) else encode_im2col_raw
    with _driver.context_for(device):
        err, tmap = raw(*spec.encode_args())
    if int(err) == 0:
        return descriptor_bytes(tmap)
    call = "cuTensorMapEncodeTiled" if isinstance(spec, TiledSpec) else "cuTensorMapEncodeIm2col"
    if err.name != "CUDA_ERROR_INVALID_VALUE":
        _driver.check(call, (err,))
    with _driver.context_for(device):
        culprit = _find_culprit(spec, raw, call)
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


def _finish(spec: TiledSpec | Im2colSpec, arch: Arch, device: int | None, view: ArrayView | None,
            encode: bool, reason: str, order: str = "numpy") -> TensorMap:
    """Check every rule, encode when a GPU can, and wrap the result (the slow, general path)."""
    violations = spec.check(arch)
    if violations:
        gpu = (view.device or 0, spec.address) if encode and view is not None else None  # the driver proves it too
        raise tensor_map_error(spec, arch, violations, order=order, auto_swizzle=reason.startswith("auto"),
                               driver_at=gpu)
    descriptor = None
    if encode and view is not None and arch.has_tma:
        descriptor = _encode_or_explain(spec, view.device or 0)
    return TensorMap(spec, arch, view.device if view is not None else device, descriptor, reason,
                     view.owner if view is not None else None)


def _describe_tensor(array: Any = None, box: Sequence[int] | None = None, *, shape: Sequence[int] | None = None,
                    dtype: Any = None, strides: Sequence[int] | None = None, swizzle: Any = "auto",
                    oob_fill: Any = "zero", l2_promotion: Any = "none", interleave: Any = "none",
                    element_strides: Sequence[int] | None = None, arch: Any = None, encode: bool = True,
                    cache: bool = True) -> TensorMap:
    """Build a tiled tensor map for ``array`` (or for ``shape``/``dtype``/``strides`` without one).

    ``box``, ``shape``, ``strides`` (bytes) and ``element_strides`` are in numpy order (outermost first).
    ``swizzle="auto"`` picks the smallest swizzle span that holds a row (rows are padded to it when narrower).
    Every rule is checked first;
    a ``TensorMapError`` lists all violations. With a GPU of sm_90+, the descriptor is encoded in the array's
    context. A repeated identical request for a live array reuses its descriptor; a new tensor of an already
    seen shape class skips the rule evaluation (its address is still checked). ``cache=False`` does all work.
    """
    _flag("cache", cache)
    options = (swizzle, oob_fill, l2_promotion, interleave, element_strides, dtype, arch, encode)
    if (cache and shape is None and strides is None
            and _is_torch_like(array)):
        # torch: identity and cheap metadata decide a hit, with no parsing (tmakit/_hotpath.py: the contract)
        return _torch_request(array, box, options, _hotpath.lookup_request(_REQUESTS, array, box, *options))
    return _describe(array, box, shape, dtype, strides, options, cache=cache)[0]


def _torch_request(array: Any, box: Any, options: tuple, found: Any) -> TensorMap:
    """The rest of a torch-like request after ``lookup_request`` answered ``found`` (a hit, a miss to build
    and remember, or None: not cacheable). The C front of describe_tensor calls this too, on its misses."""
    if type(found) is not tuple:
        if found is not None:
            return found  # a new TensorMap for a repeated request
        return _describe(array, box, None, options[5], None, options, cache=False)[0]
    request, ptr, layout = found
    template_key = ("torch", layout, array.dtype, array.get_device(), request[1], request[2:])
    template = _TEMPLATES.get(template_key)
    if template is None:
        result, template = _describe(array, box, None, options[5], None, options, cache=True)
        _remember(_TEMPLATES, template_key, template)
    else:
        result = _from_template(template, ptr, array.get_device(), array)
    result.source_layout = layout
    _remember(_REQUESTS, request, (weakref.ref(array), ptr, layout,
                                   (result.spec, result.arch, result.device, result.descriptor, result.swizzle_reason)))
    return result


def _flag(name: str, value: Any) -> None:
    if type(value) is not bool and type(value).__name__ not in ("bool", "bool_"):  # numpy's bool too
        raise InvalidArgumentError(name, value, "must be True or False", f"pass {name}=True or {name}=False")


def _once(values: Any) -> Any:
    """A one-shot iterable (generator, iterator) as a tuple; sequences and everything else unchanged."""
    if values is None or isinstance(values, (tuple, list, str, bytes, dict)) or not hasattr(values, "__next__"):
        return values
    return tuple(values)


def _typed(value: Any) -> tuple:
    return (type(value), value)




def _describe(array: Any, box: Any, shape: Any, dtype: Any, strides: Any, options: tuple, *,
              cache: bool) -> tuple[TensorMap, _Template]:
    swizzle, oob_fill, l2_promotion, interleave, element_strides, _dtype, arch, encode = options
    _flag("encode", encode)
    box, element_strides = _once(box), _once(element_strides)  # a generator is read once, whatever is cached
    options = options[:4] + (element_strides,) + options[5:]
    view, dt, shp, st, address = _array_info(array, shape, dtype, strides)
    device = view.device if view is not None else None
    key = None
    if cache and box is not None:
        try:  # keyed by validated values and option types, so 64.0 or True never hit an entry made by 64 or 1
            key = (dt, shp, st, positive_ints("box", box), _typed(swizzle), _typed(oob_fill), _typed(l2_promotion),
                   _typed(interleave), None if element_strides is None else positive_ints("element_strides",
                                                                                         element_strides),
                   _typed(arch), encode, device)
            hash(key)
        except (TypeError, InvalidArgumentError):
            key = None  # _make_template reports the bad value
    template = _TEMPLATES.get(key) if key is not None else None
    if template is None:
        template = _make_template(dt, shp, st, box, swizzle, oob_fill, l2_promotion, interleave, element_strides,
                                  arch, encode, view, device)
        if key is not None:
            _remember(_TEMPLATES, key, template)
    return _from_template(template, address, device, view.owner if view is not None else None), template


def _from_template(template: _Template, address: int, device: int | None, owner: Any) -> TensorMap:
    if address % template.alignment:  # the only address-dependent rule: report it with all the others
        spec = _with_address(template.spec, address)
        raise tensor_map_error(spec, template.arch, spec.check(template.arch), order="numpy")
    spec = _with_address(template.spec, address)
    descriptor = None
    if template.prepared is not None and owner is not None:
        descriptor = template.descriptor_at(address, device or 0) or _encode_or_explain(spec, device or 0)
    return TensorMap(spec, template.arch, device, descriptor, template.reason, owner)


def _make_template(dt: DataType, shp: tuple, st: tuple, box: Any, swizzle: Any, oob_fill: Any, l2_promotion: Any,
                   interleave: Any, element_strides: Any, arch: Any, encode: bool, view: ArrayView | None,
                   device: int | None) -> _Template:
    if box is None:
        raise InvalidArgumentError("box", None, "is required", "pass the tile to load, e.g. box=(64, 64)")
    if not 1 <= len(shp) <= 5:
        raise InvalidArgumentError("shape", shp, f"a {len(shp)}-d array has no tensor map (rank 1 to 5)",
                                   "describe an array of 1 to 5 dims (merge or split dims, or add a unit dim)")
    box_np = positive_ints("box", box, len(shp))
    es_np = positive_ints("element_strides", element_strides, len(shp)) if element_strides is not None else (1,) * len(shp)
    il = Interleave.parse(interleave, "interleave")
    if isinstance(swizzle, str) and swizzle.strip().lower() == "auto":
        sw, reason = _auto_swizzle(box_np[-1] * dt.size, il)
    else:
        sw, reason = Swizzle.parse(swizzle, "swizzle"), "as requested"
    spec = TiledSpec(dt, 0, to_driver_order(shp), _split_strides(dt, shp, st, "strides"), to_driver_order(box_np),
                     to_driver_order(es_np), il, sw, L2Promotion.parse(l2_promotion, "l2_promotion"),
                     OOBFill.parse(oob_fill, "oob_fill"))
    resolved = _resolve_arch(arch, device)
    violations = spec.check(resolved)
    if violations:  # numpy order, with the one suggestion (tmakit/tensormap/suggest.py), driver-proved on a GPU
        gpu = (device or 0, view.ptr) if encode and view is not None else None
        raise tensor_map_error(spec, resolved, violations, order="numpy", auto_swizzle=reason != "as requested",
                               driver_at=gpu)
    prepared = None
    if encode and view is not None and resolved.has_tma:
        from .encode import prepare_tiled

        prepared = prepare_tiled(*(a for i, a in enumerate(spec.encode_args()) if i != 1))
    alignment = 32 if (il is Interleave.B32 or dt in (DataType.U4X16_ALIGN16B, DataType.U6X16_ALIGN16B)) else 16
    return _Template(spec, resolved, reason, prepared, alignment)


def encode_tiled(dtype: Any, address: int, dims: Sequence[int], strides: Sequence[int], box: Sequence[int],
                 element_strides: Sequence[int] | None = None, *, interleave: Any = "none", swizzle: Any = "none",
                 l2_promotion: Any = "none", oob_fill: Any = "none", device: int | None = 0, arch: Any = None,
                 encode: bool = True, owner: Any = None) -> TensorMap:
    """Driver-order twin of ``describe_tensor`` for raw addresses (dims/box innermost first, byte strides)."""
    dt = DataType.parse(dtype, "dtype") if not isinstance(dtype, DataType) else dtype
    _flag("encode", encode)
    if isinstance(address, bool) or not hasattr(address, "__index__"):
        raise InvalidArgumentError("address", address, "must be an integer device address", "pass array.data_ptr()")
    dims_ = tuple(int_sequence("dims", dims))
    es = tuple(int_sequence("element_strides", element_strides)) if element_strides is not None else (1,) * len(dims_)
    spec = TiledSpec(dt, int(address), dims_, tuple(int_sequence("strides", strides)),
                     tuple(int_sequence("box", box)), es,
                     Interleave.parse(interleave, "interleave"), Swizzle.parse(swizzle, "swizzle"),
                     L2Promotion.parse(l2_promotion, "l2_promotion"), OOBFill.parse(oob_fill, "oob_fill"))
    view = None
    if encode and device is not None and _driver.gpu_available():
        view = ArrayView(int(address), (), (), dt.short, dt.size, device, owner)
    return _finish(spec, _resolve_arch(arch, device if view is not None else None), device, view, encode,
                   "as requested", order="driver")


def describe_im2col(array: Any = None, *, pixels_per_column: int, channels_per_pixel: int | None = None,
                    lower_corner: Sequence[int] | None = None, upper_corner: Sequence[int] | None = None,
                    shape: Sequence[int] | None = None, dtype: Any = None, strides: Sequence[int] | None = None,
                    swizzle: Any = "auto", oob_fill: Any = "zero", l2_promotion: Any = "none",
                    interleave: Any = "none", element_strides: Sequence[int] | None = None, arch: Any = None,
                    encode: bool = True) -> TensorMap:
    """An im2col tensor map for an N(D)HWC array (numpy order: N, [D,] H, W, C).

    ``lower_corner``/``upper_corner`` are the bounding-box offsets of the spatial dims in numpy order
    ([D,] H, W): lower relative to the first pixel, upper relative to the last (a 3x3 convolution with
    padding 1 uses lower=(-1, -1), upper=(-1, -1)). ``channels_per_pixel`` defaults to all channels.
    """
    _flag("encode", encode)
    view, dt, shp, st, address = _array_info(array, shape, dtype, strides)
    if not 3 <= len(shp) <= 5:
        raise InvalidArgumentError("shape", shp, "im2col needs a 3-D to 5-D N(D)HWC tensor", "reshape to N, H, W, C")
    spatial = len(shp) - 2
    lower = tuple(int_sequence("lower_corner", lower_corner if lower_corner is not None else (0,) * spatial))
    upper = tuple(int_sequence("upper_corner", upper_corner if upper_corner is not None else (0,) * spatial))
    channels = int_sequence("channels_per_pixel", [channels_per_pixel if channels_per_pixel is not None else shp[-1]])[0]
    pixels_per_column = int_sequence("pixels_per_column", [pixels_per_column])[0]
    il = Interleave.parse(interleave, "interleave")
    if isinstance(swizzle, str) and swizzle.strip().lower() == "auto":
        sw, reason = _auto_swizzle(channels * dt.size, il)
    else:
        sw, reason = Swizzle.parse(swizzle, "swizzle"), "as requested"
    es_np = positive_ints("element_strides", element_strides, len(shp)) if element_strides is not None else (1,) * len(shp)
    spec = Im2colSpec(dt, address, to_driver_order(shp), _split_strides(dt, shp, st, "strides"), to_driver_order(lower),
                      to_driver_order(upper), channels, pixels_per_column, to_driver_order(es_np), il, sw,
                      L2Promotion.parse(l2_promotion, "l2_promotion"), OOBFill.parse(oob_fill, "oob_fill"))
    device = view.device if view is not None else None
    return _finish(spec, _resolve_arch(arch, device), device, view, encode, reason)


_OPTIONS = ("swizzle", "oob_fill", "l2_promotion", "interleave", "element_strides", "dtype", "arch", "encode")
_describe_tensor.__name__ = _describe_tensor.__qualname__ = "describe_tensor"  # the public name, in any traceback
if TYPE_CHECKING:
    describe_tensor = _describe_tensor
else:  # the C front where built (tmakit/_hotpath.py), with _describe_tensor's name, docstring and signature
    describe_tensor = _hotpath.describe_front(_describe_tensor, _torch_request, _TORCH_LIKE, _REQUESTS,
                                              tuple(_describe_tensor.__kwdefaults__[k] for k in _OPTIONS))
