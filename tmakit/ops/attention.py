"""Attention forward: ``O = softmax(scale * Q K^T [+ causal mask]) V`` and the log-sum-exp of each row.

``plan = plan_attention(q, k, v, out=None, *, causal=False, scale=None, layout="bhsd", backend="auto", ...)``
prepares one launch of cuda_src/attention.cu (tensor maps or strides, the compiled kernel, the grid);
``plan()`` reruns it on the same buffers, ``plan(q2, k2, v2, out2)`` on new buffers of the same geometry;
``attention(q, k, v, ...)`` plans and runs once and returns ``(out, lse)``.

- q: (B, H, Sq, D) for ``layout="bhsd"`` or (B, Sq, H, D) for ``layout="bshd"``; k and v the same with Sk keys
  and H_kv heads, H_kv dividing H (grouped-query attention; 1: multi-query): query head h reads K/V head
  h // (H / H_kv), a coordinate of the K and V maps, never a copy; each C-contiguous, bf16 or fp16 (all three
  alike), D = 64, 128 or 256. out: q's shape and dtype; lse: (B, H, Sq)
  float32 (natural log of the row's sum of exp(scale * q.k)).
- Causal masking is top-left aligned (query i sees keys 0..i), as ``torch.nn.functional.
  scaled_dot_product_attention(is_causal=True)``; with Sq > Sk the rows i >= Sk see every key.
- The "tma" backend (sm_90) streams K and V through a TMA ring into wgmma; "cp.async" (sm_80+, or forced on
  sm_90) fills the same shared-memory images with cp.async and runs ldmatrix + mma.sync. Both are described
  in the kernel source's header.
- Decode (Sq = 1, no mask) with grouped-query heads packs the H / H_kv query heads of each K/V head into one
  tile's rows (``packs_query_heads``: q and out mapped as (B, H_kv, H / H_kv, D)); ``plan.packed`` says so. On
  tma, a problem of fewer work tiles than SMs whose tiles hold at most 64 query rows (decode, short queries),
  unmasked, splits each tile's keys into ``plan.kv_splits`` ranges (``choose_kv_splits``): each range's O and lse
  go to an fp32 workspace the plan owns, and a second launch combines them.

The tensors are described to TMA as 4-D (B, H, S, D) maps whatever their memory layout (the strides say
where a head and a sequence row are), with boxes of (1, 1, rows, 64) and 128B swizzle: a head dim of 128 is
two 64-column slabs per tile.

Measured on the H100: benchmarks/results/attention.md and docs/PERFORMANCE.md (beside torch SDPA in the same run).

The tma kernel is persistent: at most one CTA per SM (225 KiB of shared memory at D=128, 384 threads; 512 at D=64
where three consumers take fewer turns, default_config) claims work tiles (64 query rows per consumer warpgroup,
one head) from a per-plan counter.
  producer warpgroup (24 registers; one thread): per tile, wait q_empty of its Q slot -> the Q tile; per key
    block j, wait empty -> expect_tx + the boxes of K into k_full -> the same for V. It runs ahead across tiles:
    with two Q slots (``AttentionConfig.q_slots``: D <= 128) the next tile's Q and first K/V blocks load while
    this tile is computed (with one, they waited for this tile's last S: short sequences, whose tiles have few
    key blocks to hide that, ran 0.83-0.94x SDPA; docs/PERFORMANCE.md, attention forward (9)).
  each consumer warpgroup (64 query rows; 240 registers, 160 with three consumers): S_0, softmax_0; then per key
    block j: S_j = Q K_j^T (wgmma SS) and O += P_{j-1} V_{j-1} (wgmma RS) issued together, wait for S_j,
    softmax_j (mask on the diagonal / tail block, row max by quad shuffles, ex2, P packed to 16 bits) while the
    tensor cores run P V, wait for it, O *= alpha; last P V; under the causal mask the key blocks its own rows
    mask whole it waits for and releases without computing; then every consumer thread arrives on its slot's
    q_empty (the slot's next tile's Q may load) and O / l goes out through its staging buffer by TMA stores, lse by
    plain stores.
  The bounded waits' trap is out of line (cuda_src/tmakit/mbarrier.cuh): inlined, ptxas allocated the consumers
  within the 168-register launch share and ignored setmaxnreg, which kept S, P and O from living together.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..arch import Arch
from ..arrays import ArrayView
from ..backend import Backend, BackendChoice, choose_backend
from ..device import blocks_per_sm, plan_limits, shared_mem_limit
from ..device_array import DeviceArray
from ..errors import InvalidArgumentError, UnsupportedDeviceError
from ..tensormap import describe_tensor
from ..layout.wgmma import descriptor_define, wgmma_descriptors
from . import _checks
from ._kernels import kernel, sm_count
from ._plan import wait_for_stream
from ._plan_cache import cached

HEAD_DIMS = (64, 128, 256)
DTYPES = ("bfloat16", "float16")
LAYOUTS = ("bhsd", "bshd")
_SLAB = 64  # columns per 128-byte swizzled slab
_BARRIER_BYTES = 8  # one mbarrier
_ALIGN_SLACK = 1024  # dynamic shared memory is 16-byte aligned; the tiles need 1024
_KERNEL_SMEM = 227 * 1024  # the tma kernel's bound on its shared memory (sm_90's opt-in limit a block)
_THREE_CONSUMERS_ABOVE = 640  # tma, D=64: query rows above which 192-row tiles pay (default_config's docstring)
_EMPTIER_TILES = 0.05  # tma, D=64, causal: 128-row tiles where 192-row ones leave this share of S more rows empty
_SHORT_CAUSAL = 512  # tma, D=64, causal, a dense plan: up to this S, 64 keys a stage (default_config's docstring)
_FEW_TILES_FROM = 1024  # tma, D=64, causal, a dense plan: from this S, two consumers where 192-row tiles are few
_TURN_192 = 1.3  # tma, D=64, a dense plan: a turn of 192-row tiles against one of 128-row tiles (default_config)
_ACCUMULATORS = 192  # cp.async: fp32 S and O fragment values a thread holds within 255 registers (check_config)
_WARPS_AN_SM = 8  # cp.async: resident warps the default tile plan keeps an SM (default_config's docstring)


@dataclass(frozen=True)
class AttentionConfig:
    """The tile plan of one compiled variant (cuda_src/attention.cu's defines), with its shared memory."""

    backend: Backend
    head_dim: int
    bf16: bool
    block_m: int  # query rows per block
    block_n: int  # keys per K/V stage
    stages: int  # K/V ring depth
    warps: int  # cp.async path: warps of block_m / warps (16 or 32) query rows; tma: 12 or 16 (a producer and 2
    # or 3 consumer warpgroups)
    slots: int | None = None  # tma: the Q slots set (1 or 2: asked for, or by the plan's rules); None: ``q_slots`` decides

    @property
    def warp_rows(self) -> int:
        """cp.async path: query rows per warp, one or two m16 tiles (each K and V fragment a warp loads feeds as
        many mma); tma: 64 rows per consumer warpgroup."""
        return self.block_m // self.warps if self.backend is Backend.CP_ASYNC else 64

    @property
    def accumulators(self) -> int:
        """cp.async path: fp32 accumulator values a thread holds, S (block_n keys) and O (head_dim columns) for
        each of its warp's m16 tiles: warp_rows x (block_n + head_dim) / 32."""
        return self.warp_rows * (self.block_n + self.head_dim) // 32

    @property
    def threads(self) -> int:
        return 32 * self.warps

    @property
    def q_bytes(self) -> int:
        return self.block_m * self.head_dim * 2

    @property
    def stage_bytes(self) -> int:
        """Shared memory per ring stage: one K and one V tile of block_n keys."""
        return 2 * self.block_n * self.head_dim * 2

    @property
    def shared_mem(self) -> int:
        """Dynamic shared memory per block (bytes), as the kernel lays it out."""
        return self._shared_mem(self.q_slots)

    def _shared_mem(self, q_slots: int) -> int:
        tiles = q_slots * self.q_bytes + self.stages * self.stage_bytes
        if self.backend is Backend.TMA:
            # O's staging buffer; each Q slot's two barriers and its tile number (int32, padded to 8 bytes), the K
            # and V rings' FULL and EMPTY (the kernel's SharedBarriers; it checks the sum: TMAKIT_ATTN_SHARED_MEM)
            bars = _BARRIER_BYTES * (2 * q_slots + 4 * self.stages) + -(-4 * q_slots // 8) * 8
            return tiles + self.o_bytes + bars + _ALIGN_SLACK
        return tiles + _ALIGN_SLACK

    @property
    def q_slots(self) -> int:
        """tma: Q tiles the kernel holds (cuda_src/attention.cu, TMAKIT_ATTN_Q_SLOTS): ``slots`` where asked for,
        else two where they fit beside the ring and O's buffer in the kernel's 227 KiB (D <= 128 with the default
        stages), so the next work tile's Q and first K/V blocks load while this tile is computed; else one. Plans
        ask for one where the tiles fit one turn (``PersistentTiles.q_slots_config``) or two exceed the device."""
        if self.backend is not Backend.TMA:
            return 1
        if self.slots is not None:
            return self.slots
        return 2 if self.o_bytes and self._shared_mem(2) <= _KERNEL_SMEM else 1

    @property
    def o_bytes(self) -> int:
        """tma: O's own staging buffer for its TMA stores (D <= 128; at D = 256 O is staged in the Q tile), so that
        the next work tile's Q loads while this one's O is stored."""
        return self.q_bytes if self.backend is Backend.TMA and self.head_dim <= 128 else 0

    @property
    def defines(self) -> dict[str, int | str]:
        d: dict[str, int | str] = {"TMAKIT_ATTN_HEAD_DIM": self.head_dim, "TMAKIT_ATTN_BF16": int(self.bf16),
                                   "TMAKIT_ATTN_BLOCK_N": self.block_n, "TMAKIT_ATTN_STAGES": self.stages}
        if self.backend is Backend.CP_ASYNC:
            d["TMAKIT_ATTN_WARPS"] = self.warps
            d["TMAKIT_ATTN_WARP_ROWS"] = self.warp_rows
        else:
            d["TMAKIT_ATTN_CONSUMERS"] = self.warps // 4 - 1
            d["TMAKIT_ATTN_Q_SLOTS"] = self.q_slots
            d.update(descriptor_defines(self))
        d["TMAKIT_ATTN_SHARED_MEM"] = self.shared_mem  # the kernel asserts its layout is this size
        return d

    @property
    def entry(self) -> str:
        return "tmakit_attention_fwd_tma" if self.backend is Backend.TMA else "tmakit_attention_fwd_cp_async"

    def budget_lines(self) -> list[str]:
        """The shared-memory budget, one line per part (what the example prints)."""
        kib = lambda n: f"{n / 1024:.1f} KiB"  # noqa: E731
        slots = f" x {self.q_slots} slots" if self.q_slots > 1 else ""
        return [f"Q tile {self.block_m} x {self.head_dim}: {kib(self.q_bytes)}{slots}",
                f"per stage (K + V tiles of {self.block_n} keys): {kib(self.stage_bytes)} x {self.stages} stages",
                *([f"O staging tile: {kib(self.o_bytes)}"] if self.o_bytes else []),
                f"total dynamic shared memory per block: {kib(self.shared_mem)}"]


def _tile_map(view: Any, rows: int, **kw: Any) -> Any:
    """The TMA map of a (B, H, S, D) tensor read in tiles of `rows` rows by one 64-column slab, 128B swizzle."""
    return describe_tensor(view, box=(1, 1, rows, _SLAB), swizzle="128B", **kw)


def stage_descriptors(q_map: Any, k_map: Any, v_map: Any, cfg: AttentionConfig) -> tuple[list, list, list]:
    """The wgmma descriptors the tma kernel reads its tiles with, derived from the maps that fill them (tiles at
    shared address 0): Q as A (K-major; D/16 slices for the consumer rows 0-63, then 64-127), K as B (K-major,
    N = BLOCK_N), V as B (MN-major: stored [keys, D], K = BLOCK_N keys, N = D)."""
    d = cfg.head_dim
    q = wgmma_descriptors(q_map, "A", "K", k=d) + wgmma_descriptors(q_map, "A", "K", k=d, mn_offset=64)
    k = wgmma_descriptors(k_map, "B", "K", k=d, mn=cfg.block_n)
    v = wgmma_descriptors(v_map, "B", "MN", k=cfg.block_n, mn=d)
    return q, k, v


def descriptor_defines(cfg: AttentionConfig) -> dict[str, str]:
    """TMAKIT_ATTN_DESC_Q / _K / _V for cuda_src/attention.cu: ``stage_descriptors`` of maps with this plan's boxes
    (the descriptors depend on the box, element size and swizzle, not on the tensor)."""
    dtype = "bf16" if cfg.bf16 else "f16"
    shape = (1, 1, 2 * max(cfg.block_m, cfg.block_n), cfg.head_dim)

    def tile_map(rows: int) -> Any:
        return _tile_map(None, rows, shape=shape, dtype=dtype, encode=False)

    q, k, v = stage_descriptors(tile_map(cfg.block_m), tile_map(cfg.block_n), tile_map(cfg.block_n), cfg)
    return {"TMAKIT_ATTN_DESC_Q": descriptor_define(q), "TMAKIT_ATTN_DESC_K": descriptor_define(k),
            "TMAKIT_ATTN_DESC_V": descriptor_define(v)}


def three_consumers_by_turns(sq: int, bh: int, sms: int, causal: bool) -> bool:
    """tma, D=64, a dense plan (``bh`` sequences of ``sq`` rows on ``sms`` SMs): 192-row tiles (three consumer
    warpgroups) where their turns of the persistent grid, each _TURN_192 of a 128-row tile's, cost less than the
    128-row tiles' turns; under a causal mask from S _FEW_TILES_FROM, two wherever the 192-row tiles fit one turn
    (the heaviest tile, half as long again at 192 rows, sets the time)."""
    turns = lambda rows: -(-bh * -(-sq // rows) // sms)  # noqa: E731
    if causal and sq >= _FEW_TILES_FROM and turns(192) == 1:
        return False
    return turns(192) * _TURN_192 < turns(128)


def three_consumers(head_dim: int, sq: int | None, causal: bool) -> bool:
    """tma: 192-row tiles (three consumer warpgroups) at D = 64 above _THREE_CONSUMERS_ABOVE query rows, except
    under a causal mask where their last tile would be emptier than a 128-row tiling's by more than
    _EMPTIER_TILES of the rows (default_config's docstring)."""
    if head_dim != 64 or (sq is not None and sq <= _THREE_CONSUMERS_ABOVE):
        return False
    if causal and sq is not None:
        empty = lambda rows: -(-sq // rows) * rows - sq  # noqa: E731
        return empty(192) - empty(128) <= _EMPTIER_TILES * sq
    return True


def default_config(backend: Backend, head_dim: int, bf16: bool = True, *, block_n: int | None = None,
                   stages: int | None = None, warps: int | None = None, warp_rows: int | None = None,
                   shared_mem_limit: int | None = None, shared_mem_per_sm: int | None = None,
                   sq: int | None = None, causal: bool = False, bh: int | None = None,
                   sms: int | None = None, q_slots: int | None = None) -> AttentionConfig:
    """The default tile plan of a backend for a head dim (tuning arguments override each field). With
    ``shared_mem_limit`` (bytes per block), the cp.async path takes the largest K/V tile that fits it; with
    ``shared_mem_per_sm`` too, a block of fewer than 8 warps first takes the largest tile of at least half the
    default's keys (a multiple of 16) with which 8 warps' blocks fit an SM (A100: 48 keys at D=128, where 64 keys
    leave one block of 4 warps an SM; sm_86/89: 64 keys at D=64). A ``block_n`` whose 32-row warps would hold
    more than 192 fp32 accumulators (``AttentionConfig.accumulators``) takes 16-row warps unless ``warp_rows``
    says otherwise.

    Measured on the H100 (benchmarks/attention.py --tune; bf16, B=4, H=16, S=4096):
    - tma, D=128: 128 keys x 2 stages (225 KiB with two Q slots and O's buffer); 3 stages, measured before O had a
      buffer of its own, ran 0.96-0.98x as fast, and no longer fit beside it.
    - tma, D=64: 128 keys x 4 stages, 1.05x the 2-stage ring.
    - cp.async forced (f765238; docs/PERFORMANCE.md, the sm_80 twins): warps of 32 query rows (each K and V
      fragment feeds two m16 tiles), 4 warps and 64 keys x 2 stages at D=128 (97 KiB, two blocks an SM: 369
      TFLOP/s against 307 for 8 warps of 16 rows and 128 keys, 273 with 3 stages, 317 with 32 keys); 4 warps and
      128 keys at D=64 (80 KiB: 308 against 242); at D=256, whose 32-row warps would hold 256 accumulators,
      8 warps of 16 rows and 64 keys (193 KiB: 311 against 251 for 32 keys; sm_80's 163 KiB take 32 keys,
      sm_86/89's 99 KiB 16). B4 H16 S4096 bf16, H100.
    - cp.async at other architectures' occupancy, emulated on the H100 by padding each block's shared memory to
      the blocks an SM of 164 KiB (A100) or 100 KiB (sm_86/89) holds (docs/PERFORMANCE.md, the sm_80 twins): A100,
      D=128, 48 keys (two blocks) 343 / 304 TFLOP/s (full / causal) against 64 keys (one block) 273 / 249; sm_86,
      D=64, 64 keys (two blocks) 291 against 128 keys (one) 225; sm_86, D=256, 8 warps of 16 keys 199 against 4
      warps of 32 keys 178.
    - D=256, tma: 64 keys x 2 stages (192 KiB; not tuned).
    - tma, D=64, a dense plan (``bh``, its batch x heads, and the GPU's ``sms`` given): three consumer warpgroups
      (192-row tiles, 16 warps) by turns of the persistent grid (``three_consumers_by_turns``): where ceil(192-row
      tiles / sms) x 1.3 < ceil(128-row tiles / sms); under a causal mask from S 1024, two wherever the 192-row
      tiles fit one turn. Fitted with the consumers' causal skip (cuda_src/attention.cu) on 100 D=64 cases of the
      sweeps of seeds 1-12 (H100, both options timed against SDPA): geomean 1.159x against 1.110x for the rules
      before, 99.8% of the better option's (docs/PERFORMANCE.md, attention forward).
    - tma, D=64, otherwise (no ``bh``: cross-attention): three consumers where the query length ``sq`` exceeds 640
      rows (1.02-1.39x two consumers at S 715-11012), two below and under a causal mask where the 192-row tiling
      leaves over 5% of the rows more empty than the 128-row one.
    - tma, D=64, causal, a dense plan: 64 keys a stage up to S 512 (8 sweep cases of seeds 1-59, S 143-474:
      1.04x-1.15x 128 keys; from S 1175 on 0.81x-0.96x), H100, 6d41cc7.
    """
    if q_slots is not None:
        if backend is not Backend.TMA:
            raise InvalidArgumentError("q_slots", q_slots, "is the tma backend's (the Q tiles a CTA of its persistent "
                                       f"grid holds); this plan runs {backend.value}", "leave q_slots out")
        if isinstance(q_slots, bool) or not hasattr(q_slots, "__index__") or int(q_slots) not in (1, 2):
            raise InvalidArgumentError("q_slots", q_slots, "must be 1 or 2 (an int: the Q tiles a CTA holds)",
                                       "use 1 or 2, or leave it out")
        q_slots = int(q_slots)
    if warp_rows is not None and (backend is Backend.TMA or type(warp_rows) is not int or warp_rows not in (16, 32)):
        raise InvalidArgumentError("warp_rows", warp_rows, "must be 16 or 32 query rows a warp, on the cp.async "
                                   "backend (the tma backend's consumer warpgroups hold 64 rows each)",
                                   "leave warp_rows out" if backend is Backend.TMA else "use 32")
    if backend is Backend.TMA:
        if warps not in (None, 12, 16) or (warps == 16 and head_dim != 64):
            raise InvalidArgumentError("warps", warps, "must be 12 (a producer warpgroup and two consumer warpgroups "
                                       "of 64 query rows) or, at D=64, 16 (three consumers: 160 registers each "
                                       "hold D=64's accumulators, not wider ones)", "leave warps out")
        dense = head_dim == 64 and sq is not None and bh is not None and sms is not None
        dense_causal = dense and causal
        if warps is None:
            three = three_consumers_by_turns(sq, bh, sms, causal) if dense else three_consumers(head_dim, sq, causal)
            warps = 16 if three else 12
        # D=256: 64 keys a stage (a 128-key K and V stage alone is 128 KiB beside the 64 KiB Q tile)
        keys = 64 if head_dim == 256 or (dense_causal and sq <= _SHORT_CAUSAL) else 128
        tma = AttentionConfig(backend, head_dim, bf16, 64 * (warps // 4 - 1), block_n or keys,
                              stages or (4 if head_dim == 64 else 2), warps, q_slots)
        if q_slots is None and tma.q_slots > 1 and shared_mem_limit is not None and tma.shared_mem > shared_mem_limit:
            tma = replace(tma, slots=1)  # two fit the kernel's 227 KiB, not this device's block
        return tma
    rows = warp_rows or (16 if head_dim == 256 else 32)
    if warp_rows is None and block_n is not None and rows * (block_n + head_dim) // 32 > _ACCUMULATORS:
        rows = 16  # 32-row warps would spill at this block_n (check_config refuses them when asked for)
    w = warps or (8 if rows == 16 else 4)
    cfg = lambda w_, n_: AttentionConfig(backend, head_dim, bf16, rows * w_, n_, stages or 2, w_)  # noqa: E731
    fits = lambda w_, n_: shared_mem_limit is None or cfg(w_, n_).shared_mem <= shared_mem_limit  # noqa: E731
    if block_n is None:
        start = 128 if head_dim == 64 else 64  # D=256: a 64 KiB Q tile, 32 KiB per 64 keys of K or V
        wanted = _WARPS_AN_SM // w  # blocks an SM for 8 warps; an 8-warp block needs only fit
        if shared_mem_per_sm is not None and wanted > 1:
            block_n = next((n for n in range(start, start // 2 - 1, -16) if fits(w, n) and blocks_per_sm(
                cfg(w, n).shared_mem, shared_mem_per_sm) >= wanted), None)
        if block_n is None:
            block_n = start
            while block_n > 16 and not fits(w, block_n):
                block_n //= 2
    if warps is None:
        while w > 4 and not fits(w, block_n):  # (no architecture in the table needs it with 16-key blocks)
            w //= 2
    return AttentionConfig(backend, head_dim, bf16, rows * w, block_n, stages or 2, w)


def check_config(cfg: AttentionConfig, limit: int) -> None:
    """Refuse head dims and tile plans the kernel cannot hold, saying what they need and what there is."""
    need = f"D={cfg.head_dim} needs {cfg.stage_bytes / 1024:g} KiB per stage (K and V tiles of {cfg.block_n} keys)"
    if cfg.head_dim not in HEAD_DIMS:
        raise InvalidArgumentError("head_dim", cfg.head_dim, f"must be one of {HEAD_DIMS} ({need}, plus "
                                   f"{cfg.q_bytes / 1024:g} KiB for the Q tile: {cfg.shared_mem / 1024:.1f} KiB "
                                   f"with {cfg.stages} stages, {limit / 1024:.1f} KiB available per block; the "
                                   "output accumulator also lives in registers)",
                                   "pad the head dim to 64, 128 or 256, or split the heads")
    if cfg.backend is Backend.TMA and cfg.block_n not in (64, 128):
        raise InvalidArgumentError("block_n", cfg.block_n, "must be 64 or 128 on the tma backend (the N of the "
                                   "S = Q K^T wgmma)", "use 128")
    if cfg.block_n % 16 or not 16 <= cfg.block_n <= 128:
        raise InvalidArgumentError("block_n", cfg.block_n, "must be a multiple of 16 from 16 to 128", "use 64")
    if cfg.stages < 2:
        raise InvalidArgumentError("stages", cfg.stages, "must be at least 2 (a ring)", "use 2 or 3")
    if cfg.backend is Backend.CP_ASYNC and cfg.warps not in (1, 2, 4, 8):
        raise InvalidArgumentError("warps", cfg.warps, "must be 1, 2, 4 or 8", "use 4")
    if cfg.backend is Backend.CP_ASYNC and cfg.block_m not in (16 * cfg.warps, 32 * cfg.warps):
        raise InvalidArgumentError("block_m", cfg.block_m, f"must be 16 or 32 query rows for each of the {cfg.warps} "
                                   "warps (the kernel's TMAKIT_ATTN_WARP_ROWS)", f"use {32 * cfg.warps}")
    if cfg.backend is Backend.CP_ASYNC and cfg.accumulators > _ACCUMULATORS:
        # the fixes offered fit the shared memory too: 16-row warps (their block_n halved until it fits), or this
        # warp's widest key block that holds no more accumulators
        keys = cfg.block_n
        while keys > 16 and replace(cfg, block_m=16 * cfg.warps, block_n=keys).shared_mem > limit:
            keys //= 2
        fixes = ["use warp_rows=16" + (f" with block_n={keys}" if keys != cfg.block_n else "")]
        widest = (_ACCUMULATORS * 32 // cfg.warp_rows - cfg.head_dim) // 16 * 16
        if widest >= 16 and replace(cfg, block_n=widest).shared_mem <= limit:
            fixes.append(f"block_n <= {widest}")
        fix = " or ".join(fixes)
        raise InvalidArgumentError("warp_rows", cfg.warp_rows, f"holds {cfg.accumulators} fp32 accumulators a "
                                   f"thread at D={cfg.head_dim} with block_n={cfg.block_n} (warp_rows x (block_n + "
                                   f"D) / 32: S and O for each m16 tile); above {_ACCUMULATORS} they spill past "
                                   "255 registers (92-1200 bytes) and the kernel runs at half speed", fix)
    if cfg.slots is not None and (cfg.backend is not Backend.TMA or cfg.slots not in (1, 2)):
        raise InvalidArgumentError("q_slots", cfg.slots, "must be 1 or 2, on the tma backend", "leave q_slots out")
    if cfg.backend is Backend.TMA and cfg.q_slots > 1 and not cfg.o_bytes:
        raise InvalidArgumentError("q_slots", cfg.q_slots, f"must be 1 at D={cfg.head_dim}: O is staged in the Q "
                                   "tile there, which a second slot's next tile would overwrite", "use q_slots=1")
    if cfg.shared_mem > limit:
        o_tile = f" and the {cfg.o_bytes / 1024:g} KiB O staging tile" if cfg.o_bytes else ""
        q_tiles = f"two {cfg.q_bytes / 1024:g} KiB Q tiles (q_slots=2)" if cfg.q_slots > 1 else \
            f"{cfg.q_bytes / 1024:g} KiB Q tile"
        # the slots asked for are the parameter to name where one slot would fit; else the stages
        asked = cfg.slots == 2 and cfg._shared_mem(1) <= limit
        fix = "use q_slots=1" if asked else "use fewer stages or a smaller block_n"
        raise InvalidArgumentError("q_slots" if asked else "stages", 2 if asked else cfg.stages,
                                   f"{need}; {cfg.stages} stages, the {q_tiles}{o_tile} need "
                                   f"{cfg.shared_mem / 1024:.1f} KiB, {limit / 1024:.1f} KiB available per block", fix)


def _dims(v: ArrayView, layout: str) -> tuple[int, int, int, int]:
    """(B, H, S, D) of a tensor in `layout`."""
    b, x, y, d = v.shape
    return (b, x, y, d) if layout == "bhsd" else (b, y, x, d)


def _bhsd_strides(v: ArrayView, layout: str) -> tuple[int, int, int, int]:
    """Byte strides of (B, H, S, D) for a tensor in `layout`."""
    sb, sx, sy, sd = v.strides
    return (sb, sx, sy, sd) if layout == "bhsd" else (sb, sy, sx, sd)


def _bhsd_view(v: ArrayView, layout: str) -> ArrayView:
    """The tensor as a (B, H, S, D) view (strides permuted, same memory): what its TMA map describes."""
    return ArrayView(v.ptr, _dims(v, layout), _bhsd_strides(v, layout), v.dtype_name, v.itemsize, v.device, v.owner)


def packs_query_heads(sq: int, heads: int, kv_heads: int, causal: bool) -> bool:
    """Decode's grouped-query packing: one query per sequence (Sq = 1), no mask, and several query heads per K/V
    head. The kernel then sees the H / H_kv query heads that read one K/V head as the query rows of one tile, so
    each K/V block is loaded and multiplied once for all of them (a tile of one query row per head wastes 127 of
    its 128 rows on the tensor cores and reads the K/V head H / H_kv times)."""
    return sq == 1 and not causal and kv_heads < heads


def query_heads_as_rows(view: ArrayView, layout: str, kv_heads: int) -> ArrayView:
    """A (B, H, 1, D) q or out in ``layout`` as the (B, H_kv, H / H_kv, D) view whose rows are the query heads of
    each K/V head (same memory: with one query, a head's row is D elements from the next head's)."""
    b, h, _, d = _dims(view, layout)
    sb, sh, _, sd = _bhsd_strides(view, layout)
    return ArrayView(view.ptr, (b, kv_heads, h // kv_heads, d), (sb, (h // kv_heads) * sh, sh, sd), view.dtype_name,
                     view.itemsize, view.device, view.owner)


def _lse_view(lse: Any, shape: tuple[int, int, int], device: int | None) -> ArrayView:
    lv = _checks.view(lse, "lse")
    if lv.shape != shape or lv.dtype_name != "float32" or not lv.is_c_contiguous or lv.device != device:
        raise InvalidArgumentError("lse", f"shape {lv.shape}, dtype {lv.dtype_name}, device {lv.device}",
                                   f"must be a contiguous float32 array of shape {shape} on q's device ({device})",
                                   "leave lse out")
    return lv


def _check_inputs(q: Any, k: Any, v: Any, out: Any, layout: str) -> tuple[ArrayView, ...]:
    views = [_checks.view(a, n) for a, n in ((q, "q"), (k, "k"), (v, "v"))]
    for view, name in zip(views, "qkv"):
        if len(view.shape) != 4:
            raise InvalidArgumentError(name, f"shape {view.shape}", f"must be 4-D ({'B, H, S, D' if layout == 'bhsd' else 'B, S, H, D'} "
                                       f'for layout="{layout}")', "reshape it to 4-D")
        _checks.require_contiguous(view, name)
        if name == "q" and view.dtype_name not in DTYPES:
            raise InvalidArgumentError(name, f"dtype {view.dtype_name}", "must be bfloat16 or float16",
                                       "convert it (tensor.to(torch.bfloat16))")
    qv, kv, vv = views
    for view, name in ((kv, "k"), (vv, "v")):
        if view.dtype_name != qv.dtype_name:
            raise InvalidArgumentError(name, f"dtype {view.dtype_name}", f"must match q's dtype ({qv.dtype_name})",
                                       "convert q, k and v to one dtype")
        if view.device != qv.device:
            raise InvalidArgumentError(name, f"array on device {view.device}", f"must be on q's device ({qv.device})",
                                       "move it to q's device")
    B, H, Sq, D = _dims(qv, layout)
    Bk, Hk, Sk, Dk = _dims(kv, layout)
    if (Bk, Dk) != (B, D) or Hk < 1 or H % Hk:
        raise InvalidArgumentError("k", f"shape {kv.shape}", f"must have q's batch and head dim ({B}, {D}) and a "
                                   f"number of heads dividing q's {H} (grouped-query attention) in layout "
                                   f'"{layout}"', "pass k with q's batch and head dim, and H_kv heads with H % H_kv == 0")
    if vv.shape != kv.shape:
        raise InvalidArgumentError("v", f"shape {vv.shape}", f"must have k's shape {kv.shape}", "pass v shaped like k")
    if Sq < 1 or Sk < 1 or B < 1 or H < 1:
        raise InvalidArgumentError("q" if Sq < 1 or B < 1 or H < 1 else "k", f"shape {qv.shape if Sq < 1 else kv.shape}",
                                   "every dimension must be at least 1", "pass non-empty tensors")
    return qv, kv, vv, out_like_q(out, qv)


def out_like_q(out: Any, qv: ArrayView) -> ArrayView | None:
    """The view of ``out`` (None when not given), checked: q's shape and dtype, contiguous."""
    if out is None:
        return None
    ov = _checks.view(out, "out")
    if ov.shape != qv.shape or ov.dtype_name != qv.dtype_name:
        raise InvalidArgumentError("out", f"shape {ov.shape}, dtype {ov.dtype_name}",
                                   f"must have q's shape {qv.shape} and dtype {qv.dtype_name}", "allocate out like q")
    _checks.require_contiguous(ov, "out")
    return ov


def _parse_layout(layout: Any) -> str:
    if not isinstance(layout, str) or layout.lower() not in LAYOUTS:
        raise InvalidArgumentError("layout", layout, 'must be "bhsd" (B, H, S, D) or "bshd" (B, S, H, D)',
                                   'pass layout="bhsd" or layout="bshd"')
    return layout.lower()


def _empty_like(q: Any, shape: tuple[int, ...], float32: bool) -> Any:
    """A device array for an output: torch's allocator for torch inputs, else a tmakit DeviceArray (fp32 only)."""
    if hasattr(q, "new_empty"):
        import torch  # the caller already uses torch

        return q.new_empty(shape, dtype=torch.float32 if float32 else q.dtype)
    if float32:
        return DeviceArray.empty(shape, np.float32, device=_checks.view(q, "q").device)
    raise InvalidArgumentError("out", None, "is needed for inputs that are not torch tensors",
                               "pass out= (an array shaped and typed like q)")


def tma_plan_config(what: str, causal: Any, scale: Any, head_dim: int, views: list[tuple[ArrayView, str]], backend: Any,
                    *, block_n: int | None = None, stages: int | None = None, sq: int | None = None,
                    q_slots: int | None = None) -> tuple:
    """The checks and tile plan that the TMA-only attention plans (variable lengths, paged cache) share:
    ``(choice, config, scale)`` after checking ``causal``, ``scale`` (None: 1/sqrt(D)), the backend (``what`` names
    the reason it must be tma) and the 16-byte alignment of every (view, name)."""
    if not isinstance(causal, bool):
        raise InvalidArgumentError("causal", causal, "must be True or False", "pass causal=True for a causal mask")
    if scale is None:
        scale = 1.0 / math.sqrt(head_dim)
    if not isinstance(scale, (int, float)) or isinstance(scale, bool) or not math.isfinite(scale) or scale <= 0:
        raise InvalidArgumentError("scale", scale, "must be a positive finite number", "leave it out for 1/sqrt(D)")
    device = views[0][0].device
    choice = choose_backend(backend, device=device)
    if choice.backend is not Backend.TMA:
        raise UnsupportedDeviceError(what, required="sm_90 (backend 'tma')", actual=choice.arch)
    for view, name in views:
        if view.ptr % 16:
            raise InvalidArgumentError(name, f"address 0x{view.ptr:x}", "must be 16-byte aligned for a TMA map",
                                       "pass an aligned tensor")
    limit = shared_mem_limit(choice.arch, device)
    cfg = default_config(choice.backend, head_dim, views[0][0].dtype_name == "bfloat16", causal=causal,
                         block_n=block_n, stages=stages, shared_mem_limit=limit, sq=sq, q_slots=q_slots)
    check_config(cfg, limit)
    return choice, cfg, float(scale)


def lse_buffer(q: Any, lse: Any, shape: tuple[int, ...], device: int | None) -> tuple[Any, ArrayView]:
    """The lse output: ``lse`` checked (contiguous float32 of ``shape`` on the device), or a new one like q's."""
    lse = lse if lse is not None else _empty_like(q, shape, True)
    lv = _checks.view(lse, "lse")
    if lv.shape != shape or lv.dtype_name != "float32" or not lv.is_c_contiguous or lv.device != device:
        raise InvalidArgumentError("lse", f"shape {lv.shape}, dtype {lv.dtype_name}",
                                   f"must be a contiguous float32 array of shape {shape} on q's device",
                                   "leave lse out")
    return lse, lv


_SPLIT_ROWS = 64  # choose_kv_splits: splits only for at most this many query rows a (sequence, head)


def choose_kv_splits(tiles: int, key_blocks: int, sms: int, causal: bool, rows: int) -> int:
    """Key splits (flash-decoding) for a problem of fewer work tiles than SMs whose tiles hold few query rows
    (``rows`` a sequence and head, at most _SPLIT_ROWS: decode, packed grouped heads, short queries): enough for
    about two tiles per SM, each split at least 4 key blocks, at most 16; 1 under a causal mask (its rows see
    different key ranges) or where the tiles fill the SMs. With many rows the splits' fp32 partials cost more
    than the idle SMs (H100, 29aa725: B2 H2 S2311 D256 0.080 ms split 4 ways against 0.059 whole; B7 H3 S1082 D64,
    126 tiles, 0.035 against 0.021)."""
    if causal or tiles >= sms or rows > _SPLIT_ROWS:
        return 1
    return max(1, min(-(-2 * sms // tiles), key_blocks // 4, 16))


class PersistentTiles:
    """The work tiles of an attention plan, (query blocks, heads, batch) over ``_query_rows`` rows, times
    ``kv_splits`` key ranges, and the grid that walks them (``launch_grid``); on tma the CTAs claim them from
    ``_counter`` (``tile_counter``)."""

    config: AttentionConfig
    kv_splits: int = 1
    _splits_workspace: Any = None
    device: int
    heads: int
    kv_heads: int
    batch: int
    causal: bool
    _counter: Any

    @property
    def _query_rows(self) -> int:
        return self.sq  # type: ignore[attr-defined]

    @property
    def packed(self) -> bool:
        """Whether the query heads of each K/V head are packed into the rows of one tile (``packs_query_heads``)."""
        return packs_query_heads(self._query_rows, self.heads, self.kv_heads, self.causal)

    @property
    def tiles(self) -> tuple[int, int, int]:
        if self.packed:
            return (-(-(self.heads // self.kv_heads) // self.config.block_m), self.kv_heads, self.batch)
        return (-(-self._query_rows // self.config.block_m), self.heads, self.batch)

    def kernel_geometry(self) -> tuple[int, int, int]:
        """(heads, query rows, query heads per K/V head) as the kernel sees them: packed, the K/V heads, each with
        the query heads of its group as its rows."""
        if self.packed:
            return self.kv_heads, self.heads // self.kv_heads, 1
        return self.heads, self._query_rows, self.heads // self.kv_heads

    @property
    def grid(self) -> tuple[int, int, int]:
        m, h, b = self.tiles
        return launch_grid((m * self.kv_splits, h, b), self.config, self.device)

    def q_slots_config(self, keys: int | None, sms: int) -> AttentionConfig:
        """The plan's config, with one Q slot where each CTA of the persistent grid takes at most one work tile
        (``keys``: a tile's keys at most, for the key splits; None: no splits) and the slots were not asked for: a
        second slot would hold no next tile there, and measured 0.94-0.99x one on such problems (H100 and H200:
        B4 H2 S832 D64, B6 H3 S677 D128 causal; docs/PERFORMANCE.md, attention forward (9))."""
        if self.config.slots is not None:
            return self.config
        m, h, b = self.tiles
        splits = self.splits_for(keys, sms) if keys is not None else 1
        return replace(self.config, slots=1) if m * h * b * splits <= sms else self.config

    def splits_for(self, keys: int, sms: int) -> int:
        """The key splits ``choose_kv_splits`` gives these work tiles with ``keys`` keys a tile (at most) on
        ``sms`` SMs (what ``split_keys`` plans, and ``describe_attention`` says without a GPU)."""
        m, h, b = self.tiles
        return choose_kv_splits(m * h * b, -(-keys // self.config.block_n), sms, self.causal, self.kernel_geometry()[1])

    def split_keys(self, keys: int, kernel_of: Any) -> None:
        """Choose ``kv_splits`` for ``keys`` keys a work tile (at most) and, above 1, allocate the splits' fp32
        workspace (O and lse per split and query row) and the combine kernel (``kernel_of(entry)``)."""
        heads, rows, _ = self.kernel_geometry()
        self.kv_splits = self.splits_for(keys, sm_count(self.device))
        if self.kv_splits > 1:
            self._split_rows = self.batch * heads * rows
            self._splits_workspace = DeviceArray.empty((self.kv_splits * self._split_rows * (self.head_dim + 1),),
                                                       "float32", device=self.device)
            self._combine_kernel = kernel_of("tmakit_attention_combine")

    def split_args(self) -> tuple[int, int, int]:
        """The kernel's key-split arguments: the splits, the workspace's O and its lse (0, 0 without splits)."""
        if self.kv_splits == 1:
            return 1, 0, 0
        ptr = self._splits_workspace.ptr
        return self.kv_splits, ptr, ptr + 4 * self.kv_splits * self._split_rows * self.head_dim

    def bind_combine(self, o4: ArrayView, lse: Any, stream: Any) -> Any:
        """The combine launch of a key-split plan into ``o4`` (out in the kernel's (B, heads, rows, D) geometry) and
        ``lse``; None without splits."""
        if self.kv_splits == 1:
            return None
        heads, rows, _ = self.kernel_geometry()
        _, part_o, part_lse = self.split_args()
        sb, sh, ss, _ = (x // o4.itemsize for x in o4.strides)
        blocks = min(-(-self._split_rows // 8), 8 * sm_count(self.device))  # a warp a row, 8 a block
        return self._combine_kernel.bind(part_o, part_lse, self.kv_splits, self._split_rows, heads, rows, o4.ptr,
                                         sb, sh, ss, lse, grid=(blocks, 1, 1), block=(256, 1, 1), stream=stream,
                                         pdl=True, checked=False)  # no barrier to bound; waits for the partials


class TileGeometry(PersistentTiles):
    """The work tiles of a problem without a plan (``describe_attention``): the same decisions, no device."""

    def __init__(self, config: AttentionConfig, batch: int, heads: int, kv_heads: int, sq: int, causal: bool):
        self.config, self.batch, self.heads, self.kv_heads, self.sq, self.causal = (config, batch, heads, kv_heads,
                                                                                     sq, causal)


class DeviceMapsPlan(PersistentTiles):
    """The plans whose launch reads tensor maps built on the device by a first kernel (variable lengths, paged
    cache): ``plan()`` runs both and returns ``(out, lse)``; ``close()`` waits for the stream, then frees the maps'
    workspace (``_maps_workspace``) and the tile counters."""

    _build: Any
    _launch: Any
    _combine: Any = None
    _maps_workspace: Any
    _stream: Any
    out: Any
    lse: Any

    def __call__(self) -> tuple:
        self._build()
        self._launch()
        if self._combine is not None:
            self._combine()
        return self.out, self.lse

    def close(self) -> None:
        wait_for_stream(self._stream)
        self._maps_workspace.close()
        self._counter.close()
        if self._splits_workspace is not None:
            self._splits_workspace.close()


class AttentionPlan(PersistentTiles):
    """A prepared attention launch. ``plan()`` reruns it; ``plan(q, k, v, out)`` re-points it to new buffers of the
    same geometry (and writes ``plan.lse`` again); both return ``(out, lse)``."""

    def __init__(self, cfg: AttentionConfig, choice: BackendChoice, layout: str, dims: tuple, causal: bool,
                 scale: float, out: Any, lse: Any, device: int, stream: Any = None,
                 checked: bool | str | None = None):
        self.config, self.backend, self.layout, self.causal, self.scale = cfg, choice, layout, causal, scale
        self.batch, self.heads, self.sq, self.sk, self.head_dim, self.kv_heads = dims
        self.out, self.lse, self.device, self._stream = out, lse, device, stream
        self.maps: tuple = ()
        if cfg.backend is Backend.TMA:
            cfg = self.config = self.q_slots_config(self.sk, sm_count(device))
        self._kernel = kernel("attention.cu", cfg.entry, choice, device, **cfg.defines)
        self._launch: Any = None
        self._checked = checked  # the hang doctor's bounded waits (Kernel.bind(checked=)); None: TMAKIT_CHECK
        self._counter = tile_counter(device) if cfg.backend is Backend.TMA else None
        self._combine: Any = None
        if cfg.backend is Backend.TMA:
            self.split_keys(self.sk, lambda entry: kernel("attention.cu", entry, choice, device, **cfg.defines))

    @property
    def flops(self) -> float:
        """4 B H Sq Sk D (the two matrix products), half of it with the causal mask."""
        f = 4.0 * self.batch * self.heads * self.sq * self.sk * self.head_dim
        return f / 2 if self.causal else f

    def _bind(self, q: ArrayView, k: ArrayView, v: ArrayView, o: ArrayView, lse: Any) -> None:
        cfg, scale_log2 = self.config, self.scale * math.log2(math.e)
        self._operands = (q, k, v, o)  # the views own their arrays: the launch's pointers stay valid while the plan lives
        heads, rows, group = self.kernel_geometry()
        common = (heads, rows, self.sk, scale_log2, int(self.causal), group)
        # every tensor as (B, H, S, D); packed, q and out as (B, H_kv, H / H_kv, D)
        q4, o4 = ((query_heads_as_rows(x, self.layout, self.kv_heads) for x in (q, o)) if self.packed
                  else (_bhsd_view(x, self.layout) for x in (q, o)))
        k4, v4 = _bhsd_view(k, self.layout), _bhsd_view(v, self.layout)
        if cfg.backend is Backend.TMA:
            self.maps = attention_tensor_maps(q4, k4, v4, o4, cfg, "bhsd")
            args = (*self.maps, lse, *common, 0, 0, 0, 0, 0, 0, 0,  # no variable lengths, no paged cache
                    *persistent_args(self.tiles, self._counter), *self.split_args())
            self._combine = self.bind_combine(o4, lse, self._stream)
        else:
            strides = []
            for view in (q4, k4, v4, o4):
                sb, sh, ss, _ = view.strides
                strides += [sb // 2, sh // 2, ss // 2]
            args = (q.ptr, k.ptr, v.ptr, o.ptr, lse, *strides, *common)
        self._launch = self._kernel.bind(*args, grid=self.grid, block=(cfg.threads, 1, 1), shared_mem=cfg.shared_mem,
                                         stream=self._stream, checked=self._checked, pdl=cfg.backend is Backend.TMA)

    def __call__(self, q: Any = None, k: Any = None, v: Any = None, out: Any = None, *, lse: Any = None) -> tuple:
        return self._rerun(q, k, v, out, lse, None)

    def _rerun(self, q: Any, k: Any, v: Any, out: Any, lse: Any, views: list | None) -> tuple:
        """``plan(q, k, v, out, lse=lse)``; ``views``: the five arguments' ArrayViews where the caller has them
        already (the one-shot op's plan cache), so that they are not read twice."""
        if q is not None or k is not None or v is not None or out is not None or lse is not None:
            if q is None or k is None or v is None:
                raise InvalidArgumentError("q, k, v", "partly given", "re-pointing a plan needs q, k and v",
                                           "call plan() for the same buffers or plan(q, k, v[, out])")
            qv, kv, vv, ov = _check_inputs(*(views[:4] if views else (q, k, v, out)), self.layout)
            if (_dims(qv, self.layout), _dims(kv, self.layout), qv.dtype_name, qv.device) != (
                    (self.batch, self.heads, self.sq, self.head_dim), (self.batch, self.kv_heads, self.sk, self.head_dim),
                    "bfloat16" if self.config.bf16 else "float16", self.device):
                raise InvalidArgumentError("q", f"shape {qv.shape} ({qv.dtype_name}) on device {qv.device}, "
                                           f"k {kv.shape}",
                                           "must have the geometry and device the plan was made for",
                                           "make a new plan with plan_attention for other shapes or devices")
            lv = _lse_view(views[4] if views else lse, (self.batch, self.heads, self.sq), self.device) \
                if lse is not None else None
            self.out = out if out is not None else _empty_like(q, qv.shape, False)
            self.lse = lse if lse is not None else _empty_like(q, (self.batch, self.heads, self.sq), True)
            ov = ov or _checks.view(self.out, "out")
            _checks.refuse_overlap([("out", ov), ("lse", lv or _checks.view(self.lse, "lse"))],
                                   [("q", qv), ("k", kv), ("v", vv)])
            self._bind(qv, kv, vv, ov, self.lse)
        self._launch()
        if self._combine is not None:
            self._combine()
        return self.out, self.lse

    def close(self) -> None:
        """Free the tile counter and the key splits' workspace now, once the plan's launches are done (the stream
        is synchronised first); garbage collection does it otherwise. The plan is not run again after."""
        wait_for_stream(self._stream)
        for owned in (self._counter, self._splits_workspace):
            if owned is not None:
                owned.close()


def launch_grid(tiles: tuple[int, int, int], cfg: AttentionConfig, device: int | None) -> tuple[int, int, int]:
    """tma: a persistent grid, at most one CTA per SM, walking the work tiles (m_block, head, batch); cp.async: one
    block per tile."""
    if cfg.backend is not Backend.TMA:
        return tiles
    return (max(1, min(tiles[0] * tiles[1] * tiles[2], sm_count(device))), 1, 1)


def persistent_args(tiles: tuple[int, int, int], counter: DeviceArray) -> tuple[int, int, int]:
    """The tma kernel's last three arguments: the query blocks and the batch of the work tiles (heads it has), and
    the two int32 tile counters (``tile_counter()``) its CTAs claim tiles from."""
    return tiles[0], tiles[2], counter.ptr


def tile_counter(device: int | None) -> DeviceArray:
    """The persistent kernel's two int32 counters (the next unclaimed tile, the CTAs that ran out), zero: each
    launch's last CTA sets them back to zero. One per plan: launches of a plan run in its stream's order."""
    return DeviceArray.zeros((2,), "int32", device=device)


def attention_tensor_maps(q: ArrayView, k: ArrayView, v: ArrayView, o: ArrayView, cfg: AttentionConfig, layout: str, *,
                          encode: bool = True, arch: Any = None) -> tuple:
    """The four TMA maps of the tma kernel: each tensor as a (B, H, S, D) map whatever its layout, boxes of
    (1, 1, rows, 64) with 128B swizzle and zero fill: Q and K/V boxes of block_m and block_n rows, O boxes of
    64 rows (one per consumer warpgroup). ``encode=False`` plans them without a GPU, checked for ``arch``
    (default: the arrays' device's)."""
    def tmap(view: ArrayView, rows: int) -> Any:
        return _tile_map(_bhsd_view(view, layout), rows, oob_fill="zero", encode=encode, arch=arch)

    return tmap(q, cfg.block_m), tmap(k, cfg.block_n), tmap(v, cfg.block_n), tmap(o, 64)


def plan_attention(q: Any, k: Any, v: Any, out: Any = None, *, causal: bool = False, scale: float | None = None,
                   layout: str = "bhsd", backend: Any = "auto", block_n: int | None = None, stages: int | None = None,
                   warps: int | None = None, warp_rows: int | None = None, q_slots: int | None = None,
                   lse: Any = None, stream: Any = None, checked: bool | str | None = None) -> AttentionPlan:
    """Check the arguments, pick the backend (logged), compile the variant and bind one launch (not run).
    ``checked=True``: the hang doctor's bounded mbarrier waits (a hang raises HangError; default TMAKIT_CHECK).
    Tuning (``default_config``): ``block_n``, ``stages``, ``warps``, ``warp_rows`` (cp.async) and ``q_slots`` (tma:
    the Q tiles a CTA holds, 1 or 2; default two where they fit and the work tiles take more than one turn of the
    persistent grid, ``AttentionConfig.q_slots``)."""
    layout = _parse_layout(layout)
    if not isinstance(causal, bool):
        raise InvalidArgumentError("causal", causal, "must be True or False", "pass causal=True for a causal mask")
    qv, kv, vv, ov = _check_inputs(q, k, v, out, layout)
    B, H, Sq, D = _dims(qv, layout)
    Hk, Sk = _dims(kv, layout)[1:3]
    if scale is None:
        scale = 1.0 / math.sqrt(D)
    if not isinstance(scale, (int, float)) or isinstance(scale, bool) or not math.isfinite(scale) or scale <= 0:
        raise InvalidArgumentError("scale", scale, "must be a positive finite number", "leave it out for 1/sqrt(D)")
    choice = choose_backend(backend, device=qv.device)
    limits = plan_limits(choice.arch, qv.device)
    limit = limits.smem_per_block_optin
    cfg = default_config(choice.backend, D, qv.dtype_name == "bfloat16", causal=causal, block_n=block_n, stages=stages,
                         warps=warps, warp_rows=warp_rows, shared_mem_limit=limit,
                         shared_mem_per_sm=limits.smem_per_sm, sq=Sq, bh=B * H if Sq == Sk else None,
                         sms=sm_count(qv.device) if choice.backend is Backend.TMA else None, q_slots=q_slots)
    check_config(cfg, limit)
    if choice.backend is Backend.TMA:
        for view, name in ((qv, "q"), (kv, "k"), (vv, "v")) + (((ov, "out"),) if ov is not None else ()):
            if view.ptr % 16:
                raise InvalidArgumentError(name, f"address 0x{view.ptr:x}", "must be 16-byte aligned for a TMA map",
                                           'use backend="cp.async" or an aligned tensor')
    out = out if out is not None else _empty_like(q, qv.shape, False)
    lse = lse if lse is not None else _empty_like(q, (B, H, Sq), True)
    lv = _lse_view(lse, (B, H, Sq), qv.device)
    if (-(-Sq // cfg.block_m)) > 2**31 - 1 or H > 65535 or B > 65535:
        raise InvalidArgumentError("q", f"shape {qv.shape}", "needs at most 65535 heads and batches",
                                   "split the batch")
    ov = ov or _checks.view(out, "out")
    _checks.refuse_overlap([("out", ov), ("lse", lv)], [("q", qv), ("k", kv), ("v", vv)])
    plan = AttentionPlan(cfg, choice, layout, (B, H, Sq, Sk, D, Hk), causal, float(scale), out, lse, qv.device, stream,
                         checked)
    plan._bind(qv, kv, vv, ov, lse)
    return plan


def attention(q: Any, k: Any, v: Any, out: Any = None, **options: Any) -> tuple[Any, Any]:
    """Plan and run once: returns ``(out, lse)`` (asynchronous on the plan's stream). A geometry seen before
    re-points the plan made then (``tmakit.ops._plan_cache``)."""
    lse = options.pop("lse", None)  # a buffer: part of the geometry, not an option
    rest = {k_: v_ for k_, v_ in options.items() if k_ != "stream"}
    return cached("attention", ("q", "k", "v", "out", "lse"), (q, k, v, out, lse), options.get("stream"), rest,
                  lambda: plan_attention(q, k, v, out, lse=lse, **options),
                  lambda plan, views: plan._rerun(q, k, v, out, lse, views))


__all__ = ["AttentionConfig", "AttentionPlan", "HEAD_DIMS", "attention", "attention_tensor_maps", "check_config",
           "default_config", "descriptor_defines", "plan_attention", "shared_mem_limit", "stage_descriptors"]
