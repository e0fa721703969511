"""The hang doctor's PTX rewrite: every mbarrier wait bounded, every expect_tx remembered.

Each ``mbarrier.try_wait`` / ``mbarrier.test_wait`` (tmakit's own wait loops and raw ones in a user's PTX, the
retry loop being whatever surrounds the instruction) gains a slow path, taken only when the probe fails:

- if another thread has already given up (the record's flag is set), the probe is treated as completed;
- else the thread starts its clock on the first failed probe of a wait (a successful probe resets it) and,
  once ``timeout`` has passed, the first thread to get there writes the record (block, thread, cluster rank,
  the barrier's shared address and raw 64-bit state, the current phase parity, the parity it waited for, the
  elapsed time, the base address of every shared variable) and sets the flag; it then treats the probe as
  completed too.

So once a wait expires, every bounded wait in the grid returns at once: the kernel runs to its end (its
results are garbage, the launch is reported as a hang), every thread leaves normally, no thread exits early
while a cluster peer may still write its shared memory, and nothing traps, so the context stays usable.
Each ``expect_tx`` also stores (barrier address, bytes, site, block) in a per-block slot table, so the host
can say what the last expect_tx on the hung barrier posted.

Record layout (``__tmakit_hang``, little-endian): see ``RECORD_FIELDS``; the table starts at ``TABLE_OFFSET``
with ``TABLE_BLOCKS`` x ``TABLE_SLOTS`` entries of 16 bytes (address, bytes, site, block + 1).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import InvalidArgumentError
from .ptx import Module, parse_module

SYMBOL = "__tmakit_hang"
TABLE_OFFSET = 256
TABLE_BLOCKS = 1024
TABLE_SLOTS = 16
BUFFER_BYTES = TABLE_OFFSET + TABLE_BLOCKS * TABLE_SLOTS * 16
MAX_SYMBOLS = 16
# word index (u32) of each field of the record
RECORD_FIELDS = {"flag": 0, "timeout_ms": 1, "site": 2, "ctaid": 3, "tid": 6, "rank": 9, "address": 10,
                 "parity": 11, "phase": 12, "nsyms": 13, "state": 14, "elapsed_ns": 16, "wait_state": 18,
                 "pending": 20, "symbols": 21}

_WAIT = re.compile(r"(@!?%?[\w$#]+\s+)?(mbarrier\.(?:try_wait|test_wait)[\w.:]*)\s+([^;]*);")
_EXPECT = re.compile(r"(@!?%?[\w$#]+\s+)?(mbarrier\.(?:arrive\.expect_tx|expect_tx)[\w.:]*)\s+([^;]*);")
_REG_DECL = re.compile(r"\.reg\s+\.(?:[bsuf])(\d+)\s+(%?[\w$]+)(?:<\d+>)?")


@dataclass
class Site:
    """One instrumented wait: where it is in the original PTX."""

    index: int
    function: str
    ptx_line: int
    opcode: str


@dataclass
class Instrumented:
    """The rewritten PTX and what the host needs to read its record."""

    ptx: str
    sites: list[Site] = field(default_factory=list)  # wait sites, by the index the record names
    expects: list[Site] = field(default_factory=list)  # expect_tx sites
    symbols: list[str] = field(default_factory=list)  # shared variables whose bases the record holds, in order
    symbol_sizes: dict[str, int | None] = field(default_factory=dict)


def _address_into(reg32: str, addr: str, generic: bool, wide: set[str]) -> list[str]:
    """PTX that puts the 32-bit shared address of the operand ``[addr]`` into ``reg32``."""
    inner = addr.strip()[1:-1].strip()
    m = re.fullmatch(r"([%\w$#.]+)\s*(?:\+\s*(-?\s*(?:0[xX][0-9a-fA-F]+|\d+)))?", inner)
    if not m:
        return [f"mov.u32 {reg32}, 0;"]
    base, off = m.group(1), (m.group(2) or "0").replace(" ", "")
    out = []
    if generic:  # a generic address: to the shared window first
        if base.startswith("%"):
            out += [f"cvta.to.shared.u64 %tmkd_g, {base};", f"cvt.u32.u64 {reg32}, %tmkd_g;"]
        else:
            out += [f"mov.u32 {reg32}, {base};"]
    elif base.startswith("%") and base in wide:
        out += [f"cvt.u32.u64 {reg32}, {base};"]
    else:
        out += [f"mov.u32 {reg32}, {base};"]
    if off != "0":
        out.append(f"add.u32 {reg32}, {reg32}, {int(off, 0)};")
    return out


def _wide_registers(body: str) -> set[str]:
    """Registers (and register-name prefixes) declared 64 bits wide in a function's text."""
    return {m.group(2) for m in _REG_DECL.finditer(body) if m.group(1) == "64"}


