"""What a register holds, as a symbolic expression: constants through registers, selects and address arithmetic
from ``.shared`` symbols, kernel parameters and special registers.

Expressions are tuples (hashable, compared structurally):
``('c', v)`` constant, ``('sym', name)`` a variable's address, ``('sreg', '%tid.x')``, ``('ldp', param, off)`` a
parameter's value, ``('phi', reg, defs)`` a merge of several definitions (loop-carried values),
``('opq', i)`` anything else defined by instruction i, ``('lin', ((term, coeff), ...), const)`` a sum,
``('op', name, args)`` other operators, ``('mapa', addr, rank)`` a cluster peer's shared address,
``('shfl0', e)`` lane 0's value of e (a warp broadcast), ``('elect',)`` elect.sync's predicate.
Addition, subtraction, scaling and shifts by constants normalise to ``lin`` (so ``smem + (x - smem)`` is ``x``).
"""
from __future__ import annotations

import re
from typing import Any

from .cfg import CFG
from .ptx import Module, address_operand

Expr = tuple
_INT = re.compile(r"^-?(0[xX][0-9a-fA-F]+|\d+)[uU]?$")
_WIDTH = re.compile(r"^[bsu](8|16|32|64)$")
_LIN_OPS = ("add", "sub", "mul", "shl", "neg", "mad", "mov", "cvt", "cvta")


def const(v: int) -> Expr:
    return ("c", int(v))


def is_const(e: Expr) -> bool:
    return e[0] == "c"


def _lin_parts(e: Expr) -> tuple[dict, int]:
    if e[0] == "c":
        return {}, e[1]
    if e[0] == "lin":
        return dict(e[1]), e[2]
    return {e: 1}, 0


def _make_lin(terms: dict, c: int) -> Expr:
    terms = {t: k for t, k in terms.items() if k}
    if not terms:
        return const(c)
    if c == 0 and len(terms) == 1:
        (t, k), = terms.items()
        if k == 1:
            return t
    if len(terms) == 1:
        return ("lin", tuple(terms.items()), c)
    items = sorted(terms.items(), key=_term_key)
    keys = [_term_key(i) for i in items]
    if len(set(keys)) != len(keys):  # rare ties between terms of the same shape: order them fully
        items = sorted(items, key=repr)
    return ("lin", tuple(items), c)


def _term_key(item: tuple) -> tuple:
    t = item[0]
    return (t[0], t[1] if isinstance(t[1], (str, int)) else "", len(t))


def lin_add(a: Expr, b: Expr, sign: int = 1) -> Expr:
    ta, ca = _lin_parts(a)
    tb, cb = _lin_parts(b)
    for t, k in tb.items():
        ta[t] = ta.get(t, 0) + sign * k
    return _make_lin(ta, ca + sign * cb)


def lin_scale(a: Expr, k: int) -> Expr:
    ta, ca = _lin_parts(a)
    return _make_lin({t: v * k for t, v in ta.items()}, ca * k)


def _width(opcode: str) -> tuple[int, bool]:
    for part in reversed(opcode.split(".")):
        m = _WIDTH.match(part)
        if m:
            return int(m.group(1)), part[0] == "s"
    return 64, False


def _wrap(v: int, bits: int, signed: bool) -> int:
    v &= (1 << bits) - 1
    if signed and v >> (bits - 1):
        v -= 1 << bits
    return v


def _fold(name: str, args: list[int], bits: int, signed: bool) -> int | None:
    a = args
    try:
        if name == "and":
            r = a[0] & a[1]
        elif name == "or":
            r = a[0] | a[1]
        elif name == "xor":
            r = a[0] ^ a[1]
        elif name == "not":
            r = ~a[0]
        elif name == "shr":
            x = _wrap(a[0], bits, signed)
            r = x >> a[1] if signed else (a[0] & ((1 << bits) - 1)) >> a[1]
        elif name == "div":
            x, y = _wrap(a[0], bits, signed), _wrap(a[1], bits, signed)
            r = int(x / y) if signed else x // y
        elif name == "rem":
            x, y = _wrap(a[0], bits, signed), _wrap(a[1], bits, signed)
            r = x - y * int(x / y) if signed else x % y
        elif name == "min":
            r = min(_wrap(a[0], bits, signed), _wrap(a[1], bits, signed))
        elif name == "max":
            r = max(_wrap(a[0], bits, signed), _wrap(a[1], bits, signed))
        elif name == "selp":
            r = a[0] if a[2] else a[1]
        elif name == "popc":
            r = bin(a[0] & ((1 << bits) - 1)).count("1")
        else:
            return None
    except (ZeroDivisionError, IndexError):
        return None
    return _wrap(r, bits, signed)


