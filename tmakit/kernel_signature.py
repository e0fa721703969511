"""Kernel parameter lists read from PTX ``.entry`` declarations (no GPU needed).

NVRTC gives PTX next to every cubin it builds, and hand-written kernels are PTX, so the PTX entry list is
the one signature source that works on a machine without a driver. On a GPU, ``cuFuncGetParamInfo`` gives
the authoritative offsets and sizes; ``merge_driver_layout`` checks the two agree and keeps PTX's names/types.
"""
from __future__ import annotations

import ctypes
import re
import struct
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

import numpy as np

from .arrays import ArrayView, device_array_view
from .errors import LaunchError

# PTX fundamental types -> size in bytes (PTX ISA "Fundamental Types").
_PTX_SIZES = {"8": 1, "16": 2, "32": 4, "64": 8}
_SCALAR = re.compile(r"\.(u|s|b|f)(8|16|32|64)$")


@dataclass(frozen=True)
class ParamInfo:
    """One kernel parameter: where it lives in the parameter buffer and, when known, what it is."""

    index: int
    offset: int  # bytes from the start of the parameter space
    size: int  # bytes
    name: str = ""  # PTX name ("k_param_0"), "" when only the driver layout is known
    ptx_type: str = ""  # ".u64", ".f32", ".b8[128]" ...; "" when unknown
    align: int = 1

    @property
    def kind(self) -> str:
        """'int', 'float', 'bytes' (a by-value struct) or 'unknown' (driver layout only)."""
        if not self.ptx_type:
            return "unknown"
        if "[" in self.ptx_type:
            return "bytes"
        return "float" if self.ptx_type.startswith(".f") else "int"

    @property
    def signed(self) -> bool:
        return self.ptx_type.startswith(".s")

    def describe(self) -> str:
        label = self.name or f"#{self.index}"
        kind = f" {self.ptx_type}" if self.ptx_type else ""
        return f"param {self.index} ({label}{kind}, {self.size} bytes at offset {self.offset})"


_ENTRY = re.compile(r"\.entry\s+([A-Za-z_$%][\w$%]*)\s*\((.*?)\)", re.S)
# ".param .align 64 .b8 k_param_3[128]" / ".param .u64 .ptr .global .align 1 k_param_0" / ".param .u32 k_param_1"
_PARAM = re.compile(r"\.param\s+(?P<body>[^,]*?)\s*(?P<name>[A-Za-z_$%][\w$%]*)\s*(?:\[(?P<count>\d+)\])?\s*$")


def _strip_comments(ptx: str) -> str:
    ptx = re.sub(r"/\*.*?\*/", " ", ptx, flags=re.S)
    return re.sub(r"//[^\n]*", "", ptx)


def _parse_param(index: int, text: str, offset: int) -> ParamInfo:
    m = _PARAM.match(text.strip())
    if not m:
        raise LaunchError(f"cannot read PTX parameter {index}: {text.strip()!r}")
    words = m.group("body").split()
    explicit_align = 0
    if ".align" in words:
        explicit_align = int(words[words.index(".align") + 1])
    scalar = next((w for w in words if _SCALAR.match(w)), None)
    if scalar is None:
        raise LaunchError(f"PTX parameter {index} ({m.group('name')}) has no type: {text.strip()!r}")
    elem = _PTX_SIZES[_SCALAR.match(scalar).group(2)]
    count = int(m.group("count")) if m.group("count") else 0
    size = elem * count if count else elem
    # ".ptr .align N" on a pointer parameter describes the pointee, not the parameter (PTX ISA "Kernel
    # Function Parameter Attributes"), so only arrays take the explicit alignment.
    align = max(elem, explicit_align) if count else elem
    offset = (offset + align - 1) // align * align
    ptx_type = f"{scalar}[{count}]" if count else scalar
    return ParamInfo(index, offset, size, m.group("name"), ptx_type, align)


def parse_ptx_entries(ptx: str) -> dict[str, list[ParamInfo]]:
    """``{entry name: [ParamInfo, ...]}`` for every ``.entry`` in the PTX text, in declaration order."""
    entries: dict[str, list[ParamInfo]] = {}
    for m in _ENTRY.finditer(_strip_comments(ptx)):
        params, offset = [], 0
        body = m.group(2).strip()
        for i, piece in enumerate(p for p in body.split(",") if p.strip()) if body else ():
            info = _parse_param(i, piece, offset)
            params.append(info)
            offset = info.offset + info.size
        entries[m.group(1)] = params
    return entries


