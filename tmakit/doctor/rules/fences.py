"""Proxy fences: the async proxy (TMA, wgmma operand reads) does not see the generic proxy's shared-memory
accesses without ``fence.proxy.async`` (MoonshotAI/FlashKDA#24: generic writes then a TMA store;
deepseek-ai/DeepEP#642: generic reads then a TMA load into the same bytes); an ``mbarrier.init`` is visible
to TMA's complete_tx only after ``fence.mbarrier_init`` (FlashKDA#24); a tensor map changed on the device is
used safely only after ``fence.proxy.tensormap::generic`` (CUDA Programming Guide, 'Encoding a Tensor Map on
Device').

Paths are followed within one loop trip (no back edge); an access conflicts with an async operation when both
name the same shared variable and the access's offset for thread 0 lies inside the bytes the operation covers.
"""
from __future__ import annotations

from ..analysis import Kernel
from ..keys import may_alias
from ..values import Expr, _lin_parts, evaluate, leaves, substitute


def check(k: Kernel) -> None:
    _mbarrier_init(k)
    _generic_then_async(k)
    _tensormap(k)


def _mbarrier_init(k: Kernel) -> None:
    fences = {e.index for e in k.by_kind("fence_init", "fence_async")}
    async_users = k.by_kind("tensor_load", "bulk_load")
    for init in k.by_kind("init"):
        for use in async_users:
            if not may_alias(use.barrier, init.barrier):
                continue
            if k.cfg.reachable_without(init.index, use.index, fences, forward_only=True):
                k.add("proxy.mbarrier_init", "error", f"barrier {k.name(init.barrier)} is initialised at line "
                      f"{init.inst.line} and the TMA at line {use.inst.line} completes on it with no "
                      "fence.mbarrier_init (or fence.proxy.async) between: the async proxy may see the barrier "
                      "before its init", "fence.mbarrier_init.release.cluster (cutlass::arch::fence_barrier_init) "
                      "after the inits, before the __syncthreads / cluster sync", "mbarrier_init", init.inst,
                      barrier=init.barrier)
                return


def _region_of(k: Kernel, ev, tmap) -> tuple[Expr, int] | None:
    """(start address, byte length) an async operation reads or writes in shared memory."""
    if ev.kind in ("tensor_load", "tensor_store"):
        addr = ev.info.get("dst") if ev.kind == "tensor_load" else ev.info.get("src")
        if addr is None or tmap is None:
            return None
        return addr, int(tmap.smem_bytes)
    if ev.kind in ("bulk_load", "bulk_store"):
        addr = ev.info.get("dst") if ev.kind == "bulk_load" else ev.info.get("src")
        size = evaluate(ev.amount, {}) if ev.amount is not None else None
        return (addr, size) if addr is not None and size is not None else None
    return None


def _thread0_offset(addr: Expr, base: Expr) -> int | None:
    """addr - base for thread 0 when they differ by thread indices and constants only."""
    ta, ca = _lin_parts(addr)
    tb, cb = _lin_parts(base)
    diff = dict(ta)
    for t, c in tb.items():
        diff[t] = diff.get(t, 0) - c
    off = ca - cb
    for t, c in diff.items():
        if not c:
            continue
        v = evaluate(t, {"%tid.x": 0, "%tid.y": 0, "%tid.z": 0, "%laneid": 0, "%warpid": 0})
        if v is None:
            return None
        off += c * v
    return off


def _generic_then_async(k: Kernel) -> None:
    fences = {e.index for e in k.by_kind("fence_async")}
    accesses = k.by_kind("generic_write", "generic_read")
    asyncs = k.by_kind("tensor_store", "bulk_store", "tensor_load", "bulk_load")
    for op in asyncs:
        _, tmap = k.map_of(op.info.get("tmap"))
        region = _region_of(k, op, tmap)
        if region is None:
            continue
        base, size = region
        for acc in accesses:
            if op.kind in ("tensor_store", "bulk_store") and acc.kind != "generic_write":
                continue  # a read before the store's read: no hazard
            addr = acc.info.get("addr")
            if addr is None or acc.info.get("space") not in ("shared", "generic"):
                continue
            if not ({l for l in leaves(addr) if l[0] == "sym"} & {l for l in leaves(base) if l[0] == "sym"}):
                continue
            off = _thread0_offset(substitute(addr, {}), base)
            if off is None or not 0 <= off < size:
                continue
            if not k.cfg.reachable_without(acc.index, op.index, fences, forward_only=True):
                continue
            is_store = op.kind in ("tensor_store", "bulk_store")
            what = "TMA store reads" if is_store else "TMA load overwrites"
            k.add("proxy.generic_to_async", "error", f"the generic-proxy {'write' if acc.kind == 'generic_write' else 'read'}"
                  f" at line {acc.inst.line} touches {k.name(addr)}, which the {what} at line {op.inst.line} "
                  f"({k.name(base)}, {size} B), with no fence.proxy.async between: the async proxy may "
                  f"{'read stale shared memory' if is_store else 'overwrite bytes before the read has completed'}",
                  "fence.proxy.async.shared::cta (cutlass::arch::fence_view_async_shared) by every thread that "
                  "accessed the bytes, after its last access and before the barrier that hands them to the TMA "
                  "thread", "proxy", acc.inst)
            return
    _generic_then_wgmma(k, fences, accesses)


