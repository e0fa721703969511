"""Barrier identity: whether two address expressions may name the same barrier, and whether a value changes
from one loop trip to the next."""
from __future__ import annotations

from .values import Expr, _lin_parts, leaves


def term_range(e: Expr) -> tuple[int, int] | None:
    """Bounds of a non-constant term when its form gives them (x & c, x % c, selp of constants)."""
    if e[0] == "op":
        name, args = e[1], e[2]
        if name == "and" and args[1][0] == "c" and args[1][1] >= 0:
            return 0, args[1][1]
        if name == "rem" and args[1][0] == "c" and args[1][1] > 0:
            return 0, args[1][1] - 1
        if name == "selp" and args[0][0] == "c" and args[1][0] == "c":
            return min(args[0][1], args[1][1]), max(args[0][1], args[1][1])
        if name == "xor" and args[1][0] == "c" and args[1][1] >= 0:
            inner = term_range(args[0])
            if inner is not None and inner[0] >= 0:
                hi = max(inner[1], args[1][1])
                return 0, (1 << hi.bit_length()) - 1
    if e[0] == "cmp":
        return 0, 1
    return None


def may_alias(a: Expr | None, b: Expr | None) -> bool:
    """Whether addresses ``a`` and ``b`` can be equal (unknown parts: yes)."""
    if a is None or b is None:
        return True
    ta, ca = _lin_parts(a)
    tb, cb = _lin_parts(b)
    syms_a = {t for t in ta if t[0] == "sym"}
    syms_b = {t for t in tb if t[0] == "sym"}
    if syms_a != syms_b and syms_a and syms_b:
        return False
    diff = dict(ta)
    for t, k in tb.items():
        diff[t] = diff.get(t, 0) - k
    lo = hi = ca - cb
    for t, k in diff.items():
        if not k:
            continue
        r = term_range(t)
        if r is None:
            return True
        lo += min(k * r[0], k * r[1])
        hi += max(k * r[0], k * r[1])
    return lo <= 0 <= hi


def same(a: Expr | None, b: Expr | None) -> bool:
    return a is not None and a == b


def varies_in(e: Expr | None, loop_blocks: set[int], insts) -> bool:
    """Whether ``e`` may take another value on the next trip of the loop made of ``loop_blocks``."""
    if e is None:
        return True
    for leaf in leaves(e):
        if leaf[0] == "phi" and any(insts[d].block in loop_blocks for d in leaf[2]):
            return True
        if leaf[0] == "opq" and leaf[1] >= 0 and insts[leaf[1]].block in loop_blocks:
            return True
        if leaf[0] == "opq" and leaf[1] < 0:
            return True
    return False
