"""Bank conflicts of the transpose kernel's own shared-memory accesses, counted from what the GPU did.

cuda_src/transpose.cu calls TMAKIT_TRANSPOSE_TRACE(pointer, bytes) before each shared-memory access of its
turn step (the tile's loads, the images' stores); the macro is empty in the product. Here it is defined to
record, for each warp instruction, every active lane's shared address and width into a ``__device__`` buffer
(TRACE below, then ``#include "transpose.cu"``). ``ops.plan_transpose`` runs that module on real buffers,
its result is checked against numpy, and every recorded warp access is counted with
``tmakit.layout.bank_conflicts``. The kernel claims its turn conflict free, but for 8-byte elements in two row
classes, whose shifted class's stores are 2-way (column_chunk in the kernel says why), and the packed prefix's
stores of row-sector runs (RunRows in the kernel says why).

CPU tier: the traced source compiles for sm_90a and sm_80 (both engines), and the untraced kernel compiles to
the same code as before the hook was added (the hook is free when off).
"""
from __future__ import annotations

import importlib
import re
import sys

import numpy as np
import pytest

from tmakit import _driver, ops
from tmakit.backend import choose_backend
from tmakit.build import compile_cuda, load_module
from tmakit.layout import bank_conflicts

BLOCKS, WARPS, RECORDS = 16, 8, 96  # recorded: the first BLOCKS blocks, WARPS warps each, RECORDS accesses a warp

TRACE = f"""
#define TRACE_BLOCKS {BLOCKS}u
#define TRACE_WARPS {WARPS}u
#define TRACE_RECORDS {RECORDS}u
// per (block, warp): accesses recorded; per (block, warp, access, lane): bit 31 active, bit 30 a store,
// bits 24..29 the width,
// bits 0..23 the shared-window address
__device__ unsigned tmakit_trace_count[TRACE_BLOCKS * TRACE_WARPS];
__device__ unsigned tmakit_trace[TRACE_BLOCKS * TRACE_WARPS * TRACE_RECORDS * 32u];

__device__ __forceinline__ void tmakit_trace_record(unsigned address, unsigned bytes, unsigned store) {{
  const unsigned warp = threadIdx.x / 32u, lane = threadIdx.x % 32u;
  if (blockIdx.x >= TRACE_BLOCKS || warp >= TRACE_WARPS) return;
  const unsigned mask = __activemask(), leader = __ffs(mask) - 1u, slot = blockIdx.x * TRACE_WARPS + warp;
  unsigned n = 0;
  if (lane == leader) n = *(volatile unsigned*)&tmakit_trace_count[slot];
  n = __shfl_sync(mask, n, leader);
  if (n < TRACE_RECORDS)
    tmakit_trace[(slot * TRACE_RECORDS + n) * 32u + lane] = 0x80000000u | (store << 30) | (bytes << 24) | (address & 0xFFFFFFu);
  __syncwarp(mask);
  if (lane == leader) {{
    *(volatile unsigned*)&tmakit_trace_count[slot] = n + 1u;
    __threadfence_block();
  }}
  __syncwarp(mask);
}}
// the turn loads through const pointers and stores through mutable ones
__host__ __device__ constexpr unsigned tmakit_trace_is_store(const void*) {{ return 0u; }}
__host__ __device__ constexpr unsigned tmakit_trace_is_store(void*) {{ return 1u; }}
static_assert(tmakit_trace_is_store((uint4*)nullptr) == 1u && tmakit_trace_is_store((const unsigned char*)nullptr) == 0u,
              "the turn's stores (uint4*) and loads (const uint8_t*) are told apart");
template <class P>
__device__ __forceinline__ void tmakit_trace_access(P* p, unsigned bytes) {{
  tmakit_trace_record((unsigned)__cvta_generic_to_shared(p), bytes, tmakit_trace_is_store(p));
}}
#define TMAKIT_TRANSPOSE_TRACE(pointer, bytes) tmakit_trace_access((pointer), (bytes))
#include "transpose.cu"
"""

ENGINES = {"tma": "sm_90a", "cp.async": "sm_80"}