_CMP = {"eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b, "le": lambda a, b: a <= b,
        "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b, "lo": lambda a, b: a < b, "ls": lambda a, b: a <= b,
        "hi": lambda a, b: a > b, "hs": lambda a, b: a >= b}


class Values:
    """Symbolic values of one function's registers (demand-driven, remembered for one lint run)."""

    def __init__(self, module: Module, cfg: CFG):
        self.module, self.cfg, self.insts = module, cfg, cfg.insts
        self.params = {p.name: p for p in cfg.func.params}
        self._memo: dict[tuple[int, str], Expr] = {}
        self._busy: set[tuple[int, str]] = set()

    # ---- operands --------------------------------------------------------------------------------
    def operand(self, text: str, at: int) -> Expr:
        t = text.strip()
        if _INT.match(t):
            return const(int(t.rstrip("uU"), 0))
        if t.startswith(("0f", "0F", "0d", "0D")):
            return ("opq", -1)
        if t.startswith("%") and ("." in t and t.split(".")[0] in ("%tid", "%ntid", "%ctaid", "%nctaid",
                                                                  "%cluster_ctaid", "%cluster_nctaid",
                                                                  "%clusterid", "%nclusterid")):
            return ("sreg", t)
        if t in ("%laneid", "%warpid", "%cluster_ctarank", "%cluster_nctarank", "%smid", "%globaltimer",
                 "%clock", "%clock64", "%nwarpid", "%is_explicit_cluster"):
            return ("sreg", t)
        if t in self.module.variables or t in self.params:
            return ("sym", t)
        if t.startswith("[") or t.startswith("{"):
            return ("opq", at)
        if t.startswith("!"):
            return ("op", "not", (self.operand(t[1:], at),))
        return self.register(t, at)

    def address(self, text: str, at: int) -> Expr | None:
        """The address an ``[...]`` operand names."""
        parsed = address_operand(text)
        if parsed is None:
            return None
        base, off = parsed
        return lin_add(self.operand(base, at), const(off))

    def register(self, reg: str, at: int) -> Expr:
        defs = self.cfg.reaching(reg, at)
        if not defs:
            return ("opq", -2)  # read before any write (an input of inline asm, a parameter copy)
        exprs = {self.definition(d, reg) for d in defs}
        if len(exprs) == 1:
            return exprs.pop()
        return ("phi", reg, defs)

    # ---- definitions -------------------------------------------------------------------------------
    def definition(self, idx: int, reg: str) -> Expr:
        key = (idx, reg)
        if key in self._memo:
            return self._memo[key]
        if key in self._busy:
            return ("opq", idx)
        self._busy.add(key)
        try:
            value = self._define(self.insts[idx], reg)
        finally:
            self._busy.discard(key)
        self._memo[key] = value
        return value

    def _define(self, inst: Any, reg: str) -> Expr:
        op = inst.opcode
        parts = op.split(".")
        head = parts[0]
        srcs = inst.operands[1:]
        at = inst.index
        v = lambda k: self.operand(srcs[k], at)  # noqa: E731
        bits, signed = _width(op)
        if head in ("mov", "cvt", "cvta"):
            if srcs and srcs[0].startswith("{"):
                return ("opq", at)
            return v(0) if srcs else ("opq", at)
        if head == "add" and len(srcs) == 2:
            return self._fold_lin(lin_add(v(0), v(1)), bits, signed)
        if head == "sub" and len(srcs) == 2:
            return self._fold_lin(lin_add(v(0), v(1), -1), bits, signed)
        if head == "neg" and srcs:
            return self._fold_lin(lin_scale(v(0), -1), bits, signed)
        if head in ("mul", "mad") and len(srcs) >= 2 and ("lo" in parts or "wide" in parts or parts[1][0] in "fsu"):
            a, b = v(0), v(1)
            prod = self._mul(a, b, bits, signed)
            if head == "mad":
                prod = lin_add(prod, v(2)) if len(srcs) > 2 else ("opq", at)
            return self._fold_lin(prod, bits, signed)
        if head == "shl" and len(srcs) == 2:
            a, b = v(0), v(1)
            if is_const(b):
                return self._fold_lin(lin_scale(a, 1 << b[1]), bits, signed)
            return ("op", "shl", (a, b))
        if head in ("and", "or", "xor", "not", "shr", "div", "rem", "min", "max", "popc") and srcs:
            args = tuple(v(k) for k in range(len(srcs)))
            if all(is_const(a) for a in args):
                folded = _fold(head, [a[1] for a in args], bits, signed)
                if folded is not None:
                    return const(folded)
            if head == "and" and "pred" not in parts and len(args) == 2 and is_const(args[0]):
                args = (args[1], args[0])
            return ("op", head, args)
        if head == "selp" and len(srcs) == 3:
            a, b, c = v(0), v(1), v(2)
            if is_const(c):
                return a if c[1] else b
            if a == b:
                return a
            return ("op", "selp", (a, b, c))
        if head == "setp" and len(srcs) >= 2:
            cmp = parts[1]
            sgn = any(p.startswith("s") and _WIDTH.match(p) for p in parts)
            base = ("cmp", cmp, v(0), v(1), sgn)
            if len(srcs) == 3 and len(parts) > 3 and parts[2] in ("and", "or", "xor"):
                base = ("op", parts[2], (base, v(2)))
            if "|" in inst.operands[0] and reg == inst.operands[0].split("|")[1].strip():
                return ("op", "not", (base,))
            return base
        if head == "ld" and "param" in parts and srcs:
            parsed = address_operand(srcs[0])
            if parsed and parsed[0] in self.params:
                return ("ldp", parsed[0], parsed[1])
            return ("opq", at)
        if head == "elect" and "|" in inst.operands[0]:
            names = [x.strip() for x in inst.operands[0].split("|")]
            return ("elect",) if reg == names[-1] else ("opq", at)
        if head == "shfl" and "idx" in parts and len(srcs) >= 3:
            lane, clamp = v(1), v(2)
            if lane == const(0) and is_const(clamp) and clamp[1] & 0x1F == 0x1F:
                return ("shfl0", v(0))
            return ("opq", at)
        if head == "mapa" and len(srcs) == 2:
            return ("mapa", v(0), v(1))
        return ("opq", at)

    def _mul(self, a: Expr, b: Expr, bits: int, signed: bool) -> Expr:
        if is_const(a) and is_const(b):
            return const(a[1] * b[1])
        if is_const(b):
            return lin_scale(a, b[1])
        if is_const(a):
            return lin_scale(b, a[1])
        return ("op", "mul", (a, b))

    @staticmethod
    def _fold_lin(e: Expr, bits: int, signed: bool) -> Expr:
        if is_const(e):
            return const(_wrap(e[1], bits, signed))
        return e


