"""Packing kernel arguments: one parameter buffer per kernel (or bound launch), laid out once from the
parameter list (``kernel_signature.ParamInfo``); a launch writes only the bytes of the arguments it is given.

``ArgPacker.pack(args)`` writes every argument; ``ArgPacker.write(index, value)`` one. ``pointers_address`` is
the ``kernelParams`` array cuLaunchKernelEx takes. Array arguments are read through ``arrays.as_array_view``
(the one adapter); objects with ``__kernel_param__(nbytes)`` (TensorMap) give their own bytes.
"""
from __future__ import annotations

import ctypes
import struct
from typing import Any, Callable, Sequence

import numpy as np

from .arrays import array_pointer
from .errors import LaunchError
from .kernel_signature import ParamInfo

_INT_FORMATS = {1: "<B", 2: "<H", 4: "<I", 8: "<Q"}
_FLOAT_FORMATS = {4: "<f", 8: "<d"}


class ArgPacker:
    """Writes Python arguments into the kernel's parameter buffer, checked against its parameter list.

    ``pointers`` is the ``kernelParams`` array (one pointer per parameter, into ``buffer``), built once.
    """

    def __init__(self, params: Sequence[ParamInfo], kernel: str, device: int | None = None,
                 like: "ArgPacker | None" = None):
        if like is None:  # lay the parameters out (once per kernel: a bound launch takes ``blank()``)
            self.params, self.kernel, self.device = list(params), kernel, device
            self._size = max(max((p.offset + p.size for p in self.params), default=0), 8)
            self._layout = [self._param_layout(p) for p in self.params]
            self._offsets = struct.Struct(f"<{max(len(self.params), 1)}Q"), [p.offset for p in self.params]
            # the ctypes types of the buffer and of kernelParams, made once per kernel (``c_char * n`` is a type
            # construction, and a bound launch's blank() is on every op plan's path)
            self._types = ctypes.c_char * self._size, ctypes.c_void_p * max(len(self.params), 1)
            self._proto = self
        else:
            self.params, self.kernel, self.device = like.params, like.kernel, like.device
            self._size, self._layout, self._offsets, self._types = like._size, like._layout, like._offsets, like._types
            self._proto = like._proto  # the writers' checks run on it: a blank packer holds no reference cycle
        self.buffer = self._types[0]()  # zeroed, as create_string_buffer(size) makes it
        self.view = memoryview(self.buffer).cast("B")
        self.pointers = self._pointer_array(self.buffer)
        self.pointers_address = ctypes.addressof(self.pointers)
        self._writer_list: list | None = None  # one closure per parameter, built on the first write

    @property
    def _writers(self) -> list:
        """One writer per parameter (closures over this packer's buffer), built when first needed: a bound launch
        packed by ``packed_copy`` builds them only if it ever ``update``s an argument."""
        writers = self._writer_list
        if writers is None:
            writers = self._writer_list = [self._writer(*layout) for layout in self._layout]
        return writers

    def blank(self) -> "ArgPacker":
        """A packer of the same parameter list with its own zeroed buffer (the layout is shared, not redone)."""
        return ArgPacker((), self.kernel, like=self)

    def packed_copy(self, args: Sequence[Any]) -> "ArgPacker":
        """A ``blank()`` packer holding ``args``: packed (and checked) in this packer's buffer, then copied. The
        caller serialises use of this packer's buffer (``Kernel.bind`` holds the kernel's lock)."""
        packer = self.blank()
        self.pack(args)
        packer.view[:] = self.view
        return packer

    def pack(self, args: Sequence[Any]) -> None:
        if len(args) != len(self._writers):
            listing = ", ".join(p.describe() for p in self.params) or "none"
            raise LaunchError(f"kernel {self.kernel} takes {len(self.params)} argument(s), got {len(args)}; "
                              f"its parameters: {listing}")
        for write, value in zip(self._writers, args):
            write(value)

    def write(self, index: int, value: Any) -> None:
        """Write one argument's bytes (the others stay as packed)."""
        if type(index) is not int or not 0 <= index < len(self._writers):
            raise LaunchError(f"kernel {self.kernel}: argument index {index!r} is not in 0..{len(self._writers) - 1}")
        self._writers[index](value)

    def _pointer_array(self, buffer: Any) -> Any:
        """The kernelParams array for ``buffer``: one pointer per parameter, at its offset."""
        base, (packer, offsets) = ctypes.addressof(buffer), self._offsets
        return self._types[1].from_buffer_copy(packer.pack(*([base + o for o in offsets] or [0])))

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
        pointer = array_pointer(value, f"argument {p.index}") if p.size == 8 else None
        if pointer is not None:
            return pointer
        rule = "floats are not converted to integer parameters" if isinstance(value, float) else \
            "an integer parameter takes an int, a numpy integer of its size" + (", or a device array" if p.size == 8 else "")
        raise self._fail(p, value, rule)

    @staticmethod
    def _param_layout(p: ParamInfo) -> tuple:
        """What a writer of ``p`` needs, worked out once per kernel: (p, kind, struct, low, high, mask, float struct)."""
        kind = p.kind
        if kind == "unknown":  # driver layout only: scalars by size, anything else is a by-value struct
            kind = "int" if p.size in _INT_FORMATS else "bytes"
        if kind == "bytes":
            return p, kind, None, 0, 0, 0, None
        if kind == "float":
            return p, kind, struct.Struct(_FLOAT_FORMATS[p.size]), 0, 0, 0, None
        # NVRTC declares `int` as .u32 (PTX keeps no signedness for parameters), so any value that fits the
        # width in two's complement is accepted and stored masked.
        low, high, mask = -(1 << (8 * p.size - 1)), (1 << (8 * p.size)) - 1, (1 << (8 * p.size)) - 1
        untyped_float = struct.Struct(_FLOAT_FORMATS[p.size]) if p.kind == "unknown" and p.size in _FLOAT_FORMATS else None
        return p, kind, struct.Struct(_INT_FORMATS[p.size]), low, high, mask, untyped_float

    def _writer(self, p: ParamInfo, kind: str, packer: Any, low: int, high: int, mask: int,
                untyped_float: Any) -> Callable[[Any], None]:
        view, start, end = self.view, p.offset, p.offset + p.size
        by_value, fail, integer = self._proto._by_value, self._proto._fail, self._proto._integer
        if kind == "bytes":
            def write_bytes(value: Any) -> None:
                view[start:end] = by_value(p, value)
            return write_bytes
        if kind == "float":
            def write_float(value: Any) -> None:
                if isinstance(value, np.generic) and (value.dtype.kind != "f" or value.dtype.itemsize != p.size):
                    raise fail(p, value, f"a numpy {value.dtype} does not match; pass a Python float")
                if not isinstance(value, (float, int, np.generic)) or isinstance(value, bool):
                    raise fail(p, value, "a float parameter takes a Python float or int")
                packer.pack_into(view, start, value)
            return write_float

        def write_int(value: Any) -> None:
            if type(value) is int and low <= value <= high:  # the common case, no further checks
                packer.pack_into(view, start, value & mask)
                return
            if hasattr(value, "__kernel_param__"):
                view[start:end] = by_value(p, value)
                return
            if untyped_float is not None and isinstance(value, float):
                untyped_float.pack_into(view, start, value)  # no PTX type known: a float is sent as one
                return
            number = integer(p, value)
            if not low <= number <= high:
                raise fail(p, value, f"out of range for a {p.size}-byte integer")
            packer.pack_into(view, start, number & mask)
        return write_int
