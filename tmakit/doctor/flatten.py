"""Lift every ``{ }`` scope that encloses an mbarrier wait into its function's scope, line for line.

The hang doctor's slow path lives after the function's last instruction (``instrument``) and branches back to
labels beside the wait; PTX labels are scoped like registers, so a wait inside an inner scope (every inline asm
block: ``{ .reg .pred p; mbarrier.try_wait... p, ...; selp... }``) could not be returned to. The scope's braces
become spaces and the registers and labels it declares get names of their own (``p`` -> ``p_tmkd3``, ``%r<4>`` ->
``%r_tmkd3_<4>``), so the PTX means the same and every line keeps its number (the sites and findings name the
original lines).
"""
from __future__ import annotations

import re

_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/|\"[^\"\n]*\"", re.S)  # strings too (a .file name may hold a brace)
_WAIT = re.compile(r"\bmbarrier\.(?:try_wait|test_wait)\b")
_DECL = re.compile(r"\.reg\s+(?:\.v\d\s+)?\.\w+\s+([^;]+);")
# a variable the scope declares (a statement of its own: not the .shared of an instruction): renamed like a register
_VAR_DECL = re.compile(r"(?:(?<=[;{}])|^)[ \t\n]*\.(?:local|shared|param)[ \t]+([^;{}]*);", re.M)
_LABEL_DEF = re.compile(r"(?:^|(?<=[;{}\s]))([A-Za-z_$][\w$]*)\s*:(?!:)")


def _blank(text: str) -> str:
    """``text`` with its comments and strings turned into spaces (newlines kept), so positions stay the same."""
    return _COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def _scopes(clean: str) -> list[tuple[int, int, int | None]]:
    """(open, close, parent index) of every brace pair, in the order they open."""
    out: list[list] = []
    stack: list[int] = []
    for i, ch in enumerate(clean):
        if ch == "{":
            out.append([i, len(clean), stack[-1] if stack else None])  # unclosed: to the end (indices stay put)
            stack.append(len(out) - 1)
        elif ch == "}" and stack:
            out[stack.pop()][1] = i
    return [(o, c, p) for o, c, p in out]


def _own_text(clean: str, scopes, k: int) -> str:
    """Scope ``k``'s text with its child scopes blanked: what it declares itself."""
    o, c, _ = scopes[k]
    own = list(clean[o + 1:c])
    for co, cc, parent in scopes:
        if parent == k:
            own[co - o - 1:cc - o] = " " * (cc - co + 1)
    return "".join(own)


def _declared(own: str) -> tuple[dict[str, int], set[str]]:
    """({register or variable: N of a name<N> range, else 0}, labels) that a scope declares directly."""
    regs: dict[str, int] = {}
    for m in _DECL.finditer(own):
        for spec in m.group(1).split(","):
            spec = spec.strip()
            name = re.match(r"(%?[A-Za-z_$][\w$]*)\s*(?:<\s*(\d+)\s*>)?", spec)
            if name:
                regs[name.group(1)] = int(name.group(2) or 0)
    for m in _VAR_DECL.finditer(own):
        names = re.findall(r"%?[A-Za-z_$][\w$]*", re.sub(r"\[[^\]]*\]", " ", m.group(1).split("=")[0]))
        if names:
            regs[names[-1]] = 0  # the last word before the dims and the initializer: the variable's name
    without_decls = _VAR_DECL.sub(lambda m: " " * len(m.group(0)), _DECL.sub(lambda m: " " * len(m.group(0)), own))
    labels = {m.group(1) for m in _LABEL_DEF.finditer(without_decls) if not m.group(1).startswith("%")}
    return regs, labels


def flatten_wait_scopes(ptx: str) -> str:
    """The PTX with every inner scope around a wait lifted into its function (see the module docstring)."""
    clean = _blank(ptx)
    scopes = _scopes(clean)
    if not scopes:
        return ptx
    lift: set[int] = set()
    for m in _WAIT.finditer(clean):
        inner = [k for k, (o, c, _) in enumerate(scopes) if o < m.start() < c]
        for k in inner:
            if scopes[k][2] is not None:  # not the function body (depth 1) itself
                lift.add(k)
    if not lift:
        return ptx
    decls = {k: _declared(_own_text(clean, scopes, k)) for k in range(len(scopes))}

    def owner(pos: int, name: str) -> int | None:
        """The innermost scope around ``pos`` that declares ``name``."""
        best = None
        for k, (o, c, _) in enumerate(scopes):
            regs, labels = decls[k]
            if o < pos < c and (name in regs or name in labels) and (best is None or o > scopes[best][0]):
                best = k
        return best

    edits: list[tuple[int, int, str]] = []
    for k in sorted(lift):
        o, c, _ = scopes[k]
        edits += [(o, o + 1, " "), (c, c + 1, " ")]
        regs, labels = decls[k]
        for name, count in list(regs.items()) + [(label, 0) for label in labels]:
            new = f"{name}_tmkd{k}" + ("_" if count else "")
            tail = r"(\d+)?" if count else ""
            # a token, not part of a longer name, a qualifier (.shared::cta) or an opcode (bar.sync); a vector
            # register's element (v.x) is still the register
            for t in re.finditer(r"(?<![\w$%.:])" + re.escape(name) + tail + r"(?![\w$])(?!\.(?![xyzwrgba]\b)\w)",
                                 clean[o:c]):
                if count and (t.group(1) is None and not clean[o + t.end():].lstrip().startswith("<") or
                              t.group(1) is not None and int(t.group(1)) >= count):
                    continue  # %r10 beside a local %r<2>: the outer %r10
                if owner(o + t.start(), name) == k:
                    edits.append((o + t.start(), o + t.start() + len(name), new))
    out = ptx
    for start, end, text in sorted(edits, reverse=True):
        out = out[:start] + text + out[end:]
    return out
