"""tx bytes: per barrier and phase, the bytes ``expect_tx`` posts equal the bytes of the copies completing on it
(a tensor copy: its map's box bytes, landing in every CTA of a multicast mask; a bulk copy: its size).

Phases are approximated by loop trips: expects and copies on the same barrier address in the same loop (or both
outside loops) form one phase. Conditions on data split a group into scenarios (each condition true or false),
so a copy that may be skipped while its bytes are still expected (NVIDIA/cutlass#2641) is an error of its own.
"""
from __future__ import annotations

import itertools
from collections import defaultdict

from ..analysis import Kernel
from ..values import evaluate, substitute

RULE_MANY, RULE_FEW, RULE_COND, RULE_UNKNOWN = "tx.too_many", "tx.too_few", "tx.conditional", "tx.unknown"


def _bytes(k: Kernel, ev, env) -> tuple[int | None, str]:
    if ev.kind == "tensor_load":
        param, tmap = k.map_of(ev.info["tmap"])
        if tmap is None:
            return None, f"no tensor map is bound to {param or 'its tensor-map operand'}"
        return int(tmap.box_bytes), f"box {'x'.join(map(str, tmap.box_shape))} {tmap.dtype.short} = " \
                                    f"{tmap.box_bytes} B"
    v = evaluate(substitute(ev.amount, env), env) if ev.amount is not None else None
    if v is None:
        return None, "its byte count is computed at run time"
    return v, f"{v} B"


def _count(k: Kernel, ev, rank: int) -> int | None:
    counts = k.threads(ev.inst, rank)
    if counts is None or len(set(counts.values())) != 1:
        return None
    return next(iter(counts.values()))


def check(k: Kernel) -> None:
    loads = k.by_kind("tensor_load", "bulk_load", "complete_tx")
    expects = k.by_kind("expect_tx")
    if not expects and not any(e.kind != "complete_tx" for e in loads):
        return
    if any(e.info.get("multicast") for e in loads) and k.cluster is None:
        k.add(RULE_UNKNOWN, "note", "the kernel multicasts (cp.async.bulk*.multicast::cluster) but the cluster shape is "
              "unknown, so the bytes landing in each CTA cannot be counted", "pass cluster=(x, y, z) (--cluster X,Y,Z)",
              "tx", next(e.inst for e in loads if e.info.get("multicast")))
        return
    for rank in k.ranks:
        groups: dict[tuple, dict[str, list]] = defaultdict(lambda: {"expect": [], "deliver": []})
        for ev in expects:
            env = k.rank_env(rank)
            if k.runs_on(ev.inst, rank) is False:
                continue
            target = rank if ev.peer is None else evaluate(substitute(ev.peer, env), env)
            if target is None:
                k.add(RULE_UNKNOWN, "note", "expect_tx on a cluster peer's barrier whose rank is computed at run time",
                      "-", "tx", ev.inst, barrier=ev.barrier)
                continue
            key = substitute(ev.barrier, env)
            groups[(target, key, k.loop(ev.inst))]["expect"].append((ev, rank))
        for issuer in k.ranks:
            env = k.rank_env(issuer)
            for ev in loads:
                if k.runs_on(ev.inst, issuer) is False:
                    continue
                for target in _targets(k, ev, issuer, env):
                    key = substitute(ev.barrier, env)
                    groups[(target, key, k.loop(ev.inst))]["deliver"].append((ev, issuer))
        _compare_rank(k, rank, {g: v for g, v in groups.items() if g[0] == rank})


def _targets(k: Kernel, ev, issuer: int, env) -> list[int]:
    if ev.info.get("multicast"):
        mask = evaluate(substitute(ev.info["mask"], env), env) if ev.info.get("mask") is not None else None
        if mask is None:
            k.add(RULE_UNKNOWN, "note", "the multicast CTA mask is computed at run time, so the CTAs it writes are "
                  "unknown", "-", "tx", ev.inst, barrier=ev.barrier)
            return []
        return [r for r in k.ranks if mask >> r & 1]
    if ev.peer is not None:
        t = evaluate(substitute(ev.peer, env), env)
        return [] if t is None else [t]
    return [issuer]


def _compare_rank(k: Kernel, rank: int, groups: dict) -> None:
    by_key: dict = defaultdict(list)
    for (target, key, loop), g in groups.items():
        by_key[key].append((loop, g))
    for key, entries in by_key.items():
        split = len(entries) > 1
        for loop, g in entries:
            if not g["expect"] or not g["deliver"]:
                if split:
                    first = (g["expect"] or g["deliver"])[0][0]
                    k.add(RULE_UNKNOWN, "note", f"the expect_tx and the copies on barrier {k.name(key)} sit in "
                          "different loops, so the bytes per phase are not derivable", "-", "tx", first.inst,
                          barrier=key)
                    continue
            _compare_group(k, rank, key, g)