def _is_wide(reg: str, wide: set[str]) -> bool:
    if reg in wide:
        return True
    prefix = re.match(r"(%?[A-Za-z_$]+)", reg)
    return bool(prefix and prefix.group(1) in wide)


def _wait_block(n: int, opcode: str, operands: str, pred: str, wide: set[str], sm90: bool,
                symbols: list[str]) -> list[str]:
    ops = [o.strip() for o in operands.split(",")]
    done, addr = ops[0], ops[1]
    parity_form = ".parity" in opcode
    generic = ".shared" not in opcode
    wait = f"{pred}{opcode} {operands};"
    word = lambda name: 4 * RECORD_FIELDS[name]  # noqa: E731
    rec = [f"atom.global.cas.b32 %tmkd_o, [{SYMBOL}], 0, 1;", "setp.ne.u32 %tmkd_q, %tmkd_o, 0;",
           f"@%tmkd_q bra $TMKD_GIVE_{n};", f"st.global.u32 [{SYMBOL}+{word('site')}], {n};"]
    for i, axis in enumerate("xyz"):
        rec += [f"mov.u32 %tmkd_v, %ctaid.{axis};", f"st.global.u32 [{SYMBOL}+{word('ctaid') + 4 * i}], %tmkd_v;",
                f"mov.u32 %tmkd_v, %tid.{axis};", f"st.global.u32 [{SYMBOL}+{word('tid') + 4 * i}], %tmkd_v;"]
    if sm90:
        rec += ["mov.u32 %tmkd_v, %cluster_ctarank;", f"st.global.u32 [{SYMBOL}+{word('rank')}], %tmkd_v;"]
    rec += _address_into("%tmkd_a", addr, generic, wide)
    rec += [f"st.global.u32 [{SYMBOL}+{word('address')}], %tmkd_a;",
            "ld.shared.b64 %tmkd_w, [%tmkd_a];", f"st.global.u64 [{SYMBOL}+{word('state')}], %tmkd_w;",
            "mbarrier.pending_count.b64 %tmkd_v, %tmkd_w;", f"st.global.u32 [{SYMBOL}+{word('pending')}], %tmkd_v;",
            "mbarrier.test_wait.parity.shared.b64 %tmkd_q, [%tmkd_a], 0;", "selp.u32 %tmkd_v, 1, 0, %tmkd_q;",
            f"st.global.u32 [{SYMBOL}+{word('phase')}], %tmkd_v;",
            f"st.global.u64 [{SYMBOL}+{word('elapsed_ns')}], %tmkd_d;"]
    if parity_form:
        third = ops[2]
        rec += [f"mov.u32 %tmkd_v, {third};" if not third.startswith("%") or not _is_wide(third, wide)
                else f"cvt.u32.u64 %tmkd_v, {third};", f"st.global.u32 [{SYMBOL}+{word('parity')}], %tmkd_v;"]
    else:
        rec += [f"st.global.u32 [{SYMBOL}+{word('parity')}], -1;",
                f"mov.b64 %tmkd_w, {ops[2]};", f"st.global.u64 [{SYMBOL}+{word('wait_state')}], %tmkd_w;"]
    rec.append(f"st.global.u32 [{SYMBOL}+{word('nsyms')}], {len(symbols)};")
    for i, sym in enumerate(symbols):
        rec += [f"mov.u32 %tmkd_v, {sym};", f"st.global.u32 [{SYMBOL}+{word('symbols') + 4 * i}], %tmkd_v;"]
    return [
        wait,
        f"@{done} bra $TMKD_OK_{n};",
        "{",
        ".reg .pred %tmkd_q;", ".reg .b32 %tmkd_f, %tmkd_o, %tmkd_v, %tmkd_a;",
        ".reg .b64 %tmkd_now, %tmkd_d, %tmkd_lim, %tmkd_w, %tmkd_g;",
        f"ld.volatile.global.u32 %tmkd_f, [{SYMBOL}];",  # another thread gave up: release this one too
        "setp.ne.u32 %tmkd_q, %tmkd_f, 0;",
        f"@%tmkd_q bra $TMKD_GIVE_{n};",
        "mov.u64 %tmkd_now, %globaltimer;",
        "setp.eq.u64 %tmkd_q, %tmkd_t0, 0;",
        "@%tmkd_q mov.u64 %tmkd_t0, %tmkd_now;",
        "sub.u64 %tmkd_d, %tmkd_now, %tmkd_t0;",
        f"ld.global.u32 %tmkd_f, [{SYMBOL}+{word('timeout_ms')}];",
        "mul.wide.u32 %tmkd_lim, %tmkd_f, 1000000;",
        "setp.lt.u64 %tmkd_q, %tmkd_d, %tmkd_lim;",
        f"@%tmkd_q bra $TMKD_OK_{n};",
        *rec,
        f"$TMKD_GIVE_{n}:",
        f"mov.pred {done}, 1;",  # treat the wait as completed: every thread runs on to the end
        "}",
        f"$TMKD_OK_{n}:",
        f"@{done} mov.u64 %tmkd_t0, 0;",
    ]


