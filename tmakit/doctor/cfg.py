"""Control flow of one PTX function: basic blocks, edges (with the branch predicate each carries), dominators,
natural loops, and which definitions of a register reach an instruction.

Reaching definitions are answered on demand (a backward walk over predecessors, remembered per (register,
block)): the rules ask about a few dozen registers, not all of them.
"""
from __future__ import annotations

from .ptx import Function, Inst

_NO_DEST = frozenset({"st", "red", "bar", "barrier", "fence", "membar", "cp", "bra", "ret", "exit", "trap", "prefetch",
                      "prefetchu", "setmaxnreg", "tensormap", "nanosleep", "griddepcontrol", "stmatrix", "call",
                      "multimem", "pmevent", "brkpt", "applypriority", "discard"})
_NO_DEST_MBARRIER = frozenset({"init", "expect_tx", "complete_tx", "inval"})
_ENDS_BLOCK = frozenset({"bra", "ret", "exit", "trap", "brx"})


def dest_regs(inst: Inst) -> list[str]:
    """Registers an instruction writes (remembered on the instruction)."""
    found = inst.dests
    if found is None:
        found = inst.dests = _dest_regs(inst)
    return found


def _dest_regs(inst: Inst) -> list[str]:
    head, rest = inst.head, inst.rest
    if head in _NO_DEST or not rest:
        return []
    if head == "mbarrier" and inst.opcode.split(".")[1] in _NO_DEST_MBARRIER:
        return []
    if head == "wgmma" and not inst.opcode.startswith("wgmma.mma_async"):
        return []
    c = rest[0]
    if c == "%" or c.isalpha():  # the common case: one register, then a comma
        comma = rest.find(",")
        first = (rest if comma < 0 else rest[:comma]).strip()
        if "|" in first:
            return [r.strip() for r in first.split("|") if r.strip() != "_"]
        return [] if first == "_" or first.startswith("[") else [first]
    if c == "{":
        first = inst.operands[0]
        return [r.strip() for r in first.strip("{}").split(",") if r.strip() and r.strip() != "_"]
    return []


def src_text(inst: Inst) -> list[str]:
    """The operand texts an instruction reads (everything but its destinations)."""
    return inst.operands[1:] if dest_regs(inst) else list(inst.operands)


class Block:
    """A basic block: instructions [start, end), its edges, and the predicate each conditional edge carries
    (successor -> (predicate register, taken when it is true?))."""

    __slots__ = ("index", "start", "end", "succs", "preds", "edge_pred")

    def __init__(self, index: int, start: int, end: int):
        self.index, self.start, self.end = index, start, end
        self.succs: list[int] = []
        self.preds: list[int] = []
        self.edge_pred: dict[int, tuple[str, bool]] = {}


