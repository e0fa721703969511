"""Phase: the parity a loop waits for must follow the barrier's phases.

- A wait inside a loop whose barrier and parity do not change from trip to trip, on a barrier that completes a
  phase every trip, returns at once from the second trip on (stale data) or waits for a phase that never comes.
- Where the loop's counters can be followed (a loop-carried register with a constant start and a constant step),
  the loop is run for 16 trips: the parity waited for on each barrier must flip with each use of that barrier
  (waits on it before the loop, a peeled first trip, count as uses)
  (tile-ai/tilelang#2927: a per-iteration barrier with the loop's parity; tile-ai/tilelang#3087: a ring's
  parity on a barrier that flips every iteration).
- Lagging waiters: several threads wait, then a subset of them (an elected lane, a leader warp) releases the
  partner, with no warp/CTA barrier between; a waiter that has not yet seen the phase may then see the barrier
  two phases on and wait for a parity that never comes again (NVIDIA/cutlass#3654, triton-lang/triton#10035).
  A wgmma.mma_async issued after the wait and completed (wgmma.wait_group) before the signal synchronises the
  signaller's warpgroup: the tensor cores run it only once all four warps have issued it (PTX ISA 9.7.15.5.2,
  "all threads in the warpgroup"), so a warpgroup's thread 0 may release for its warpgroup. So does a named
  barrier of 128 threads (bar.sync id, 128) that each waiting warpgroup reaches whole under an id of its own.
"""
from __future__ import annotations

from ..analysis import Kernel
from ..keys import may_alias, varies_in
from ..values import Expr, evaluate, leaves, substitute

SECTION = "phase"
TRIPS = 16


def check(k: Kernel) -> None:
    producers = k.by_kind("arrive", "expect_tx", "tensor_load", "bulk_load")
    for w in k.by_kind("wait"):
        if not w.info.get("by_parity") or w.barrier is None:
            continue
        loops = k.loops(w.inst)
        if not loops:
            continue
        repeated = any(k.loops(p.inst) and may_alias(p.barrier, w.barrier) for p in producers)
        if not repeated:
            continue
        body = k.cfg.loops[loops[0]]
        parity = w.info["parity"]
        if not varies_in(parity, body, k.cfg.insts) and not varies_in(w.barrier, body, k.cfg.insts):
            k.add("phase.invariant_parity", "error", f"the loop at line {_line(k, loops[0])} waits on barrier "
                  f"{k.name(w.barrier)} for parity {_show(parity)} on every trip, but the barrier completes a phase "
                  "every trip: from the second trip on the wait returns at once (stale data) or never returns",
                  "track the phase: flip the parity each time the barrier is reused (phase ^= 1 when the stage index "
                  "wraps, as a PipelineState does)", SECTION, w.inst, barrier=w.barrier)
            continue
        _simulate(k, w, loops[0])
    _lagging_waiters(k, producers)


def _line(k: Kernel, header: int) -> int:
    return k.cfg.insts[k.cfg.blocks[header].start].line


def _show(e: Expr) -> str:
    return str(e[1]) if e[0] == "c" else "(a value fixed for the loop)"


