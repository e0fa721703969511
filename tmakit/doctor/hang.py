"""The hang doctor's host side. Each instrumented module has one record: a device header (flag, timeout, and the
device address of the module's mailbox, 256 bytes of mapped pinned host memory) written when it must change
(the first bind, another timeout, after a hang), never per launch; the thread whose wait gives up writes the
record into the mailbox, flag last. A checked launch is the launch alone: nothing else enters the stream. A flagged mailbox becomes ``HangError`` (what the waiting thread saw, in words, plus the lint's findings
for that barrier).

``Kernel.bind(..., checked=True)`` (and ``TMAKIT_CHECK=1``) builds one: the module's PTX rewritten by
``instrument`` and assembled once per module (``Module.checked_kernel``), bound like any launch. Two ways to
learn of a hang:
- ``checked=True``: each launch waits for its stream and raises from the call;
- ``checked="deferred"`` (``TMAKIT_CHECK=deferred``): a launch does not wait; it raises when the mailbox of an
  earlier launch of the module is flagged, and ``check()`` / ``tmakit.check_hangs()`` wait for every launch in
  flight and raise. The launches that were in flight with a hung one give up at once (the device flag stays set
  until the host has read the record) and their outputs are garbage too.
Bindings of one module share its record: a hang in one is raised by whichever collects it first.
"""
from __future__ import annotations

import ctypes
import struct
import weakref
from dataclasses import dataclass
from typing import Any

from .. import _driver
from ..errors import HangError, InvalidArgumentError
from .instrument import (CLOCK_SHIFT, HEADER_BYTES, RECORD_BYTES, RECORD_FIELDS, SYMBOL, TABLE_BLOCKS, TABLE_OFFSET,
                         TABLE_SLOTS, Instrumented)

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
    elapsed_ms: float
    ptx_line: int
    source_line: str | None
    last_expect: tuple[int, int] | None  # (bytes, PTX line) of the last expect_tx on this barrier in this block

    def __str__(self) -> str:
        where = f"PTX line {self.ptx_line}" + (f" ({self.source_line})" if self.source_line else "")
        wait = f"for parity {self.parity}" if self.parity is not None else "on an arrival token"
        text = (f"block {self.block} thread {self.thread}" + (f" (cluster rank {self.rank})" if self.rank else "")
                + f" waited {self.elapsed_ms:.0f} ms at {where} on barrier {self.barrier} [{self.role}] {wait}; the "
                f"barrier is in a phase of parity {self.phase}")
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


def _u32(raw: bytes, field: str, k: int = 0) -> int:
    return struct.unpack_from("<I", raw, 4 * (RECORD_FIELDS[field] + k))[0]


def _u64(raw: bytes, field: str) -> int:
    return struct.unpack_from("<Q", raw, 4 * RECORD_FIELDS[field])[0]


# a shared address as a thread sees it may carry its CTA's rank in the cluster above bit 24 (sm_90: block 0
# wrote the bases, another rank's thread hung); the shared window itself is far smaller
_CTA_OFFSET = 0xFFFFFF


def _symbol_of(address: int, names: list[str], bases: list[int], sizes: dict) -> str:
    best = None
    address &= _CTA_OFFSET
    for name, base in zip(names, (b & _CTA_OFFSET for b in bases)):
        size = sizes.get(name)
        if base <= address and (size is None or address < base + size):
            if best is None or base > best[1]:
                best = (name, base)
    if best is None:
        return f"shared address 0x{address:x}"
    off = address - best[1]
    return best[0] + (f"+{off}" if off else "")


