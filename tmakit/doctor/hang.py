"""The hang doctor's host side: a checked launch resets the kernel's record, launches, waits for the stream, and
turns a record into ``HangError`` (what the waiting thread saw, in words, plus the lint's findings for that
barrier).

``Kernel.bind(..., checked=True)`` (and ``TMAKIT_CHECK=1``) builds one: the module's PTX rewritten by
``instrument`` and assembled once per module (``Module.checked_kernel``), bound like any launch. The record
is read after every launch, so a checked launch synchronises its stream (one wait per launch).
"""
from __future__ import annotations

import ctypes
import struct
from dataclasses import dataclass
from typing import Any

from .. import _driver
from ..errors import HangError, InvalidArgumentError
from .instrument import RECORD_FIELDS, SYMBOL, TABLE_BLOCKS, TABLE_OFFSET, TABLE_SLOTS, Instrumented

DEFAULT_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class HangRecord:
    """What the first thread whose wait expired recorded."""

    kernel: str
    block: tuple[int, int, int]
    thread: tuple[int, int, int]
    rank: int
    barrier: str  # "bars+8" (the shared variable and offset), or the raw shared address
    address: int
    role: str  # "full barrier (TMA bytes land on it)", ... where the lint can tell
    parity: int | None  # the phase parity it waited for (None: a wait on an arrival token)
    phase: int  # the barrier's current phase parity
    state: int  # the raw 64-bit mbarrier word (PTX ISA: opaque)
    pending: int  # mbarrier.pending_count of that word
    elapsed_ms: float
    ptx_line: int
    source_line: str | None
    last_expect: tuple[int, int] | None  # (bytes, PTX line) of the last expect_tx on this barrier in this block

    def __str__(self) -> str:
        where = f"PTX line {self.ptx_line}" + (f" ({self.source_line})" if self.source_line else "")
        wait = f"for parity {self.parity}" if self.parity is not None else "on an arrival token"
        text = (f"block {self.block} thread {self.thread}" + (f" (cluster rank {self.rank})" if self.rank else "")
                + f" waited {self.elapsed_ms:.0f} ms at {where} on barrier {self.barrier} [{self.role}] {wait}; the "
                f"barrier is in a phase of parity {self.phase} (raw state 0x{self.state:016x}, "
                f"pending count {self.pending} as mbarrier.pending_count reads it)")
        if self.parity is not None and self.parity == self.phase:
            text += f": the phase of parity {self.parity} is the current one, and it never completed"
        elif self.parity is not None:
            text += f": that phase completed after the wait gave up (slower than the timeout, or a lagging waiter)"
        if self.last_expect is not None:
            text += f"; the last expect_tx on it in this block posted {self.last_expect[0]} bytes (PTX line " \
                    f"{self.last_expect[1]})"
        else:
            text += "; no expect_tx was posted on it in this block"
        return text


class HangBuffer:
    """The instrumented module's record (the ``__tmakit_hang`` global), reset before and read after a launch."""

    def __init__(self, address: int, size: int):
        self.address, self.size = int(address), int(size)

    @classmethod
    def of(cls, module: Any) -> "HangBuffer":
        """The record of a loaded instrumented module."""
        return cls(*(int(v) for v in _driver.call("cuModuleGetGlobal", module.handle, SYMBOL.encode())))

    def reset(self, stream: Any, timeout_ms: int) -> None:
        _driver.call("cuMemsetD8Async", self.address, 0, TABLE_OFFSET, stream)
        _driver.call("cuMemsetD32Async", self.address + 4 * RECORD_FIELDS["timeout_ms"], timeout_ms, 1, stream)

    def read(self, offset: int, size: int) -> bytes:
        """Bytes of the record (after the launch's stream has been synchronised)."""
        buf = ctypes.create_string_buffer(size)
        _driver.call("cuMemcpyDtoH", ctypes.addressof(buf), self.address + offset, size)
        return buf.raw


def _u32(raw: bytes, field: str, k: int = 0) -> int:
    return struct.unpack_from("<I", raw, 4 * (RECORD_FIELDS[field] + k))[0]


def _u64(raw: bytes, field: str) -> int:
    return struct.unpack_from("<Q", raw, 4 * RECORD_FIELDS[field])[0]


def _symbol_of(address: int, names: list[str], bases: list[int], sizes: dict) -> str:
    best = None
    for name, base in zip(names, bases):
        size = sizes.get(name)
        if base <= address and (size is None or address < base + size):
            if best is None or base > best[1]:
                best = (name, base)
    if best is None:
        return f"shared address 0x{address:x}"
    off = address - best[1]
    return best[0] + (f"+{off}" if off else "")


