"""Arrivals: per phase, the threads that arrive on a barrier (times each arrive's count) equal the count it was
initialised with; a barrier that is waited on phase after phase receives arrivals at all; and a consumer that
releases a stage does so on every path through its loop.

Sources: NVIDIA/cutlass#2404 (a producer count of 32 with one arriving thread; a whole consumer warpgroup arriving
on a count-1 barrier), deepseek-ai/DeepEP#293 (a warp arriving on a count-1 barrier), NVIDIA/cutlass#1438 (what
consumer_release is for), NVIDIA/cutlass#2364 (arrive.expect_tx on a barrier nobody initialised).
"""
from __future__ import annotations

import itertools
from collections import defaultdict

from ..analysis import Kernel
from ..keys import may_alias, varies_in
from ..values import evaluate, substitute

SECTION = "arrive"


def check(k: Kernel) -> None:
    inits = k.by_kind("init")
    arrives = k.by_kind("arrive")
    waits = k.by_kind("wait")
    for ev in arrives + k.by_kind("expect_tx"):
        if ev.peer is None and not any(may_alias(i.barrier, ev.barrier) for i in inits) and inits is not None:
            if ev.barrier is not None and ev.barrier[0] != "opq" and not ev.info.get("cp_async"):
                k.add("arrivals.uninitialized", "error", f"{ev.inst.opcode.split('.')[0]}.{ev.inst.opcode.split('.')[1]} "
                      f"on {k.name(ev.barrier)}, which no mbarrier.init in this kernel initialises: its state is "
                      "undefined (an unspecified launch failure, or a phase that never completes)",
                      "mbarrier.init it (one thread) with its arrival count, then fence.mbarrier_init and a barrier "
                      "before first use", "mbarrier", ev.inst, barrier=ev.barrier)
                return
    for init in inits:
        _check_counts(k, init, arrives)
    _never_arrived(k, waits, arrives + k.by_kind("expect_tx"), inits)
    _skipped_release(k, waits, arrives)


def _check_counts(k: Kernel, init, arrives) -> None:
    expected_v = evaluate(init.amount, {}) if init.amount is not None else None
    for rank in k.ranks:
        env = k.rank_env(rank)
        key = substitute(init.barrier, env)
        sites = []
        for issuer in k.ranks:
            ienv = k.rank_env(issuer)
            for ev in arrives:
                if ev.info.get("no_complete") or k.runs_on(ev.inst, issuer) is False:
                    continue
                target = issuer if ev.peer is None else evaluate(substitute(ev.peer, ienv), ienv)
                if target is None:
                    return  # an arrive on a peer computed at run time: not countable
                if target != rank:
                    continue
                akey = substitute(ev.barrier, ienv)
                if akey == key:
                    sites.append((ev, issuer))
                elif may_alias(akey, key):
                    return  # an arrive that may or may not land here: not countable
        if not sites:
            continue
        if expected_v is None:
            k.add("arrivals.unknown", "note", f"barrier {k.name(key)} is initialised with a count computed at run time; "
                  "its arrivals per phase are not checked", "-", SECTION, init.inst, barrier=key)
            return
        for group in _phases(k, sites, key):
            if _check_group(k, key, expected_v, group):
                return
        return


def _phases(k: Kernel, sites: list, key) -> list[list]:
    """The sites grouped by phase: two arrivals belong to different phases when a wait on the barrier stands on
    every path from one to the other (straight-line code that arrives, waits, and arrives again)."""
    waits = {w.index for w in k.by_kind("wait") if may_alias(w.barrier, key)}
    groups: list[list] = []
    for site in sorted(sites, key=lambda s: s[0].index):
        for group in groups:
            if any(k.cfg.reachable_without(other.index, site[0].index, waits, forward_only=True)
                   or k.cfg.reachable_without(site[0].index, other.index, waits, forward_only=True)
                   or other.index == site[0].index for other, _ in group):
                group.append(site)
                break
        else:
            groups.append([site])
    return groups


def _check_group(k: Kernel, key, expected_v: int, sites: list) -> bool:
    loops = {k.loop(ev.inst) for ev, _ in sites}
    if len(loops) > 1:
        k.add("arrivals.unknown", "note", f"the arrivals on barrier {k.name(key)} come from different loops, so "
              "the arrivals per phase are not derivable", "-", SECTION, sites[0][0].inst, barrier=key)
        return True
    per_site = []
    for ev, issuer in sites:
        counts = k.threads(ev.inst, issuer)
        per = evaluate(substitute(ev.amount, k.rank_env(issuer)), k.rank_env(issuer)) if ev.amount else 1
        if counts is None or per is None:
            k.add("arrivals.unknown", "note", f"how many threads arrive on barrier {k.name(key)} (line "
                  f"{ev.inst.line}) depends on data", "-", SECTION, ev.inst, barrier=key)
            return True
        per_site.append((ev, issuer, {size: n * per for size, n in counts.items()}, k.data_literals(ev.inst)))
    common = frozenset.intersection(*(lits for *_, lits in per_site))
    exprs = sorted({e for *_, lits in per_site for e, _ in lits - common}, key=repr)
    if len(exprs) > 4:
        k.add("arrivals.unknown", "note", f"barrier {k.name(key)}: too many data conditions around its arrivals "
              "to enumerate", "-", SECTION, sites[0][0].inst, barrier=key)
        return True
    for truth_values in itertools.product((True, False), repeat=len(exprs)):
        truth = dict(zip(exprs, truth_values))
        active = [site for site in per_site if all(truth.get(e, True) == pol for e, pol in site[3] - common)]
        if not active:
            continue
        totals: dict[int, int] = defaultdict(int)
        for _, _, counts, _ in active:
            for size, n in counts.items():
                totals[size] += n
        if _report(k, key, expected_v, set(totals.values()), [(ev, who) for ev, who, *_ in active]):
            return True
    return False