def decode_record(raw: bytes, kernel: str, ins: Instrumented, static: dict, device: bytes | None = None,
                  entry: bytes | None = None) -> HangRecord:
    """A ``HangRecord`` from the mailbox's bytes; ``device``: the device record (the shared variables' bases block 0
    wrote), ``entry``: the hung block's expect_tx table slot for the barrier; ``static[site] = (barrier name,
    role, source line)`` from the lint of the original PTX."""
    site = _u32(raw, "site")
    names = ins.symbols.get(ins.sites[site].function, []) if site < len(ins.sites) else []
    nsyms = min(_u32(device, "nsyms"), len(names)) if device is not None else 0
    bases = [_u32(device, "symbols", i) for i in range(nsyms)] if device is not None else []
    address = _u32(raw, "address")
    block = tuple(_u32(raw, "ctaid", i) for i in range(3))
    name = _symbol_of(address, names[:nsyms], bases, ins.symbol_sizes)
    barrier_static, role, source = static.get(site, (name, "role unknown", None))
    parity = _u32(raw, "parity")
    last = None  # the block's last expect_tx on this barrier, if this launch (%gridid) and this block posted it
    if entry is not None:
        got_addr, got_bytes, got_tag, got_grid = struct.unpack("<IIII", entry)
        linear = linear_block(raw)
        if got_grid == _u64(raw, "gridid") & 0xFFFFFFFF and got_addr == address \
                and got_tag >> 16 == (linear + 1) & 0xFFFF and (got_tag & 0xFFFF) < len(ins.expects):
            last = (got_bytes, ins.expects[got_tag & 0xFFFF].ptx_line)
    return HangRecord(kernel, block, tuple(_u32(raw, "tid", i) for i in range(3)), _u32(raw, "rank"), name, address,
                      role, None if parity == 0xFFFFFFFF else parity, _u32(raw, "phase"),
                      _u32(raw, "elapsed") * (1 << CLOCK_SHIFT) / 1e6,
                      ins.sites[site].ptx_line if site < len(ins.sites) else 0, source, last)


def linear_block(raw: bytes) -> int:
    block = tuple(_u32(raw, "ctaid", i) for i in range(3))
    grid = tuple(_u32(raw, "nctaid", i) for i in range(3))
    return block[0] + grid[0] * (block[1] + grid[1] * block[2])


def table_offset(raw: bytes) -> int:
    """Byte offset in the device record of the hung block's expect_tx slot for the hung barrier."""
    row = linear_block(raw) % TABLE_BLOCKS
    return TABLE_OFFSET + 16 * (row * TABLE_SLOTS + (_u32(raw, "address") >> 3) % TABLE_SLOTS)


def timeout_ms(timeout: Any) -> int:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 3600:
        raise InvalidArgumentError("timeout", timeout, "must be a number of seconds in (0, 3600]", "timeout=2.0")
    return max(1, int(round(timeout * 1000)))


def record_address(module: Any) -> int:
    """The device address of a loaded instrumented module's record (the ``__tmakit_hang`` global)."""
    return int(_driver.call("cuModuleGetGlobal", module.handle, SYMBOL.encode())[0])


class _ModuleRecord:
    """One instrumented module's record and mailbox (every checked binding of the module shares them): the
    device header (flag, timeout, mailbox address) is written when it must change (the first bind, another
    timeout, after a hang), never per launch: any stream operation between two launches cost the attention
    kernel 4-5% (two small copies, or three stream memory writes, measured)."""

    def __init__(self, module: Any, device: int):
        from ..memory import pinned_empty

        self.address = record_address(module)
        self.mailbox = pinned_empty(RECORD_BYTES, "uint8", mapped=True, device=device)
        self.mailbox[:] = 0
        self.timeout_ms: int | None = None  # what the device header holds; None: to be written

    def flagged(self) -> bool:
        return bool(self.mailbox[:4].any())

    def prepare(self, handle: Any, timeout: int) -> None:
        """Make the device header say flag 0, ``timeout`` and the mailbox."""
        _driver.call("cuStreamSynchronize", handle)  # rare: nothing of this module may be reading the header
        units = max(1, timeout * 1_000_000 >> CLOCK_SHIFT)  # the kernel's clock counts 2^CLOCK_SHIFT ns
        header = ctypes.create_string_buffer(struct.pack("<IIQ", 0, units, self.mailbox.base.device_pointer))
        _driver.call("cuMemcpyHtoD", self.address, ctypes.addressof(header), HEADER_BYTES)
        self.timeout_ms = timeout

    def take(self) -> tuple[bytes, bytes, bytes]:
        """The flagged record, the device record (symbol bases) and the hung block's expect_tx slot for the hung
        barrier (read after ``check`` has waited for the stream); the header is then written again before the
        next launch."""
        raw = self.mailbox.tobytes()
        self.mailbox[:4] = 0
        self.timeout_ms = None
        device = ctypes.create_string_buffer(RECORD_BYTES)
        _driver.call("cuMemcpyDtoH", ctypes.addressof(device), self.address, RECORD_BYTES)
        entry = ctypes.create_string_buffer(16)
        _driver.call("cuMemcpyDtoH", ctypes.addressof(entry), self.address + table_offset(raw), 16)
        return raw, device.raw, entry.raw