def decode_record(raw: bytes, kernel: str, ins: Instrumented, table: Any, static: dict) -> HangRecord:
    """A ``HangRecord`` from the record's bytes; ``table(entry) -> 16 bytes`` reads one expect_tx slot;
    ``static[site] = (barrier name, role, source line)`` from the lint of the original PTX."""
    site = _u32(raw, "site")
    nsyms = min(_u32(raw, "nsyms"), len(ins.symbols))
    bases = [_u32(raw, "symbols", i) for i in range(nsyms)]
    address = _u32(raw, "address")
    block = tuple(_u32(raw, "ctaid", i) for i in range(3))
    name = _symbol_of(address, ins.symbols[:nsyms], bases, ins.symbol_sizes)
    barrier_static, role, source = static.get(site, (name, "role unknown", None))
    parity = _u32(raw, "parity")
    last = None
    if table is not None:
        entry = table(address)
        got_addr, got_bytes, got_site, got_block = struct.unpack("<IIII", entry)
        if got_block and got_addr == address and got_site < len(ins.expects):
            last = (got_bytes, ins.expects[got_site].ptx_line)
    return HangRecord(kernel, block, tuple(_u32(raw, "tid", i) for i in range(3)), _u32(raw, "rank"), name, address,
                      role, None if parity == 0xFFFFFFFF else parity, _u32(raw, "phase"), _u64(raw, "state"),
                      _u32(raw, "pending"), _u64(raw, "elapsed_ns") / 1e6,
                      ins.sites[site].ptx_line if site < len(ins.sites) else 0, source, last)


def table_entry(block: tuple[int, int, int], grid: tuple[int, int, int], address: int) -> int:
    """Byte offset of the expect_tx slot the kernel writes for (block, barrier address)."""
    linear = block[0] + grid[0] * (block[1] + grid[1] * block[2])
    return TABLE_OFFSET + 16 * ((linear % TABLE_BLOCKS) * TABLE_SLOTS + (address >> 3) % TABLE_SLOTS)


def timeout_ms(timeout: Any) -> int:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 3600:
        raise InvalidArgumentError("timeout", timeout, "must be a number of seconds in (0, 3600]", "timeout=2.0")
    return max(1, int(round(timeout * 1000)))


class CheckedLaunch:
    """A bound launch whose mbarrier waits are bounded: ``checked()`` launches, waits for the stream, and raises
    ``HangError`` when a wait expired. ``update`` and ``args`` are the bound launch's."""

    def __init__(self, kernel: Any, bound: Any, ins: Instrumented, original_ptx: str, timeout: float,
                 cluster: Any = None):
        self.kernel, self._bound, self._ins, self._ptx = kernel, bound, ins, original_ptx
        self._timeout_ms = timeout_ms(timeout)
        self._buffer = HangBuffer.of(bound.kernel.module)
        self._cluster = cluster

    def __call__(self, stream: Any = None) -> None:
        from ..streams import stream_handle

        config = self._bound._config
        handle = _driver.driver().CUstream(stream_handle(stream)) if stream is not None else config.hStream
        self._buffer.reset(handle, self._timeout_ms)
        self._bound(stream)
        _driver.call("cuStreamSynchronize", handle)
        raw = self._buffer.read(0, TABLE_OFFSET)
        if _u32(raw, "flag"):
            self._raise(raw, (config.gridDimX, config.gridDimY, config.gridDimZ))

    def update(self, index: int, value: Any) -> None:
        self._bound.update(index, value)

    @property
    def args(self) -> tuple:
        return self._bound.args

    def _raise(self, raw: bytes, grid: tuple[int, int, int]) -> None:
        block = tuple(_u32(raw, "ctaid", i) for i in range(3))
        table = lambda address: self._buffer.read(table_entry(block, grid, address), 16)  # noqa: E731
        static, findings = self._static()
        record = decode_record(raw, self.kernel.name, self._ins, table, static)
        site_name = static.get(_u32(raw, "site"), (None,))[0]
        related = [f for f in findings if f.severity != "note" and (f.barrier is None or f.barrier == site_name)]
        raise HangError(self.kernel.name, record, related)

    def _static(self) -> tuple[dict, list]:
        """Per wait site: (barrier name, role, source line) from the lint's analysis of the original PTX, and the
        lint's findings with the maps this launch was bound with."""
        from ..tensormap.tensor_map import TensorMap
        from .check import lint_ptx
        from .ptx import parse_module
        from .analysis import Kernel as Analysed
        from .keys import may_alias

        maps = {i: a for i, a in enumerate(self._bound.args) if isinstance(a, TensorMap)}
        try:
            report = lint_ptx(self._ptx, entry=self.kernel.name, maps=maps or None, cluster=self._cluster)
            findings = report.findings
        except Exception:  # noqa: BLE001 - the hang is the news; the lint is context that must not hide it
            findings = []
        module = parse_module(self._ptx)
        k = Analysed(module, module.entry(self.kernel.name))
        static = {}
        by_line = {e.inst.line: e for e in k.by_kind("wait")}
        for site in self._ins.sites:
            ev = by_line.get(site.ptx_line)
            if ev is None:
                continue
            data = any(may_alias(e.barrier, ev.barrier) for e in k.by_kind("tensor_load", "bulk_load", "expect_tx"))
            release = any(may_alias(e.barrier, ev.barrier) for e in k.by_kind("arrive")
                          if not e.info.get("expect"))
            role = ("full barrier: TMA bytes land on it" if data else
                    "empty/release barrier: consumers arrive on it" if release else "no arrival on it in this kernel")
            static[site.index] = (k.name(ev.barrier), role, module.source_line(ev.inst))
        return static, findings


def checked_bind(kernel: Any, args: tuple, options: dict, timeout: float | None) -> CheckedLaunch:
    """``kernel.bind(*args, **options)`` on the instrumented twin of its module."""
    checked, ins = kernel.module.checked_kernel(kernel.name)
    bound = checked.bind(*args, checked=False, **options)
    return CheckedLaunch(kernel, bound, ins, kernel.module.code.ptx,
                         DEFAULT_TIMEOUT_S if timeout is None else timeout, options.get("cluster"))