# ---- CPU tier ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("esize, classes", [(1, 1), (8, 2)])
@pytest.mark.parametrize("backend", list(ENGINES))
def test_traced_transpose_compiles_for_both_engines(backend, esize, classes):
    arch = ENGINES[backend]
    defines = {**choose_backend(backend, arch=arch).defines, "TMAKIT_TRANSPOSE_ELEMENT_BYTES": esize,
               "TMAKIT_TRANSPOSE_ROW_CLASSES": classes}
    traced = compile_cuda(TRACE, arch=arch, defines=defines, name="transpose_traced.cu")
    plain = compile_cuda("transpose.cu", arch=arch, defines=defines)
    assert ".entry tmakit_transpose" in traced.ptx and ".entry tmakit_transpose" in plain.ptx
    assert re.search(r"\.global .*tmakit_trace\[", traced.ptx), "the traced module has no trace buffer"
    assert "tmakit_trace" not in plain.ptx and "activemask" not in plain.ptx, "the product kernel records accesses"
    # a load and a store hook in the turn (and the prefix's round) of this build's element size and row classes
    assert traced.ptx.count("activemask") >= 2, "the hooks did not reach the turn's accesses"


# ---- GPU tier ------------------------------------------------------------------------------------------------

def _traced_kernels(monkeypatch):
    """Make plan_transpose load the traced module; returns the modules it loaded."""
    transpose_module = importlib.import_module("tmakit.ops.transpose")
    modules = []

    def kernel(source, entry, choice, device, **defines):
        assert source == "transpose.cu"
        modules.append(load_module(TRACE, device=device, defines={**choice.defines, **defines}))
        return modules[-1].kernel(entry)

    monkeypatch.setattr(transpose_module, "kernel", kernel)
    return modules


def _read_global(module, name, count):
    address, size = _driver.call("cuModuleGetGlobal", module.handle, name.encode())
    assert int(size) == count * 4
    host = np.empty(count, np.uint32)
    _driver.call("cuMemcpyDtoH", host.ctypes.data, address, int(size))
    return host


def _warp_accesses(module):
    """[(kind, width, [address or None per lane]), ...] for every recorded warp instruction, kind "load" or
    "store"."""
    counts = _read_global(module, "tmakit_trace_count", BLOCKS * WARPS)
    trace = _read_global(module, "tmakit_trace", BLOCKS * WARPS * RECORDS * 32).reshape(BLOCKS * WARPS, RECORDS, 32)
    assert counts.max() <= RECORDS, f"a warp made {counts.max()} accesses; raise RECORDS"
    accesses = []
    for slot, n in enumerate(counts):
        for lanes in trace[slot, :n]:
            active = lanes >> 31 == 1
            kinds = set((lanes[active] >> 24 & 0x7F).tolist())  # store bit and width
            assert len(kinds) == 1, f"lanes of one instruction disagree on the access: {kinds}"
            kind = kinds.pop()
            accesses.append(("store" if kind & 0x40 else "load", kind & 0x3F,
                             [int(a & 0xFFFFFF) if on else None for a, on in zip(lanes, active)]))
    return accesses