def _simulate(k: Kernel, w, header: int) -> None:
    body, insts, values = k.cfg.loops[header], k.cfg.insts, k.values
    phis = {leaf for e in (w.info["parity"], w.barrier) for leaf in leaves(e) if leaf[0] == "phi"}
    if not phis:
        return
    init, step = {}, {}
    for leaf in phis:
        inside = [d for d in leaf[2] if insts[d].block in body]
        outside = [d for d in leaf[2] if insts[d].block not in body]
        if len(inside) != 1 or len(outside) != 1:
            return
        start = evaluate(values.definition(outside[0], leaf[1]), {})
        if start is None:
            return
        init[leaf], step[leaf] = start, values.definition(inside[0], leaf[1])
    lits = [(e, pol) for e, pol, b in k.placed_literals(w.inst)  # conditions decided inside the loop, per trip
            if b in body and k.kind_of(e) not in ("thread", "const", "rank")]
    env = dict(init)
    uses = _earlier_uses(k, w, header)
    offset = None
    for trip in range(TRIPS):
        runs = True
        for e, pol in lits:
            v = evaluate(e, env)
            if v is None:
                return
            if bool(v) != pol:
                runs = False
        if runs:
            key = evaluate(substitute(w.barrier, _zero_syms(w.barrier)), env)
            parity = evaluate(w.info["parity"], env)
            if key is None or parity is None:
                return
            n = uses.get(key, 0)
            d = (parity ^ n) & 1
            if offset is None:
                offset = d
            elif d != offset:
                k.add("phase.parity_sequence", "error", f"run the loop at line {_line(k, header)}: on trip {trip} it "
                      f"waits on barrier {k.name(w.barrier)} (slot {key}) for parity {parity & 1}, but that barrier has "
                      f"completed {n} phase(s) in the earlier trips, so the phase it waits for has parity "
                      f"{(n + offset) & 1}: the wait returns at once on a stale phase or never returns",
                      "derive the parity from how many times this barrier was used (stage = k % S, parity = (k / S) & 1 "
                      "for a ring of S barriers; k & 1 for one barrier reused every trip)", SECTION, w.inst,
                      barrier=w.barrier)
                return
            uses[key] = n + 1
        nxt = {}
        for leaf in phis:
            v = evaluate(step[leaf], env)
            if v is None:
                return
            nxt[leaf] = v & 0xFFFFFFFF if abs(v) < 1 << 32 else v
        env = nxt


def _earlier_uses(k: Kernel, w, header: int) -> dict[int, int]:
    """Waits on the same barriers before the loop, by slot: a loop whose first trip was peeled into a prologue
    (software pipelining) finds those slots one phase on."""
    # (slot, parity) pairs: one wait's probes (a first one, then its retry loop's) are one phase of one slot
    phases: set[tuple[int, int]] = set()
    body, first = k.cfg.loops[header], k.cfg.blocks[header].start
    for x in k.by_kind("wait"):
        if x.inst.block in body or x.index >= first or x.barrier is None or not may_alias(x.barrier, w.barrier):
            continue
        key = evaluate(substitute(x.barrier, _zero_syms(x.barrier)), {})
        parity = evaluate(x.info["parity"], {}) if x.info.get("parity") is not None else None
        if key is not None and parity is not None:
            phases.add((key, parity & 1))
    uses: dict[int, int] = {}
    for key, _ in phases:
        uses[key] = uses.get(key, 0) + 1
    return uses


def _zero_syms(e: Expr) -> dict:
    return {leaf: 0 for leaf in leaves(e) if leaf[0] == "sym"}


_WARP_COLLECTIVE = ("shfl", "vote", "match", "redux", "elect", "ldmatrix", "mma", "stmatrix", "wgmma")


def _lagging_waiters(k: Kernel, producers) -> None:
    insts = k.cfg.insts
    cta_syncs = [s for s in k.by_kind("sync") if s.info.get("scope") in ("cta", "cluster")]
    # a warp-synchronous instruction makes every lane of its warp wait for the others (.sync)
    warp_syncs = {i.index for i in insts if (i.head == "bar" and "warp" in i.opcode)
                  or (i.head in _WARP_COLLECTIVE and ("sync" in i.opcode.split(".") or i.head == "wgmma"))}
    mma = {i.index for i in insts if i.head == "wgmma" and "mma_async" in i.opcode}
    mma_waits = {i.index for i in insts if i.head == "wgmma" and "wait_group" in i.opcode}
    for w in k.by_kind("wait"):
        loop = k.loop(w.inst)
        if loop < 0 or w.barrier is None:
            continue
        body = k.cfg.loops[loop]
        for x in producers:
            if x.inst.block not in body or x.barrier is None or may_alias(x.barrier, w.barrier):
                continue
            if not k.cfg.reachable_without(w.index, x.index, set(), forward_only=True):
                continue
            if all(_hazard(k, w, x, size, producers, body, cta_syncs, warp_syncs, (mma, mma_waits)) for size in k.block_sizes):
                n_w = len(k.thread_set(w.inst, k.block_sizes[-1]) or ())
                k.add("phase.lagging_waiter", "error", f"{n_w} threads wait on barrier {k.name(w.barrier)} (line "
                      f"{w.inst.line}), then a subset of them signals at line {x.inst.line} ({x.kind} on "
                      f"{k.name(x.barrier)}) with no barrier between: a waiter that has not yet seen the phase can "
                      "find the barrier two phases on and wait for a parity that never comes again",
                      "synchronise the waiters before the signal: __syncwarp() inside a warp, bar.sync id, count "
                      "across warps", SECTION, x.inst, barrier=w.barrier)
                return