def _expect_block(n: int, opcode: str, operands: str, pred: str, wide: set[str]) -> list[str]:
    ops = [o.strip() for o in operands.split(",")]
    addr, tx = (ops[1], ops[2]) if ".arrive" in opcode else (ops[0], ops[1])
    generic = ".shared" not in opcode
    guard = pred.strip()
    lines = [f"{pred}{opcode} {operands};", "{",
             ".reg .b32 %tmkd_a, %tmkd_b, %tmkd_k, %tmkd_i, %tmkd_x, %tmkd_y;", ".reg .b64 %tmkd_p, %tmkd_g;"]
    lines += _address_into("%tmkd_a", addr, generic, wide)
    lines += [f"mov.u32 %tmkd_b, {tx};" if not (tx.startswith("%") and _is_wide(tx, wide))
              else f"cvt.u32.u64 %tmkd_b, {tx};",
              "mov.u32 %tmkd_x, %nctaid.y;", "mov.u32 %tmkd_y, %ctaid.z;", "mov.u32 %tmkd_k, %ctaid.y;",
              "mad.lo.u32 %tmkd_k, %tmkd_y, %tmkd_x, %tmkd_k;", "mov.u32 %tmkd_x, %nctaid.x;",
              "mov.u32 %tmkd_y, %ctaid.x;", "mad.lo.u32 %tmkd_k, %tmkd_k, %tmkd_x, %tmkd_y;",  # linear block id
              f"and.b32 %tmkd_i, %tmkd_k, {TABLE_BLOCKS - 1};", "shr.u32 %tmkd_x, %tmkd_a, 3;",
              f"and.b32 %tmkd_x, %tmkd_x, {TABLE_SLOTS - 1};", f"mad.lo.u32 %tmkd_i, %tmkd_i, {TABLE_SLOTS}, %tmkd_x;",
              "mul.wide.u32 %tmkd_p, %tmkd_i, 16;", f"mov.u64 %tmkd_g, {SYMBOL};",
              "add.u64 %tmkd_p, %tmkd_p, %tmkd_g;", "add.u32 %tmkd_k, %tmkd_k, 1;", f"mov.u32 %tmkd_y, {n};",
              f"{guard + ' ' if guard else ''}st.global.v4.u32 [%tmkd_p+{TABLE_OFFSET}], {{%tmkd_a, %tmkd_b, %tmkd_y, %tmkd_k}};",
              "}"]
    return lines