def _rows_for(esize, classes, row_sectors=False):
    # dst pitch = rows * esize bytes: a multiple of 32 makes one row class, 16 mod 32 two (one shifted), an odd
    # count of elements row-sector runs (a pitch that is not a multiple of 16); more than two 256-row tiles, so
    # that recorded blocks load the prefix of shifted or row-sector runs
    return 3 * 256 + (1 if row_sectors else 0 if classes == 1 else 16 // esize)


# (element bytes, dst row classes, row-sector runs, backend, tile rows): both tile heights on the TMA path (128, its
# default; 256)
CASES = [pytest.param(e, c, False, "tma", t, marks=pytest.mark.requires_sm90)
         for e in (1, 2, 4, 8) for c in (1, 2) for t in (128, 256)]
# row-sector runs (dst pitch odd): extended rows; the packed prefix's stores (chunks 0 and 1) are left out
CASES += [pytest.param(e, 1, True, "tma", t, marks=pytest.mark.requires_sm90) for e in (1, 2, 4, 8) for t in (128, 256)]
CASES += [pytest.param(e, 2, False, "cp.async", 256, marks=pytest.mark.requires_sm80) for e in (1, 8)]


@pytest.mark.requires_gpu
@pytest.mark.parametrize("esize,classes,row_sectors,backend,tile_rows", CASES)
def test_transpose_turn_is_bank_conflict_free_on_the_gpu(monkeypatch, esize, classes, row_sectors, backend,
                                                          tile_rows):
    from tmakit.device_array import DeviceArray

    modules = _traced_kernels(monkeypatch)
    dtype = np.dtype(f"u{esize}")
    rows, cols = _rows_for(esize, classes, row_sectors), (2 * 128 + 16) // esize  # two tile columns and a 16-byte edge
    rng = np.random.default_rng()
    host = rng.integers(0, 256, size=rows * cols * esize, dtype=np.uint8).view(dtype).reshape(rows, cols)
    poison = np.full((cols, rows * esize), 0xA5, np.uint8).view(dtype)
    with DeviceArray.from_host(host) as src, DeviceArray.from_host(poison) as dst:
        plan = ops.plan_transpose(dst, src, backend=backend, tile_plan=ops.TilePlan.of(tile_rows))
        assert plan.result.sectors.classes == classes and plan.result.sectors.row_sectors == row_sectors, plan.result
        plan()
        _driver.call("cuCtxSynchronize")
        assert np.array_equal(dst.to_host(), host.T), "the traced kernel transposed wrongly"
    assert len(modules) == 1
    accesses = _warp_accesses(modules[0])
    turn = Turn(esize)
    loads = [a for a in accesses if a[0] == "load"]
    stores = [a for a in accesses if a[0] == "store"]
    assert {w for _, w, _ in loads} == {turn.slice_bytes} and {w for _, w, _ in stores} == {16}
    assert len(loads) > 0 and len(stores) > 0
    if classes == 2:  # the prefix's round: one micro-block row in 8 works (4 lanes of a warp)
        assert any(sum(x is not None for x in lanes) == 4 for _, _, lanes in loads), "no prefix load was recorded"
    tile_bytes = tile_rows * 128  # the tile's rows in the stage (32 KiB of 256 rows)
    if row_sectors:  # the packed prefix: its loads read the prefix box, after the tile's rows in the stage
        stage = min(a for _, _, lanes in loads for a in lanes if a is not None) & ~0x3FF
        assert any(min(a for a in lanes if a is not None) >= stage + tile_bytes for _, _, lanes in loads), \
            "no prefix load was recorded"
    if row_sectors:  # the packed prefix's stores into chunks 0 and 1 of the extended rows (after the stage and its
        # two prefix chunks: 36 KiB with 256 rows)
        stride = (tile_rows // (16 // esize) + 2) * 16
        prefix_stores = [lanes for _, _, lanes in stores
                         if all((a - stage - tile_bytes - 4096) % stride < 32 for a in lanes if a is not None)]
        assert prefix_stores, "no prefix store was recorded"
        stores = [a for a in stores if a[2] not in prefix_stores]
        accesses = [a for a in accesses if a[0] == "load" or a[2] not in prefix_stores]
    conflicts = {kind: [(i, extra) for i, (k, w, lanes) in enumerate(accesses) if k == kind
                        for extra in [bank_conflicts(lanes, w)] if extra] for kind in ("load", "store")}
    where = f"{esize}-byte elements, {classes} row class(es){', row sectors' if row_sectors else ''}, {backend}"
    assert not conflicts["load"], f"{where}: {len(conflicts['load'])} of {len(loads)} warp loads conflict: {conflicts['load'][:8]}"
    if esize == 8 and classes == 2:  # the documented exception: the shifted class's stores 2-way, never worse
        phases = 4  # a 16-byte warp access: 4 phases of 8 lanes, each at most one wavefront more
        assert all(extra <= phases for _, extra in conflicts["store"]), f"{where}: {conflicts['store'][:8]}"
        assert len(conflicts["store"]) <= len(stores) // 2 + 1, f"{where}: more than the shifted class's stores conflict"
    else:
        assert not conflicts["store"], f"{where}: {len(conflicts['store'])} of {len(stores)} warp stores conflict: {conflicts['store'][:8]}"


class Turn:
    """The kernel's Turn<T> constants that the test needs."""

    def __init__(self, esize):
        self.slice_bytes = 16 // max(1, 4 // esize)  # S = 16 / P, P = max(1, 4 / E)


def test_trace_decoding_on_a_made_up_record(monkeypatch):
    """What the GPU test reads back, decoded: per warp instruction its kind, width and the active lanes' addresses."""
    counts = np.zeros(BLOCKS * WARPS, np.uint32)
    trace = np.zeros((BLOCKS * WARPS, RECORDS, 32), np.uint32)
    counts[3] = 2
    trace[3, 0, :] = 0x80000000 | (4 << 24) | (np.arange(32, dtype=np.uint32) * 4 + 0x400)  # a 4-byte load, all lanes
    trace[3, 1, 7::8] = 0x80000000 | (1 << 30) | (16 << 24) | 0x810  # a 16-byte store by lanes 7, 15, 23, 31
    monkeypatch.setattr(sys.modules[__name__], "_read_global",
                        lambda module, name, count: counts if name == "tmakit_trace_count" else trace.ravel())
    (load, store) = _warp_accesses(None)
    assert load == ("load", 4, [0x400 + 4 * i for i in range(32)]) and bank_conflicts(load[2], 4) == 0
    assert store[:2] == ("store", 16) and [i for i, a in enumerate(store[2]) if a is not None] == [7, 15, 23, 31]
    assert bank_conflicts(store[2], 16) == 0  # four lanes, one per 8-lane phase