def _hazard(k: Kernel, w, x, size: int, producers, body, cta_syncs, warp_syncs, warpgroup) -> bool:
    tw, tx = k.thread_set(w.inst, size), k.thread_set(x.inst, size)
    if tw is None or tx is None or not tx or not tx < tw:
        return False
    others = tw - tx
    partners = [p for p in producers if p.kind in ("arrive", "expect_tx") and p.barrier == x.barrier
                and p.inst.block in body]
    if any((k.thread_set(p.inst, size) or frozenset()) & others for p in partners):
        return False  # the laggards' own arrivals gate the partner
    blocked = {s.index for s in cta_syncs if _covers(s, tw)}
    if not k.cfg.reachable_without(w.index, x.index, blocked, forward_only=True):
        return False
    signal_warps = {t // 32 for t in tx}
    if all(t // 32 in signal_warps for t in others) and \
            not k.cfg.reachable_without(w.index, x.index, warp_syncs, forward_only=True):
        return False  # every laggard shares a warp with a signaller, and the warp synchronises in between
    signal_groups = {t // 128 for t in tx}
    if all(t // 128 in signal_groups for t in others):
        if all(not k.cfg.reachable_without(w.index, x.index, cut, forward_only=True) for cut in warpgroup):
            return False  # every laggard shares a warpgroup with a signaller, which saw a wgmma of the group complete
        # or a barrier of each warpgroup's own 128 threads between (bar.sync id, 128, the id one per warpgroup
        # and reached by all of its threads, as consumer warpgroups name theirs)
        group_syncs = {s.index for s in cta_syncs if _per_warpgroup(k, s, tw, size)}
        if group_syncs and not k.cfg.reachable_without(w.index, x.index, group_syncs, forward_only=True):
            return False
    return True


def _per_warpgroup(k: Kernel, sync, waiters: frozenset[int], size: int) -> bool:
    """Whether ``sync`` is a 128-thread named barrier that each waiter's warpgroup reaches whole, under an id of
    its own: then it orders that warpgroup's waiters before its signaller, and nothing else."""
    count = sync.info.get("count")
    if count is None or evaluate(count, {}) != 128 or sync.info.get("id") is None:
        return False
    groups = {t // 128 for t in waiters}
    members = frozenset(t for g in groups for t in range(128 * g, 128 * g + 128))
    reached = k.thread_set(sync.inst, size)
    ids = k.thread_values(sync.info["id"], members, size)
    if reached is None or not members <= reached or ids is None or (size % 128 and max(groups) == size // 128):
        return False
    by_group: dict[int, set[int]] = {}
    for t, i in zip(sorted(members), ids):
        by_group.setdefault(t // 128, set()).add(i)
    if any(len(v) != 1 for v in by_group.values()):
        return False
    first = [min(v) for v in by_group.values()]
    if len(set(first)) != len(first):
        return False  # two warpgroups on one id: any four of their warps complete it
    # and no thread outside these warpgroups syncs on one of their ids
    others = reached - members
    rest = k.thread_values(sync.info["id"], frozenset(others), size) if others else []
    return rest is not None and not set(rest) & set(first)


def _covers(sync, threads: frozenset[int]) -> bool:
    if sync.info.get("scope") == "cluster":
        return True
    count = sync.info.get("count")
    if count is None:
        return True
    n = evaluate(count, {})
    return n is not None and n >= len(threads)