def _report(k: Kernel, key, expected_v: int, values: set[int], sites) -> bool:
    first = sites[0][0].inst
    who = _who(k, sites)
    if all(v > expected_v for v in values):
        k.add("arrivals.too_many", "error", f"barrier {k.name(key)} was initialised for {expected_v} arrival(s) per "
              f"phase but {_span(values)} arrive ({who}): a phase completes before its producer is done, and the "
              "extra arrivals complete the next phase early (or overflow the pending count)",
              f"arrive from exactly {expected_v} thread(s) (elect one: if (threadIdx.x % 32 == 0) / elect.sync), "
              f"or init the barrier with {_span(values)}", SECTION, first, barrier=key, value=expected_v)
        return True
    if all(v < expected_v for v in values):
        k.add("arrivals.too_few", "error", f"barrier {k.name(key)} was initialised for {expected_v} arrival(s) per "
              f"phase but only {_span(values)} arrive ({who}): the phase never completes and its waiters hang",
              f"init the barrier with the number of threads that arrive ({_span(values)}), or have "
              f"{expected_v} threads arrive", SECTION, first, barrier=key, value=expected_v)
        return True
    if len(values) > 1:
        k.add("arrivals.unknown", "note", f"the arrivals on barrier {k.name(key)} per phase ({_span(values)}) "
              "depend on the block size", "declare it: __launch_bounds__(threads)", SECTION, first, barrier=key)
        return True
    return False


def _span(values: set[int]) -> str:
    lo, hi = min(values), max(values)
    return str(lo) if lo == hi else f"{lo} to {hi}"


def _who(k: Kernel, sites) -> str:
    return ", ".join(f"line {ev.inst.line}" + (f" ({k.module.source_line(ev.inst)})" if k.module.source_line(ev.inst)
                                               else "") for ev, _ in sites[:3])


def _never_arrived(k: Kernel, waits, arrivals, inits) -> None:
    for w in waits:
        loops = k.loops(w.inst)
        if not loops or w.barrier is None:
            continue
        if any(may_alias(a.barrier, w.barrier) for a in arrivals if a.peer is None):
            continue
        if any(a.peer is not None for a in arrivals):
            continue  # remote arrivals from cluster peers may land here
        if not any(may_alias(i.barrier, w.barrier) for i in inits):
            continue
        if not varies_in(w.info.get("parity"), k.cfg.loops[loops[0]], k.cfg.insts):
            continue  # waits on one phase only: a barrier completed once (or never used again)
        k.add("arrivals.never_released", "error", f"the loop at line {k.cfg.insts[k.cfg.blocks[loops[0]].start].line} "
              f"waits on barrier {k.name(w.barrier)} phase after phase, but nothing in the kernel arrives on it: after "
              "the first pass over the ring the wait never returns (a consumer that never releases the stage)",
              "have every consumer arrive on this barrier (consumer_release) when it is done with the stage",
              SECTION, w.inst, barrier=w.barrier)


def _skipped_release(k: Kernel, waits, arrives) -> None:
    for w in waits:
        loop = k.loop(w.inst)
        if loop < 0:
            continue
        body = k.cfg.loops[loop]
        releases = [a for a in arrives if not a.info.get("expect") and not a.info.get("cp_async")
                    and a.inst.block in body and not may_alias(a.barrier, w.barrier)]
        later = [a for a in releases if k.cfg.reachable_without(w.index, a.index, set(), forward_only=True)]
        if not later:
            continue
        blocked = {a.index for a in later}
        releasers = k.thread_set(later[0].inst, k.block_sizes[-1])
        if not releasers:
            continue
        edge_ok = k.edges_for(min(releasers))  # follow the paths one releasing thread can take
        for latch, _ in k.cfg.back_edges(loop):
            if latch == w.inst.block:
                continue  # the wait's own retry (ptxas may give the spin loop the trip loop's header)
            end = k.cfg.blocks[latch].end - 1
            if end != w.index and end not in blocked and \
                    k.cfg.reachable_without(w.index, end, blocked, forward_only=True, edge_ok=edge_ok):
                rel = later[0]
                k.add("arrivals.skipped_release", "error", f"after waiting on {k.name(w.barrier)} (line {w.inst.line}) "
                      f"a path through the loop reaches its next trip without the release at line {rel.inst.line} "
                      f"(arrive on {k.name(rel.barrier)}): that stage is never freed and the producer hangs in its "
                      "acquire", "release on every path (put the arrive after the branch, or arrive before `continue`)",
                      SECTION, w.inst, barrier=rel.barrier)
                return
