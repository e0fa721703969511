"""A PTX reader for the doctor: functions, their instructions (predicate, opcode, operands, PTX line, source
line), labels, and the module's ``.shared``/``.global`` variables with their alignment.

Enough of PTX to follow mbarriers and TMA copies through a kernel, not a full grammar: statements end at ``;``,
``{`` or ``}``; ``.loc``/``.file`` end at the line. Registers declared in an inner ``{ }`` scope (inline asm
blocks declare ``.reg .pred p;`` again and again) are renamed ``p#<scope>`` so each is its own register.
Parameter lists come from ``kernel_signature.parse_ptx_entries``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from ..errors import InvalidArgumentError
from ..kernel_signature import ParamInfo, parse_ptx_entries

_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_LABEL = re.compile(r"^\s*([A-Za-z_$%][\w$%]*)\s*:(?!:)")
_PRED = re.compile(r"^@(!?)(%?[\w$#]+)\s+")
_REG_DECL = re.compile(r"\.reg\s+(?:\.v\d\s+)?\.\w+\s+(.+)$", re.S)
_VAR = re.compile(r"^\s*(?:\.extern\s+|\.visible\s+|\.weak\s+)*\.(shared|global|const)\b(.*?)"
                  r"([A-Za-z_$][\w$]*)\s*(\[\s*(\d*)\s*\])?\s*(=.*)?$", re.S)
_HEADER = re.compile(r"\.(entry|func)\s+(?:\([^)]*\)\s*)?([A-Za-z_$%][\w$%]*)")
_TOKEN = re.compile(r"%?[A-Za-z_$][\w$]*")
_ONLY_LABELS = re.compile(r"^(\s*[A-Za-z_$%][\w$%]*\s*:(?!:))+\s*$")


@dataclass(frozen=True)
class Variable:
    """A module-scope (or function-scope static) variable: ``.shared .align 8 .b8 bars[16]``."""

    name: str
    space: str  # "shared" | "global" | "const"
    align: int
    size: int | None  # bytes; None for an extern array of unknown size
    extern: bool = False
    function: str | None = None  # the function it is declared in (None: module scope)


class Inst:
    """One instruction. ``operands`` are the operand texts with inner-scope registers renamed (split on first
    use: most instructions are only ever asked for their destination)."""

    __slots__ = ("index", "line", "opcode", "rest", "pred", "negated", "loc", "block", "head", "_operands", "dests")

    def __init__(self, index: int, line: int, opcode: str, rest: str, pred: str | None = None,
                 negated: bool = False, loc: tuple[int, int] | None = None):
        self.index, self.line, self.opcode, self.rest = index, line, opcode, rest
        self.pred, self.negated, self.loc = pred, negated, loc  # loc: (.file index, source line) of the last .loc
        self.block = -1
        self.head = opcode.split(".", 1)[0]  # "mbarrier"
        self._operands: list[str] | None = None
        self.dests: list[str] | None = None  # the registers it writes (cfg.dest_regs fills it)

    @property
    def operands(self) -> list[str]:
        if self._operands is None:
            self._operands = _split_operands(self.rest)
        return self._operands

    def has(self, *qualifiers: str) -> bool:
        parts = self.opcode.split(".")
        return all(q in parts for q in qualifiers)


@dataclass(eq=False)
class Function:
    name: str
    kind: str  # "entry" | "func"
    insts: list[Inst] = field(default_factory=list)
    labels: dict[str, int] = field(default_factory=dict)  # label -> index of the next instruction
    directives: dict[str, tuple[int, ...]] = field(default_factory=dict)  # maxntid, reqntid, reqnctapercluster
    body_open_line: int = 0  # the line of the body's "{"
    body_close_line: int = 0
    params: list[ParamInfo] = field(default_factory=list)
    scoped_regs: dict[str, str] = field(default_factory=dict)  # renamed register -> its original name


@dataclass(eq=False)
class Module:
    text: str
    version: tuple[int, int] | None
    target: str
    variables: dict[str, Variable]
    functions: dict[str, Function]
    files: dict[int, str]

    def entry(self, name: str | None) -> Function:
        entries = [f for f in self.functions.values() if f.kind == "entry"]
        if name is None:
            if len(entries) != 1:
                raise InvalidArgumentError("entry", None, f"the PTX has {len(entries)} kernels "
                                           f"({', '.join(f.name for f in entries) or 'none'})",
                                           "name the kernel: entry='...' (--entry NAME)")
            return entries[0]
        found = self.functions.get(name)
        if found is None or found.kind != "entry":
            raise InvalidArgumentError("entry", name, "is not a kernel of this PTX",
                                       f"use one of {[f.name for f in entries]}")
        return found

    def calls_trap(self, inst: Inst) -> bool:
        """Whether ``inst`` calls a function of this module that traps before anything else: a bounded wait's
        out-of-line timeout (tmakit's mbarrier.cuh), bookkeeping rather than work in a wait's retry loop."""
        if inst.head != "call" or not inst.operands:
            return False
        callee = self.functions.get(inst.operands[0].strip())
        return callee is not None and bool(callee.insts) and callee.insts[0].head == "trap"

    def source_line(self, inst: Inst) -> str | None:
        """"file:line" of the instruction (from ``.loc``; needs line info), or None."""
        if inst.loc is None or inst.loc[1] == 0:
            return None
        path = self.files.get(inst.loc[0], "?")
        return f"{path.rsplit('/', 1)[-1]}:{inst.loc[1]}"


_SPECIAL = re.compile(r'[;{}"\n]')
_LINE_DIRECTIVES = (".loc", ".file", ".version", ".target", ".address_size")  # end at the line, no ';'
_SLOW_LINE = re.compile(r'[{}";]')  # a line the fast path leaves to the scanner (braces, strings, two statements)


def _statements(text: str):
    """(line, text, kind) per statement: kind is ';', '{', '}' (the text before the brace), or 'line'
    (``.loc``/``.file``, which end at the line wherever they sit)."""
    text = "\n" + text  # so the first line is looked at like every other line start
    line, buf, buf_line = 0, [], 1
    i, n = 0, len(text)
    while i < n:
        if not buf and text[i] == "\n":  # fast path: a whole line that is one plain statement
            end = text.find("\n", i + 1)
            end = n if end < 0 else end
            body = text[i + 1:end].strip()
            if not body:
                line += 1
                i = end
                continue
            if body.startswith(_LINE_DIRECTIVES):
                line += 1
                yield line, body, "line"
                i = end
                continue
            if body.endswith(";") and not _SLOW_LINE.search(body, 0, len(body) - 1):
                line += 1
                yield line, body[:-1].strip(), ";"
                i = end
                continue
        m = _SPECIAL.search(text, i)
        j = m.start() if m else n
        if j > i:
            chunk = text[i:j]
            if not buf:
                stripped = chunk.lstrip()
                if stripped:
                    buf_line = line
                    buf.append(stripped)
            else:
                buf.append(chunk)
        if m is None:
            break
        c = text[j]
        i = j + 1
        if c == "\n":
            line += 1
            if buf:
                buf.append(" ")
            while True:
                end = text.find("\n", i)
                end = n if end < 0 else end
                head = text[i:end].lstrip()
                if not head.startswith(_LINE_DIRECTIVES):
                    break
                yield line, head.strip(), "line"
                if end >= n:
                    i = n
                    break
                i, line = end + 1, line + 1
            continue
        if c == '"':  # strings (.file names, .pragma) may hold any character
            k = text.find('"', i)
            k = n if k < 0 else k + 1
            if not buf:
                buf_line = line
            buf.append(text[j:k])
            i = k
            continue
        if c in "{}" and buf and "".join(buf).strip():
            # a brace inside a statement is an operand vector ({%r1, %r2}), unless it opens a function body
            pending = "".join(buf)
            if _ONLY_LABELS.match(pending):  # "L1: {": the labels, then a scope
                yield buf_line, pending.strip(), ";"
                buf = []
                i = j
                continue
            operand = pending.count("{") > pending.count("}") if c == "}" else not _HEADER.search(pending)
            if operand:
                buf.append(c)
                continue
        # a brace statement is placed on the brace's own line (a function body opens there)
        yield (line if c in "{}" else buf_line), "".join(buf).strip(), c
        buf = []
    if buf and "".join(buf).strip():
        yield buf_line, "".join(buf).strip(), "line"


def _split_operands(text: str) -> list[str]:
    if "{" not in text and "[" not in text:
        return [p.strip() for p in text.split(",") if p.strip()] if text else []
    out, depth, cur = [], 0, []
    for ch in text:
        if ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


def _expand_regs(spec: str) -> list[str]:
    """'%r<4>, %p' -> ['%r0', ..., '%r3', '%p'] (only the names; '<n>' ranges expand lazily as a prefix)."""
    return [s.strip() for s in spec.split(",") if s.strip()]


def _parse_variable(text: str, scope_level: int) -> Variable | None:
    m = _VAR.match(text)
    if not m or m.group(3) in ("entry", "func"):
        return None
    words = m.group(2).split()
    align = int(words[words.index(".align") + 1]) if ".align" in words else 0
    scalar = next((w for w in words if re.fullmatch(r"\.[bsuf](8|16|32|64)", w)), None)
    elem = int(scalar[2:]) // 8 if scalar else 1
    count = m.group(5)
    size = elem * int(count) if count else (None if m.group(4) else elem)
    return Variable(m.group(3), m.group(1), align or elem, size, text.lstrip().startswith(".extern"))


class _Reader:
    def __init__(self, text: str):
        self.text = text
        self.variables: dict[str, Variable] = {}
        self.functions: dict[str, Function] = {}
        self.files: dict[int, str] = {}
        self.version, self.target = None, ""

    def read(self) -> Module:
        clean = _COMMENTS.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), self.text)
        # Labels declared inside { } (inline asm's LAB_WAIT, repeated in every inlined copy) are scoped like
        # registers: find them first, so forward branches to them rename too. NVRTC's own $L__ labels never are.
        scoped_labels = _scoped_labels(clean) if _USER_LABEL.search(clean) else {}
        func: Function | None = None
        depth, scope_ids, scope_counter = 0, [], 0
        renames: list[dict[str, str]] = []
        loc: tuple[int, int] | None = None
        pending_header: str | None = None
        for line, stmt, kind in _statements(clean):
            if kind == "line" or stmt.startswith((".loc", ".file")):
                if stmt.startswith((".version", ".target", ".address_size")):
                    self._module_directive(stmt)
                elif "inlined_at" not in stmt:  # keep the kernel's own line, not the inlined helper's
                    loc = self._line_directive(stmt, loc)
                if kind == "line":
                    continue
                stmt = ""
            if kind == "{":
                if stmt and _HEADER.search(stmt) and depth == 0:
                    pending_header = stmt
                if depth == 0 and pending_header is not None:
                    func = self._open_function(pending_header, line)
                    pending_header = None
                    renames = [{}]
                    scope_ids = [0]
                elif func is not None:
                    if stmt:
                        self._statement(func, stmt, line, loc, renames)
                    scope_counter += 1
                    scope_ids.append(scope_counter)
                    renames.append(dict(renames[-1]))
                    for label in scoped_labels.get(scope_counter, ()):
                        renames[-1][label] = f"{label}#{scope_counter}"
                depth += 1
                continue
            if kind == "}":
                if stmt and func is not None:
                    self._statement(func, stmt, line, loc, renames)
                depth -= 1
                if func is not None:
                    if depth == 0:
                        func.body_close_line = line
                        func = None
                    else:
                        scope_ids.pop()
                        renames.pop()
                continue
            if not stmt:
                continue
            if depth == 0:
                if _HEADER.search(stmt):
                    pending_header = stmt  # a prototype (ends with ';') or a header whose '{' follows
                    if kind == ";":
                        pending_header = None
                    continue
                self._module_directive(stmt)
                continue
            if func is None:
                continue
            if stmt.startswith(".reg") and len(scope_ids) > 1:
                m = _REG_DECL.match(stmt)
                if m:
                    for name in _expand_regs(m.group(1)):
                        new = f"{name}#{scope_ids[-1]}"
                        renames[-1][name] = new
                        func.scoped_regs[new] = name
                continue
            if stmt.startswith((".shared", ".global", ".const")):
                var = _parse_variable(stmt, depth)
                if var:
                    self.variables[var.name] = replace(var, function=func.name)
                continue
            if stmt.startswith("."):
                if not stmt.startswith((".reg", ".local", ".param", ".pragma")):
                    self._func_directive(func, stmt)
                continue
            self._statement(func, stmt, line, loc, renames)
        return Module(self.text, self.version, self.target, self.variables, self.functions, self.files)

    def _line_directive(self, stmt: str, loc):
        parts = stmt.split()
        if parts[0] == ".loc" and len(parts) >= 3:
            try:
                return int(parts[1]), int(parts[2])
            except ValueError:
                return loc
        if parts[0] == ".file" and len(parts) >= 3:
            m = re.search(r'"([^"]*)"', stmt)
            if m:
                self.files[int(parts[1])] = m.group(1)
        return loc

    def _module_directive(self, stmt: str) -> None:
        if stmt.startswith(".version"):
            m = re.match(r"\.version\s+(\d+)\.(\d+)", stmt)
            if m:
                self.version = (int(m.group(1)), int(m.group(2)))
        elif stmt.startswith(".target"):
            self.target = stmt.split()[1].rstrip(",")
        elif re.match(r"(\.extern\s+|\.visible\s+|\.weak\s+)*\.(shared|global|const)\b", stmt):
            var = _parse_variable(stmt, 0)
            if var:
                self.variables[var.name] = var

    def _open_function(self, header: str, line: int) -> Function:
        m = _HEADER.search(header)
        func = Function(m.group(2), m.group(1), body_open_line=line)
        for d in ("maxntid", "reqntid", "reqnctapercluster", "minnctapersm", "maxnreg"):
            dm = re.search(rf"\.{d}\s+([\d\s,]+)", header)
            if dm:
                func.directives[d] = tuple(int(x) for x in dm.group(1).replace(",", " ").split())
        if func.kind == "entry":
            func.params = parse_ptx_entries(header + "{}").get(func.name, [])
        self.functions[func.name] = func
        return func

    def _func_directive(self, func: Function, stmt: str) -> None:
        m = re.match(r"\.(maxntid|reqntid|reqnctapercluster)\s+([\d\s,]+)", stmt)
        if m:
            func.directives[m.group(1)] = tuple(int(x) for x in m.group(2).replace(",", " ").split())

    def _statement(self, func: Function, stmt: str, line: int, loc, renames) -> None:
        table = renames[-1] if renames else {}
        while ":" in stmt:
            m = _LABEL.match(stmt)
            if not m:
                break
            func.labels[table.get(m.group(1), m.group(1))] = len(func.insts)
            stmt = stmt[m.end():].strip()
        if not stmt:
            return
        pred, negated = None, False
        if stmt[0] == "@":
            pm = _PRED.match(stmt)
            if pm:
                negated, pred = pm.group(1) == "!", pm.group(2)
                stmt = stmt[pm.end():]
        split = stmt.split(None, 1)
        opcode, rest = split[0], (split[1].strip() if len(split) > 1 else "")
        if table:
            def sub(mt: re.Match) -> str:
                return table.get(mt.group(0), mt.group(0))
            rest = _TOKEN.sub(sub, rest)
            if pred is not None:
                pred = table.get(pred, pred)
        func.insts.append(Inst(len(func.insts), line, opcode, rest, pred, negated, loc))


_USER_LABEL = re.compile(r"^\s*(?!\$L__)[A-Za-z_$][\w$]*\s*:(?!:)", re.M)


def _scoped_labels(clean: str) -> dict[int, set[str]]:
    """{scope number: labels declared directly in it} for the nested { } scopes of every function, numbered as
    the reader numbers them."""
    found: dict[int, set[str]] = {}
    depth, counter, stack = 0, 0, []
    in_function = False
    for _, stmt, kind in _statements(clean):
        if kind == "{":
            if depth == 0:
                in_function = bool(_HEADER.search(stmt)) or in_function
                stack = [0]
            elif in_function:
                counter += 1
                stack.append(counter)
            depth += 1
            continue
        if kind == "}":
            depth -= 1
            if depth == 0:
                in_function = False
            elif stack:
                stack.pop()
            continue
        if depth > 1 and in_function and kind != "line":
            while True:
                m = _LABEL.match(stmt)
                if not m:
                    break
                found.setdefault(stack[-1], set()).add(m.group(1))
                stmt = stmt[m.end():].strip()
    return found


def parse_module(text: str) -> Module:
    """Read PTX text into a ``Module``."""
    if not isinstance(text, str) or ".entry" not in text and ".func" not in text:
        raise InvalidArgumentError("source", (text[:60] + "...") if isinstance(text, str) else text,
                                   "is not PTX with a kernel (.entry)", "pass PTX text, a .ptx file or a .cu file")
    return _Reader(text).read()


def address_operand(text: str) -> tuple[str, int] | None:
    """'[%r5+16]' -> ('%r5', 16); '[bars]' -> ('bars', 0); None when ``text`` is not an address."""
    t = text.strip()
    if not (t.startswith("[") and t.endswith("]")):
        return None
    inner = t[1:-1].strip()
    m = re.fullmatch(r"([%\w$#.:]+)\s*(?:\+\s*(-?\s*(?:0[xX][0-9a-fA-F]+|\d+)))?", inner)
    if not m:
        return None
    off = m.group(2)
    return m.group(1), int(off.replace(" ", ""), 0) if off else 0