def ptx_targets(ptx: str) -> list[str]:
    """The ``.target`` architectures of a PTX text (``["sm_90a"]``)."""
    m = re.search(r"^\s*\.target\s+([^\n]+)", _strip_comments(ptx), re.M)
    if not m:
        return []
    return [t.strip() for t in m.group(1).split(",") if t.strip().startswith(("sm_", "compute_"))]


def merge_driver_layout(ptx_params: Sequence[ParamInfo] | None, layout: Sequence[tuple[int, int]],
                        kernel: str) -> list[ParamInfo]:
    """Combine the driver's (offset, size) list with the PTX names/types; they must agree on count and sizes.

    Offsets are not compared: on sm_90 cuFuncGetParamInfo reports a 64-byte-aligned CUtensorMap parameter
    at offset 48 where the PTX puts it at 64 (measured on an H100, driver 13.0), and launches through a
    kernelParams pointer array never use offsets.
    """
    if not ptx_params:
        return [ParamInfo(i, off, size) for i, (off, size) in enumerate(layout)]
    if len(ptx_params) != len(layout) or any(p.size != d[1] for p, d in zip(ptx_params, layout)):
        raise LaunchError(
            f"kernel {kernel}: the PTX parameter list {[(p.offset, p.size) for p in ptx_params]} disagrees with "
            f"the driver's {list(map(tuple, layout))}; the code object and its PTX come from different builds "
            "(clear the cache: TMAKIT_CACHE=0 or delete TMAKIT_CACHE_DIR)"
        )
    return [replace(p) for p in ptx_params]


# ---------------------------------------------------------------------------------------------------------
# Marshalling: one parameter buffer per kernel, laid out once; a launch only writes the bytes that change.

_INT_FORMATS = {1: "<B", 2: "<H", 4: "<I", 8: "<Q"}
_FLOAT_FORMATS = {4: "<f", 8: "<d"}
_pointer_getters: dict[type, Callable[[Any], int]] = {}


def _pointer_getter(value: Any) -> Callable[[Any], int] | None:
    """How to read a device pointer from objects of this value's type (decided once per type)."""
    tp = type(value)
    if tp in _pointer_getters:
        return _pointer_getters[tp]
    getter: Callable[[Any], int] | None = None
    if hasattr(value, "data_ptr") and hasattr(value, "element_size"):  # torch.Tensor
        getter = lambda v: int(v.data_ptr())  # noqa: E731
    elif hasattr(value, "__cuda_array_interface__"):  # cupy, numba, tmakit.DeviceArray
        getter = lambda v: int(v.__cuda_array_interface__["data"][0])  # noqa: E731
    elif isinstance(value, ArrayView) or hasattr(value, "__dlpack__"):
        getter = lambda v: device_array_view(v).ptr  # noqa: E731
    _pointer_getters[tp] = getter
    return getter


