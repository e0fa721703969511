"""One kernel under analysis: its CFG, values and events, and the questions every rule asks of an instruction:
under which conditions it runs (``literals``), on which CTA of the cluster (``runs_on``), by how many threads
(``threads``), in which loop (``loop``), and how to report a finding about it (``add``).

Thread counts are computed, not guessed: each instruction's guarding conditions are evaluated over every
thread index of each plausible block size (``.reqntid`` when the kernel declares it; else the sizes up to
``.maxntid`` or 1024 that give every role of the kernel at least one thread). A count that depends on the block
size or on data is None, and the rules then say so in a note.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from .cfg import CFG
from .events import SECTIONS, Event, extract
from .ptx import Function, Inst, Module
from .report import Finding
from .values import Expr, Values, alignment, evaluate, leaves, lin_add, lin_scale, residue

THREAD_LEAVES = ("%tid.x", "%tid.y", "%tid.z", "%laneid", "%warpid")
RANK_LEAVES = ("%cluster_ctarank", "%cluster_ctaid.x", "%cluster_ctaid.y", "%cluster_ctaid.z", "%ctaid.x",
               "%ctaid.y", "%ctaid.z")
SIZE_LEAVES = ("%ntid.x", "%ntid.y", "%ntid.z", "%cluster_nctarank", "%cluster_nctaid.x")
_BLOCK_SIZES = (32, 64, 96, 128, 160, 192, 256, 288, 320, 384, 512, 640, 768, 1024)
_EVENT_HEADS = frozenset({"mbarrier", "cp", "fence", "tensormap", "st", "red", "atom", "stmatrix", "ld", "ldmatrix",
                          "ldu", "wgmma", "bar", "barrier"})
_SIDE_EFFECTS = {"st", "red", "atom", "cp", "wgmma", "bar", "barrier", "ld", "ldu", "ldmatrix", "tensormap", "fence",
                 "call", "elect", "shfl", "stmatrix", "setmaxnreg", "membar", "prefetch", "cvta"}


def _vec(e: Expr, env: dict) -> Any:
    """``evaluate`` over numpy arrays of thread indices (env['%tid.x'] an array)."""
    kind = e[0]
    if kind == "c":
        return e[1]
    if kind == "sreg":
        name = e[1]
        if name in env:
            return env[name]
        tid = env.get("%tid.x")
        if name == "%laneid":
            return tid % 32
        if name == "%warpid":
            return tid // 32
        return None
    if kind == "lin":
        total: Any = e[2]
        for t, k in e[1]:
            x = _vec(t, env)
            if x is None:
                return None
            total = total + k * x
        return total
    if kind == "cmp":
        a, b = _vec(e[2], env), _vec(e[3], env)
        if a is None or b is None:
            return None
        op = e[1]
        return {"eq": a == b, "ne": a != b, "lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b, "lo": a < b,
                "ls": a <= b, "hi": a > b, "hs": a >= b}.get(op)
    if kind == "elect":
        return env["%tid.x"] % 32 == 0
    if kind == "shfl0":
        tid = env["%tid.x"]
        return _vec(e[1], {**env, "%tid.x": tid - tid % 32})
    if kind == "op":
        name, args = e[1], [_vec(a, env) for a in e[2]]
        if name == "not" and args[0] is not None:
            a = args[0]
            return ~a if isinstance(a, np.ndarray) and a.dtype == bool else (not a if isinstance(a, (bool, np.bool_))
                                                                            else ~a)
        if name == "and" and any(a is None for a in args):
            known = [a for a in args if a is not None]
            if known and not np.any(known[0]):
                return known[0]
            return None
        if any(a is None for a in args):
            return None
        try:
            if name == "and":
                return args[0] & args[1]
            if name == "or":
                return args[0] | args[1]
            if name == "xor":
                return args[0] ^ args[1]
            if name == "shr":
                return args[0] >> args[1]
            if name == "shl":
                return args[0] << args[1]
            if name == "div":
                return args[0] // args[1]
            if name == "rem":
                return args[0] % args[1]
            if name == "mul":
                return args[0] * args[1]
            if name == "min":
                return np.minimum(args[0], args[1])
            if name == "max":
                return np.maximum(args[0], args[1])
            if name == "selp":
                return np.where(args[2], args[0], args[1])
        except (TypeError, ZeroDivisionError, ValueError):
            return None
        return None
    if kind == "mapa":
        return _vec(e[1], env)
    return env.get(e)


class Kernel:
    """The analysed kernel: everything the rules share."""

    def __init__(self, module: Module, func: Function, *, maps: dict[str, Any] | None = None,
                 cluster: tuple[int, int, int] | None = None, arch: str = "sm_90a"):
        self.module, self.func, self.arch = module, func, arch
        self.cfg = CFG(func)
        self.values = Values(module, self.cfg)
        self.events: list[Event] = [e for inst in func.insts if inst.head in _EVENT_HEADS
                                    for e in extract(inst, self.values)]
        self.maps: dict[str, Any] = dict(maps or {})  # PTX parameter name -> TensorMap
        declared = func.directives.get("reqnctapercluster")
        self.cluster = tuple(cluster) if cluster else (tuple(declared) + (1, 1))[:3] if declared else None
        self.ranks = list(range(math.prod(self.cluster))) if self.cluster else [0]
        self.findings: list[Finding] = []
        self.c_names: dict[str, str] = {}  # PTX parameter name -> C name (for messages)
        self._lit_memo: dict[int, list[tuple[Expr, bool]]] = {}
        self._count_memo: dict[tuple, Any] = {}
        self.block_sizes = self._block_sizes()

    # ---- conditions --------------------------------------------------------------------------------
    def literals(self, inst: Inst) -> list[tuple[Expr, bool]]:
        """The conditions under which ``inst`` runs: (predicate expression, must be true?) pairs."""
        return [(e, pol) for e, pol, _ in self.placed_literals(inst)]

    def placed_literals(self, inst: Inst) -> list[tuple[Expr, bool, int]]:
        """``literals`` with the block each condition is decided in."""
        lits = list(self._block_literals(inst.block))
        if inst.pred is not None and inst.head != "bra":
            lits.extend((e, pol, inst.block) for e, pol in
                        _split_literal(self.values.operand(inst.pred, inst.index), not inst.negated))
        return lits

    def _block_literals(self, block: int) -> list[tuple[Expr, bool, int]]:
        memo = self._lit_memo.get(block)
        if memo is not None:
            return memo
        out, child, cfg = [], block, self.cfg
        while True:
            parent = cfg.idom.get(child)
            if parent is None or parent == child:
                break
            blk = cfg.blocks[child]
            edge = cfg.blocks[parent].edge_pred.get(child)
            if edge is not None and blk.preds == [parent]:
                branch = cfg.blocks[parent].end - 1
                out.extend((e, pol, parent) for e, pol in _split_literal(self.values.operand(edge[0], branch), edge[1]))
            child = parent
        self._lit_memo[block] = out
        return out

    @staticmethod
    def kind_of(expr: Expr) -> str:
        """'thread', 'rank', 'data', 'mixed' (thread and data) or 'const' by the leaves the expression reads."""
        kinds = set()
        for leaf in leaves(expr):
            if leaf[0] == "sreg" and leaf[1] in THREAD_LEAVES or leaf[0] == "elect":
                kinds.add("thread")
            elif leaf[0] == "sreg" and leaf[1] in RANK_LEAVES:
                kinds.add("rank")
            elif leaf[0] == "sreg" and leaf[1] in SIZE_LEAVES:
                kinds.add("size")
            else:
                kinds.add("data")
        if expr[0] == "shfl0" or any(k == "thread" for k in kinds):
            return "mixed" if "data" in kinds else "thread"
        if "data" in kinds:
            return "data"
        if "rank" in kinds:
            return "rank"
        return "const" if not kinds or kinds == {"size"} else "thread"

    def data_literals(self, inst: Inst) -> frozenset:
        return frozenset((e, pol) for e, pol in self.literals(inst) if self.kind_of(e) in ("data", "mixed"))

    def rank_env(self, rank: int) -> dict:
        cx = self.cluster[0] if self.cluster else 1
        cy = self.cluster[1] if self.cluster else 1
        n = len(self.ranks)
        return {"%cluster_ctarank": rank, "%cluster_ctaid.x": rank % cx, "%cluster_ctaid.y": (rank // cx) % cy,
                "%cluster_ctaid.z": rank // (cx * cy), "%ctaid.x": rank % cx, "%ctaid.y": (rank // cx) % cy,
                "%ctaid.z": rank // (cx * cy), "%cluster_nctarank": n, "%cluster_nctaid.x": cx}

    def runs_on(self, inst: Inst, rank: int) -> bool | None:
        """Whether ``inst`` runs on cluster rank ``rank`` (by its rank conditions; None: cannot tell)."""
        env = self.rank_env(rank)
        result: bool | None = True
        for e, pol in self.literals(inst):
            if self.kind_of(e) != "rank":
                continue
            v = evaluate(e, env)
            if v is None:
                result = None
            elif bool(v) != pol:
                return False
        return result

    # ---- thread counts -------------------------------------------------------------------------------
    def _thread_mask(self, inst: Inst, size: int, rank: int) -> Any:
        key = (inst.block if inst.pred is None else -1 - inst.index, size, rank)
        if key in self._count_memo:
            return self._count_memo[key]
        lits = self.literals(inst)
        tid = np.arange(size, dtype=np.int64)
        env = {"%tid.x": tid, "%tid.y": 0, "%tid.z": 0, "%ntid.x": size, "%ntid.y": 1, "%ntid.z": 1,
               **self.rank_env(rank)}
        mask: Any = np.ones(size, dtype=bool)
        for e, pol in lits:
            kind = self.kind_of(e)
            if kind in ("data", "rank", "const") and kind != "const":
                continue
            v = _vec(e, env)
            if v is None:
                mask = None
                break
            v = np.broadcast_to(np.asarray(v).astype(bool), (size,))
            mask = mask & (v if pol else ~v)
        self._count_memo[key] = mask
        return mask

    def threads(self, inst: Inst, rank: int = 0) -> dict[int, int] | None:
        """{block size: how many threads of a block run ``inst``} (data conditions taken as true), or None."""
        out = {}
        for size in self.block_sizes:
            mask = self._thread_mask(inst, size, rank)
            if mask is None:
                return None
            out[size] = int(mask.sum())
        return out

    def thread_values(self, expr: Expr, threads: frozenset[int], size: int, rank: int = 0) -> list[int] | None:
        """The value of ``expr`` for each thread of ``threads`` (in sorted order), or None where it depends on more
        than the thread and the rank."""
        tid = np.array(sorted(threads), dtype=np.int64)
        env = {"%tid.x": tid, "%tid.y": 0, "%tid.z": 0, "%ntid.x": size, "%ntid.y": 1, "%ntid.z": 1,
               **self.rank_env(rank)}
        v = _vec(expr, env)
        if v is None:
            return None
        return [int(x) for x in np.broadcast_to(np.asarray(v), tid.shape)]

    def thread_set(self, inst: Inst, size: int, rank: int = 0) -> frozenset[int] | None:
        mask = self._thread_mask(inst, size, rank)
        return None if mask is None else frozenset(np.nonzero(mask)[0].tolist())

    def _block_sizes(self) -> list[int]:
        d = self.func.directives
        if "reqntid" in d:
            return [math.prod(d["reqntid"])]
        if "maxntid" in d:  # __launch_bounds__(n): the doctor takes n as the block size
            return [math.prod(d["maxntid"])]
        upper = 1024
        sizes = [s for s in _BLOCK_SIZES if s < upper] + [upper]
        need = 1  # the smallest block in which every barrier operation has a thread to run it
        self.block_sizes = [upper]
        for ev in self.events:
            if ev.kind in ("arrive", "expect_tx", "wait", "tensor_load", "init"):
                mask = self._thread_mask(ev.inst, upper, 0)
                if mask is not None and mask.any():
                    need = max(need, int(np.argmax(mask)) + 1)
        self._count_memo.clear()
        return [s for s in sizes if s >= need] or [upper]

    # ---- loops ---------------------------------------------------------------------------------------
    def is_spin_loop(self, header: int) -> bool:
        """A wait's retry loop: only the wait, its branch and bookkeeping (timers, counters)."""
        for b in self.cfg.loops[header]:
            blk = self.cfg.blocks[b]
            for inst in self.cfg.insts[blk.start:blk.end]:
                if inst.head == "mbarrier" and inst.opcode.split(".")[1] in ("try_wait", "test_wait"):
                    continue
                if (inst.head in _SIDE_EFFECTS or inst.head == "mbarrier") and not self.module.calls_trap(inst):
                    return False
        return True

    def edges_for(self, tid: int, rank: int = 0):
        """An ``edge_ok`` for CFG walks: thread and rank conditions decided for thread ``tid``, data ones open."""
        env = {"%tid.x": tid, "%tid.y": 0, "%tid.z": 0, "%laneid": tid % 32, "%warpid": tid // 32,
               "%ntid.x": self.block_sizes[-1], **self.rank_env(rank)}

        def ok(b: int, s: int) -> bool:
            edge = self.cfg.blocks[b].edge_pred.get(s)
            if edge is None:
                return True
            expr = self.values.operand(edge[0], self.cfg.blocks[b].end - 1)
            if self.kind_of(expr) not in ("thread", "rank", "const"):
                return True
            v = evaluate(expr, env)
            return v is None or bool(v) == edge[1]
        return ok

    def loops(self, inst: Inst) -> list[int]:
        """Loop headers around ``inst``, innermost first, retry loops of waits left out."""
        return [h for h in self.cfg.loops_containing(inst.block) if not self.is_spin_loop(h)]

    def loop(self, inst: Inst) -> int:
        found = self.loops(inst)
        return found[0] if found else -1

    # ---- names and findings ---------------------------------------------------------------------------
    def name(self, expr: Expr | None) -> str:
        """A readable name for an address: 'bars+8', 'smem_raw+(...)'."""
        if expr is None:
            return "?"
        if expr[0] == "sym":
            return expr[1]
        if expr[0] == "c":
            return hex(expr[1])
        if expr[0] == "lin":
            direct = [t[1] for t, k in expr[1] if t[0] == "sym" and k == 1]
            others = [t for t, k in expr[1] if not (t[0] == "sym" and k == 1)]
            inside = sorted({leaf[1] for t in others for leaf in leaves(t) if leaf[0] == "sym"})
            if len(direct) == 1:
                base = direct[0]
            elif not direct and len(inside) == 1:  # align_shared(sym, n): the symbol, rounded up
                base, others = f"align({inside[0]})", [t for t in others if not any(l[0] == "sym" for l in leaves(t))]
            else:
                base = "?"
            text = base + (f"+{expr[2]}" if expr[2] > 0 else f"{expr[2]}" if expr[2] < 0 else "")
            return text + ("+(runtime index)" if others else "")
        syms = sorted({leaf[1] for leaf in leaves(expr) if leaf[0] == "sym"})
        return f"align({syms[0]})" if len(syms) == 1 else "(computed address)"

    def add(self, rule: str, severity: str, message: str, fix: str, section: str, inst: Inst | None = None,
            *, barrier: Expr | None = None, parameter: str = "", value: Any = None) -> None:
        reference = SECTIONS.get(section, section)
        line = inst.line if inst is not None else None
        src = self.module.source_line(inst) if inst is not None else None
        finding = Finding(rule, parameter or rule.split(".")[0], value, message, fix, reference, severity=severity,
                          ptx_line=line, source_line=src, barrier=self.name(barrier) if barrier is not None else None)
        if finding not in self.findings:
            self.findings.append(finding)

    def by_kind(self, *kinds: str) -> list[Event]:
        return [e for e in self.events if e.kind in kinds]

    def map_of(self, tmap: Expr | None) -> tuple[str | None, Any]:
        """(PTX parameter name, bound TensorMap or None) for a copy's tensor-map operand."""
        if tmap is None:
            return None, None
        syms = [leaf[1] for leaf in leaves(tmap) if leaf[0] == "sym"]
        for s in syms:
            if s in self.values.params:
                return s, self.maps.get(s)
        for leaf in leaves(tmap):
            if leaf[0] == "ldp":  # a pointer parameter: the map lives in global memory
                return leaf[1], self.maps.get(leaf[1])
        return None, None

    def alignment(self, expr: Expr) -> int:
        """``values.alignment`` with loop-carried values followed through their definitions."""
        return alignment(self.resolve_phis(expr), self.module.variables)

    def residue(self, expr: Expr, modulus: int) -> int | None:
        return residue(self.resolve_phis(expr), modulus, self.module.variables)

    def resolve_phis(self, expr: Expr) -> Expr:
        """``expr`` with each merge of definitions replaced by its common alignment-preserving form: a merge
        whose every definition is (the merge itself or another definition) plus a multiple of 2^k becomes
        base + 2^k * (unknown), so alignment and residue see through induction variables."""
        env = {}
        for leaf in leaves(expr):
            if leaf[0] != "phi":
                continue
            step, base = None, None
            for d in leaf[2]:
                e = self.values.definition(d, leaf[1])
                rest = lin_add(e, leaf, -1) if leaf in leaves(e) else None
                if rest is not None and not (leaves(rest) & {leaf}):
                    a = alignment(rest, self.module.variables)
                    step = a if step is None else min(step, a)
                else:
                    base = e if base is None else base
                    if base != e:
                        base = None
                        break
            if base is not None and step is not None:
                env[leaf] = lin_add(base, lin_scale(("opq", -3, leaf[1]), step))
        return _replace(expr, env) if env else expr


def _replace(e: Expr, env: dict) -> Expr:
    if e in env:
        return env[e]
    kind = e[0]
    if kind == "lin":
        total: Expr = ("c", e[2])
        for t, k in e[1]:
            total = lin_add(total, lin_scale(_replace(t, env), k))
        return total
    if kind == "op":
        return ("op", e[1], tuple(_replace(a, env) for a in e[2]))
    return e


def _split_literal(expr: Expr, polarity: bool) -> list[tuple[Expr, bool]]:
    """A condition as the conjunction it implies: not a -> (a, !pol); a and b true -> both; a or b false -> both
    false. (A disjunction that holds stays one literal.)"""
    if expr[0] == "op" and expr[1] == "not" and len(expr[2]) == 1:
        return _split_literal(expr[2][0], not polarity)
    if expr[0] == "op" and ((expr[1] == "and" and polarity) or (expr[1] == "or" and not polarity)) \
            and all(a[0] in ("cmp", "op", "elect") for a in expr[2]):
        return [lit for a in expr[2] for lit in _split_literal(a, polarity)]
    return [(expr, polarity)]