def _compare_group(k: Kernel, rank: int, key, g) -> None:
    items = []  # (event, signed bytes per execution or None, text, data literals)
    for ev, who in g["expect"]:
        env = k.rank_env(who)
        b, text = _bytes(k, ev, env)
        n = _count(k, ev, who)
        items.append((ev, None if b is None or n is None else b * n, text if n is not None else
                      "the number of threads that run it depends on the block size or on data", +1))
    for ev, who in g["deliver"]:
        env = k.rank_env(who)
        b, text = _bytes(k, ev, env)
        n = _count(k, ev, who)
        items.append((ev, None if b is None or n is None else b * n, text if n is not None else
                      "the number of threads that issue it depends on the block size or on data", -1))
    unknown = [(ev, text) for ev, b, text, _ in items if b is None]
    if unknown:
        ev, text = unknown[0]
        k.add(RULE_UNKNOWN, "note", f"the bytes per phase on barrier {k.name(key)} are not derivable: {text}",
              "bind every tensor map the kernel loads with (maps= / --map) and use compile-time byte counts", "tx",
              ev.inst, barrier=key)
        return
    lits = {ev.index: k.data_literals(ev.inst) for ev, *_ in items}
    # expect_tx and copies under exactly the same conditions balance whatever those are (an unrolled loop's
    # copies, each beside its own expect_tx): whichever of them run, they run in balanced sets
    balance: dict[frozenset, int] = defaultdict(int)
    for ev, b, _, sign in items:
        balance[frozenset(lits[ev.index])] += sign * b
    if all(v == 0 for v in balance.values()):
        return
    # the balanced sets net to zero under any conditions: enumerate only the conditions of the others
    items = [it for it in items if balance[frozenset(lits[it[0].index])] != 0]
    lits = {ev.index: lits[ev.index] for ev, *_ in items}
    paired = _pairs(items, lits)
    if paired is None:
        _enumerate(k, rank, key, items, lits)
        return
    # one copy per expect_tx, of its bytes: each pair on its own conditions; the first that disagrees is reported
    # (an unrolled loop's other pairs would repeat it)
    for pair in paired:
        if _enumerate(k, rank, key, list(pair), {ev.index: lits[ev.index] for ev, *_ in pair}):
            return


def _enumerate(k: Kernel, rank: int, key, items, lits) -> bool:
    """Every truth assignment of the data conditions the items do not all share (at most 4): the bytes expected
    and delivered must agree. True when it reported something."""
    common = frozenset.intersection(*lits.values()) if lits else frozenset()
    exprs = sorted({e for ls in lits.values() for e, _ in ls - common}, key=repr)
    if len(exprs) > 4:
        k.add(RULE_UNKNOWN, "note", f"barrier {k.name(key)}: too many data conditions around its expect_tx and "
              "copies to enumerate", "-", "tx", items[0][0].inst, barrier=key)
        return True
    results = []
    for values in itertools.product((True, False), repeat=len(exprs)):
        truth = dict(zip(exprs, values))
        active = [it for it in items if all(truth.get(e, True) == pol for e, pol in lits[it[0].index] - common)]
        expected = sum(b for ev, b, _, s in active if s > 0)
        delivered = sum(b for ev, b, _, s in active if s < 0)
        results.append((truth, expected, delivered, active))
    bad = [r for r in results if r[1] != r[2]]
    if not bad:
        return False
    exp_ev = next((it[0] for it in items if it[3] > 0), None)
    dlv_ev = next((it[0] for it in items if it[3] < 0), None)
    anchor = (exp_ev or dlv_ev).inst
    where = f" (CTA rank {rank} of the cluster)" if len(k.ranks) > 1 else ""
    if len(bad) < len(results):
        truth, expected, delivered, active = bad[0]
        cond = _describe(k, truth, items)
        k.add(RULE_COND, "error", f"on barrier {k.name(key)}{where}, when {cond}, expect_tx posts {expected} B but the "
              f"copies that run deliver {delivered} B: the expected bytes and the copies are under different conditions"
              f"{' (the phase never completes: the waiters hang)' if expected > delivered else ''}",
              "post expect_tx under the same condition as the copies (or arrive without tx when a copy is skipped)",
              "tx", anchor, barrier=key)
        return True
    truth, expected, delivered, active = bad[0]
    parts = "; ".join(f"line {ev.inst.line}: {text}" for ev, b, text, s in active if s < 0) or "no copy completes on it"
    if expected > delivered:
        fix = (f"expect exactly the bytes that land: expect_tx({delivered}) (TensorMap.box_bytes per box, counted in "
               "every CTA a multicast writes)" if delivered else
               "post expect_tx on the barrier the copies complete on (a stale or wrong barrier index?)")
        k.add(RULE_MANY, "error", f"barrier {k.name(key)}{where} expects {expected} B per phase but the copies completing "
              f"on it deliver {delivered} B ({parts}): the phase never completes and the waiters hang", fix, "tx",
              anchor, barrier=key, value=expected)
    else:
        k.add(RULE_FEW, "error", f"barrier {k.name(key)}{where} expects {expected} B per phase but {delivered} B land on "
              f"it ({parts}): the phase completes before the data has landed (a race), and the late bytes count "
              "against the next phase", f"expect_tx({delivered}) before issuing the copies", "tx", anchor,
              barrier=key, value=expected)
    return True


def _pairs(items, lits) -> list[tuple] | None:
    """Each expect_tx with the copy of the same bytes whose conditions it shares most, or None where they do
    not pair one to one."""
    expects = [it for it in items if it[3] > 0]
    copies = [it for it in items if it[3] < 0]
    if not expects or len(expects) != len(copies):
        return None
    out, free = [], list(copies)
    for e in expects:
        same = [c for c in free if c[1] == e[1]]
        if not same:
            return None
        best = max(same, key=lambda c: len(lits[c[0].index] & lits[e[0].index]))
        free.remove(best)
        out.append((e, best))
    return out


def _describe(k: Kernel, truth: dict, items) -> str:
    words = []
    for expr, value in truth.items():
        line = next((ev.inst.line for ev, *_ in items if any(e == expr for e, _ in k.data_literals(ev.inst))), None)
        words.append(f"the condition guarding line {line} is {'true' if value else 'false'}")
    return " and ".join(words) or "it runs"
