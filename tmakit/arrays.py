"""The one array adapter: any device array (torch-like, ``__cuda_array_interface__``, DLPack) -> ``ArrayView``.

``as_array_view(obj)`` is the only place tmakit reads an array object (describe, with_address, kernel
arguments, ops, copies). ``ArrayView`` carries the pointer, shape and byte strides in numpy order, the element
type's name and the device; it holds a reference to the source object so the memory outlives the view.
"""
from __future__ import annotations

import ctypes
import math
from typing import Any, NamedTuple

import numpy as np

from . import _driver
from ._sequences import is_sequence
from .errors import InvalidArgumentError


class ArrayView(NamedTuple):
    """What tmakit reads from an array (a named tuple: built on every describe, with_address and launch)."""

    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # bytes, numpy order (outermost first)
    dtype_name: str  # numpy-style name: "float32", "bfloat16", "float8_e4m3fn", ...
    itemsize: int
    device: int | None  # CUDA ordinal, None for host memory
    owner: Any = None  # keeps the memory alive

    @property
    def is_device(self) -> bool:
        return self.device is not None

    @property
    def nbytes(self) -> int:
        # math.prod, not np.prod: exact, and a twentieth of the cost (the ops check sizes on every call)
        return math.prod(self.shape) * self.itemsize if self.shape else self.itemsize

    @property
    def is_c_contiguous(self) -> bool:
        return is_c_contiguous(self.shape, self.strides, self.itemsize)


_TYPESTR_NAMES = {
    ("u", 1): "uint8", ("i", 1): "int8", ("b", 1): "bool", ("u", 2): "uint16", ("i", 2): "int16",
    ("f", 2): "float16", ("u", 4): "uint32", ("i", 4): "int32", ("f", 4): "float32", ("u", 8): "uint64",
    ("i", 8): "int64", ("f", 8): "float64",
}


