"""The per-call host paths: repeating a kernel launch, and answering a repeated ``describe_tensor`` request.

They run on every call, so their cost is the interpreter's own. ``tmakit/_native.c`` implements them in C
(pip builds it where a C compiler is present); this module holds the Python twin of each, with the same
behaviour, used when the extension is missing or ``TMAKIT_NATIVE=0``. ``IMPLEMENTATION`` and ``STATUS`` say
which is in use (``tmakit info`` shows them); the tests run both and compare.

Contracts (both implementations):

``RepeatLaunch``: base of ``tmakit.Kernel``. ``kernel(*args, **kwargs)`` with the same arguments as the armed
launch (ints and bytes equal, tuples of them equal, every other object identical; the same keywords) and its
module still loaded (``alive.alive``) launches the frozen parameter buffer again. Anything else calls
``kernel._launch_slow(args, kwargs)``. ``_arm(args, kwargs, keep, alive, launch, config, func, params)`` arms
a launch (addresses of cuLaunchKernelEx, the CUlaunchConfig, the CUfunction and the kernelParams array, all
kept valid by ``keep``, a ``BoundLaunch``); a failed repeat calls ``kernel._repeat_failed(code)``.

``lookup_request(requests, array, box, swizzle, oob_fill, l2_promotion, interleave, element_strides, dtype,
arch, encode)``: for a torch-like tensor, returns a new ``TensorMap`` when ``requests`` holds this exact request
for this live array at its current address and layout; else ``(request, ptr, layout)`` to build and remember;
else None when the request cannot be a cache key (box or element strides not a tuple/list of exact ints, a
bool or float option, an unhashable option). Entries are ``(weakref(array), ptr, layout, (spec, arch,
device, descriptor, swizzle_reason))``.

``describe_front(impl, rest, torch_like, requests, defaults)``: the public ``describe_tensor``. In C, the calls
``describe_tensor(x, box)`` and ``describe_tensor(x, box=box)`` for an ``x`` whose type is in ``torch_like``
run ``lookup_request`` with the default options and return a hit; a miss goes to ``rest(x, box, defaults,
found)``; every other call to ``impl``. In front of the dict, a table of recent plain requests indexed by the
array's address answers a repeat with the same checks (live array, equal box, equal ``data_ptr()``, shape and
``stride()``) and no key tuple or dict probe; while the TensorMap it returned last is alive, it returns that same
object (tmakit never changes a TensorMap it has returned). ``forget()`` empties the table. The Python twin is ``impl`` itself.

``repoint(stored, address)``: ``stored = (CUtensorMap, its address, cuTensorMapReplaceAddress's address)``;
re-points the descriptor at ``address`` and returns its 128 bytes, or None when the driver refuses.
"""
from __future__ import annotations

import functools
import os
from ctypes import string_at
from typing import Any, Callable


def _load_native() -> tuple[Any, str]:
    if os.environ.get("TMAKIT_NATIVE", "1") == "0":
        return None, "Python twins (TMAKIT_NATIVE=0)"
    try:
        from . import _native
    except ImportError as exc:
        return None, f"Python twins (the C extension tmakit._native is not built: {exc})"
    return _native, "C extension tmakit._native"


_native, STATUS = _load_native()
IMPLEMENTATION = "native" if _native is not None else "python"

_INT = frozenset({int})
_BOOL_OR_FLOAT = frozenset({bool, float})


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    tp = type(a)
    if tp is not type(b):
        return False
    if tp is int or tp is bytes:
        return a == b
    if tp is tuple:
        return len(a) == len(b) and all(map(_same, a, b))
    return False


class PyRepeatLaunch:
    """Python twin of ``tmakit._native.RepeatLaunch`` (see the module docstring)."""

    __slots__ = ()
    _repeat: tuple | None = None  # (args, kwargs, keep, alive) of the armed launch

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        armed = self._repeat
        if (armed is not None and _same(args, armed[0]) and kwargs.keys() == armed[1].keys()
                and all(map(_same, kwargs.values(), map(armed[1].__getitem__, kwargs))) and armed[3].alive):
            return armed[2]()  # the BoundLaunch: launch, check, retry, blocking sync
        return self._launch_slow(args, kwargs)  # type: ignore[attr-defined]

    def _arm(self, args: tuple, kwargs: dict, keep: Any, alive: Any, launch: int, config: int, func: int,
             params: int) -> None:
        self._repeat = (args, dict(kwargs), keep, alive)

    @property
    def _armed(self) -> Any:
        return None if self._repeat is None else self._repeat[2]


_tensor_map_type: Any = None


def py_bind_tensor_map(tensor_map_type: type, fields: tuple) -> None:
    global _tensor_map_type
    _tensor_map_type = tensor_map_type


def _int_tuple(seq: Any) -> tuple | None:
    if type(seq) is list:
        seq = tuple(seq)
    elif type(seq) is not tuple:
        return None
    return seq if _INT.issuperset(map(type, seq)) else None


def py_lookup_request(requests: dict, array: Any, box: Any, swizzle: Any, oob_fill: Any, l2_promotion: Any,
                      interleave: Any, element_strides: Any, dtype: Any, arch: Any, encode: Any) -> Any:
    """Python twin of ``tmakit._native.lookup_request`` (see the module docstring)."""
    if not _BOOL_OR_FLOAT.isdisjoint(map(type, (swizzle, oob_fill, l2_promotion, interleave))):
        return None
    box_key = _int_tuple(box)
    es_key = None if element_strides is None else _int_tuple(element_strides)
    if box_key is None or (element_strides is not None and es_key is None):
        return None
    request = (id(array), box_key, swizzle, oob_fill, l2_promotion, interleave, es_key, dtype, arch, encode)
    try:
        entry = requests.get(request)
    except TypeError:  # an unhashable option: the general path reports it
        return None
    ptr, layout = array.data_ptr(), (array.shape, array.stride())
    if entry is not None and entry[0]() is array and entry[1] == ptr and entry[2] == layout:
        return _tensor_map_type(*entry[3], array, layout)
    return request, ptr, layout


def py_repoint(stored: tuple, address: int) -> bytes | None:
    """Python twin of ``tmakit._native.repoint``, through cuda.bindings."""
    from . import _driver

    result = _driver.bindings().cuTensorMapReplaceAddress(stored[0], address)
    if (result[0] if type(result) is tuple else result) != 0:
        return None
    return string_at(stored[1], 128)


def describe_front(impl: Callable, rest: Callable, torch_like: set, requests: dict, defaults: tuple) -> Callable:
    """The public describe_tensor: the C front (``_native.DescribeFront``, which answers describe_tensor(x, box)
    for a known torch-like x with default options from ``requests`` and hands misses to ``rest``) dressed as
    ``impl``; without the extension, ``impl`` itself."""
    if _native is None:
        return impl
    return functools.update_wrapper(_native.DescribeFront(impl, rest, torch_like, requests, defaults), impl)


if _native is not None:
    RepeatLaunch: Any = _native.RepeatLaunch
    bind_tensor_map, lookup_request, repoint = _native.bind_tensor_map, _native.lookup_request, _native.repoint
else:
    RepeatLaunch = PyRepeatLaunch
    bind_tensor_map, lookup_request, repoint = py_bind_tensor_map, py_lookup_request, py_repoint