_RECORDS: "weakref.WeakKeyDictionary[Any, _ModuleRecord]" = weakref.WeakKeyDictionary()
_IN_FLIGHT: "weakref.WeakSet[CheckedLaunch]" = weakref.WeakSet()


def check_hangs() -> None:
    """Wait for every deferred checked launch still in flight and raise ``HangError`` for the first that hung
    (``checked="deferred"``; a ``checked=True`` launch has already raised from its call)."""
    for launch in list(_IN_FLIGHT):
        launch.check()


class CheckedLaunch:
    """A bound launch whose mbarrier waits are bounded. ``checked()`` launches; a wait that expired raises
    ``HangError`` from that call (``deferred=False``) or from a later call or ``check()`` (``deferred=True``).
    ``update`` and ``args`` are the bound launch's."""

    def __init__(self, kernel: Any, bound: Any, ins: Instrumented, original_ptx: str, timeout: float,
                 cluster: Any = None, deferred: bool = False):
        self.kernel, self._bound, self._ins, self._ptx = kernel, bound, ins, original_ptx
        self._timeout_ms = timeout_ms(timeout)
        module = bound.kernel.module
        record = _RECORDS.get(module)
        if record is None:
            record = _RECORDS[module] = _ModuleRecord(module, bound.kernel.device)
        self._record = record
        self._cluster, self.deferred = cluster, bool(deferred)
        self._stream: Any = None  # the stream of the launches not yet waited for

    def __call__(self, stream: Any = None) -> None:
        from ..streams import stream_handle

        record = self._record
        if self.deferred and record.flagged():  # an earlier launch gave up: let it run to its end, then read
            self.check()
        config = self._bound._config
        handle = _driver.driver().CUstream(stream_handle(stream)) if stream is not None else config.hStream
        if record.timeout_ms != self._timeout_ms:
            record.prepare(handle, self._timeout_ms)
        self._bound(stream)  # nothing else enters the stream: no event, no copy (either costs a few %)
        self._stream = handle
        if self.deferred:
            _IN_FLIGHT.add(self)
        else:
            self.check()

    def check(self) -> None:
        """Wait for this binding's stream; raise ``HangError`` if a launch of the module hung."""
        if self._stream is not None:
            _driver.call("cuStreamSynchronize", self._stream)
            self._stream = None
        _IN_FLIGHT.discard(self)
        if self._record.flagged():
            self._raise(self._record.take())

    def update(self, index: int, value: Any) -> None:
        self._bound.update(index, value)

    @property
    def args(self) -> tuple:
        return self._bound.args

    def _raise(self, taken: tuple[bytes, bytes, bytes]) -> None:
        raw, device, entry = taken
        static, findings = self._static()
        record = decode_record(raw, self.kernel.name, self._ins, static, device, entry)
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


def checked_bind(kernel: Any, args: tuple, options: dict, timeout: float | None,
                 deferred: bool = False) -> CheckedLaunch:
    """``kernel.bind(*args, **options)`` on the instrumented twin of its module, always serialized after the previous
    kernel (``pdl`` dropped): the twin writes its record's shared-memory bases at the start of every launch, and a
    hang is then one launch's alone."""
    checked, ins = kernel.module.checked_kernel(kernel.name)
    bound = checked.bind(*args, checked=False, **{**options, "pdl": False})
    return CheckedLaunch(kernel, bound, ins, kernel.module.code.ptx,
                         DEFAULT_TIMEOUT_S if timeout is None else timeout, options.get("cluster"), deferred)
