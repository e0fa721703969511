"""CPU model of what a TMA store or reduce-add store writes to global memory, and of the reduce-add arithmetic.

Which elements a store writes (measured on an H100, benchmarks/tma_modes_vs_model.py, 1000 random descriptors):
every element of the box inside the tensor, AND, along dim 0, the elements past ``dims[0]`` up to the next
16-byte boundary of the row (``ceil(dims[0] * elem_size / 16) * 16`` bytes): the TMA unit writes whole 16-byte
chunks along the innermost dimension, so the padding between a row's end and the next 16 bytes is overwritten
with the box's data (a reduce-add adds into it). The other dimensions are clipped exactly. ``tma_model.store_element_map``
gives this set; ``tma_model.tma_store`` and ``tma_reduce_add`` use it.

Reduce-add (``cp.reduce.async.bulk.tensor.Nd.global.shared::cta.add.tile``), PTX ISA "cp.reduce.async.bulk.tensor": each element of the box is reduced into global memory inline; ``.add``
is defined for u32, s32, u64, f32, f16 and bf16. The box is read from shared memory at the same (swizzled)
addresses a tile load writes (``tma_model``), and it writes the same elements as a tile store.

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
from .tma_model import check_store_start, store_element_map

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
    geo, soff, goff, inb = store_element_map(spec, coords, memory.nbytes)
    mem = memory.view(np.uint8).reshape(-1)
    img = np.asarray(image).view(np.uint8).ravel()
    byte = np.arange(geo.elem_size, dtype=np.int64)
    dst = goff[inb][:, None] + byte
    src = soff[inb][:, None] + byte
    mem[dst] = add_elements(spec.dtype, mem[dst], img[src])
    return memory
