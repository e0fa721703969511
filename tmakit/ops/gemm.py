"""GEMM: ``C = alpha * A @ B (+ beta * C)`` on tensor cores, fp32 accumulation.

``plan = plan_gemm(a, b, c=None, *, alpha=1.0, beta=0.0, b_major="k", backend="auto", ...)`` prepares one launch
of cuda_src/gemm.cu (tensor maps or pointers, the compiled kernel, the grid); ``plan()`` reruns it on the same
buffers, ``plan(a2, b2, c2)`` on new buffers of the same geometry; ``gemm(a, b, out=None, ...)`` plans and runs
once and returns the output.

- a: (M, K), row-major. b: (N, K) with ``b_major="k"`` (K contiguous: ``B = b.T``, like ``torch.nn.Linear``'s
  weight) or (K, N) with ``b_major="n"`` (N contiguous, the plain ``A @ B``). bf16 or fp16, alike.
- c / out: (M, N) in the input dtype or float32 (``out_dtype``); with ``beta != 0`` its old contents are read.
- Rows may be padded (a view of a wider buffer): the innermost stride must be one element and every row pitch
  and base address a multiple of 16 bytes: TMA's rule for a tensor map, and the cp.async twin's 16-byte chunks.
- The "tma" backend (sm_90) is the warp-specialized persistent kernel (TMA ring, wgmma, 2-CTA cluster
  multicast, TMA-store epilogue); "cp.async" (sm_80+, or forced on sm_90) the cp.async ring + ldmatrix +
  mma.sync twin over the same shared-memory images. Both are described in the kernel source's header.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from .. import _driver
from ..arch import Arch
from ..arrays import ArrayView
from ..backend import Backend, BackendChoice, choose_backend
from ..device import shared_mem_limit
from ..errors import InvalidArgumentError
from ..tensormap import describe_tensor
from ..layout.wgmma import descriptor_define, wgmma_descriptors
from . import _checks
from ._kernels import kernel, sm_count
from ._plan_cache import cached

DTYPES = ("bfloat16", "float16")
OUT_DTYPES = ("bfloat16", "float16", "float32")
B_MAJORS = ("k", "n")
BLOCK_M = 128
BLOCK_K = 64
_USUAL_WIDTHS = (128, 192, 256)  # tma's BN besides the narrow widths (GemmConfig.narrow; 192 tma only)
NO_MAP = bytes(128)  # the fp8 scale map parameter of a build that reads none
# The operand maps' L2 promotion (dense, grouped and fp8 GEMMs; the dense GEMM's C map too, read where beta != 0):
# 128, not 256, since where the pitch is not a multiple of 128 bytes a box row spans two lines, and promoting each
# to 256 bytes read about twice the DRAM bytes (docs/PERFORMANCE.md, GEMM, "L2 promotion").
L2_PROMOTION = "128B"


@dataclass(frozen=True)
class GemmConfig:
    """The tile plan of one compiled variant (cuda_src/gemm.cu's defines) and what it needs."""

    backend: Backend
    bf16: bool
    b_kmajor: bool
    out_f32: bool
    block_n: int  # BN: 256, 192 (tma) or 128 (BK = 64); on tma also a narrow width (``narrow``)
    stages: int
    cluster: int  # tma: CTAs per cluster sharing (multicasting) the B tile, or A's (multicast_a); 1 on cp.async
    group_m: int  # tile rasterization: rows of (cluster) tiles that sweep N together
    splits: int = 1  # tma: split-K, the k-blocks of each tile cut into this many ranges (fp32 partials, then a sum)
    groups: int = 0  # tma: a grouped GEMM of this many groups (ops/grouped_gemm.py); 0: a plain GEMM
    fp8: bool = False  # tma: e4m3 operands with per-128 block scales (ops/fp8_gemm.py)
    store_add: bool = False  # tma: C tiles reduce-added (cp.reduce.async.bulk.tensor .add), not stored
    tail_rows: int = 0  # tma: C's last rows, computed by a second plan (choose_tail_rows); not compiled in
    block_m: int = BLOCK_M  # BM: 128, or 64 on tma (the two consumer warpgroups each take half of BN)
    multicast_a: bool = False  # tma, cluster 2: the pair takes adjacent tiles of the same rows and shares A, not B
    # tma: the caller's A and B swapped (C^T = B^T A^T: the tile's rows run along the caller's N, its BN along M),
    # C stored transposed; a 16-bit output of a plain GEMM, no split-K or tail (choose_swap_ab)
    swap_ab: bool = False
    a_kmajor: bool = True  # tma: the kernel's A K-major; False (MN-major slabs) where a swap takes an N-major B

    @property
    def caller_b_kmajor(self) -> bool:
        """The caller's B major: the kernel's B's, or its A's where the operands are swapped."""
        return self.a_kmajor if self.swap_ab else self.b_kmajor

    @property
    def threads(self) -> int:
        return 384 if self.backend is Backend.TMA else 256

    @property
    def b_rows(self) -> int:
        """128-byte rows of B in one stage: BN K-major, or BN's 64-column N-major slabs of 64 rows each (a narrow
        width's last slab loaded whole: gemm.cu's kBBytes)."""
        return self.block_n if self.b_kmajor else -(-self.block_n // 64) * 64

    @property
    def stage_bytes(self) -> int:
        # 128-byte rows of A and B (+ fp8's row scales)
        load = (self.block_m + self.b_rows) * 128 + (self.block_m * 4 if self.fp8 else 0)
        return -(-load // 1024) * 1024

    @property
    def epilogue_bytes(self) -> int:
        return 4 * 64 * 128 if self.backend is Backend.TMA else 0  # 2 warpgroups x 2 slabs of 64 x 128 bytes

    @property
    def shared_mem(self) -> int:
        grouped = 128 + 2 * 128 + 8 * (self.groups + 1) if self.groups else 0  # C map edits, group tables
        # the ring's FULL and EMPTY barriers, the consumers' C-load barriers (one a slab buffer), alignment
        return self.stages * self.stage_bytes + self.epilogue_bytes + 16 * self.stages + 32 + 1024 + grouped

    @property
    def narrow(self) -> bool:
        """BN a multiple of 16 from 64 to 240 other than 128 and 192 (tma): a width that fits an N the usual
        widths cover poorly; gemm.cu's kNarrow (either B major and output type, any beta, BM 128, no split-K,
        groups, fp8 or reduce-add: check_config)."""
        return self.block_n not in _USUAL_WIDTHS

    @property
    def defines(self) -> dict[str, int | str]:
        d: dict[str, int | str] = {
            "TMAKIT_GEMM_BM": self.block_m, "TMAKIT_GEMM_BN": self.block_n, "TMAKIT_GEMM_STAGES": self.stages,
            "TMAKIT_GEMM_CLUSTER": self.cluster, "TMAKIT_GEMM_MULTICAST_A": int(self.multicast_a),
            "TMAKIT_GEMM_BF16": int(self.bf16), "TMAKIT_GEMM_B_KMAJOR": int(self.b_kmajor),
            "TMAKIT_GEMM_OUT_F32": int(self.out_f32 or self.splits > 1),  # split-K: fp32 partials
            "TMAKIT_GEMM_GROUPED": int(self.groups > 0), "TMAKIT_GEMM_FP8": int(self.fp8),
            "TMAKIT_GEMM_STORE_ADD": int(self.store_add),
            "TMAKIT_GEMM_SPLIT_K": int(self.splits > 1),  # C's map: the (splits, M, N) workspace
            "TMAKIT_GEMM_SWAP_AB": int(self.swap_ab), "TMAKIT_GEMM_A_KMAJOR": int(self.a_kmajor)}
        if self.backend is Backend.TMA:
            d.update(descriptor_defines(self))
        return d

    @property
    def reduce_defines(self) -> dict[str, int | str]:
        """The build split-K's reduce (``tmakit_gemm_splitk_reduce``) comes from: C's output type, no split-K
        (the same build as the plan's without split-K, so one compile serves both)."""
        return {**self.defines, "TMAKIT_GEMM_OUT_F32": int(self.out_f32), "TMAKIT_GEMM_SPLIT_K": 0}

    @property
    def entry(self) -> str:
        return "tmakit_gemm_tma" if self.backend is Backend.TMA else "tmakit_gemm_cp_async"


# Per-problem tile choice (tma): the kernel is persistent with a static round robin, so a problem takes
# ceil(CTAs / resident CTAs) turns of one tile each. Relative time of one tile (per K step) measured on the H100
# over 40 random shapes (seed 7, M, N, K in [256, 16384]): a 128-wide tile ~0.6 of a 256-wide one; a 2-CTA cluster
# (B multicast) ~0.95 of a lone CTA, ~0.9 once each CTA takes more than 3 turns (a lone CTA then ran 20-30%
# slower on large outputs: 8304x7448x1352 0.60x against 0.79x). Picking the cheapest turn count took the sweep's
# geomean from 0.71x to 0.85x cuBLAS (the best of the four per shape: 0.89x); docs/PERFORMANCE.md.
# BN 192 (H100, 8cb03e2, K 4096, four outputs of 9-30 turns): a turn 0.755-0.80 of a 256-wide one, as much work a
# FLOP. Chosen where the model saves 10% (_BN192_MARGIN): over the 12 benchmark shapes whose choice it changed it
# measured 0.90-1.38x the old choice, the losses N-major B with N < 400 (0.90x, 0.93x, lone 192-wide tiles against
# 128-wide ones in clusters) and a 15-turn problem it saved 5% on in the model (0.90x). N-major B was left out
# until its 192-wide tiles ran in clusters (3944819); taking it as K-major B measured, held out (H100, sweep seeds
# 14-25, every problem it changed): 51 problems 1.14x, min 0.89x; docs/PERFORMANCE.md.
_TILE_COST = {256: 1.0, 192: 0.76, 128: 0.6}
_BN192_MARGIN = 0.9
_CLUSTER_COST = {2: 0.95, 1: 1.0}
_CLUSTER_COST_MANY_TURNS = {2: 0.9, 1: 1.0}
_NMAJOR_NARROW = 640  # choose_tile: below this N with N-major B the cluster discount is judged per option
_ONE_WAVE_K = 3072  # choose_tile: up to this K a one-wave problem takes lone 128-wide tiles
_FEW_ROWS = 64  # default_config: up to this M, 128-wide tiles take as many ring stages as fit (up to 6)
# default_config: up to this M, 64-row tiles take up to 8 ring stages, else up to 6 (B streamed, its bytes in flight
# bound it; decode shapes, docs/PERFORMANCE.md, GEMM: the H200 gains, the H100 holds; from 12 rows on neither)
_DEEP_RING_ROWS = 8
# Narrow widths (default_config, narrow_width): a problem whose chosen tile is 192 or 256 wide takes N cut into as
# many tiles as 256-wide ones would make, rounded up to 16 columns, where that width is narrower than the chosen
# one (no more tiles, each narrower), at most _NARROW_MAX, and K at least _NARROW_MIN_K. H100, 4ef69d7-a8dbce5,
# against the chosen width in the same rounds: 24 of 98 K-major problems of N <= 1024 (seeds 1-59, where the rule
# was found) 1.18x, min 1.01x; held out, 29 of seeds 60-99 1.19x, min 1.02x, and 24 of seeds 100-139 1.18x, min
# 1.01x. Wider narrow tiles than the chosen 192 (fewer of them) and 240-wide ones or K < 512 lost up to 0.80x
# (docs/PERFORMANCE.md). N-major B likewise (its last 64-column slab of B loaded whole), and also where the chosen
# tile is 128 wide in a cluster, the narrow width's turns cost less in the turn model (``tile_cost``) and K is at
# least _NARROW_FROM_128_MIN_K: H100, against the usual plan, seeds 1-59 (where it was found) 44 problems of a chosen
# 256 1.15x, min 1.00x, and 14 of a chosen 128 1.25x, min 0.98x; held out, seeds 60-99 28 1.16x, min 0.98x, and 10
# 1.18x, min 1.02x; after the turn-cost form, seeds 160-259 29 of a chosen 128 1.15x, min 0.94x. A chosen 128 of
# equal turns or shorter K lost to 0.73x, and two that saved a turn of 128-wide tiles for one of 224-wide ones
# (dearer in the model) 0.89x and 0.96x; lone CTAs and 64-row tiles lost to 0.39x (docs/PERFORMANCE.md). An fp32
# output (beta 0) likewise, its 32-column slabs: every problem of seeds 1-59 the rule changes 105 1.19x, min 0.97x;
# seeds 60-99 67 1.20x, min 1.00x. K-major B takes the 128-in-a-cluster form too (few problems: 6 of seeds 1-59 and
# 100-159 1.25x, min 0.97x; held out, all 9 of seeds 160-400 1.16x, min 1.07x).
# A chosen 128 in a cluster whose N the one narrow width does not serve takes a narrow width of more tiles a row
# where they save a turn and _NARROW_MORE_TILES_MARGIN of the model's cost (choose_narrow; 11 problems of sweep
# seeds 1-199 on the H100 1.19x, min 1.07x; docs/PERFORMANCE.md, GEMM).
_NARROW_MAX = 224
_NARROW_MORE_TILES_MARGIN = 0.9
# Clusters that share A (choose_multicast_a): a plan of lone 128-row CTAs whose pairs along N add no turn, K of at
# least _MULTICAST_A_MIN_K; one turn of 128-wide tiles, or several turns of at most _MULTICAST_A_MAX_M rows with
# N-major B. Found on sweep seeds 1-40 and 41-399 (H100); held out, seeds 400-999 (H200, every problem drawn before
# it was timed): 24 one-turn problems 1.13x, min 0.95x, and 14 few-row ones 1.08x, min 0.99x (docs/PERFORMANCE.md).
_MULTICAST_A_MIN_K = 3584
_MULTICAST_A_MAX_M = 640
_NARROW_MIN_K = 512
_NARROW_FROM_128_MIN_K = 1536


def _tile_ctas(m: int, n: int, block_n: int, cluster: int, block_m: int = BLOCK_M, multicast_a: bool = False) -> int:
    """CTA tiles of an m x n output: the tile rows rounded up to whole clusters, times the tile columns (with
    ``multicast_a``, the tile columns rounded up to whole clusters, times the tile rows)."""
    rows, cols = -(-m // block_m), -(-n // block_n)
    if multicast_a:
        return rows * -(-cols // cluster) * cluster
    return -(-rows // cluster) * cluster * cols


def persistent_grid(m: int, n: int, cfg: GemmConfig, sms: int) -> tuple[int, int, int]:
    """The tma kernel's persistent grid: one CTA per SM of ``sms`` (whole clusters), at most one per work unit
    (a cluster's tiles times the split-K ranges)."""
    cl = cfg.cluster
    units = _tile_ctas(m, n, cfg.block_n, cl, cfg.block_m, cfg.multicast_a) // cl * cfg.splits
    return (max(1, min(units, sms // cl)) * cl, 1, 1)


def _turn_ctas(cluster: int, sms: int) -> int:
    """CTAs of the persistent grid in one turn: whole clusters on ``sms`` SMs (at least one cluster)."""
    return max(cluster, sms // cluster * cluster)


def tile_turns(m: int, n: int, block_n: int, cluster: int, sms: int, block_m: int = BLOCK_M,
               multicast_a: bool = False) -> int:
    """Tiles each resident CTA of the persistent grid works through (the last turn may be part-empty)."""
    return -(-_tile_ctas(m, n, block_n, cluster, block_m, multicast_a) // _turn_ctas(cluster, sms))


def _many_turns(m: int, n: int, sms: int) -> bool:
    """Whether the cluster's many-turn discount applies to an m x n output: judged by its 256-wide tiles in pairs
    (more than 3 turns), a property of the problem, not of one tile option."""
    return tile_turns(m, n, 256, 2, sms) > 3


def _cluster_discount(cluster: int, many_turns: bool) -> float:
    """The turn model's factor for a cluster of ``cluster`` CTAs (_CLUSTER_COST, or _CLUSTER_COST_MANY_TURNS for
    a problem of many turns)."""
    return (_CLUSTER_COST_MANY_TURNS if many_turns else _CLUSTER_COST).get(cluster, 1.0)


def choose_tile(m: int, n: int, sms: int, block_n: int | None = None, cluster: int | None = None,
                widths: tuple[int, ...] = (256, 128), k: int | None = None, b_kmajor: bool = True) -> tuple[int, int]:
    """(block_n, cluster) with the fewest tile-cost turns for an m x n output on ``sms`` SMs; a given block_n or
    cluster is kept. Ties go to the wider tile, then to the cluster. A 192-wide tile not asked for is taken where
    its cost is below _BN192_MARGIN of the best other tile's. A problem of one wave of 128-wide lone tiles and a
    ``k`` of at most _ONE_WAVE_K takes them: a cluster saves no turn there and its bandwidth does not matter
    (H100, 7a0a9c0: 344x344x896 0.62x cuBLAS against 0.53x with clusters, 896x856x432 0.79x against 0.64x,
    328x1784x3056 0.69x against 0.55x, with split-K as chosen)."""
    if (block_n in (None, 128) and cluster in (None, 1) and 128 in widths and k is not None and k <= _ONE_WAVE_K
            and tile_turns(m, n, 128, 1, sms) == 1):
        return 128, 1

    # one tile row: nobody to share B with; one SM: no room for a cluster of two (plan_gemm refuses sms < cluster)
    clusters = (cluster,) if cluster else (2, 1) if m > BLOCK_M and sms >= 2 else (1,)
    options = [(bn, cl) for bn in ((block_n,) if block_n else widths) for cl in clusters]

    # The cluster's gain grows with the turns, a property of the problem: judged by the 256-wide tiles in
    # clusters, so that two clustered options are compared on their turns and widths alone (judged per option, a
    # 128-wide tile of 5 turns got the many-turn discount and beat a faster 256-wide one of 3; docs/PERFORMANCE.md).
    # N-major B with N < 640 keeps the per-option judgement: there the 256-wide tiles it would take lost.
    many_turns = _many_turns(m, n, sms)

    def cost(o: tuple[int, int]) -> tuple:
        turns = tile_turns(m, n, o[0], o[1], sms)
        many = turns > 3 if not b_kmajor and n < _NMAJOR_NARROW else many_turns
        cluster_cost = _cluster_discount(o[1], many)
        return turns * _TILE_COST.get(o[0], 1.0) * cluster_cost, -o[0], -o[1]
    best = min(options, key=cost)
    others = [o for o in options if o[0] != 192]
    if best[0] == 192 and block_n is None and others:
        other = min(others, key=cost)
        if cost(best)[0] >= _BN192_MARGIN * cost(other)[0]:
            return other
    return best


def tile_cost(block_n: int) -> float:
    """A turn of one BN-wide tile relative to a 256-wide one (_TILE_COST; a narrow width's interpolated between the
    usual widths around it; outside 128-256, the nearest one's)."""
    widths = sorted(_TILE_COST)
    if block_n in _TILE_COST or not widths[0] < block_n < widths[-1]:  # outside 128-256 (not measured): the nearest
        return _TILE_COST[min(max(block_n, widths[0]), widths[-1])]
    hi = min(w for w in widths if w > block_n)
    lo = max(w for w in widths if w < block_n)
    return _TILE_COST[lo] + (_TILE_COST[hi] - _TILE_COST[lo]) * (block_n - lo) / (hi - lo)


def narrow_width(n: int, tiles: int | None = None) -> int | None:
    """The narrow width for an N whose 256-wide tiles waste columns: N cut into as many tiles as 256-wide ones (or
    ``tiles``), rounded up to 16; None where that is 128, 192 or 256 (the usual widths), below 64 or above
    _NARROW_MAX."""
    w = -(-(-(-n // (tiles or -(-n // 256)))) // 16) * 16
    return w if 64 <= w <= _NARROW_MAX and w not in _USUAL_WIDTHS else None


def choose_narrow(m: int, n: int, k: int, block_n: int, cluster: int, sms: int) -> int | None:
    """The narrow width that replaces a chosen tile (``default_config`` checks the rest of the plan), or None:
    ``narrow_width`` where it is narrower than a chosen 192 or 256; for a chosen 128 in a cluster with K >=
    _NARROW_FROM_128_MIN_K, ``narrow_width`` where its turns cost less (``tile_cost``), else the narrow width of
    more tiles than 256-wide ones whose turns are fewer and cost at most _NARROW_MORE_TILES_MARGIN of the 128-wide
    tiles' (the cheapest; ties to the wider): 11600x640x7232 takes 4 tiles of 160 a row, 3 turns, for 5 of 128, 4
    turns."""
    w = narrow_width(n)
    if w and block_n in (192, 256) and w < block_n:
        return w
    if (block_n, cluster) != (128, 2) or k < _NARROW_FROM_128_MIN_K:
        return None
    turns = tile_turns(m, n, 128, 2, sms)
    if w and tile_turns(m, n, w, 2, sms) * tile_cost(w) < turns * tile_cost(128):
        return w
    best: tuple[float, int] | None = None
    for tiles in range(-(-n // 256) + 1, -(-n // 128) + 1):  # narrower than 128: as dear a tile, more tiles
        v = narrow_width(n, tiles)
        if v is None:
            continue
        v_turns = tile_turns(m, n, v, 2, sms)
        cost = v_turns * tile_cost(v)
        if v_turns >= turns:
            continue
        if cost < _NARROW_MORE_TILES_MARGIN * turns * tile_cost(128) and (best is None or cost < best[0]):
            best = (cost, v)
    return best[1] if best else None


def choose_multicast_a(m: int, n: int, k: int, block_n: int, b_kmajor: bool, sms: int) -> bool:
    """Whether a plan chosen as lone 128 x ``block_n`` CTAs takes clusters that share A (``multicast="a"``): pairs
    on horizontally adjacent tiles, each loading half of A's tile rows, so the L2 reads of A halve. Where the pairs
    add no turn, K >= _MULTICAST_A_MIN_K, and either the tiles are 128 wide in one turn (1288x1432x3832: 132 lone
    CTAs, 11 tile rows, which pairs sharing B would pad to 12, a second turn) or the output has at most
    _MULTICAST_A_MAX_M rows and N-major B. Long mainloops of few-tile problems are bound by the L2's reads (ncu on
    the H100: 71% L2 throughput, the tensor pipe 45% busy at 1288x1432x3832); shorter K and K-major B of many
    turns measured losses (docs/PERFORMANCE.md, GEMM)."""
    if m <= BLOCK_M or k < _MULTICAST_A_MIN_K or sms < 2:
        return False
    turns = tile_turns(m, n, block_n, 1, sms)
    if tile_turns(m, n, block_n, 2, sms, multicast_a=True) != turns:
        return False
    return (turns == 1 and block_n == 128) or (turns > 1 and m <= _MULTICAST_A_MAX_M and not b_kmajor)


def choose_block_m(m: int, n: int, block_n: int, cluster: int, sms: int) -> int:
    """64 where the chosen tile is 128 x 128 in lone CTAs and the problem's 128-row tiles fill at most half the SMs
    in one turn (its 64-row tiles then fill one turn too, twice as many SMs), or where M is at most 64 (one tile
    row either way: the second warpgroup of a 128-row tile multiplies rows of zeros); else 128. A problem of so few
    tiles is bound by each CTA's own tensor work: half the rows a tile, half the time (H100, 70 such problems of
    the sweeps of seeds 1-59: geomean 1.14x, 0.96x-1.64x; decodes up to 1.47x on the H200; docs/PERFORMANCE.md,
    GEMM), with any beta (docs/PERFORMANCE.md, GEMM epilogues)."""
    if (block_n, cluster) != (128, 1):
        return BLOCK_M
    return 64 if m <= 64 or 2 * _tile_ctas(m, n, 128, 1) <= sms else BLOCK_M


def turn_cost(m: int, n: int, k: int, sms: int) -> float:
    """The tile model's time of an m x n x k GEMM (K-major B, beta 0) on ``sms`` SMs with the tile ``choose_tile``
    picks for it in ``plan_gemm``, in turns of 128 x 256 tiles (one turn: every resident CTA computes one such tile
    over all of K)."""
    bn, cl = choose_tile(m, n, sms, k=k, widths=(256, 192, 128))
    return tile_turns(m, n, bn, cl, sms) * _TILE_COST.get(bn, 1.0)


def choose_splits(m: int, n: int, k: int, block_n: int, cluster: int, sms: int, block_m: int = BLOCK_M,
                  by_model: bool = True) -> int:
    """Split-K for an output of few tiles and a long K: when the tiles fill at most half the SMs and K has at least
    16 k-blocks (1024), cut each tile's k-blocks into as many ranges as fill the SMs, each at least 4 k-blocks
    long, at most 16 (the partials are read back once: 16 fp32 slices of the output); when they fill more than
    half the SMs in one turn, the split ``split_cost_us`` finds cheapest where it saves _SPLIT_MARGIN (not with
    ``by_model`` False). 1 otherwise. A shorter K is not split: the second launch costs more than the split saves
    (docs/PERFORMANCE.md, GEMM)."""
    ctas = _tile_ctas(m, n, block_n, cluster, block_m)
    k_blocks = -(-k // BLOCK_K)
    if k_blocks < 2 * _SPLIT_MIN_KB or ctas > _turn_ctas(cluster, sms):
        return 1
    if 2 * ctas <= sms:
        return max(1, min(sms // ctas, k_blocks // _SPLIT_RANGE_KB, 16))
    if not by_model:
        return 1
    # more than half the SMs: the split whose turns, ranges and reduce cost least, where that saves _SPLIT_MARGIN
    cost = [split_cost_us(m, n, k_blocks, block_n, cluster, sms, block_m, s)
            for s in range(1, min(16, k_blocks // _SPLIT_RANGE_KB) + 1)]
    best = min(range(len(cost)), key=cost.__getitem__)
    return best + 1 if cost[best] < _SPLIT_MARGIN * cost[0] else 1


def choose_split_width(m: int, n: int, k: int, cluster: int, sms: int, splits: int) -> tuple[int, int]:
    """(block_n, splits) for a problem whose 128 x 128 tiles split K (``choose_splits``): 256-wide tiles in the same
    cluster with their own split, or the 128-wide plan. Where the 128-wide tiles fill more than half the SMs in one
    turn, 256-wide ones where the model (``split_cost_us``) says they cost less: half as many tiles take more ranges
    each in one turn where the 128-wide ranges took two (2312x416x11816: 80 CTAs x 3 ranges in 2 turns, or 40 x 3
    in one). Over at most half the SMs, 128-wide tiles in clusters cut into two ranges take 256-wide ones where
    those split into more and pad N no more (two 128-wide tiles a 256-wide one: 424x1504x15336 in 5 ranges;
    docs/PERFORMANCE.md, GEMM)."""
    wide = choose_splits(m, n, k, 256, cluster, sms)
    if 2 * _tile_ctas(m, n, 128, cluster) > sms:
        kb = -(-k // BLOCK_K)
        if wide > 1 and (split_cost_us(m, n, kb, 256, cluster, sms, BLOCK_M, wide)
                         < split_cost_us(m, n, kb, 128, cluster, sms, BLOCK_M, splits)):
            return 256, wide
    elif cluster == 2 and splits == 2 and wide > splits and 2 * -(-n // 256) == -(-n // 128):
        return 256, wide
    return 128, splits


def split_cost_us(m: int, n: int, k_blocks: int, block_n: int, cluster: int, sms: int, block_m: int,
                  splits: int) -> float:
    """The turn model's time of a GEMM of ``k_blocks`` cut into ``splits`` ranges, with choose_tail_rows' constants
    (a tile's fill and epilogue cost _TILE_OVERHEAD_KB k-blocks of _KB_US a 256-wide tile; the reduce _REDUCE_US
    plus its bytes at _REDUCE_BYTES_US). Unlike choose_tail_rows' estimate, a 64-row tile costs half a 128-row one,
    and the reduce's output is counted as 16-bit (C's read for beta != 0 not at all), as the rule was measured."""
    turns = -(-_tile_ctas(m, n, block_n, cluster, block_m) * splits // _turn_ctas(cluster, sms))
    us = turns * (-(-k_blocks // splits) + _TILE_OVERHEAD_KB) * _KB_US * tile_cost(block_n) * block_m / BLOCK_M
    return us + (_REDUCE_US + (4 * splits + 2) * m * n / _REDUCE_BYTES_US if splits > 1 else 0.0)


# choose_splits: a problem splits where each of two ranges would have _SPLIT_MIN_KB k-blocks; it then takes ranges
# of at least _SPLIT_RANGE_KB (H100, 44 sweep problems of seeds 1-59: ranges of >= 4 against >= 8 k-blocks 1.06x
# where both split, splitting K of 512-1000 0.6-0.9x).
# Tiles filling more than half the SMs in one turn split where the model (split_cost_us) saves _SPLIT_MARGIN, and
# tail plans (choose_tail_rows) take such splits too: H200 and H100, every problem of sweep seeds 1-199 the rule
# changes, against the previous plan in the same rounds (docs/PERFORMANCE.md, GEMM).
_SPLIT_MIN_KB = 8
_SPLIT_RANGE_KB = 4
_SPLIT_MARGIN = 0.85

# choose_tail_rows' model: a tile's fill and epilogue cost about 8 k-blocks of its mainloop (the per-turn fit in
# docs/PERFORMANCE.md: 3.5-5.4 us a tile beside 0.76 us per 64 of K); the tail's reduce about 3 us and its
# partials' bytes at 2.5 TB/s; a tail is taken where the model saves _TAIL_MARGIN.
_TILE_OVERHEAD_KB = 8
_KB_US = 0.7
_REDUCE_US = 3.0
_REDUCE_BYTES_US = 2.5e6  # bytes a microsecond: 2.5 TB/s
_TAIL_MARGIN = 0.9
# A tail whose own plan does not split (its tiles fill the SMs) is taken from this K on, after a first plan in
# clusters: it is a second launch of whole tiles, which shorter mainloops do not pay for (H100, 40 problems of sweep
# seeds 1-40 the model picks at any K: 0.96x, min 0.74x at K 256; from K 5000 on 10 problems 1.06x, min 0.98x;
# docs/PERFORMANCE.md, GEMM).
_TAIL_UNSPLIT_MIN_K = 5120


def tail_config(cfg: GemmConfig, tail_rows: int, n: int, k: int, sms: int, *, shared_mem_limit: int = 232448,
                splits_by_model: bool = True) -> GemmConfig:
    """The plan of C's last ``tail_rows`` rows (``choose_tail_rows``): chosen as for a problem of its own on
    ``sms`` SMs (lone CTAs where fewer than two)."""
    return default_config(cfg.backend, bf16=cfg.bf16, b_kmajor=cfg.b_kmajor, out_f32=cfg.out_f32,
                          group_m=cfg.group_m, shared_mem_limit=shared_mem_limit, m=tail_rows, n=n, k=k, sms=sms,
                          cluster=1 if sms is not None and sms < 2 else None,
                          splits_by_model=splits_by_model)


def choose_tail_rows(cfg: GemmConfig, m: int, n: int, k: int, sms: int, *, shared_mem_limit: int = 232448,
                     splits_by_model: bool = True, whole_tails: bool = True) -> int:
    """Rows at the end of C left to a second plan (0: none). A persistent grid of T turns whose last turn is
    part-empty keeps the tile rows that fill T - 1 turns; the rows after them, few tiles, go to a plan of their
    own, which splits their K (``choose_splits``) over the SMs and sums the partials. Taken where the turn model
    saves _TAIL_MARGIN of the time: a last turn nearly empty and a K long enough to split (5936x4352x9720 with
    N-major B on 132 SMs: 816 CTAs of 128 x 256 tiles in clusters take 7 turns, the last 24 CTAs alone; the first
    46 tile rows fill 6 turns, and the last 48 rows, 34 lone 64 x 128 tiles, have their K cut 3 ways). After a first
    plan in clusters, from K >= _TAIL_UNSPLIT_MIN_K, also a tail whose own plan fills the SMs without split-K (a
    second launch of whole tiles: 1664x3992x16128's last 640 rows, 3 pairs x 21 tiles of 128 x 192, after 8 tile
    rows of 128 x 256 in one turn; ``whole_tails`` False leaves those out).
    ``splits_by_model``: the tail's plan as ``default_config``'s."""
    if cfg.backend is not Backend.TMA or cfg.splits > 1 or cfg.groups or cfg.fp8 or cfg.store_add or not sms or \
            cfg.narrow or cfg.multicast_a:
        return 0
    turns = tile_turns(m, n, cfg.block_n, cfg.cluster, sms, cfg.block_m)
    cols = -(-n // cfg.block_n)
    # tile rows the first plan keeps: whole clusters of them in one turn fewer
    rows = (turns - 1) * _turn_ctas(cfg.cluster, sms) // cols // cfg.cluster * cfg.cluster
    tail = m - rows * cfg.block_m
    if turns < 2 or rows < 1 or tail <= 0:
        return 0
    t = tail_config(cfg, tail, n, k, sms, shared_mem_limit=shared_mem_limit, splits_by_model=splits_by_model)
    if t.splits < 2 and (not whole_tails or k < _TAIL_UNSPLIT_MIN_K or cfg.cluster < 2):
        return 0
    kb = -(-k // BLOCK_K)
    turn_us = (kb + _TILE_OVERHEAD_KB) * _KB_US * _TILE_COST.get(cfg.block_n, 1.0)
    tail_turns = -(-_tile_ctas(tail, n, t.block_n, t.cluster, t.block_m, t.multicast_a) * t.splits
                   // _turn_ctas(t.cluster, sms))
    tail_us = tail_turns * (-(-kb // t.splits) + _TILE_OVERHEAD_KB) * _KB_US * _TILE_COST.get(t.block_n, 1.0)
    reduce_us = _REDUCE_US + (t.splits * 4 + (4 if cfg.out_f32 else 2)) * tail * n / _REDUCE_BYTES_US \
        if t.splits > 1 else 0.0
    return tail if (turns - 1) * turn_us + tail_us + reduce_us < _TAIL_MARGIN * turns * turn_us else 0


# Swapped operands (choose_swap_ab): a plain plan and the plan of C^T (the caller's N as the kernel's rows, its M
# along BN) compared in the turn model, each plan's turns times its tile's cost (half for 64-row tiles) and, from K
# of _SWAP_CLUSTER_MIN_K, the cluster's discount (``choose_tile``'s); the swapped one is taken where it costs at most
# _SWAP_MARGIN of the plain one. 1000x4097x2048: 33 x 4 lone 128 x 256 tiles of C^T fill one turn (cuBLAS runs this
# very tiling: ncu on the H100) where C's 8 x 33 of 128 x 128 in pairs take two. H100, 66 problems of sweep seeds
# 1-199 the model without the discount swapped: 1.13x, but 0.75x-0.87x where lone swapped CTAs replaced clustered
# ones at K >= 3592, and 1.00x-1.25x at K <= 2048 (docs/PERFORMANCE.md, GEMM).
_SWAP_MARGIN = 0.9
_SWAP_CLUSTER_MIN_K = 3072


def plan_turn_cost(cfg: GemmConfig, m: int, n: int, sms: int, clusters: bool = True) -> float:
    """The turn model's time of a plan of whole tiles (no split-K or tail) for the kernel's m x n output: its turns
    times its tile's cost (``tile_cost``), halved for 64-row tiles, times (``clusters``) ``choose_tile``'s cluster
    discount (judged by the problem's turns of 256-wide tiles in pairs)."""
    turns = tile_turns(m, n, cfg.block_n, cfg.cluster, sms, cfg.block_m, cfg.multicast_a)
    discount = _cluster_discount(cfg.cluster, _many_turns(m, n, sms)) if clusters else 1.0
    return turns * tile_cost(cfg.block_n) * cfg.block_m / BLOCK_M * discount


def choose_swap_ab(plain: GemmConfig, swapped: GemmConfig, m: int, n: int, k: int, sms: int,
                   shared_mem_limit: int = 232448) -> bool:
    """Whether the plan of C^T (``swapped``, chosen for an n x m output) replaces ``plain`` (chosen for m x n):
    both of whole tiles, neither taking a tail, and the swapped one's ``plan_turn_cost`` (the cluster's discount
    counted from K >= _SWAP_CLUSTER_MIN_K) at most _SWAP_MARGIN of the plain one's. No ``sms`` (a GPU of
    unknown size): False."""
    if not sms:
        return False
    for cfg, rows, cols in ((plain, m, n), (swapped, n, m)):
        if cfg.splits > 1 or choose_tail_rows(cfg, rows, cols, k, sms, shared_mem_limit=shared_mem_limit):
            return False
    clusters = k >= _SWAP_CLUSTER_MIN_K
    return plan_turn_cost(swapped, n, m, sms, clusters) <= _SWAP_MARGIN * plan_turn_cost(plain, m, n, sms, clusters)


def choose_plan(backend: Backend, m: int, n: int, k: int, sms: int, limit: int, *, bf16: bool, b_kmajor: bool,
                out_f32: bool, block_n: int | None = None, stages: int | None = None, cluster: int | None = None,
                group_m: int = 8, splits: int | None = None, block_m: int | None = None, store_add: bool = False,
                multicast_a: bool | None = None, tail_rows: Any = None, swap_ab: Any = None,
                sms_given: bool = False) -> tuple[GemmConfig, GemmConfig | None]:
    """``plan_gemm``'s (and ``describe_gemm``'s) plan for an m x n x k product: ``default_config``, checked, its
    tail (``resolve_tail``), and swapped operands (``swap_ab``: True, False, or None for ``choose_swap_ab``'s
    choice where the tile plan is chosen: no block_n, cluster, splits, block_m, stages, multicast or tail_rows
    given; given, split-K not asked for is left out). Returns
    the config and the tail's (None without one). ``sms_given``: ``sms`` is the caller's (checked against the
    cluster)."""
    if swap_ab is not None and not isinstance(swap_ab, bool):
        raise InvalidArgumentError("swap_ab", swap_ab, "must be True, False or None (chosen per problem)",
                                   "leave it out")
    if swap_ab and tail_rows:
        raise InvalidArgumentError("tail_rows", tail_rows, "must be 0 with swap_ab=True (a tail is C's last rows, "
                                   "the swapped kernel's last columns)", "pass tail_rows=0")
    kw = dict(bf16=bf16, out_f32=out_f32, block_n=block_n, stages=stages, cluster=cluster, group_m=group_m,
              shared_mem_limit=limit, k=k, sms=sms, block_m=block_m, store_add=store_add)

    def swapped_config(splits: int | None) -> GemmConfig:
        # C^T's plan: the caller's N as its rows, its M along BN; the kernel's B is the caller's A (K-major) and its
        # A the caller's B (MN-major slabs where B is N-major, which no pair shares unless asked: check_config
        # refuses that)
        shared = multicast_a if b_kmajor or multicast_a is not None else False
        return replace(default_config(backend, b_kmajor=True, m=n, n=m, splits=splits, multicast_a=shared, **kw),
                       swap_ab=True, a_kmajor=b_kmajor)

    tile_chosen = False  # block_n, cluster and splits left out (the tail rule's condition)
    if swap_ab:  # given: split-K not asked for is left out (the swapped kernel does not split)
        cfg = swapped_config(1 if splits is None else splits)
    else:
        splits = first_plan_splits(splits, tail_rows)
        cfg = default_config(backend, b_kmajor=b_kmajor, m=m, n=n, splits=splits, multicast_a=multicast_a, **kw)
        tile_chosen = block_n is None and cluster is None and splits is None
        chosen = tile_chosen and block_m is None and stages is None and multicast_a is None and tail_rows is None
        if (swap_ab is None and chosen and backend is Backend.TMA and not out_f32 and not store_add
                and choose_swap_ab(cfg, swapped := swapped_config(None), m, n, k, sms, limit)):
            cfg = swapped
    check_config(cfg, limit, k)
    if sms_given and sms < cfg.cluster:
        raise InvalidArgumentError("sms", sms, f"must be at least the cluster's {cfg.cluster} CTAs",
                                   "pass more SMs" if cfg.multicast_a else "pass cluster=1, or more SMs")
    if cfg.swap_ab:
        return cfg, None
    return resolve_tail(cfg, m, n, k, sms, limit, tail_rows, tile_chosen)


def default_config(backend: Backend, *, bf16: bool = True, b_kmajor: bool = True, out_f32: bool = False,
                   block_n: int | None = None, stages: int | None = None, cluster: int | None = None,
                   group_m: int = 8, shared_mem_limit: int = 232448, m: int | None = None, n: int | None = None,
                   sms: int | None = None, k: int | None = None, splits: int | None = None,
                   groups: int = 0, fp8: bool = False, block_m: int | None = None,
                   store_add: bool = False, splits_by_model: bool = True,
                   multicast_a: bool | None = None) -> GemmConfig:
    """The tile plan: BM x BN x 64 tiles, as many ring stages as fit, at most 4 (at most 6 for fp8, for 128-wide
    tiles of an ``m`` of at most 64 rows and for 64-row tiles; at most 8 for 64-row tiles of an ``m`` of at most
    8 rows). On tma with the problem's ``m``, ``n`` and the
    device's ``sms``, BN (256 or 128) and the cluster (2 or 1) not given are chosen by ``choose_tile``; without
    them, 256 and 2; BM is ``block_m``, or there ``choose_block_m``'s (64 for few 128 x 128 lone tiles), else 128;
    with ``k`` too, split-K by ``choose_splits`` unless ``splits`` is given; ``store_add``: C stored by reduce-add
    (the config says so). A chosen 192- or 256-wide tile gives way to ``narrow_width`` where that is narrower,
    K >= _NARROW_MIN_K, no ``store_add``, and the usual plan neither splits K nor takes a tail, on a GPU
    where 150 KiB of shared memory fit; so does a chosen 128-wide tile in a cluster where the narrow width's turns
    cost less (``tile_cost``) and K >= _NARROW_FROM_128_MIN_K (``choose_narrow``); a split 128-wide tile plan over
    more than half the SMs in one turn, or split in two in clusters over fewer, may become 256-wide
    (``choose_split_width``; block_n, cluster, block_m and splits all left out, 150 KiB of shared memory).
    ``splits_by_model`` False leaves out the splits of ``choose_splits``' turn model and ``choose_split_width``:
    the narrow rule judges the usual plan's split and tail so, and gives way only where it did before those rules
    (the rule was measured against that plan). BN 192 is a candidate on tma (not fp8). ``multicast_a`` True: a
    2-CTA cluster sharing A (the tile chosen as for one sharing B); None: ``choose_multicast_a`` decides for a plan
    chosen as lone 128-row CTAs without split-K or tail; False: a cluster, if any, shares B. cp.async: BN 256 where
    150 KiB of shared memory fit, else 128, no cluster, no split."""
    if block_m is not None and (type(block_m) is not int or block_m not in (64, 128)):
        raise InvalidArgumentError("block_m", block_m, "must be 128, or 64 on tma (tile rows)",
                                   "use 128 (or leave it out)")
    if multicast_a and cluster is None:
        cluster = 2  # the pair that shares A
    wide = shared_mem_limit >= 150 * 1024
    tile_chosen = block_n is None and cluster is None and block_m is None  # (before they are chosen below)
    if backend is Backend.TMA and m and n and sms and (block_n is None or cluster is None):
        widths = ((256, 128) if fp8 else (256, 192, 128)) if wide else (128,)
        bn, cl = choose_tile(m, n, sms, block_n, cluster, widths, k=k, b_kmajor=b_kmajor)
    else:
        bn = block_n or (256 if wide else 128)
        cl = cluster if cluster is not None else (2 if backend is Backend.TMA else 1)
    # (wide: the rule was measured with the H100's shared memory, where 4 stages of a narrow tile fit)
    if (wide and block_n is None and block_m in (None, 128) and splits in (None, 1)
            and backend is Backend.TMA and m and n and k and k >= _NARROW_MIN_K and sms and not fp8
            and not groups and not store_add and choose_splits(m, n, k, bn, cl, sms, by_model=False) == 1):
        narrow = choose_narrow(m, n, k, bn, cl, sms)
        usual = GemmConfig(backend, bf16, b_kmajor, out_f32, bn, 4, cl, group_m, 1, block_m=BLOCK_M)
        # a tail plan stays the usual's (split tails: the narrow rule was measured before tails of whole tiles)
        if narrow and not choose_tail_rows(usual, m, n, k, sms, shared_mem_limit=shared_mem_limit,
                                           splits_by_model=False, whole_tails=False):
            bn, block_m = narrow, BLOCK_M
    if block_m is None and backend is Backend.TMA and not fp8 and not groups and m and n and sms:
        block_m = choose_block_m(m, n, bn, cl, sms)
    bm = block_m if block_m is not None else BLOCK_M
    if splits is None:
        splits = (choose_splits(m, n, k, bn, cl, sms, bm, splits_by_model)
                  if backend is Backend.TMA and m and n and k and sms and bn in _USUAL_WIDTHS else 1)
        if (m and n and k and sms and tile_chosen and wide and splits_by_model
                and not fp8 and not groups and not store_add and (bn, bm) == (128, BLOCK_M) and splits > 1):
            bn, splits = choose_split_width(m, n, k, cl, sms, splits)
    if (multicast_a is None and tile_chosen and backend is Backend.TMA and m and n and k and sms and cl == 1
            and bm == BLOCK_M and splits == 1 and bn in _USUAL_WIDTHS and not fp8 and not groups and not store_add):
        usual = GemmConfig(backend, bf16, b_kmajor, out_f32, bn, 4, 1, group_m, 1, block_m=BLOCK_M)
        # a plan the tail rule would split keeps its tail (the rule was measured on plans without one)
        if choose_multicast_a(m, n, k, bn, b_kmajor, sms) and not choose_tail_rows(
                usual, m, n, k, sms, shared_mem_limit=shared_mem_limit):
            multicast_a, cl = True, 2
    if stages is None:
        stages = 2
        # The fp8 stage (33 KiB) leaves room for more; so does a 128-wide 16-bit one (32 KiB) on a problem of at
        # most 64 rows, bound by B's bytes in flight (docs/PERFORMANCE.md, GEMM: 8x4096x4096 1.11x with 6), and a
        # 64-row one (8 where M is at most _DEEP_RING_ROWS: 24 KiB stages of a streamed B).
        more = fp8 or bm == 64 or (m is not None and m <= _FEW_ROWS and bn == 128 and backend is Backend.TMA)
        deep = bm == 64 and m is not None and m <= _DEEP_RING_ROWS
        for s in ((8, 7, 6, 5, 4, 3) if deep else (6, 5, 4, 3) if more else (4, 3)):
            if GemmConfig(backend, bf16, b_kmajor, out_f32, bn, s, cl, group_m, splits, groups, fp8,
                          block_m=bm).shared_mem <= shared_mem_limit:
                stages = s
                break
    return GemmConfig(backend, bf16, b_kmajor, out_f32, bn, stages, cl, group_m, splits, groups, fp8, store_add,
                      block_m=bm, multicast_a=bool(multicast_a))


def check_config(cfg: GemmConfig, limit: int, k: int | None = None) -> None:
    """Refuse tile plans the kernel cannot hold, saying what they need and what there is (with ``k``, split-K ranges
    beyond the k-blocks: an empty range would release a stage it never waited for)."""
    tma = cfg.backend is Backend.TMA and not cfg.fp8
    if type(cfg.block_m) is not int or cfg.block_m not in (64, 128) or (
            cfg.block_m == 64 and (not tma or cfg.groups or cfg.block_n == 192)):
        raise InvalidArgumentError("block_m", cfg.block_m, "must be 128, or 64 on tma with block_n 128 or 256, no "
                                   "groups and no fp8 (both consumer warpgroups take the tile's 64 rows, each half "
                                   "of BN)", "use 128 (or leave it out)")
    narrow_ok = tma and type(cfg.block_n) is int and cfg.block_n % 16 == 0 and 64 <= cfg.block_n <= 256
    if cfg.block_n not in (_USUAL_WIDTHS if tma else (128, 256)) and not narrow_ok:
        raise InvalidArgumentError("block_n", cfg.block_n, "must be 128 or 256, or on tma 192 or a multiple of 16 "
                                   "from 64 to 240 (the N of the m64nNk16 wgmma; the cp.async twin's 8 warps of 64 x "
                                   "N/4; fp8's one B scale a tile)", "use 256 (128 for small N)")
    if cfg.narrow:
        for refused, why in ((cfg.block_m != 128, f"block_m={cfg.block_m}"),
                             (cfg.splits != 1, f"split-K (splits={cfg.splits})"), (cfg.groups, "groups"),
                             (cfg.store_add, 'reduce="add"')):
            if refused:
                raise InvalidArgumentError("block_n", cfg.block_n, f"a narrow width (not 128, 192 or 256) is not "
                                           f"built with {why}: it takes 128-row tiles and no split-K, "
                                           "groups or reduce-add", "use block_n=128 or 256")
    if cfg.cluster not in (1, 2) or (cfg.cluster == 2 and cfg.backend is not Backend.TMA and not cfg.multicast_a):
        raise InvalidArgumentError("cluster", cfg.cluster, "must be 1 or 2, and 1 on the cp.async backend (clusters "
                                   "and TMA multicast are sm_90)", "use cluster=2 on tma, 1 on cp.async")
    if cfg.multicast_a and (cfg.cluster != 2 or cfg.backend is not Backend.TMA or cfg.groups or cfg.fp8):
        raise InvalidArgumentError("multicast", "a", f"needs a 2-CTA cluster on tma without groups or fp8 (the pair "
                                   f"takes adjacent tiles of the same rows and shares A's tile; this plan: cluster="
                                   f"{cfg.cluster}, {cfg.backend.value}{', groups' if cfg.groups else ''}"
                                   f"{', fp8' if cfg.fp8 else ''})", 'pass cluster=2, or multicast="b" or None')
    if cfg.swap_ab:
        for refused, why in ((cfg.backend is not Backend.TMA, f"the {cfg.backend.value} backend"),
                             (cfg.out_f32, "an fp32 output"), (cfg.splits != 1, f"split-K (splits={cfg.splits})"),
                             (cfg.groups, "groups"), (cfg.fp8, "fp8"), (cfg.store_add, 'reduce="add"'),
                             (cfg.tail_rows, f"a tail (tail_rows={cfg.tail_rows})"),
                             (not cfg.b_kmajor, "an N-major kernel B (its B is the caller's A, K-major)")):
            if refused:
                raise InvalidArgumentError("swap_ab", True, f"is not built with {why}: swapped operands store a "
                                           "16-bit output of a plain GEMM transposed, 64 rows of 128 bytes a slab",
                                           "pass swap_ab=False (or leave it out)")
    if not cfg.a_kmajor and not cfg.swap_ab:
        raise InvalidArgumentError("a_kmajor", False, "needs swap_ab: MN-major A stages are the caller's N-major B, "
                                   "swapped", "leave a_kmajor True (plan_gemm sets it)")
    if not cfg.a_kmajor and cfg.multicast_a:
        raise InvalidArgumentError("multicast", "a", "cannot share A with swapped operands and N-major B: the "
                                   "kernel's A (the caller's B) is loaded in MN-major slabs, whole by each CTA",
                                   'pass multicast="b" or leave it out')
    if cfg.stages < 2:
        raise InvalidArgumentError("stages", cfg.stages, "must be at least 2 (a ring)", "use 3 or 4")
    if not isinstance(cfg.splits, int) or isinstance(cfg.splits, bool) or not 1 <= cfg.splits <= 64 or (
            cfg.splits > 1 and cfg.backend is not Backend.TMA):
        raise InvalidArgumentError("splits", cfg.splits, "must be an int in [1, 64], and 1 on the cp.async backend",
                                   "leave it out: plan_gemm chooses split-K per problem")
    if k is not None and cfg.splits > -(-k // BLOCK_K):
        raise InvalidArgumentError("splits", cfg.splits, f"must be at most the {-(-k // BLOCK_K)} k-blocks of K={k} "
                                   f"({BLOCK_K} each)", "use fewer splits")
    if not isinstance(cfg.group_m, int) or cfg.group_m < 1:
        raise InvalidArgumentError("group_m", cfg.group_m, "must be a positive int (tile rows per raster group)",
                                   "use 8")
    if cfg.shared_mem > limit:
        raise InvalidArgumentError("stages", cfg.stages, f"a {cfg.block_m} x {cfg.block_n} x {BLOCK_K} stage is "
                                   f"{cfg.stage_bytes / 1024:g} KiB; {cfg.stages} stages need "
                                   f"{cfg.shared_mem / 1024:.1f} KiB, {limit / 1024:.1f} KiB available per block",
                                   "use fewer stages or block_n=128")


def _rows(v: ArrayView, name: str) -> tuple[int, int, int]:
    """(rows, cols, row pitch in elements) of a 2-D operand, checking TMA's 16-byte rules."""
    if len(v.shape) != 2:
        raise InvalidArgumentError(name, f"shape {v.shape}", "must be 2-D", "reshape it to a matrix")
    rows, cols = v.shape
    if rows < 1 or cols < 1:
        raise InvalidArgumentError(name, f"shape {v.shape}", "every dimension must be at least 1",
                                   "pass a non-empty matrix")
    if v.strides[1] != v.itemsize:
        raise InvalidArgumentError(name, f"byte strides {v.strides}", "must have unit stride in its last dimension "
                                   "(rows contiguous)", "pass a row-major array (tensor.contiguous())")
    pitch = v.strides[0]
    if rows > 1 and pitch % 16:
        raise InvalidArgumentError(name, f"row pitch {pitch} bytes (shape {v.shape}, {v.dtype_name})",
                                   "must be a multiple of 16 bytes: a TMA tensor map's row stride (and the cp.async "
                                   "twin's 16-byte chunks) need it",
                                   f"store it in a buffer whose rows are padded to a multiple of {16 // v.itemsize} "
                                   "elements and pass the [:, :cols] view (torch.empty(rows, padded)[:, :cols])")
    if rows > 1 and pitch < cols * v.itemsize:
        raise InvalidArgumentError(name, f"row pitch {pitch} bytes", "must not be smaller than a row",
                                   "pass a row-major array")
    if v.ptr % 16:
        raise InvalidArgumentError(name, f"address 0x{v.ptr:x}", "must be 16-byte aligned (TMA tensor maps, "
                                   "cp.async 16-byte chunks)", "allocate it fresh or slice at a 16-byte boundary")
    return rows, cols, (pitch // v.itemsize if rows > 1 else cols)


def _check_inputs(a: Any, b: Any, c: Any, b_kmajor: bool, out_dtype: str | None) -> tuple:
    av, bv = _checks.view(a, "a"), _checks.view(b, "b")
    if av.dtype_name not in DTYPES:
        raise InvalidArgumentError("a", f"dtype {av.dtype_name}", "must be bfloat16 or float16",
                                   "convert it (tensor.to(torch.bfloat16))")
    if bv.dtype_name != av.dtype_name:
        raise InvalidArgumentError("b", f"dtype {bv.dtype_name}", f"must match a's dtype ({av.dtype_name})",
                                   "convert a and b to one dtype")
    if bv.device != av.device:
        raise InvalidArgumentError("b", f"array on device {bv.device}", f"must be on a's device ({av.device})",
                                   "move it to a's device")
    M, K, _ = _rows(av, "a")
    br, bc, _ = _rows(bv, "b")
    N, Kb = (br, bc) if b_kmajor else (bc, br)
    if Kb != K:
        want = f"(N, {K})" if b_kmajor else f"({K}, N)"
        raise InvalidArgumentError("b", f"shape {bv.shape}", f'must be {want} with b_major="{"k" if b_kmajor else "n"}" '
                                   f"(a is {av.shape})", 'pass B transposed, or the other b_major ("k": b is (N, K), '
                                   '"n": b is (K, N))')
    cv = None
    if c is not None:
        cv = _checks.view(c, "c")
        want_dtype = out_dtype or cv.dtype_name
        if cv.shape != (M, N) or cv.dtype_name not in OUT_DTYPES or cv.dtype_name != want_dtype or (
                cv.dtype_name != "float32" and cv.dtype_name != av.dtype_name):
            raise InvalidArgumentError("c", f"shape {cv.shape}, dtype {cv.dtype_name}",
                                       f"must be ({M}, {N}) in a's dtype ({av.dtype_name}) or float32",
                                       "allocate c as (M, N) of a's dtype or float32")
        if cv.device != av.device:  # a peer output, written over the peer path (NVLink)
            _driver.enable_peer_access(av.device, cv.device)  # raises, naming both GPUs
        _rows(cv, "c")
        _checks.refuse_overlap([("c", cv)], [("a", av), ("b", bv)])  # c may be read (beta), never a or b
    return av, bv, cv, (M, N, K)


def parse_multicast(multicast: Any) -> bool | None:
    """``multicast`` as ``default_config``'s ``multicast_a``: "a" True, "b" False, None None (chosen)."""
    if multicast is None:
        return None
    if not isinstance(multicast, str) or multicast.lower() not in ("a", "b"):
        raise InvalidArgumentError("multicast", multicast, 'must be "a" (a 2-CTA cluster shares A\'s tile), "b" '
                                   "(shares B's) or None (chosen per problem)", "leave it out")
    return multicast.lower() == "a"


def _parse_b_major(b_major: Any) -> bool:
    if not isinstance(b_major, str) or b_major.lower() not in B_MAJORS:
        raise InvalidArgumentError("b_major", b_major, '"k" (b stored (N, K), K contiguous) or "n" (b stored (K, N))',
                                   'pass b_major="k" or b_major="n"')
    return b_major.lower() == "k"


def _empty(a: Any, shape: tuple[int, int], dtype: str) -> Any:
    """An output on a's device from torch's allocator (torch inputs); other callers pass ``c``/``out``."""
    if hasattr(a, "new_empty") and (shape[1] * (4 if dtype == "float32" else 2)) % 16 == 0:
        import torch  # the caller already uses torch

        return a.new_empty(shape, dtype=getattr(torch, dtype))
    raise InvalidArgumentError("c", None, f"must be given here: an output of shape {shape} ({dtype}) is allocated "
                               "only for torch inputs whose row pitch (N elements) is a multiple of 16 bytes",
                               "pass c= / out= (for other N, a [:, :N] view of a buffer with padded rows)")


class GemmPlan:
    """A prepared GEMM launch. ``plan()`` reruns it; ``plan(a, b, c)`` re-points it to new buffers of the same
    geometry (re-addressed tensor maps); both return the output."""

    def __init__(self, cfg: GemmConfig, choice: BackendChoice, dims: tuple[int, int, int], alpha: float, beta: float,
                 out: Any, device: int, stream: Any = None,
                 checked: bool | str | None = None, sms: int | None = None, tail: GemmConfig | None = None):
        self.config, self.backend = cfg, choice
        self.sms = sms or sm_count(device)  # the SMs the persistent grid fills
        self.m, self.n, self.k = dims
        self.alpha, self.beta, self.out, self.device, self._stream = alpha, beta, out, device, stream
        self.maps: tuple = ()
        self._kernel = kernel("gemm.cu", cfg.entry, choice, device, **cfg.defines)
        self._launch: Any = None
        self._reduce: Any = None  # split-K's second launch
        self._workspace: Any = None  # split-K's fp32 partials, owned by the plan
        if cfg.splits > 1:  # check_config(cfg, limit, k) has kept splits within the k-blocks
            from ..device_array import DeviceArray

            self._reduce_kernel = kernel("gemm.cu", "tmakit_gemm_splitk_reduce", choice, device,
                                         **cfg.reduce_defines)
            # a slice of M rows a split (its map is rank 3: TMA clips each split's tiles at M), fp32 rows of 16-byte
            # multiples
            pitch = -(-self.n // 4) * 4
            self._workspace = DeviceArray.empty((cfg.splits * self.m, pitch), "float32", device=device)
            self._split_rows, self._w_pitch = self.m, pitch
        self._checked = checked  # the hang doctor's bounded waits (Kernel.bind(checked=)); None: TMAKIT_CHECK
        # C's last cfg.tail_rows rows: a plan of their own (split-K), launched after this one's kernel
        self._tail = None if not cfg.tail_rows else GemmPlan(tail, choice, (cfg.tail_rows, self.n, self.k), alpha,
                                                              beta, None, device, stream, checked, sms)

    @property
    def tail(self) -> GemmPlan | None:
        """The plan of C's last ``config.tail_rows`` rows (``choose_tail_rows``), or None."""
        return self._tail

    @property
    def kernel_dims(self) -> tuple[int, int]:
        """The kernel's (M, N): the output's, or (N, M) where the operands are swapped (``config.swap_ab``)."""
        return (self.n, self.m) if self.config.swap_ab else (self.m, self.n)

    @property
    def tiles(self) -> tuple[int, int]:
        """The kernel's tile rows and columns (of C^T where the operands are swapped)."""
        km, kn = self.kernel_dims
        return (-(-km // self.config.block_m), -(-kn // self.config.block_n))

    @property
    def grid(self) -> tuple[int, int, int]:
        if self.config.backend is Backend.CP_ASYNC:
            return (self.tiles[0] * self.tiles[1], 1, 1)
        km, kn = self.kernel_dims
        return persistent_grid(km - self.config.tail_rows, kn, self.config, self.sms)

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k

    def _bind(self, a: ArrayView, b: ArrayView, c: ArrayView) -> None:
        cfg = self.config
        M, N, K = self.m, self.n, self.k
        self._operands = (a, b, c)  # the views own their arrays: the launch's pointers stay valid while the plan lives
        scal = (float(self.alpha), float(self.beta), cfg.group_m)
        ldc = c.strides[0] // c.itemsize if M > 1 else N
        if cfg.backend is Backend.TMA and cfg.splits > 1:
            # the main kernel writes each split's fp32 partial into its slice of the workspace (alpha 1, beta 0);
            # the reduce sums the slices into C with alpha and beta
            w = self._workspace
            wv = split_workspace_view(w.ptr, cfg.splits, M, N, self._w_pitch, self.device, w)
            self.maps = gemm_tensor_maps(a, b, wv, cfg)
            args = (*self.maps, w.ptr, M, N, K, self._w_pitch, 1.0, 0.0, cfg.group_m, cfg.splits, self._split_rows,
                    0, 0, 0, NO_MAP, 0, 0)
            total = M * -(-N // 4)  # one thread per 4 columns
            self._reduce = self._reduce_kernel.bind(
                w.ptr, self._w_pitch, self._split_rows * self._w_pitch, c.ptr, M, N, ldc, cfg.splits,
                float(self.alpha), float(self.beta), grid=(min(-(-total // 256), 8 * sm_count(self.device)), 1, 1),
                block=(256, 1, 1), stream=self._stream, pdl=True, checked=False)  # waits for the slices
        elif cfg.backend is Backend.TMA and cfg.swap_ab:
            # C^T = B^T A^T: B's map feeds the kernel's A stages, A's its B stages; C's map is C's own (the kernel
            # stores each slab transposed)
            self.maps = gemm_tensor_maps(b, a, c, cfg)
            args = (*self.maps, c.ptr, N, M, K, ldc, *scal, 1, 0, 0, 0, 0, NO_MAP, 0, 0)
        elif cfg.backend is Backend.TMA:
            self.maps = gemm_tensor_maps(a, b, c, cfg)
            # the tiles of the first M - tail_rows rows (whole cluster rows of tiles: nothing stored past them);
            # no groups, no fp8 scales
            args = (*self.maps, c.ptr, M - cfg.tail_rows, N, K, ldc, *scal, 1, 0, 0, 0, 0, NO_MAP, 0, 0)
            if self._tail is not None:
                self._tail._bind(rows_of(a, M - cfg.tail_rows, cfg.tail_rows), b,
                                 rows_of(c, M - cfg.tail_rows, cfg.tail_rows))
        else:
            lda = a.strides[0] // a.itemsize if M > 1 else K
            ldb = b.strides[0] // b.itemsize if b.shape[0] > 1 else b.shape[1]
            args = (a.ptr, b.ptr, c.ptr, M, N, K, lda, ldb, ldc, *scal)
        self._launch = self._kernel.bind(*args, grid=self.grid, block=(cfg.threads, 1, 1), shared_mem=cfg.shared_mem,
                                         stream=self._stream, checked=self._checked, pdl=cfg.backend is Backend.TMA,
                                         cluster=(cfg.cluster, 1, 1) if cfg.cluster > 1 else None)

    def __call__(self, a: Any = None, b: Any = None, c: Any = None) -> Any:
        return self._rerun(a, b, c, None)

    def _rerun(self, a: Any, b: Any, c: Any, views: list | None) -> Any:
        """``plan(a, b, c)``; ``views``: the three arguments' ArrayViews where the caller has them already (the
        one-shot op's plan cache), so that they are not read twice."""
        if a is not None or b is not None or c is not None:
            if a is None or b is None:
                raise InvalidArgumentError("a, b", "partly given", "re-pointing a plan needs a and b (and c)",
                                           "call plan() for the same buffers or plan(a, b[, c])")
            out_dtype = "float32" if self.config.out_f32 else None
            av, bv, cv, dims = _check_inputs(*(views if views else (a, b, c)), self.config.caller_b_kmajor,
                                             out_dtype)
            if dims != (self.m, self.n, self.k) or (av.dtype_name == "bfloat16") != self.config.bf16 or \
                    av.device != self.device:
                raise InvalidArgumentError("a", f"shape {av.shape} ({av.dtype_name}) on device {av.device}, "
                                           f"b {bv.shape}",
                                           "must have the geometry and device the plan was made for",
                                           "make a new plan with plan_gemm for other shapes or devices")
            plan_out = "float32" if self.config.out_f32 else av.dtype_name
            if cv is not None and cv.dtype_name != plan_out:  # the kernel was compiled for one output type
                raise InvalidArgumentError("c", f"dtype {cv.dtype_name}",
                                           f"must be the plan's output dtype ({plan_out})",
                                           "make a new plan with plan_gemm for another output dtype")
            if c is None and (self.beta != 0 or self.config.store_add):
                raise InvalidArgumentError("c", None, "is needed with beta != 0 (its contents are read) and with "
                                           'reduce="add" (the product is added into it)', "pass c")
            self.out = c if c is not None else _empty(a, (self.m, self.n), out_dtype or av.dtype_name)
            self._bind(av, bv, cv or _checks.view(self.out, "c"))
        self._run()
        return self.out

    def _run(self) -> None:
        """The plan's launches: the kernel, split-K's reduce, then the tail's (which has no output of its own)."""
        self._launch()
        if self._reduce is not None:
            self._reduce()
        if self._tail is not None:
            self._tail._run()


def rows_of(v: ArrayView, row0: int, rows: int) -> ArrayView:
    """Rows [row0, row0 + rows) of a 2-D view (same pitch, same owner)."""
    return v._replace(ptr=v.ptr + row0 * v.strides[0], shape=(rows, v.shape[1]))


def split_workspace_view(ptr: int, splits: int, m: int, n: int, pitch: int, device: int,
                         owner: Any = None) -> ArrayView:
    """Split-K's fp32 workspace as the tma kernel's C: (splits, m, n), rows ``pitch`` floats apart, slices m rows
    apart, so that its map clips each split's tiles at row m."""
    return ArrayView(ptr, (splits, m, n), (m * pitch * 4, pitch * 4, 4), "float32", 4, device, owner)


def _operand_boxes(cfg: GemmConfig) -> tuple[tuple[int, int], tuple[int, int]]:
    """The boxes of A's and B's maps: A (BM, 64); B (BN / cluster, 64) K-major (each CTA of a cluster loads its
    share and multicasts it) or (64, 64) N-major slabs. With ``multicast_a`` the pair shares A instead: A
    (BM / cluster, 64), B (BN, 64) K-major. An MN-major A (``a_kmajor`` False) is loaded as (64, 64) slabs."""
    a_rows = cfg.block_m // cfg.cluster if cfg.multicast_a else cfg.block_m
    b_rows = cfg.block_n if cfg.multicast_a else cfg.block_n // cfg.cluster
    box_a = (a_rows, BLOCK_K) if cfg.a_kmajor else (BLOCK_K, 64)
    return box_a, ((b_rows, BLOCK_K) if cfg.b_kmajor else (BLOCK_K, 64))


def gemm_tensor_maps(a: ArrayView, b: ArrayView, c: ArrayView, cfg: GemmConfig, *, encode: bool = True,
                     arch: Any = None) -> tuple:
    """The three TMA maps of the tma kernel: A and B boxes by ``_operand_boxes``, C boxes (64, 128 bytes of
    columns; one slice of split-K's workspace, ``split_workspace_view``); 128B swizzle, zero fill, 128-byte L2
    promotion. ``encode=False`` plans them without a GPU (for showing them), checked for ``arch``
    (default: the arrays' device's)."""
    kw = dict(swizzle="128B", oob_fill="zero", encode=encode, arch=arch)
    box_a, box_b = _operand_boxes(cfg)
    ta = describe_tensor(a, box=box_a, l2_promotion=L2_PROMOTION, **kw)
    tb = describe_tensor(b, box=box_b, l2_promotion=L2_PROMOTION, **kw)
    # a peer output's map is encoded for a's GPU, whose kernel stores through it
    peer = {"device": a.device} if encode and c.device != a.device else {}
    # C too: its slabs are read by TMA where beta != 0 (H100, 93 such problems: 1.02x, up to 1.4x at short K)
    tc = describe_tensor(c, box=(1,) * (len(c.shape) - 2) + (64, 128 // c.itemsize), l2_promotion=L2_PROMOTION,
                         **kw, **peer)
    return ta, tb, tc


def stage_descriptors(a_map: Any, b_map: Any, cfg: GemmConfig) -> tuple[list, list]:
    """The wgmma descriptors the tma kernel reads its stages with, derived from the maps that fill them (stages at
    shared address 0): A's four k16 slices for the first consumer warpgroup's rows 0-63, then the second's (rows
    64-127 at BM 128, the same rows at BM 64; MN-major where ``a_kmajor`` is False); B's four, N = BN (at BM 64
    each warpgroup moves its own start to its half)."""
    second = 64 if cfg.block_m == 128 else 0
    major = "K" if cfg.a_kmajor else "MN"
    a = wgmma_descriptors(a_map, "A", major, k=BLOCK_K) + wgmma_descriptors(a_map, "A", major, k=BLOCK_K,
                                                                            mn_offset=second)
    b = wgmma_descriptors(b_map, "B", "K" if cfg.b_kmajor else "MN", k=BLOCK_K, mn=cfg.block_n)
    return a, b


def descriptor_defines(cfg: GemmConfig) -> dict[str, str]:
    """TMAKIT_GEMM_DESC_A / _B for cuda_src/gemm.cu: ``stage_descriptors`` of maps with this plan's boxes (the
    descriptors depend on the box, element size and swizzle, not on the tensor)."""
    dtype = "bf16" if cfg.bf16 else "f16"
    box_a, box_b = _operand_boxes(replace(cfg, multicast_a=False))  # the stages' layout is the same either way
    a_shape = (2 * cfg.block_m, 2 * BLOCK_K) if cfg.a_kmajor else (2 * BLOCK_K, 2 * cfg.block_m)  # (rows, cols)
    a_map = describe_tensor(shape=a_shape, dtype=dtype, box=box_a, swizzle="128B", encode=False)
    b_map = describe_tensor(shape=(2 * max(box_b), 2 * max(box_b)), dtype=dtype, box=box_b, swizzle="128B", encode=False)
    a, b = stage_descriptors(a_map, b_map, cfg)
    return {"TMAKIT_GEMM_DESC_A": descriptor_define(a), "TMAKIT_GEMM_DESC_B": descriptor_define(b)}


def plan_gemm(a: Any, b: Any, c: Any = None, *, alpha: float = 1.0, beta: float = 0.0, b_major: str = "k",
              backend: Any = "auto", out_dtype: str | None = None, block_n: int | None = None,
              stages: int | None = None, cluster: int | None = None, group_m: int = 8, splits: int | None = None,
              reduce: str | None = None, sms: int | None = None, tail_rows: int | None = None, stream: Any = None,
              checked: bool | str | None = None, block_m: int | None = None, multicast: str | None = None,
              swap_ab: bool | None = None) -> GemmPlan:
    """Check the arguments, pick the backend (logged), compile the variant and bind one launch (not run).
    ``block_n``, ``cluster`` and ``splits`` (split-K) left out are chosen per problem (``choose_tile``,
    ``choose_splits``); a split-K plan owns an fp32 workspace and launches twice (the partials, then their sum).
    ``block_n`` may be a narrow width on tma, a multiple of 16 from 64 to 240 (``GemmConfig.narrow``:
    128-row tiles, no split-K or reduce), for an N the usual widths cover poorly; left out, one replaces a chosen
    192- or 256-wide tile where ``narrow_width`` is narrower (no more tiles, less work), and a 128-wide one in a
    cluster where its turns cost less (``default_config``).
    ``checked=True``: the hang doctor's bounded mbarrier waits (a hang raises HangError; default TMAKIT_CHECK).

    ``c`` may live on another GPU of the host (a peer output, stored over NVLink; peer access is checked and
    enabled); ``a`` and ``b`` may not: a GEMM reading A through a peer map ran at 95 TFLOP/s against 806 local on
    the H200 (every tile column re-reads A over NVLink: peer lines are not cached in this GPU's L2).
    ``reduce="add"``: ``c += alpha * a @ b`` by TMA reduce-add stores (``cp.reduce.async.bulk.tensor .add``,
    atomic per element), so several GEMMs, on this GPU or on peers, may add into one ``c`` at once (tma only;
    beta 0, no split-K, N * the output's element size a multiple of 16 bytes).
    ``sms``: the SMs the persistent grid fills (default all): fewer leaves SMs to work run beside it, such as
    the all-gather GEMM's copies. ``tail_rows`` (tma): C's last rows computed by a second plan of their own
    (``plan.tail``: its tiles and split-K chosen for those rows), where the first plan's last turn would be nearly
    empty; left out, ``choose_tail_rows`` decides when ``block_n``, ``cluster`` and ``splits`` are left out too
    (else 0); 0: none; given, the first plan takes no split-K unless ``splits`` says so (which is then refused).
    ``block_m`` (tma): 64 for tiles of 64 rows, twice as many as of 128 (both consumer warpgroups take the 64 rows,
    each half of ``block_n``, 128 or 256), or 128; left out,
    ``choose_block_m`` decides (64 for problems of few 128 x 128 lone tiles).
    ``multicast`` (tma, 2-CTA clusters): which operand the pair shares by TMA multicast. "b": the pair takes
    vertically adjacent tiles of the same columns, each loading half of B's tile; "a": horizontally adjacent tiles
    of the same rows, each loading half of A's tile rows (whole tile rows, where an odd count of them leaves "b"'s
    pairs a part-empty turn; "a" implies ``cluster=2``, and a tile not given is chosen as for "b"); left out,
    ``choose_multicast_a`` decides. "b" asks for no cluster: a cluster, where the plan has one (chosen or given),
    shares B.
    ``swap_ab`` (tma): True computes C^T = B^T A^T (either B major, an N-major B read as MN-major A stages; a
    16-bit output, no split-K, tail or reduce): the tiles' rows run along N and their ``block_n`` side along M, C
    stored transposed from the tiles, for problems whose M the 128-row tiles cover poorly; left out,
    ``choose_swap_ab`` decides where the tile plan is chosen."""
    b_kmajor = _parse_b_major(b_major)
    for name, value in (("alpha", alpha), ("beta", beta)):
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            raise InvalidArgumentError(name, value, "must be a finite number", f"pass {name}=1.0")
    if out_dtype is not None and out_dtype not in OUT_DTYPES:
        raise InvalidArgumentError("out_dtype", out_dtype, f"must be one of {OUT_DTYPES}", "leave it out for a's dtype")
    av, bv, cv, dims = _check_inputs(a, b, c, b_kmajor, out_dtype)
    if beta != 0 and c is None:
        raise InvalidArgumentError("c", None, "is needed with beta != 0 (its contents are read)", "pass c")
    odt = out_dtype or (cv.dtype_name if cv is not None else av.dtype_name)
    choice = choose_backend(backend, device=av.device)
    if reduce is not None:
        _check_reduce(reduce, cv, beta, splits, choice, odt)
        splits = 1
    device_sms = sm_count(av.device)
    if sms is not None and (not isinstance(sms, int) or isinstance(sms, bool) or not 1 <= sms <= device_sms):
        raise InvalidArgumentError("sms", sms, f"must be an int in [1, {device_sms}] (the SMs of GPU {av.device})",
                                   "leave it out for all of them")
    limit = shared_mem_limit(choice.arch, av.device)
    cfg, tail = choose_plan(choice.backend, *dims, sms or device_sms, limit, bf16=av.dtype_name == "bfloat16",
                            b_kmajor=b_kmajor, out_f32=odt == "float32", block_n=block_n, stages=stages,
                            cluster=cluster, group_m=group_m, splits=splits, block_m=block_m,
                            store_add=reduce is not None, multicast_a=parse_multicast(multicast),
                            tail_rows=tail_rows, swap_ab=swap_ab, sms_given=sms is not None)
    out = c if c is not None else _empty(a, dims[:2], odt)
    plan = GemmPlan(cfg, choice, dims, float(alpha), float(beta), out, av.device, stream, checked, sms, tail)
    plan._bind(av, bv, cv or _checks.view(out, "c"))
    return plan


def first_plan_splits(splits: int | None, tail_rows: Any) -> int | None:
    """``splits`` for the first plan: 1 where a tail is asked for and splits are not (its tiles whole), else as
    given."""
    return 1 if splits is None and tail_rows and not isinstance(tail_rows, bool) else splits


def resolve_tail(cfg: GemmConfig, m: int, n: int, k: int, sms: int, limit: int, tail_rows: Any,
                 chosen: bool) -> tuple[GemmConfig, GemmConfig | None]:
    """``plan_gemm``'s (and ``describe_gemm``'s) tail: ``tail_rows`` None takes ``choose_tail_rows``'s where the
    tile plan was ``chosen`` (block_n, cluster and splits left out), else none; a given one is checked. Returns the
    config with its ``tail_rows`` and the tail's own config (None without a tail)."""
    if tail_rows is None:
        tail_rows = choose_tail_rows(cfg, m, n, k, sms, shared_mem_limit=limit) if chosen else 0
    else:
        _check_tail_rows(tail_rows, cfg, m)
    if not tail_rows:
        return cfg, None
    tail = tail_config(cfg, tail_rows, n, k, sms, shared_mem_limit=limit)
    check_config(tail, limit, k)
    return replace(cfg, tail_rows=tail_rows), tail


def _check_tail_rows(tail_rows: Any, cfg: GemmConfig, m: int) -> None:
    if not isinstance(tail_rows, int) or isinstance(tail_rows, bool) or not 0 <= tail_rows < m:
        raise InvalidArgumentError("tail_rows", tail_rows, f"must be an int in [0, {m}) (rows at the end of C)",
                                   "leave it out to have it chosen, or pass 0")
    if not tail_rows:
        return
    for refused, why, fix in ((cfg.backend is not Backend.TMA, "on the cp.async backend", "pass tail_rows=0"),
                              (cfg.splits > 1, f"with split-K (splits={cfg.splits})", "leave splits out"),
                              (cfg.store_add, 'with reduce="add"', "pass tail_rows=0")):
        if refused:
            raise InvalidArgumentError("tail_rows", tail_rows, f"must be 0 {why}: a tail is for plans of whole "
                                       "tiles on tma", fix)
    whole = cfg.block_m * (1 if cfg.multicast_a else cfg.cluster)
    if (m - tail_rows) % whole:
        raise InvalidArgumentError("tail_rows", tail_rows, f"must leave the first plan whole cluster rows of tiles: "
                                   f"M - tail_rows a multiple of {whole} (M = {m}, {cfg.block_m}-row tiles in clusters "
                                   f"of {cfg.cluster}, chosen or given)",
                                   f"pass M minus a multiple of {whole}" + (
                                       "" if cfg.multicast_a or cfg.cluster == 1
                                       else f", or cluster=1 for multiples of {cfg.block_m}"))


def _check_reduce(reduce: Any, cv: ArrayView | None, beta: float, splits: int | None, choice: BackendChoice,
                  odt: str) -> None:
    if reduce != "add":
        raise InvalidArgumentError("reduce", reduce, 'must be None (store C) or "add" (C += the product by TMA '
                                   "reduce-add stores)", 'leave it out, or pass reduce="add"')
    if cv is None:
        raise InvalidArgumentError("c", None, 'is needed with reduce="add" (the product is added into it)', "pass c")
    if beta != 0:
        raise InvalidArgumentError("beta", beta, 'must be 0 with reduce="add" (C is added to in memory, not read: '
                                   "other GEMMs may be adding into it)", "scale C beforehand, or use beta without "
                                   "reduce")
    if splits not in (None, 1):
        raise InvalidArgumentError("splits", splits, 'must be 1 with reduce="add" (one product per tile)',
                                   "leave splits out")
    if choice.backend is not Backend.TMA:
        raise InvalidArgumentError("backend", choice.name, 'must be tma with reduce="add": the cp.async twin '
                                   "(sm_80) has no reducing store", "run it on an sm_90 GPU with backend auto")
    if (cv.shape[1] * cv.itemsize) % 16:
        raise InvalidArgumentError("c", f"shape {cv.shape} ({odt})", 'must have rows of a multiple of 16 bytes with '
                                   'reduce="add" (a TMA reduction cannot end inside a 16-byte chunk of a row)',
                                   f"pad N to a multiple of {16 // cv.itemsize}")


def gemm(a: Any, b: Any, out: Any = None, **options: Any) -> Any:
    """Plan and run once: returns the output (asynchronous on the plan's stream). A geometry seen before
    re-points the plan made then (``tmakit.ops._plan_cache``)."""
    rest = {k: v for k, v in options.items() if k != "stream"}
    return cached("gemm", ("a", "b", "c"), (a, b, out), options.get("stream"), rest,
                  lambda: plan_gemm(a, b, out, **options), lambda plan, views: plan._rerun(a, b, out, views))


__all__ = ["GemmConfig", "GemmPlan", "check_config", "choose_block_m", "choose_multicast_a", "choose_plan",
           "choose_splits", "choose_swap_ab", "choose_tail_rows", "choose_tile", "default_config", "descriptor_defines",
           "first_plan_splits", "gemm", "gemm_tensor_maps", "parse_multicast", "persistent_grid", "plan_gemm",
           "plan_turn_cost", "resolve_tail", "rows_of", "shared_mem_limit", "stage_descriptors", "tile_turns",
           "turn_cost"]