class ArgPacker:
    """Writes Python arguments into the kernel's parameter buffer, checked against its parameter list.

    ``pointers`` is the ``kernelParams`` array (one pointer per parameter, into ``buffer``), built once.
    """

    def __init__(self, params: Sequence[ParamInfo], kernel: str, device: int | None = None):
        self.params, self.kernel, self.device = list(params), kernel, device
        size = max((p.offset + p.size for p in self.params), default=0)
        self.buffer = ctypes.create_string_buffer(max(size, 8))
        self.view = memoryview(self.buffer).cast("B")
        self.pointers = self._pointer_array(self.buffer)
        self.pointers_address = ctypes.addressof(self.pointers)
        self._writers = [self._writer(p) for p in self.params]

    def pack(self, args: Sequence[Any]) -> None:
        if len(args) != len(self._writers):
            listing = ", ".join(p.describe() for p in self.params) or "none"
            raise LaunchError(f"kernel {self.kernel} takes {len(self.params)} argument(s), got {len(args)}; "
                              f"its parameters: {listing}")
        for write, value in zip(self._writers, args):
            write(value)

    def frozen_copy(self) -> tuple[int, tuple]:
        """A copy of the packed buffer with its own kernelParams array, never written again: (address of the
        pointer array, the objects that keep both alive)."""
        buffer = ctypes.create_string_buffer(self.buffer.raw, len(self.buffer))
        pointers = self._pointer_array(buffer)
        return ctypes.addressof(pointers), (buffer, pointers)

    def _pointer_array(self, buffer: Any) -> Any:
        """The kernelParams array for ``buffer``: one pointer per parameter, at its offset."""
        base = ctypes.addressof(buffer)
        return (ctypes.c_void_p * max(len(self.params), 1))(*[base + p.offset for p in self.params])

    def bytes_of(self, index: int) -> bytes:
        p = self.params[index]
        return bytes(self.view[p.offset:p.offset + p.size])

    def _fail(self, p: ParamInfo, value: Any, rule: str) -> LaunchError:
        shown = f"{type(value).__name__} {value!r}" if len(repr(value)) < 60 else type(value).__name__
        return LaunchError(f"kernel {self.kernel}: argument {p.index} ({p.name or 'unnamed'}, expected "
                           f"{p.ptx_type or 'a value'} of {p.size} bytes) got {shown}: {rule}")

    def _by_value(self, p: ParamInfo, value: Any) -> bytes:
        """Bytes for a by-value parameter: ``__kernel_param__(size)`` first, then raw buffers."""
        hook = getattr(value, "__kernel_param__", None)
        if hook is not None:
            owner = getattr(value, "device", None)
            if isinstance(owner, int) and self.device is not None and owner != self.device:
                raise self._fail(p, value, f"it belongs to device {owner} but the kernel runs on device "
                                           f"{self.device}; build it for device {self.device}")
            data = hook(p.size)
            if type(data) is not bytes:  # a bytearray/memoryview/ndarray: measure it in bytes
                data = memoryview(data).tobytes()
        elif isinstance(value, (bytes, bytearray, memoryview)):
            data = bytes(value)
        elif isinstance(value, (np.ndarray, np.void)):
            data = value.tobytes()
        elif isinstance(value, ctypes.Structure | ctypes.Array):
            data = bytes(value)
        else:
            raise self._fail(p, value, "a by-value struct needs an object with __kernel_param__(nbytes), bytes, "
                                       "a numpy structured value or a ctypes Structure of that size")
        if len(data) != p.size:
            raise self._fail(p, value, f"it gives {len(data)} bytes, the parameter has {p.size}")
        return data

    def _integer(self, p: ParamInfo, value: Any) -> int:
        if isinstance(value, np.generic):
            if value.dtype.kind not in "iub" or value.dtype.itemsize != p.size:
                raise self._fail(p, value, f"a numpy {value.dtype} ({value.dtype.itemsize} bytes) does not match; "
                                           f"pass a {p.size}-byte integer or a Python int")
            return int(value)
        if isinstance(value, int):
            return value
        getter = _pointer_getter(value) if p.size == 8 else None
        if getter is not None:
            return getter(value)
        rule = "floats are not converted to integer parameters" if isinstance(value, float) else \
            "an integer parameter takes an int, a numpy integer of its size" + (", or a device array" if p.size == 8 else "")
        raise self._fail(p, value, rule)

    def _writer(self, p: ParamInfo) -> Callable[[Any], None]:
        view, start, end = self.view, p.offset, p.offset + p.size
        kind = p.kind
        if kind == "unknown":  # driver layout only: scalars by size, anything else is a by-value struct
            kind = "int" if p.size in _INT_FORMATS else "bytes"
        if kind == "bytes":
            def write_bytes(value: Any) -> None:
                view[start:end] = self._by_value(p, value)
            return write_bytes
        if kind == "float":
            packer = struct.Struct(_FLOAT_FORMATS[p.size])

            def write_float(value: Any) -> None:
                if isinstance(value, np.generic) and (value.dtype.kind != "f" or value.dtype.itemsize != p.size):
                    raise self._fail(p, value, f"a numpy {value.dtype} does not match; pass a Python float")
                if not isinstance(value, (float, int, np.generic)) or isinstance(value, bool):
                    raise self._fail(p, value, "a float parameter takes a Python float or int")
                packer.pack_into(view, start, value)
            return write_float
        packer = struct.Struct(_INT_FORMATS[p.size])
        # NVRTC declares `int` as .u32 (PTX keeps no signedness for parameters), so any value that fits the
        # width in two's complement is accepted and stored masked.
        low, high, mask = -(1 << (8 * p.size - 1)), (1 << (8 * p.size)) - 1, (1 << (8 * p.size)) - 1
        untyped_float = struct.Struct(_FLOAT_FORMATS[p.size]) if p.kind == "unknown" and p.size in _FLOAT_FORMATS else None

        def write_int(value: Any) -> None:
            if type(value) is int and low <= value <= high:  # the common case, no further checks
                packer.pack_into(view, start, value & mask)
                return
            if hasattr(value, "__kernel_param__"):
                view[start:end] = self._by_value(p, value)
                return
            if untyped_float is not None and isinstance(value, float):
                untyped_float.pack_into(view, start, value)  # no PTX type known: a float is sent as one
                return
            number = self._integer(p, value)
            if not low <= number <= high:
                raise self._fail(p, value, f"out of range for a {p.size}-byte integer")
            packer.pack_into(view, start, number & mask)
        return write_int