def instrument(ptx: str, module: Module | None = None) -> Instrumented:
    """The PTX with every mbarrier wait bounded and every expect_tx remembered (see the module docstring)."""
    module = module or parse_module(ptx)
    if SYMBOL in ptx:
        raise InvalidArgumentError("ptx", SYMBOL, "is already instrumented", "instrument the original PTX once")
    lines = ptx.split("\n")
    sm90 = module.target.startswith("sm_9") or module.target.startswith("sm_1")
    result = Instrumented("")
    edits: dict[int, list[tuple[str, object]]] = {}  # 0-based line -> edits
    for func in module.functions.values():
        first, last = func.body_open_line, func.body_close_line
        body = "\n".join(lines[first - 1:last])
        wide = _wide_registers(body)
        symbols = [v.name for v in module.variables.values()
                   if v.space == "shared" and v.function in (None, func.name)][:MAX_SYMBOLS]
        waits = [i for i in func.insts if i.head == "mbarrier" and i.opcode.split(".")[1] in ("try_wait", "test_wait")]
        expects = [i for i in func.insts if i.head == "mbarrier" and ("expect_tx" in i.opcode.split("."))
                   and i.opcode.split(".")[1] in ("arrive", "expect_tx")]
        if not waits and not expects:
            continue
        for inst in waits:
            n = len(result.sites)
            result.sites.append(Site(n, func.name, inst.line, inst.opcode))
            edits.setdefault(inst.line - 1, []).append(("wait", (n, wide, sm90, symbols)))
        for inst in expects:
            n = len(result.expects)
            result.expects.append(Site(n, func.name, inst.line, inst.opcode))
            edits.setdefault(inst.line - 1, []).append(("expect", (n, wide)))
        if waits:
            edits.setdefault(first - 1, []).append(("prologue", None))
        for name in symbols:
            if name not in result.symbols:
                result.symbols.append(name)
                result.symbol_sizes[name] = module.variables[name].size
    out: list[str] = []
    for number, text in enumerate(lines):
        todo = edits.get(number)
        if not todo:
            out.append(text)
            continue
        for kind, args in todo:
            if kind == "prologue":  # the function body's "{" is on this line: t0 after it
                at = text.index("{") + 1
                text = text[:at] + "\n.reg .b64 %tmkd_t0;\nmov.u64 %tmkd_t0, 0;\n" + text[at:]
            elif kind == "wait":
                n, wide, sm90_, syms = args
                text = _WAIT.sub(lambda m: "\n".join(_wait_block(n, m.group(2), m.group(3), m.group(1) or "", wide,
                                                                 sm90_, syms)), text, count=1)
            else:
                n, wide = args
                text = _EXPECT.sub(lambda m: "\n".join(_expect_block(n, m.group(2), m.group(3), m.group(1) or "",
                                                                     wide)), text, count=1)
        out.append(text)
    text = "\n".join(out)
    decl = f".global .align 16 .b8 {SYMBOL}[{BUFFER_BYTES}];"
    text, count = re.subn(r"^(\s*\.address_size\s+\d+\s*)$", lambda m: m.group(1) + "\n" + decl, text, count=1,
                          flags=re.M)
    if not count:
        text = re.sub(r"^(\s*\.target\s+[^\n]*)$", lambda m: m.group(1) + "\n" + decl, text, count=1, flags=re.M)
    result.ptx = text
    return result
