"""The hang doctor's PTX rewrite: every mbarrier wait bounded, every expect_tx remembered.

Each ``mbarrier.try_wait`` / ``mbarrier.test_wait`` (tmakit's own wait loops and raw ones in a user's PTX, the
retry loop being whatever surrounds the instruction) counts its failed probes in one register per thread (the
wait state: count, the wait's clock start, and whether the thread gave up); on every ``CHECK_EVERY``-th one:

- if another thread has already given up (the device flag is set), the thread gives up too;
- else the first such look starts the wait's clock (a successful probe resets count and clock) and, once
  ``timeout`` has passed, the first thread to get there writes the record (block, thread, grid, cluster rank,
  launch, the barrier's shared address, its current phase parity, the parity it waited for, the elapsed time)
  into the module's mailbox (mapped pinned host memory whose device address the header holds), flag last, and
  gives up.

A thread that gives up treats the probe as completed and keeps a mark (the GONE bit): from then on its waits
give up at once and its arrives, expect_tx and byte-completing copies are skipped, so the kernel runs to its end
without driving a barrier below zero (which the hardware faults on). Every thread leaves normally, no thread
exits early while a cluster peer may still write its shared memory, and nothing traps, so the context stays
usable; the launch's results are garbage and the launch is reported as a hang. Thread 0 of block 0 writes the
bases of the function's shared variables into the device record at the start of each launch, and each
``expect_tx`` stores (barrier address, bytes, site and block, launch) in a per-block slot table: the host reads
both after a hang (two small copies, only then).

Record layout (``__tmakit_hang``, little-endian): see ``RECORD_FIELDS``; the table starts at ``TABLE_OFFSET``
with ``TABLE_BLOCKS`` x ``TABLE_SLOTS`` entries of 16 bytes (address, bytes, site | (block + 1) << 16 (low 16
bits of the block), the low 32 bits of %gridid: the launch).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import InvalidArgumentError
from .flatten import flatten_wait_scopes
from .ptx import Module, parse_module

SYMBOL = "__tmakit_hang"
TABLE_OFFSET = 256
TABLE_BLOCKS = 1024
TABLE_SLOTS = 16
BUFFER_BYTES = TABLE_OFFSET + TABLE_BLOCKS * TABLE_SLOTS * 16
MAX_SYMBOLS = 16
CHECK_EVERY = 256  # failed probes of a wait between two looks at the flag and the clock (1 << COUNT_BITS)
# word index (u32) of each field of the record. The device record (``__tmakit_hang``) holds the header (flag,
# timeout in clock units, and the mailbox: the device address of the module's record in mapped pinned host
# memory) and the symbol bases each launch's block 0 writes; the thread that gives up writes its part of the
# record into the mailbox, flag last (64-bit fields 8-byte aligned). Times are in clock units of 2^CLOCK_SHIFT ns.
RECORD_FIELDS = {"flag": 0, "timeout": 1, "mailbox": 2, "site": 4, "ctaid": 5, "tid": 8, "rank": 11, "address": 12,
                 "parity": 13, "phase": 14, "nsyms": 15, "elapsed": 16, "gridid": 18, "nctaid": 20, "wait_state": 24,
                 "symbols": 32}
HEADER_BYTES = 16  # flag, timeout, mailbox: what the host writes when it must change (never per launch)
RECORD_BYTES = TABLE_OFFSET

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
    symbols: dict[str, list[str]] = field(default_factory=dict)  # per function: the shared variables whose bases
    # its launches write into the record, in order
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


# A thread's wait state, one 32-bit register: bits 0-7 count the failed probes of the current wait (mod 256),
# bits 8-30 hold the wait's clock start in units of 2^20 ns (about 1 ms; 0: not started), bit 31 says the thread
# gave up a wait (kept until the kernel ends). One register, so the rewrite adds little to the pressure of a
# kernel's hottest loop.
COUNT_BITS, CLOCK_BITS, CLOCK_SHIFT = 8, 23, 20
GONE = 0x80000000


def _wait_block(n: int, opcode: str, operands: str, pred: str, wide: set[str],
                sm90: bool) -> tuple[list[str], list[str]]:
    """``(inline, tail)``: the wait and its failure count inline; on one failed probe in CHECK_EVERY the thread
    branches to ``tail`` (placed after the function's last instruction), which looks at the flag and the clock
    and, the first thread to time out, writes the record, then branches back. The slow path stays out of the loop
    body because there it costs time even untaken: checked, the attention kernel's overhead fell by 0.3-0.9 points
    with it in the tail rather than inline (docs/PERFORMANCE.md); a call (the ABI's saves) cost more. The wait must
    be at function scope (``flatten_wait_scopes``): the tail branches back to labels beside it."""
    ops = [o.strip() for o in operands.split(",")]
    done, addr = ops[0], ops[1]
    generic = ".shared" not in opcode
    word = lambda name: 4 * RECORD_FIELDS[name]  # noqa: E731
    clock = (1 << CLOCK_BITS) - 1
    if ".parity" in opcode:
        third = ops[2]
        parity = [f"mov.u32 %tmkd_v, {third};" if not third.startswith("%") or not _is_wide(third, wide)
                  else f"cvt.u32.u64 %tmkd_v, {third};", f"st.global.u32 [%tmkd_m+{word('parity')}], %tmkd_v;"]
    else:  # a wait on an arrival token: keep the token
        parity = ["mov.u32 %tmkd_v, -1;", f"st.global.u32 [%tmkd_m+{word('parity')}], %tmkd_v;",
                  f"mov.b64 %tmkd_g, {ops[2]};", f"st.global.u64 [%tmkd_m+{word('wait_state')}], %tmkd_g;"]
    rec = [f"ld.global.u64 %tmkd_m, [{SYMBOL}+{word('mailbox')}];",
           f"st.global.u32 [%tmkd_m+{word('elapsed')}], %tmkd_v;", "mov.u32 %tmkd_v, " + str(n) + ";",
           f"st.global.u32 [%tmkd_m+{word('site')}], %tmkd_v;"]
    for i, axis in enumerate("xyz"):
        rec += [f"mov.u32 %tmkd_v, %ctaid.{axis};", f"st.global.u32 [%tmkd_m+{word('ctaid') + 4 * i}], %tmkd_v;",
                f"mov.u32 %tmkd_v, %tid.{axis};", f"st.global.u32 [%tmkd_m+{word('tid') + 4 * i}], %tmkd_v;",
                f"mov.u32 %tmkd_v, %nctaid.{axis};", f"st.global.u32 [%tmkd_m+{word('nctaid') + 4 * i}], %tmkd_v;"]
    rec += ["mov.u32 %tmkd_v, %cluster_ctarank;" if sm90 else "mov.u32 %tmkd_v, 0;",
            f"st.global.u32 [%tmkd_m+{word('rank')}], %tmkd_v;",
            "mov.u64 %tmkd_g, %gridid;", f"st.global.u64 [%tmkd_m+{word('gridid')}], %tmkd_g;",
            *_address_into("%tmkd_u", addr, generic, wide), f"st.global.u32 [%tmkd_m+{word('address')}], %tmkd_u;",
            "mbarrier.test_wait.parity.shared.b64 %tmkd_q, [%tmkd_u], 0;", "selp.u32 %tmkd_v, 1, 0, %tmkd_q;",
            f"st.global.u32 [%tmkd_m+{word('phase')}], %tmkd_v;", *parity,
            # every field before the flag: the host reads the mailbox once the flag is set
            "membar.sys;", "mov.u32 %tmkd_v, 1;", "st.volatile.global.u32 [%tmkd_m], %tmkd_v;"]
    inline = [
        f"{pred}{opcode} {operands};",
        f"@{done} bra $TMKD_OK_{n};",
        "{",
        ".reg .pred %tmkd_q;", ".reg .b32 %tmkd_v;",
        # only every CHECK_EVERY-th failed probe leaves for the tail; the others retry at once
        "add.u32 %tmkd_v, %tmkd_n, 1;", f"bfi.b32 %tmkd_n, %tmkd_v, %tmkd_n, 0, {COUNT_BITS};",
        f"and.b32 %tmkd_v, %tmkd_n, {CHECK_EVERY - 1};", "setp.ne.u32 %tmkd_q, %tmkd_v, 0;",
        f"@%tmkd_q bra $TMKD_SKIP_{n};",
        "}",
        f"bra $TMKD_TAIL_{n};",
        f"$TMKD_GIVE_{n}:",
        f"mov.pred {done}, 1;",  # treat the wait as completed: every thread runs on to the end
        f"or.b32 %tmkd_n, %tmkd_n, {GONE};",
        f"$TMKD_SKIP_{n}:",
        f"$TMKD_OK_{n}:",
        f"@{done} and.b32 %tmkd_n, %tmkd_n, {GONE};",  # a new wait: count and clock from 0 (the gone bit stays)
    ]
    tail = [
        f"$TMKD_TAIL_{n}:",
        "{",
        ".reg .pred %tmkd_q;", ".reg .b32 %tmkd_v, %tmkd_u;", ".reg .b64 %tmkd_m, %tmkd_g;",
        f"setp.ge.u32 %tmkd_q, %tmkd_n, {GONE};", f"@%tmkd_q bra $TMKD_GIVE_{n};",  # gave up before: at once
        f"ld.volatile.global.u32 %tmkd_v, [{SYMBOL}];",  # another thread gave up: this one too
        "setp.ne.u32 %tmkd_q, %tmkd_v, 0;", f"@%tmkd_q bra $TMKD_GIVE_{n};",
        "mov.u64 %tmkd_m, %globaltimer;", f"shr.u64 %tmkd_m, %tmkd_m, {CLOCK_SHIFT};", "cvt.u32.u64 %tmkd_u, %tmkd_m;",
        f"and.b32 %tmkd_u, %tmkd_u, {clock};", "max.u32 %tmkd_u, %tmkd_u, 1;",  # now (0 means "not started")
        f"bfe.u32 %tmkd_v, %tmkd_n, {COUNT_BITS}, {CLOCK_BITS};",  # this wait's start
        "setp.eq.u32 %tmkd_q, %tmkd_v, 0;",  # the first look starts it
        f"@%tmkd_q bfi.b32 %tmkd_n, %tmkd_u, %tmkd_n, {COUNT_BITS}, {CLOCK_BITS};", f"@%tmkd_q bra $TMKD_SKIP_{n};",
        "sub.u32 %tmkd_v, %tmkd_u, %tmkd_v;", f"and.b32 %tmkd_v, %tmkd_v, {clock};",  # elapsed
        f"ld.global.u32 %tmkd_u, [{SYMBOL}+{word('timeout')}];", "setp.lt.u32 %tmkd_q, %tmkd_v, %tmkd_u;",
        f"@%tmkd_q bra $TMKD_SKIP_{n};",
        f"atom.global.cas.b32 %tmkd_u, [{SYMBOL}], 0, 1;",  # the first writes the record
        "setp.ne.u32 %tmkd_q, %tmkd_u, 0;", f"@%tmkd_q bra $TMKD_GIVE_{n};",
        *rec,
        f"bra $TMKD_GIVE_{n};",
        "}",
    ]
    return inline, tail


def _mutates_a_barrier(inst) -> bool:
    """An arrive, expect_tx or complete_tx on an mbarrier, or a copy that completes bytes or arrives on one."""
    parts = inst.opcode.split(".")
    if inst.head == "mbarrier":
        return len(parts) > 1 and parts[1] in ("arrive", "arrive_drop", "expect_tx", "complete_tx")
    return inst.head in ("cp", "cp.reduce") and "mbarrier" in inst.opcode


def _guarded(op: str, pred: str) -> list[str]:
    """``op`` (with its original guard ``pred``) skipped once this thread has given up a wait: after a give-up the
    kernel runs on past phases that never completed, and an arrive or a copy's complete_tx on such a barrier can
    take its pending count below zero, which the hardware faults on (seen on the H100: "unspecified launch
    failure" at the arrive), killing the context the doctor keeps alive."""
    guard = pred.strip()
    lines = ["{", ".reg .pred %tmkd_x;", f"setp.lt.u32 %tmkd_x, %tmkd_n, {GONE};"]  # not gone
    if guard:
        negated, reg = guard[1:].startswith("!"), guard[1:].lstrip("!")
        if negated:
            lines += [".reg .pred %tmkd_y;", f"not.pred %tmkd_y, {reg};", "and.pred %tmkd_x, %tmkd_x, %tmkd_y;"]
        else:
            lines += [f"and.pred %tmkd_x, %tmkd_x, {reg};"]
    return lines + [f"@%tmkd_x {op}", "}"]


def _expect_block(n: int, opcode: str, operands: str, pred: str, wide: set[str]) -> list[str]:
    ops = [o.strip() for o in operands.split(",")]
    addr, tx = (ops[1], ops[2]) if ".arrive" in opcode else (ops[0], ops[1])
    generic = ".shared" not in opcode
    guarded = _guarded(f"{opcode} {operands};", pred)  # "{", decls, the predicate %tmkd_x, the op, "}"
    lines = guarded[:-1] + [".reg .b32 %tmkd_a, %tmkd_b, %tmkd_c, %tmkd_s;", ".reg .b64 %tmkd_p;"]
    lines += _address_into("%tmkd_a", addr, generic, wide)
    # the slot of (this block, this barrier): the block's table row was computed once, in the prologue; written
    # only when the expect_tx itself was (not after a give-up)
    lines += [f"mov.u32 %tmkd_b, {tx};" if not (tx.startswith("%") and _is_wide(tx, wide))
              else f"cvt.u32.u64 %tmkd_b, {tx};",
              "shr.u32 %tmkd_c, %tmkd_a, 3;", f"and.b32 %tmkd_c, %tmkd_c, {TABLE_SLOTS - 1};",
              "mul.wide.u32 %tmkd_p, %tmkd_c, 16;", "add.u64 %tmkd_p, %tmkd_p, %tmkd_row;",
              f"or.b32 %tmkd_s, %tmkd_tag, {n};",
              "@%tmkd_x st.global.v4.u32 [%tmkd_p], {%tmkd_a, %tmkd_b, %tmkd_s, %tmkd_seq};",
              "}"]
    return lines


def _prologue(expects: bool) -> str:
    """Function-scope registers: the wait state (COUNT_BITS, GONE), and for expect_tx the block's row of the
    table, its tag ((linear block id + 1) << 16) and the launch (the low 32 bits of %gridid)."""
    word = lambda name: 4 * RECORD_FIELDS[name]  # noqa: E731
    text = "\n.reg .b32 %tmkd_n;\nmov.u32 %tmkd_n, 0;\n"
    if expects:
        text += "\n".join([
            ".reg .b64 %tmkd_row;", ".reg .b32 %tmkd_tag, %tmkd_seq;", "{", ".reg .b32 %tmkd_x, %tmkd_y, %tmkd_k;",
            ".reg .b64 %tmkd_g;",
            "mov.u32 %tmkd_x, %nctaid.y;", "mov.u32 %tmkd_y, %ctaid.z;", "mov.u32 %tmkd_k, %ctaid.y;",
            "mad.lo.u32 %tmkd_k, %tmkd_y, %tmkd_x, %tmkd_k;", "mov.u32 %tmkd_x, %nctaid.x;",
            "mov.u32 %tmkd_y, %ctaid.x;", "mad.lo.u32 %tmkd_k, %tmkd_k, %tmkd_x, %tmkd_y;",  # linear block id
            "add.u32 %tmkd_tag, %tmkd_k, 1;", "shl.b32 %tmkd_tag, %tmkd_tag, 16;",
            "mov.u64 %tmkd_g, %gridid;", "cvt.u32.u64 %tmkd_seq, %tmkd_g;",  # this launch, in every entry
            f"and.b32 %tmkd_k, %tmkd_k, {TABLE_BLOCKS - 1};",
            f"mul.wide.u32 %tmkd_row, %tmkd_k, {TABLE_SLOTS * 16};", f"mov.u64 %tmkd_g, {SYMBOL};",
            "add.u64 %tmkd_row, %tmkd_row, %tmkd_g;", f"add.u64 %tmkd_row, %tmkd_row, {TABLE_OFFSET};", "}", ""])
    return text


def _symbols_writer(symbols: list[str]) -> str:
    """Before the function's first instruction (after its shared variables are declared): thread 0 of block 0
    writes the bases of the function's shared variables into the record."""
    word = lambda name: 4 * RECORD_FIELDS[name]  # noqa: E731
    return "\n".join([
            "{", ".reg .pred %tmkd_q;", ".reg .b32 %tmkd_v, %tmkd_w;",
            "mov.u32 %tmkd_v, %tid.x;", "mov.u32 %tmkd_w, %tid.y;", "or.b32 %tmkd_v, %tmkd_v, %tmkd_w;",
            "mov.u32 %tmkd_w, %tid.z;", "or.b32 %tmkd_v, %tmkd_v, %tmkd_w;", "mov.u32 %tmkd_w, %ctaid.x;",
            "or.b32 %tmkd_v, %tmkd_v, %tmkd_w;", "mov.u32 %tmkd_w, %ctaid.y;", "or.b32 %tmkd_v, %tmkd_v, %tmkd_w;",
            "mov.u32 %tmkd_w, %ctaid.z;", "or.b32 %tmkd_v, %tmkd_v, %tmkd_w;", "setp.ne.u32 %tmkd_q, %tmkd_v, 0;",
            "@%tmkd_q bra $TMKD_SYMBOLS_DONE;", f"st.global.u32 [{SYMBOL}+{word('nsyms')}], {len(symbols)};",
            *[line for i, sym in enumerate(symbols) for line in
              (f"mov.u32 %tmkd_v, {sym};", f"st.global.u32 [{SYMBOL}+{word('symbols') + 4 * i}], %tmkd_v;")],
            "$TMKD_SYMBOLS_DONE:", "}", ""])


def _opcode_line(lines: list[str], inst) -> int:
    """The 0-based line that holds ``inst``'s opcode: the reader numbers a statement by its first line, which is a
    label's when the label stands on a line of its own (CUTLASS's ``LAB_WAIT:`` before its ``try_wait``)."""
    for i in range(inst.line - 1, min(len(lines), inst.line + 64)):
        if inst.opcode in lines[i]:
            return i
    return inst.line - 1


def instrument(ptx: str, module: Module | None = None) -> Instrumented:
    """The PTX with every mbarrier wait bounded and every expect_tx remembered (see the module docstring)."""
    if SYMBOL in ptx:
        raise InvalidArgumentError("ptx", SYMBOL, "is already instrumented", "instrument the original PTX once")
    flat = flatten_wait_scopes(ptx)  # same lines, so sites name the original PTX's lines
    module = parse_module(flat) if flat != ptx or module is None else module
    lines = flat.split("\n")
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
        guarded = [i for i in func.insts if _mutates_a_barrier(i) and i not in expects]
        if not waits and not expects and not guarded:
            continue
        for inst in waits:
            n = len(result.sites)
            result.sites.append(Site(n, func.name, inst.line, inst.opcode))
            edits.setdefault(_opcode_line(lines, inst), []).append(("wait", (n, wide, sm90, last - 1)))
        for inst in expects:
            n = len(result.expects)
            if n >= 0xFFFF:  # the table entry keeps the site in 16 bits
                raise InvalidArgumentError("ptx", f"{n + 1} expect_tx", "has more expect_tx sites than the hang doctor "
                                           "numbers (65535)", "check a smaller kernel, or lint it without a launch")
            result.expects.append(Site(n, func.name, inst.line, inst.opcode))
            edits.setdefault(_opcode_line(lines, inst), []).append(("expect", (n, wide)))
        for inst in guarded:
            edits.setdefault(_opcode_line(lines, inst), []).append(("guard", inst.opcode))
        edits.setdefault(first - 1, []).append(("prologue", bool(expects)))
        if waits:
            edits.setdefault(last - 1, []).append(("tails", None))  # after every wait (lines are edited in order)
            # so the host can name "bars+8": one thread, a few stores, per launch
            edits.setdefault(func.insts[0].line - 1, []).insert(0, ("symbols", symbols))
        result.symbols[func.name] = symbols
        for name in symbols:
            result.symbol_sizes[name] = module.variables[name].size
    out: list[str] = []
    tails: dict[int, list[str]] = {}  # closing line of a function -> its waits' slow paths
    for number, text in enumerate(lines):
        todo = edits.get(number)
        if not todo:
            out.append(text)
            continue
        for kind, args in todo:
            if kind == "prologue":  # the function body's "{" is on this line: the registers after it
                at = text.index("{") + 1
                text = text[:at] + _prologue(args) + text[at:]
            elif kind == "symbols":
                text = _symbols_writer(args) + "\n" + text
            elif kind == "guard":
                pattern = re.compile(r"(@!?%?[\w$#]+\s+)?(" + re.escape(args) + r")(\s+[^;]*;|;)")
                text = pattern.sub(lambda m: "\n".join(_guarded(m.group(2) + m.group(3), m.group(1) or "")), text,
                                   count=1)
            elif kind == "wait":
                n, wide, sm90_, close = args

                def rewrite(m: re.Match, n: int = n, wide: set[str] = wide, sm90_: bool = sm90_,
                            close: int = close) -> str:
                    inline, tail = _wait_block(n, m.group(2), m.group(3), m.group(1) or "", wide, sm90_)
                    tails.setdefault(close, []).extend(tail)
                    return "\n".join(inline)
                text = _WAIT.sub(rewrite, text, count=1)
            elif kind == "tails":  # the function body's closing "}" (not one in a comment): the slow paths before it,
                # behind a ret (a body may end without one and would run on into them)
                at = re.sub(r"//.*", lambda m: " " * len(m.group(0)), text).rindex("}")
                text = text[:at] + "\n".join(["ret;", *tails.get(number, [])]) + "\n" + text[at:]
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