# ---- evaluation, substitution, alignment ------------------------------------------------------------

def leaves(e: Expr, out: set | None = None) -> set:
    """The leaf expressions (registers' merges, parameters, special registers, symbols...) ``e`` reads.

    Expressions share sub-expressions (a DAG), so the walk remembers the nodes it has seen by identity."""
    out = set() if out is None else out
    seen: set[int] = set()
    stack = [e]
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        kind = x[0]
        if kind == "lin":
            stack.extend(t for t, _ in x[1])
        elif kind == "op":
            stack.extend(x[2])
        elif kind == "cmp":
            stack.extend((x[2], x[3]))
        elif kind == "mapa":
            stack.extend((x[1], x[2]))
        elif kind == "shfl0":
            stack.append(x[1])
        elif kind != "c":
            out.add(x)
    return out


def evaluate(e: Expr, env: dict, _memo: dict | None = None) -> int | None:
    """The value of ``e`` with the leaves in ``env`` (leaf expr -> int; '%tid.x' style keys for sregs)."""
    if e[0] == "c":
        return e[1]
    memo = {} if _memo is None else _memo
    key = id(e)
    if key in memo:
        return memo[key]
    value = _evaluate(e, env, memo)
    memo[key] = value
    return value


def _evaluate(e: Expr, env: dict, memo: dict) -> int | None:
    evaluate_ = lambda x, env_=env: evaluate(x, env_, memo if env_ is env else None)  # noqa: E731
    kind = e[0]
    if kind == "c":
        return e[1]
    if kind == "sreg":
        return _sreg(e[1], env)
    if kind == "lin":
        total = e[2]
        for t, k in e[1]:
            x = evaluate_(t, env)
            if x is None:
                return None
            total += k * x
        return total
    if kind == "op":
        args = [evaluate_(a, env) for a in e[2]]
        name = e[1]
        if name == "selp":
            if args[2] is None:
                return args[0] if args[0] is not None and args[0] == args[1] else None
            return args[0] if args[2] else args[1]
        if name == "and" and None in args:  # and with a known 0 is 0 (predicates, masks)
            known = [a for a in args if a is not None]
            return 0 if 0 in known else None
        if name == "or" and None in args:
            known = [a for a in args if a is not None]
            return 1 if known and all(k == 1 for k in known) and len(e[2]) == 2 and _is_pred(e) else None
        if None in args:
            return None
        if name == "not":
            return int(not args[0]) if _is_pred(e[2][0]) else ~args[0]
        if name == "shl":
            return args[0] << args[1]
        if name == "mul":
            return args[0] * args[1]
        return _fold(name, args, 64, True) if name in ("div", "rem", "min", "max") else _fold(name, args, 64, False)
    if kind == "cmp":
        a, b = evaluate_(e[2], env), evaluate_(e[3], env)
        if a is None or b is None:
            return None
        fn = _CMP.get(e[1])
        return None if fn is None else int(fn(a, b))
    if kind == "elect":
        tid = env.get("%tid.x")
        return None if tid is None else int(tid % 32 == 0)
    if kind == "shfl0":
        tid = env.get("%tid.x")
        if tid is None:
            return None
        return evaluate_(e[1], {**env, "%tid.x": tid - tid % 32, "%laneid": 0})
    if kind == "mapa":
        return evaluate_(e[1], env)
    return env.get(e)


