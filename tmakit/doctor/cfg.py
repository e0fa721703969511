"""Control flow of one PTX function: basic blocks, edges (with the branch predicate each carries), dominators,
natural loops, and which definitions of a register reach an instruction.

Reaching definitions are answered on demand (a backward walk over predecessors, remembered per (register,
block)): the rules ask about a few dozen registers, not all of them.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from .ptx import Function, Inst

_NO_DEST = ("st", "red", "bar", "barrier", "fence", "membar", "cp", "bra", "ret", "exit", "trap", "prefetch",
            "prefetchu", "setmaxnreg", "tensormap", "nanosleep", "griddepcontrol", "stmatrix", "call", "multimem",
            "pmevent", "brkpt", "applypriority", "discard", "createpolicy_", "wgmma_", "cp.reduce")
_NO_DEST_MBARRIER = ("init", "expect_tx", "complete_tx", "inval")
_REG = re.compile(r"%[\w$#]+|\b[A-Za-z_][\w$]*#\d+\b|\bp#\d+\b")
_ENDS_BLOCK = ("bra", "ret", "exit", "trap", "brx")


def dest_regs(inst: Inst) -> list[str]:
    """Registers an instruction writes."""
    head = inst.head
    if head in _NO_DEST or not inst.operands:
        return []
    if head == "mbarrier":
        kind = inst.opcode.split(".")[1]
        if kind in _NO_DEST_MBARRIER:
            return []
    if head == "wgmma" and not inst.opcode.startswith("wgmma.mma_async"):
        return []
    first = inst.operands[0]
    if first in ("_",):
        return []
    if first.startswith("{"):
        return [r.strip() for r in first.strip("{}").split(",") if r.strip() and r.strip() != "_"]
    if "|" in first:
        return [r.strip() for r in first.split("|") if r.strip() != "_"]
    if first.startswith("["):
        return []
    return [first]


def src_text(inst: Inst) -> list[str]:
    """The operand texts an instruction reads (everything but its destinations)."""
    return inst.operands[1:] if dest_regs(inst) else list(inst.operands)


@dataclass(eq=False)
class Block:
    index: int
    start: int  # first instruction index
    end: int  # one past the last
    succs: list[int] = field(default_factory=list)
    preds: list[int] = field(default_factory=list)
    # successor -> (predicate register, taken when the predicate is true?) for the edges of a conditional branch
    edge_pred: dict[int, tuple[str, bool]] = field(default_factory=dict)


class CFG:
    def __init__(self, func: Function):
        self.func = func
        self.insts = func.insts
        self.blocks: list[Block] = []
        self._build()
        self.idom = self._dominators()
        self.loops = self._loops()  # header -> set of blocks
        self.loop_of = self._innermost()  # block -> header of its innermost loop (or -1)
        self._rd_memo: dict[str, dict[int, frozenset[int]]] = {}
        self._defs: dict[str, list[int]] | None = None

    # ---- blocks --------------------------------------------------------------------------------
    def _build(self) -> None:
        insts, labels = self.insts, self.func.labels
        starts = {0} | {i for i in labels.values() if i < len(insts)}
        for inst in insts:
            if inst.head in _ENDS_BLOCK and inst.index + 1 < len(insts):
                starts.add(inst.index + 1)
        order = sorted(starts)
        for n, s in enumerate(order):
            e = order[n + 1] if n + 1 < len(order) else len(insts)
            self.blocks.append(Block(n, s, e))
        block_at = {b.start: b.index for b in self.blocks}
        for b in self.blocks:
            for i in range(b.start, b.end):
                insts[i].block = b.index
        for b in self.blocks:
            if b.end == b.start:
                continue
            last = insts[b.end - 1]
            fall = b.index + 1 if b.index + 1 < len(self.blocks) else None
            if last.head == "bra" and last.operands:
                target = block_at.get(labels.get(last.operands[0], -1))
                if target is not None:
                    self._edge(b, target)
                if last.pred is not None and fall is not None:
                    self._edge(b, fall)
                    if target is not None and target != fall:
                        b.edge_pred[target] = (last.pred, not last.negated)
                        b.edge_pred[fall] = (last.pred, last.negated)
            elif last.head in ("ret", "exit", "trap", "brx") and last.pred is None:
                pass
            elif fall is not None:
                self._edge(b, fall)

    def _edge(self, b: Block, target: int) -> None:
        if target not in b.succs:
            b.succs.append(target)
            self.blocks[target].preds.append(b.index)

    # ---- dominators (Cooper, Harvey, Kennedy) -------------------------------------------------
    def _rpo(self) -> list[int]:
        seen, order, stack = set(), [], [(0, iter(self.blocks[0].succs))] if self.blocks else []
        if self.blocks:
            seen.add(0)
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                order.append(node)
                stack.pop()
            elif nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, iter(self.blocks[nxt].succs)))
        return order[::-1]

    def _dominators(self) -> dict[int, int]:
        rpo = self._rpo()
        self.rpo = rpo
        pos = {b: i for i, b in enumerate(rpo)}
        idom = {rpo[0]: rpo[0]} if rpo else {}
        changed = True
        while changed:
            changed = False
            for b in rpo[1:]:
                preds = [p for p in self.blocks[b].preds if p in idom]
                if not preds:
                    continue
                new = preds[0]
                for p in preds[1:]:
                    a, c = p, new
                    while a != c:
                        while pos[a] > pos[c]:
                            a = idom[a]
                        while pos[c] > pos[a]:
                            c = idom[c]
                    new = a
                if idom.get(b) != new:
                    idom[b] = new
                    changed = True
        return idom

    def dominates(self, a: int, b: int) -> bool:
        while True:
            if a == b:
                return True
            parent = self.idom.get(b)
            if parent is None or parent == b:
                return False
            b = parent

    # ---- loops --------------------------------------------------------------------------------
    def _loops(self) -> dict[int, set[int]]:
        loops: dict[int, set[int]] = {}
        for b in self.blocks:
            for s in b.succs:
                if b.index in self.idom and self.dominates(s, b.index):  # back edge b -> s
                    body = loops.setdefault(s, {s})
                    stack = [b.index]
                    while stack:
                        n = stack.pop()
                        if n not in body:
                            body.add(n)
                            stack.extend(self.blocks[n].preds)
        return loops

    def _innermost(self) -> dict[int, int]:
        out = {}
        for b in self.blocks:
            best, size = -1, None
            for h, body in self.loops.items():
                if b.index in body and (size is None or len(body) < size):
                    best, size = h, len(body)
            out[b.index] = best
        return out

    def loops_containing(self, block: int) -> list[int]:
        """Headers of every loop containing ``block``, innermost first."""
        found = [h for h, body in self.loops.items() if block in body]
        return sorted(found, key=lambda h: len(self.loops[h]))

    def back_edges(self, header: int) -> list[tuple[int, int]]:
        return [(p, header) for p in self.blocks[header].preds if p in self.loops[header]]

    # ---- reaching definitions -------------------------------------------------------------------
    def defs_of(self, reg: str) -> list[int]:
        if self._defs is None:
            table: dict[str, list[int]] = {}
            for inst in self.insts:
                for d in dest_regs(inst):
                    table.setdefault(d, []).append(inst.index)
            self._defs = table
        return self._defs.get(reg, [])

    def reaching(self, reg: str, at: int) -> frozenset[int]:
        """Indices of the definitions of ``reg`` that reach instruction ``at`` (before it executes)."""
        inst = self.insts[at]
        block = self.blocks[inst.block]
        defs = self.defs_of(reg)
        if len(defs) == 1 and self.insts[defs[0]].pred is None:  # SSA-like: one dominating definition
            d = defs[0]
            db = self.insts[d].block
            if (db == block.index and d < at) or (db != block.index and self.dominates(db, block.index)):
                return frozenset(defs)
        for i in range(at - 1, block.start - 1, -1):
            if reg in dest_regs(self.insts[i]):
                return self._defs_at(i, reg)
        return self._entry_sets(reg)[block.index]

    def _defs_at(self, i: int, reg: str) -> frozenset[int]:
        if self.insts[i].pred is not None:  # a predicated definition may not happen: an older one may survive
            return frozenset({i}) | self.reaching(reg, i)
        return frozenset({i})

    def _entry_sets(self, reg: str) -> dict[int, frozenset[int]]:
        """The definitions of ``reg`` reaching each block's entry (a fixpoint over this one register)."""
        memo = self._rd_memo.get(reg)
        if memo is not None:
            return memo
        last: dict[int, tuple[int, bool]] = {}  # block -> (its last definition, predicated?)
        for d in self.defs_of(reg):
            b = self.insts[d].block
            if b not in last or d > last[b][0]:
                last[b] = (d, self.insts[d].pred is not None)
        entry = {b.index: frozenset() for b in self.blocks}
        changed = True
        order = self.rpo or [b.index for b in self.blocks]
        while changed:
            changed = False
            for b in order:
                new: set[int] = set()
                for p in self.blocks[b].preds:
                    if p in last:
                        d, predicated = last[p]
                        new.add(d)
                        if predicated:
                            new |= entry[p]
                    else:
                        new |= entry[p]
                if new != entry[b]:
                    entry[b] = frozenset(new)
                    changed = True
        self._rd_memo[reg] = entry
        return entry

    # ---- paths --------------------------------------------------------------------------------
    def reachable_without(self, start: int, goal: int, blocked: set[int], *, forward_only: bool = False,
                          edge_ok=None) -> bool:
        """Whether instruction ``goal`` can follow instruction ``start`` on a path that passes no instruction
        in ``blocked`` (``forward_only``: never taking a loop's back edge, i.e. within one trip; ``edge_ok(b, s)``:
        whether the edge b -> s may be taken)."""
        insts = self.insts
        sb = insts[start].block
        for i in range(start + 1, self.blocks[sb].end):
            if i == goal:
                return True
            if i in blocked:
                return False
        succs = lambda b: [s for s in self._forward_succs(b, forward_only) if edge_ok is None or edge_ok(b, s)]  # noqa
        seen, stack = set(), succs(sb)
        while stack:
            b = stack.pop()
            if b in seen:
                continue
            seen.add(b)
            blk = self.blocks[b]
            stopped = False
            for i in range(blk.start, blk.end):
                if i == goal:
                    return True
                if i in blocked:
                    stopped = True
                    break
            if not stopped:
                stack.extend(succs(b))
        return False

    def _forward_succs(self, b: int, forward_only: bool) -> list[int]:
        succs = self.blocks[b].succs
        if not forward_only:
            return succs
        return [s for s in succs if not (s in self.loops and b in self.loops[s])]