def is_c_contiguous(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> bool:
    """Row-major without gaps (size-1 dims may have any stride; an empty array always is)."""
    if 0 in shape:
        return True
    acc = itemsize  # the C stride of each dim, innermost first (no dim is 0 here)
    for i in range(len(shape) - 1, -1, -1):
        d = shape[i]
        if d != 1 and strides[i] != acc:
            return False
        acc *= d
    return True


def _c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides, acc = [], itemsize
    for dim in reversed(shape):
        strides.append(acc)
        acc *= max(int(dim), 1)
    return tuple(reversed(strides))


def _from_cai(obj: Any, cai: Any) -> ArrayView:
    """A view from ``__cuda_array_interface__``; a malformed dict is an InvalidArgumentError naming ``array``."""
    def is_int(v: Any) -> bool:
        return hasattr(v, "__index__") and not isinstance(v, bool)
    try:
        ok = (isinstance(cai, dict) and isinstance(cai["typestr"], str) and len(cai["typestr"]) >= 3
              and all(is_int(d) and d >= 0 for d in cai["shape"]) and is_int(cai["data"][0]) and cai["data"][0] >= 0
              and (not cai.get("strides") or (len(cai["strides"]) == len(cai["shape"])
                                               and all(is_int(v) for v in cai["strides"]))))
    except (KeyError, TypeError, IndexError):
        ok = False
    if not ok or not cai["typestr"][2:].isdigit():
        raise InvalidArgumentError("array", cai, "has a malformed __cuda_array_interface__ (it needs typestr, shape "
                                   "of ints >= 0, data=(pointer, readonly) and optional strides of ints)",
                                   "pass the array object itself (torch/cupy/tmakit), or fix its interface dict")
    return _view_from_cai(obj, cai)


def _view_from_cai(obj: Any, cai: dict) -> ArrayView:
    typestr = cai["typestr"]
    key = (typestr[1], int(typestr[2:]))
    name = _TYPESTR_NAMES.get(key)
    if name is None:
        raise InvalidArgumentError("array", typestr, "has an element type TMA cannot move", "use a 1/2/4/8-byte type")
    shape = tuple(int(s) for s in cai["shape"])
    itemsize = key[1]
    strides = tuple(int(s) for s in cai["strides"]) if cai.get("strides") else _c_strides(shape, itemsize)
    ptr = int(cai["data"][0])
    known = getattr(obj, "__tmakit_device__", None)  # a tmakit DeviceArray knows its device
    return ArrayView(ptr, shape, strides, name, itemsize, known if known is not None else _device_of_pointer(ptr), obj)


def _device_of_pointer(ptr: int) -> int:
    dev = _driver.pointer_device(ptr) if ptr else None
    return 0 if dev is None else dev


def is_torch_like(array: Any) -> bool:
    """torch tensors (and look-alikes): data_ptr(), stride(), get_device()."""
    return hasattr(array, "data_ptr") and hasattr(array, "stride") and hasattr(array, "get_device")


def _torch_api(obj: Any) -> tuple | None:
    """``(data_ptr, element_size, stride)``, the bound methods the adapter calls on a torch tensor (or a
    look-alike), else None."""
    try:
        return obj.data_ptr, obj.element_size, obj.stride
    except AttributeError:
        return None


def _has_torch_api(obj: Any) -> bool:
    """What the adapter reads from a torch tensor: data_ptr(), element_size(), stride()."""
    return _torch_api(obj) is not None


def is_array(obj: Any) -> bool:
    """Whether ``obj`` is an array ``as_array_view`` reads (or refuses as host memory), not a number."""
    return (_has_torch_api(obj) or isinstance(obj, (ArrayView, np.ndarray))
            or hasattr(obj, "__cuda_array_interface__") or hasattr(obj, "__dlpack__"))


def _from_torch_like(obj: Any, api: tuple | None = None) -> ArrayView:
    try:
        return _read_torch_like(obj, api)
    except (TypeError, ValueError, AttributeError, OverflowError) as exc:
        if isinstance(exc, InvalidArgumentError):
            raise
        # a look-alike whose methods or attributes are not what torch's are (a shape holding a string, say)
        raise InvalidArgumentError("array", type(obj).__name__, f"has a torch-like API (data_ptr, stride, "
                                   f"element_size, shape) that does not read as torch's: {type(exc).__name__}: {exc}",
                                   "pass a torch/cupy array or a tmakit.DeviceArray") from exc


def _int_entries(values: Any) -> bool:
    return is_sequence(values) and all(hasattr(v, "__index__") and not isinstance(v, bool) for v in values)


def _read_torch_like(obj: Any, api: tuple | None) -> ArrayView:
    data_ptr, element_size, stride = api or (obj.data_ptr, obj.element_size, obj.stride)
    try:
        device = obj.get_device()  # torch: an int, -1 on the CPU (cheaper than .device)
    except AttributeError:  # a look-alike without get_device(): its .device
        device = getattr(obj.device, "index", 0) if getattr(obj.device, "type", "cuda") == "cuda" else None
    if device is not None and (isinstance(device, bool) or not hasattr(device, "__index__")):
        raise TypeError(f"its device is {device!r}, not a device ordinal")
    if device is None or device < 0:
        raise InvalidArgumentError("array", f"tensor on {getattr(obj, 'device', 'the CPU')}",
                                   "must be a CUDA device array", "move it to the GPU first (tensor.cuda())")
    dtype = obj.dtype
    try:
        known = _TORCH_DTYPES.get(dtype)  # (name, itemsize) of a torch dtype met before: two calls fewer
    except TypeError:  # a look-alike's unhashable dtype
        known = None
    if known is None:
        name, itemsize = str(dtype), element_size()
        if name[:6] == "torch." and type(itemsize) is int and type(dtype).__module__ == "torch":
            known = _TORCH_DTYPES[dtype] = (name[6:], itemsize)
    else:
        name, itemsize = known
    st, ptr, shape = stride(), data_ptr(), obj.shape
    if known is not None and type(ptr) is int and type(device) is int and type(st) is tuple and len(st) == 2 \
            and type(st[0]) is int and type(st[1]) is int and isinstance(shape, tuple) and len(shape) == 2 \
            and type(shape[0]) is int and type(shape[1]) is int:  # a torch tensor of 2 dims: nothing to convert
        # tuple.__new__: the named tuple's own __new__ is a Python function
        return _tuple_new(ArrayView, (ptr, tuple(shape), (st[0] * itemsize, st[1] * itemsize), known[0],
                                      itemsize, device, obj))
    # anything else is read with every field checked: a look-alike may hold what torch never would
    if not _int_entries(shape) or any(int(d) < 0 for d in shape):
        raise TypeError(f"its shape {shape!r} is not a sequence of ints >= 0")
    if not _int_entries(st) or len(st) != len(shape):
        raise TypeError(f"its stride() {st!r} is not {len(shape)} ints (one per dimension)")
    if not hasattr(ptr, "__index__") or isinstance(ptr, bool) or not 0 <= int(ptr) < 1 << 64:
        raise TypeError(f"its data_ptr() {ptr!r} is not an address (an int >= 0)")
    if not hasattr(itemsize, "__index__") or isinstance(itemsize, bool) or int(itemsize) not in (1, 2, 4, 8, 16):
        raise TypeError(f"its element_size() {itemsize!r} is not 1, 2, 4, 8 or 16 bytes")
    itemsize = int(itemsize)
    return _tuple_new(ArrayView, (int(ptr), tuple(int(d) for d in shape), tuple([int(s) * itemsize for s in st]),
                                  name[name.rfind(".") + 1:], itemsize, int(device), obj))


_tuple_new = tuple.__new__
# torch dtype -> (its name without "torch.", its element size): facts of the dtype objects, filled as each is met
# (str(dtype) and element_size() cost two calls on every describe and with_address).
_TORCH_DTYPES: dict = {}


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32), ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


_DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED = 2, 3, 13
_DL_NAMES = {(0, 8): "int8", (0, 16): "int16", (0, 32): "int32", (0, 64): "int64", (1, 8): "uint8", (1, 16): "uint16",
             (1, 32): "uint32", (1, 64): "uint64", (2, 16): "float16", (2, 32): "float32", (2, 64): "float64",
             (4, 16): "bfloat16", (6, 8): "bool"}


def _from_dlpack(obj: Any) -> ArrayView:
    try:
        capsule = obj.__dlpack__(stream=None)
    except TypeError:
        capsule = obj.__dlpack__()
    get_ptr = ctypes.pythonapi.PyCapsule_GetPointer
    get_ptr.restype, get_ptr.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    is_valid = ctypes.pythonapi.PyCapsule_IsValid
    is_valid.restype, is_valid.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]
    if is_valid(capsule, b"dltensor"):
        tensor = _DLTensor.from_address(get_ptr(capsule, b"dltensor"))  # DLManagedTensor starts with DLTensor
    elif is_valid(capsule, b"dltensor_versioned"):
        # DLManagedTensorVersioned: {DLPackVersion(2 x u32), manager_ctx, deleter, flags(u64), DLTensor}
        tensor = _DLTensor.from_address(get_ptr(capsule, b"dltensor_versioned") + 8 + 8 + 8 + 8)
    else:
        raise InvalidArgumentError("array", type(obj).__name__, "returned an unknown DLPack capsule", "pass a torch/cupy array")
    if tensor.device.device_type not in (_DL_CUDA, _DL_CUDA_MANAGED):
        raise InvalidArgumentError("array", f"DLPack device type {tensor.device.device_type}",
                                   "must be a CUDA device array", "copy it to the GPU first")
    key = (tensor.dtype.code, tensor.dtype.bits)
    name = _DL_NAMES.get(key, f"dl{key[0]}_{key[1]}")
    itemsize = max(1, tensor.dtype.bits // 8)
    shape = tuple(tensor.shape[i] for i in range(tensor.ndim))
    strides = (tuple(tensor.strides[i] * itemsize for i in range(tensor.ndim)) if tensor.strides
               else _c_strides(shape, itemsize))
    ptr = (tensor.data or 0) + tensor.byte_offset
    return ArrayView(ptr, shape, strides, name, itemsize, int(tensor.device.device_id), (obj, capsule))


def device_array_view(obj: Any, parameter: str = "array") -> ArrayView:
    """View a device array. Host arrays raise ``InvalidArgumentError`` naming ``parameter``."""
    if type(obj) is ArrayView:  # the ops' own views (they have no torch API)
        if obj.device is None:
            raise InvalidArgumentError(parameter, "host array", "must be a device array", "copy it to the GPU first")
        return obj
    # torch next (the common case; its __cuda_array_interface__ refuses bfloat16 and fp8)
    api = _torch_api(obj)
    if api is not None:
        return _from_torch_like(obj, api)
    if isinstance(obj, ArrayView):
        if not obj.is_device:
            raise InvalidArgumentError(parameter, "host array", "must be a device array", "copy it to the GPU first")
        return obj
    if isinstance(obj, np.ndarray):
        raise InvalidArgumentError(parameter, f"numpy.ndarray{obj.shape}", "is host memory; a TMA descriptor needs a device array",
                                   "copy it to the GPU (tmakit.DeviceArray.from_host, torch.as_tensor(x, device='cuda'))")
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        if not isinstance(cai, dict) or not {"data", "shape", "typestr"} <= cai.keys():
            raise InvalidArgumentError(parameter, type(obj).__name__, "has a malformed __cuda_array_interface__ "
                                       "(needs 'data', 'shape' and 'typestr')", "pass a well-formed device array")
        return _from_cai(obj, cai)
    if hasattr(obj, "__dlpack__"):
        return _from_dlpack(obj)
    raise InvalidArgumentError(parameter, type(obj).__name__,
                               "is not a device array (no __cuda_array_interface__, DLPack or torch tensor API)",
                               "pass a torch/cupy array, a tmakit.DeviceArray or a cuda.core Buffer view")


def array_pointer(obj: Any, parameter: str = "array") -> int | None:
    """The device pointer of an array (the part of ``as_array_view`` a kernel argument needs: torch's
    ``data_ptr()`` or the interface's ``data`` without building a view), or None when ``obj`` is no array."""
    if _has_torch_api(obj):
        if getattr(getattr(obj, "device", None), "type", "cuda") != "cuda":
            raise InvalidArgumentError(parameter, f"tensor on {obj.device}", "must be a CUDA device array",
                                       "move it to the GPU first (tensor.cuda())")
        ptr = obj.data_ptr() if callable(obj.data_ptr) else None
        if type(ptr) is int and ptr >= 0:  # torch's
            return ptr
        if isinstance(ptr, bool) or not hasattr(ptr, "__index__") or not 0 <= int(ptr) < 1 << 64:
            raise InvalidArgumentError(parameter, type(obj).__name__, f"has a torch-like data_ptr() that gave {ptr!r}, "
                                       "not an address", "pass a torch/cupy array or a tmakit.DeviceArray")
        return int(ptr)
    if not is_array(obj):
        return None
    cai = getattr(obj, "__cuda_array_interface__", None)
    if isinstance(cai, dict) and isinstance(cai.get("data"), tuple):
        return int(cai["data"][0])
    return device_array_view(obj, parameter).ptr


def view_if_array(obj: Any, parameter: str = "array") -> ArrayView | None:
    """``as_array_view(obj)`` when ``obj`` is an array (``is_array``), else None (a number, say): one look at
    the object for callers that take an array or something else."""
    api = _torch_api(obj)
    if api is not None:
        return _from_torch_like(obj, api)
    return device_array_view(obj, parameter) if is_array(obj) else None


as_array_view = device_array_view  # the adapter's name; device_array_view stays for existing callers