def _is_pred(e: Expr) -> bool:
    return e[0] in ("cmp", "elect") or (e[0] == "op" and e[1] in ("and", "or", "not") and all(_is_pred(a) for a in e[2]))


def _sreg(name: str, env: dict) -> int | None:
    if name in env:
        return env[name]
    tid = env.get("%tid.x")
    if name == "%laneid" and tid is not None:
        return tid % 32
    if name == "%warpid" and tid is not None:
        return tid // 32
    return None


def substitute(e: Expr, env: dict) -> Expr:
    """``e`` with every leaf ``env`` knows replaced by its value, folded."""
    v = evaluate(e, env)
    if v is not None:
        return const(v)
    kind = e[0]
    if kind == "lin":
        total: Expr = const(e[2])
        for t, k in e[1]:
            total = lin_add(total, lin_scale(substitute(t, env), k))
        return total
    if kind == "op":
        return ("op", e[1], tuple(substitute(a, env) for a in e[2]))
    if kind == "cmp":
        return ("cmp", e[1], substitute(e[2], env), substitute(e[3], env), e[4])
    if kind == "mapa":
        return ("mapa", substitute(e[1], env), substitute(e[2], env))
    return e


def alignment(e: Expr, variables: dict, cap: int = 1 << 20) -> int:
    """A power of two known to divide the value of ``e`` (addresses: from ``.align`` and the arithmetic)."""
    kind = e[0]
    if kind == "c":
        v = e[1]
        return cap if v == 0 else min(cap, v & -v)
    if kind == "sym":
        var = variables.get(e[1])
        return var.align if var is not None else 1
    if kind == "lin":
        a = alignment(const(e[2]), variables, cap)
        for t, k in e[1]:
            a = min(a, alignment(t, variables, cap) * (abs(k) & -abs(k)))
        return min(a, cap)
    if kind == "op":
        name, args = e[1], e[2]
        if name == "and" and args[1][0] == "c" and args[1][1] < 0:  # x & -2^k clears the low bits
            mask = args[1][1]
            return min(cap, max(alignment(args[0], variables, cap), mask & -mask))
        if name == "and" and args[1][0] == "c":
            return min(cap, max(1, args[1][1] & -args[1][1]) if args[1][1] else cap)
        if name == "shl" and args[1][0] == "c":
            return min(cap, alignment(args[0], variables, cap) << args[1][1])
        if name == "selp":
            return min(alignment(args[0], variables, cap), alignment(args[1], variables, cap))
        return 1
    if kind == "mapa":
        return alignment(e[1], variables, cap)
    return 1


def residue(e: Expr, modulus: int, variables: dict) -> int | None:
    """``e mod modulus`` when every part of it is known modulo ``modulus`` (else None)."""
    if alignment(e, variables) % modulus == 0:
        return 0
    kind = e[0]
    if kind == "c":
        return e[1] % modulus
    if kind == "lin":
        total = e[2]
        for t, k in e[1]:
            r = residue(t, modulus, variables)
            if r is None:
                return None
            total += r * k
        return total % modulus
    return None


def symbols_of(e: Expr) -> set[str]:
    return {leaf[1] for leaf in leaves(e) if leaf[0] == "sym"}