def _generic_then_wgmma(k: Kernel, fences: set[int], accesses) -> None:
    if not k.by_kind("wgmma"):
        return
    writes = []
    for acc in accesses:
        addr = acc.info.get("addr")
        if acc.kind == "generic_write" and addr is not None:
            syms = {l for l in leaves(addr) if l[0] == "sym"}
            if syms:
                writes.append((acc, addr, syms, _thread0_address(addr)))
    if not writes:
        return
    for mma in k.by_kind("wgmma"):
        for desc in (mma.info.get("a"), mma.info.get("b")):
            if desc is None:
                continue
            syms = {l for l in leaves(desc) if l[0] == "sym"}
            start = _descriptor_start(desc)
            if not syms or start is None:
                continue
            for acc, addr, wsyms, a in writes:
                if not syms & wsyms or a is None or not start <= a < start + 8192:
                    continue  # outside the 8 KiB an m64 k16 slice starting at the descriptor's address spans
                if k.cfg.reachable_without(acc.index, mma.index, fences, forward_only=True):
                    k.add("proxy.generic_to_async", "error", f"the generic-proxy write at line {acc.inst.line} "
                          f"fills {k.name(addr)}, which the wgmma at line {mma.inst.line} reads through "
                          "its shared-memory descriptor, with no fence.proxy.async between: wgmma reads shared memory "
                          "through the async proxy", "fence.proxy.async.shared::cta after the writes (then "
                          "wgmma.fence and the barrier)", "proxy", acc.inst)
                    return


_THREAD0 = {"%tid.x": 0, "%tid.y": 0, "%tid.z": 0, "%laneid": 0, "%warpid": 0}


def _thread0_address(addr: Expr) -> int | None:
    env = dict(_THREAD0)
    env.update({leaf: 0 for leaf in leaves(addr) if leaf[0] == "sym"})
    a = evaluate(addr, env)
    return None if a is None else a & 0x3FFFF


def _descriptor_start(desc: Expr) -> int | None:
    env = dict(_THREAD0)
    env.update({leaf: 0 for leaf in leaves(desc) if leaf[0] == "sym"})
    d = evaluate(desc, env)
    return None if d is None else (d & 0x3FFF) << 4


def _tensormap(k: Kernel) -> None:
    writes = k.by_kind("tensormap_write") + [e for e in k.by_kind("generic_write") if e.info.get("space") == "global"]
    if not writes:
        return
    acquires = {e.index for e in k.by_kind("fence_tensormap") if e.info.get("acquire")}
    for use in k.by_kind("tensor_load", "tensor_store", "prefetch"):
        tmap = use.info.get("tmap")
        for w in writes:
            addr = w.info.get("addr")
            if addr is None or not _same_pointer(addr, tmap):
                continue
            if k.cfg.reachable_without(w.index, use.index, acquires, forward_only=True):
                k.add("proxy.tensormap", "error", f"the tensor map used at line {use.inst.line} is modified on the "
                      f"device at line {w.inst.line} ({w.inst.opcode.split('.')[0]}) and used with no "
                      "fence.proxy.tensormap::generic.acquire between: the TMA unit may read the old descriptor",
                      "after the change: fence.proxy.tensormap::generic.release (or tensormap.cp_fenceproxy) by the "
                      "writer, and fence.proxy.tensormap::generic.acquire.<scope> [map], 128 before the first use",
                      "tensormap_fence", use.inst)
                return


def _same_pointer(addr: Expr, tmap: Expr | None) -> bool:
    if tmap is None:
        return False
    la = {l for l in leaves(addr) if l[0] in ("ldp", "sym")}
    lt = {l for l in leaves(tmap) if l[0] in ("ldp", "sym")}
    return bool(la & lt) and may_alias(addr, tmap)