class CFG:
    def __init__(self, func: Function):
        self.func = func
        self.insts = func.insts
        self.blocks: list[Block] = []
        self._build()
        self.idom = self._dominators()
        self.loops = self._loops()  # header -> set of blocks
        self.loop_of = self._innermost()  # block -> header of its innermost loop (or -1)
        self._rd_memo: dict[str, _EntrySets] = {}
        self._defs: dict[str, list[int]] | None = None
        self._reach_memo: dict[tuple[int, bool], frozenset[int]] = {}  # (block, forward_only) -> blocks after it
        self._forward_memo: dict[int, list[int]] = {}

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
        if not hasattr(self, "_tin"):
            self._number_dominator_tree()
        if a not in self._tin or b not in self._tin:
            return a == b
        return self._tin[a] <= self._tin[b] and self._tout[b] <= self._tout[a]

    def _number_dominator_tree(self) -> None:
        """Entry/exit numbers of a walk over the dominator tree: a dominates b iff b's interval is inside a's."""
        children: dict[int, list[int]] = {}
        for b, parent in self.idom.items():
            if parent != b:
                children.setdefault(parent, []).append(b)
        self._tin, self._tout = {}, {}
        clock, stack = 0, [(r, False) for r, p in self.idom.items() if r == p]
        while stack:
            node, done = stack.pop()
            if done:
                self._tout[node] = clock
                clock += 1
                continue
            self._tin[node] = clock
            clock += 1
            stack.append((node, True))
            stack.extend((c, False) for c in children.get(node, ()))

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
        out = {b.index: -1 for b in self.blocks}
        for h, body in sorted(self.loops.items(), key=lambda item: -len(item[1])):  # smaller loops overwrite
            for b in body:
                out[b] = h
        return out

    def loops_containing(self, block: int) -> list[int]:
        """Headers of every loop containing ``block``, innermost first."""
        if not hasattr(self, "_nests"):
            nests: dict[int, list[int]] = {}
            for h, body in sorted(self.loops.items(), key=lambda item: len(item[1])):
                for b in body:
                    nests.setdefault(b, []).append(h)
            self._nests = nests
        return self._nests.get(block, [])

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

    def _entry_sets(self, reg: str) -> "_EntrySets":
        sets = self._rd_memo.get(reg)
        if sets is None:
            sets = self._rd_memo[reg] = _EntrySets(self, reg)
        return sets

    # ---- paths --------------------------------------------------------------------------------
    def reachable_without(self, start: int, goal: int, blocked: set[int], *, forward_only: bool = False,
                          edge_ok=None) -> bool:
        """Whether instruction ``goal`` can follow instruction ``start`` on a path that passes no instruction
        in ``blocked`` (``forward_only``: never taking a loop's back edge, i.e. within one trip; ``edge_ok(b, s)``:
        whether the edge b -> s may be taken). A path reaching ``goal`` ends there, even where ``goal`` itself
        is blocked."""
        insts = self.insts
        first_blocked: dict[int, int] = {}  # block -> its first blocked instruction (a block is checked whole)
        for i in blocked:
            b = insts[i].block
            if i < first_blocked.get(b, len(insts)):
                first_blocked[b] = i
        goal_block = insts[goal].block
        sb = insts[start].block
        # the rest of start's block, from the instruction after it
        after = [i for i in blocked if start < i < self.blocks[sb].end]
        stop = min(after) if after else self.blocks[sb].end
        if start < goal < self.blocks[sb].end and goal <= stop:
            return True
        if after:
            return False
        if not blocked and edge_ok is None:  # plain reachability: the blocks after sb's, once per block
            reach = self._reach_memo.get((sb, forward_only))
            if reach is None:
                reach = self._reach_memo[(sb, forward_only)] = self._reachable_blocks(sb, forward_only)
            return goal_block in reach
        succs = lambda b: [s for s in self._forward_succs(b, forward_only) if edge_ok is None or edge_ok(b, s)]  # noqa
        seen, stack = set(), succs(sb)
        while stack:
            b = stack.pop()
            if b in seen:
                continue
            seen.add(b)
            fb = first_blocked.get(b)
            if b == goal_block and (fb is None or goal <= fb):
                return True
            if fb is None:
                stack.extend(succs(b))
        return False

    def _reachable_blocks(self, b: int, forward_only: bool) -> frozenset[int]:
        """The blocks a path leaving block b can enter (b again only round a loop, and not when forward_only)."""
        seen: set[int] = set()
        stack = list(self._forward_succs(b, forward_only))
        while stack:
            s = stack.pop()
            if s not in seen:
                seen.add(s)
                stack.extend(self._forward_succs(s, forward_only))
        return frozenset(seen)

    def _forward_succs(self, b: int, forward_only: bool) -> list[int]:
        succs = self.blocks[b].succs
        if not forward_only:
            return succs
        out = self._forward_memo.get(b)
        if out is None:
            out = self._forward_memo[b] = [s for s in succs if not (s in self.loops and b in self.loops[s])]
        return out


class _EntrySets:
    """The definitions of one register reaching each block's entry, found by walking predecessors backwards
    from the asked block until every path meets a definition (remembered per block)."""

    def __init__(self, cfg: CFG, reg: str):
        self.cfg, self.reg = cfg, reg
        self.last: dict[int, tuple[int, bool]] = {}  # block -> (its last definition, predicated?)
        for d in cfg.defs_of(reg):
            b = cfg.insts[d].block
            if b not in self.last or d > self.last[b][0]:
                self.last[b] = (d, cfg.insts[d].pred is not None)
        self.memo: dict[int, frozenset[int]] = {}

    def __getitem__(self, block: int) -> frozenset[int]:
        found = self.memo.get(block)
        if found is not None:
            return found
        blocks, defs = self.cfg.blocks, set()
        seen, stack = {block}, list(blocks[block].preds)
        while stack:
            p = stack.pop()
            hit = self.last.get(p)
            if hit is not None:
                defs.add(hit[0])
                if not hit[1]:
                    continue
            if p in seen:
                continue
            seen.add(p)
            stack.extend(blocks[p].preds)
        result = frozenset(defs)
        self.memo[block] = result
        return result
