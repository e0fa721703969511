"""CPU model of a TMA reduce-add store (``cp.reduce.async.bulk.tensor.Nd.global.shared::cta.add.tile``).

PTX ISA "cp.reduce.async.bulk.tensor": each element of the box is reduced into global memory inline; ``.add``
is defined for u32, s32, u64, f32, f16 and bf16. The box is read from shared memory at the same (swizzled)
addresses a tile load writes (``tma_model``), and elements outside the tensor are skipped, like a tile store.

Arithmetic (checked on an H100 by tests/test_tma_modes_hardware.py): integers add modulo 2^bits; f32 is the
IEEE sum rounded to nearest even; f16 and bf16 are the exact sum of the two values rounded once to nearest
even in the 16-bit format. Only finite inputs are modelled exactly (NaN payloads and subnormal flushing of the
hardware are not claimed).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..dtypes import DataType
from ..errors import InvalidArgumentError
from .tma_model import _element_map, check_store_start

# The element types .add accepts (PTX ISA table of cp.reduce.async.bulk.tensor), with the numpy type of the sum.
REDUCE_ADD_TYPES = {DataType.UINT32: np.uint32, DataType.INT32: np.int32, DataType.UINT64: np.uint64,
                    DataType.FLOAT32: np.float32, DataType.FLOAT16: np.float16, DataType.BFLOAT16: None}


def _bf16_round(values: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bits, round to nearest even (finite inputs)."""
    bits = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def _bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def add_elements(dtype: Any, before: np.ndarray, addend: np.ndarray) -> np.ndarray:
    """``before + addend`` as the reduce-add computes it, on raw little-endian element bytes ([n, size] uint8)."""
    dt = DataType.parse(dtype)
    if dt not in REDUCE_ADD_TYPES:
        raise InvalidArgumentError("dtype", dt.short, "has no reduce-add (PTX .add takes u32, s32, u64, f32, f16, bf16)",
                                   "describe the tensor as one of those types")
    a = np.ascontiguousarray(before, dtype=np.uint8)
    b = np.ascontiguousarray(addend, dtype=np.uint8)
    if dt is DataType.BFLOAT16:
        x, y = _bf16_to_f32(a.view(np.uint16)), _bf16_to_f32(b.view(np.uint16))
        # the sum of two bf16 values rounds correctly through float32: it is exact there unless the exponents
        # differ by more than 16, and then the smaller one is far below half a bf16 unit.
        return _bf16_round(x + y).view(np.uint8).reshape(a.shape)
    if dt is DataType.FLOAT16:
        x, y = a.view(np.float16).astype(np.float64), b.view(np.float16).astype(np.float64)
        return (x + y).astype(np.float16).view(np.uint8).reshape(a.shape)  # exact in float64, rounded once
    t = REDUCE_ADD_TYPES[dt]
    with np.errstate(over="ignore"):
        return (a.view(t) + b.view(t)).astype(t).view(np.uint8).reshape(a.shape)


def tma_reduce_add(spec: Any, memory: np.ndarray, coords: Sequence[int], image: np.ndarray) -> np.ndarray:
    """Apply a reduce-add of the shared-memory ``image`` into the box at ``coords`` (driver order) of ``memory``
    (the tensor's bytes from its base address), in place: every in-bounds element becomes before + box."""
    check_store_start(coords)
    if not (isinstance(memory, np.ndarray) and memory.flags.c_contiguous and memory.flags.writeable):
        raise InvalidArgumentError("memory", type(memory).__name__, "must be a writable C-contiguous numpy array "
                                   "(the reduction writes into it in place)", "pass numpy.ascontiguousarray(...)")
    geo, soff, goff, inb = _element_map(spec, coords)
    mem = memory.view(np.uint8).reshape(-1)
    img = np.asarray(image).view(np.uint8).ravel()
    byte = np.arange(geo.elem_size, dtype=np.int64)
    dst = goff[inb][:, None] + byte
    src = soff[inb][:, None] + byte
    mem[dst] = add_elements(spec.dtype, mem[dst], img[src])
    return memory
