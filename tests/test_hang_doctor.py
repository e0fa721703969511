"""The hang doctor on the CPU: the rewritten PTX of every seeded hang and of tmakit's own kernels assembles with
ptxas (the GPU loads exactly that), every wait is bounded, every expect_tx remembered; a record decodes into
words; a checked launch over the fake driver raises HangError with the lint's findings for the barrier; the
option reaches the launch from ``bind``, ``TMAKIT_CHECK`` and the plans. tests/test_hang_gpu.py runs the hangs.
"""
from __future__ import annotations

import re
import struct
import subprocess
import tempfile
from pathlib import Path

import pytest
from _fake_driver import OK, device_view, fake, fake_launch  # noqa: F401 - fixtures
from conftest import requires_ptxas
from hang_kernels import SCENARIOS, SOURCE

from tmakit import ops
from tmakit.build import compile_cuda
from tmakit.doctor import assemble, hang
from tmakit.doctor.flatten import flatten_wait_scopes
from tmakit.doctor.instrument import BUFFER_BYTES, RECORD_BYTES, RECORD_FIELDS, SYMBOL, instrument
from tmakit.doctor.ptx import parse_module
from tmakit.errors import HangError, InvalidArgumentError, UnsupportedDeviceError

ROOT = Path(__file__).resolve().parents[1]


def _assemble(ptx: str, arch: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "k.ptx")
        path.write_text(ptx)
        done = subprocess.run(["ptxas", f"-arch={arch}", str(path), "-o", str(Path(tmp, "k.cubin"))],
                              capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[:3000]


def _waits(ptx: str) -> list:
    return [i for f in parse_module(ptx).functions.values() for i in f.insts
            if i.head == "mbarrier" and i.opcode.split(".")[1] in ("try_wait", "test_wait")]


@requires_ptxas
@pytest.mark.parametrize("scenario", [0, *SCENARIOS])
def test_every_seeded_hang_instruments_and_assembles(scenario):
    code = compile_cuda(SOURCE, arch="sm_90a", defines={"SCENARIO": scenario}, name="hang.cu")
    ins = instrument(code.ptx)
    _assemble(ins.ptx, "sm_90a")
    assert f".global .align 16 .b8 {SYMBOL}[{BUFFER_BYTES}];" in ins.ptx
    original = _waits(code.ptx)
    assert [s.ptx_line for s in ins.sites] == [w.line for w in original] and ins.sites
    text = ins.ptx
    for site in ins.sites:  # each wait: its probe, then the branch past the slow path on success
        assert f"$TMKD_OK_{site.index}:" in text and f"$TMKD_GIVE_{site.index}:" in text
    assert text.count("atom.global.cas.b32") == len(ins.sites)  # each wait's give-up, in the function's tail
    # the slow paths sit after the last instruction of the function, out of its loops
    assert text.index("$TMKD_TAIL_0:") > text.rindex("ret;")
    assert len(ins.expects) == code.ptx.count("expect_tx") and text.count("st.global.v4.u32") >= len(ins.expects)
    # every arrive and every copy that completes bytes on a barrier is skipped once the thread gave up
    mutating = [line for line in text.splitlines() if re.search(r"\b(mbarrier\.arrive|cp\.async\.bulk\.tensor)", line)]
    assert mutating and all(line.strip().startswith("@%tmkd_x ") for line in mutating), mutating


@requires_ptxas
@pytest.mark.parametrize("kernel", ["gemm.cu", "attention.cu", "pipeline.cu", "tile_load.cu", "tma_modes.cu",
                                    "transpose.cu"])
def test_shipped_kernels_instrument_and_assemble(kernel):
    code = compile_cuda(kernel, arch="sm_90a")
    ins = instrument(code.ptx)
    _assemble(ins.ptx, "sm_90a")
    assert len(ins.sites) == len(_waits(code.ptx)) > 0


@requires_ptxas
@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "ptx").glob("*.ptx")))
def test_hand_written_ptx_instruments_and_assembles(name):
    text = (ROOT / "ptx" / name).read_text()
    ins = instrument(text)
    _assemble(ins.ptx, parse_module(text).target)
    assert len(ins.sites) == len(_waits(text))


def test_scoped_labels_of_inline_asm_waits_stay_apart():
    """CUTLASS-style waits repeat LAB_WAIT/DONE in every inlined copy; each copy's branches stay in its scope."""
    block = """  {{
  .reg .pred P1;
  LAB_WAIT:
  mbarrier.try_wait.parity.shared::cta.b64 P1, [%r1], {p};
  @P1 bra DONE;
  bra LAB_WAIT;
  DONE:
  }}
"""
    ptx = (".version 8.0\n.target sm_90a\n.address_size 64\n.visible .entry k()\n{\n .reg .b32 %r<4>;\n"
           " .shared .align 8 .b64 bar;\n mov.u32 %r1, bar;\n" + block.format(p=0) + block.format(p=1) + " ret;\n}\n")
    func = parse_module(ptx).functions["k"]
    assert sorted(func.labels) == ["DONE#1", "DONE#2", "LAB_WAIT#1", "LAB_WAIT#2"]
    assert [i.operands for i in func.insts if i.head == "bra"] == [["DONE#1"], ["LAB_WAIT#1"], ["DONE#2"],
                                                                    ["LAB_WAIT#2"]]
    ins = instrument(ptx)
    assert len(ins.sites) == 2
    # each wait rewritten where its opcode stands (the reader numbers it by its label's line)
    assert all(f"$TMKD_OK_{i}:" in ins.ptx and f"$TMKD_TAIL_{i}:" in ins.ptx for i in range(2))
    if assemble.shutil.which("ptxas"):
        _assemble(ins.ptx, "sm_90a")


def test_scopes_around_a_wait_are_lifted_line_for_line():
    """The tail's branches back need the wait at function scope: its scope's braces go, its registers and labels
    get names of their own (ranges too), a child scope that shadows a name keeps it, other scopes stay."""
    ptx = (".version 8.0\n.target sm_90a\n.address_size 64\n.visible .entry k()\n{\n .reg .b32 %r<4>;\n"
           " .shared .align 8 .b64 bar;\n mov.u32 %r1, bar;\n"
           " {\n .reg .pred p;\n .reg .b32 %t<2>;\n { .reg .pred p; setp.eq.u32 p, %r1, 0; }\n"
           " W: mbarrier.try_wait.parity.shared::cta.b64 p, [%r1], 0; // p stays in { }\n"
           " selp.u32 %t1, 1, 0, p;\n @!p bra W;\n }\n"
           " { .reg .pred p; setp.eq.u32 p, %r2, 0; }\n ret;\n}\n")
    flat = flatten_wait_scopes(ptx)
    assert flat.count("\n") == ptx.count("\n")
    lines = flat.splitlines()
    assert lines[8].strip() == "" and lines[15].strip() == ""  # the lifted scope's braces
    assert ".reg .pred p_tmkd1;" in flat and ".reg .b32 %t_tmkd1_<2>;" in flat
    assert "W_tmkd1: mbarrier.try_wait.parity.shared::cta.b64 p_tmkd1, [%r1], 0; // p stays in { }" in flat
    assert "selp.u32 %t_tmkd1_1, 1, 0, p_tmkd1;" in flat and "@!p_tmkd1 bra W_tmkd1;" in flat
    assert flat.count("{ .reg .pred p; setp.eq.u32 p, %r") == 2  # the shadowing child and the sibling
    assert flatten_wait_scopes(flat) == flat  # nothing left to lift
    ins = instrument(ptx)
    assert [s.ptx_line for s in ins.sites] == [13]
    if assemble.shutil.which("ptxas"):
        _assemble(ins.ptx, "sm_90a")


def test_instrumenting_twice_is_refused():
    ins = instrument(compile_cuda(SOURCE, arch="sm_90a", defines={"SCENARIO": 1}, name="hang.cu").ptx)
    with pytest.raises(InvalidArgumentError, match="already instrumented"):
        instrument(ins.ptx)


def _record(**fields) -> bytes:
    raw = bytearray(RECORD_BYTES)
    for name, value in fields.items():
        if isinstance(value, tuple):
            for i, v in enumerate(value):
                struct.pack_into("<I", raw, 4 * (RECORD_FIELDS[name] + i), v)
        elif name in ("gridid", "wait_state"):
            struct.pack_into("<Q", raw, 4 * RECORD_FIELDS[name], value)
        else:
            struct.pack_into("<I", raw, 4 * RECORD_FIELDS[name], value)
    return bytes(raw)


def _expect(address: int, nbytes: int, site: int, block: int, gridid: int) -> tuple:
    """An expect_tx table entry as the kernel writes it (and the thread that gives up copies it)."""
    return (address, nbytes, site | (block + 1) << 16, gridid & 0xFFFFFFFF)


def _scenario(n: int):
    code = compile_cuda(SOURCE, arch="sm_90a", defines={"SCENARIO": n}, options=["-lineinfo"], name="hang.cu")
    return code, instrument(code.ptx)


@pytest.fixture(scope="module")
def compiled():
    """Scenarios 0 and 1, compiled and instrumented before any fake driver is in place."""
    return {n: _scenario(n) for n in (0, 1)}


UNITS_PER_S = 1e9 / (1 << 20)  # the kernel's clock: units of 2^20 ns


def test_a_record_reads_as_words():
    code, ins = _scenario(1)
    full = ins.symbols["hang"].index("_ZZ4hangE4full")
    bases = tuple(0x400 + 16 * i for i in range(len(ins.symbols["hang"])))
    device = _record(nsyms=len(bases), symbols=bases)
    fields = dict(flag=1, site=0, ctaid=(3, 0, 0), tid=(5, 0, 0), address=bases[full], parity=0, phase=0,
                  elapsed=round(UNITS_PER_S), nctaid=(4, 1, 1), gridid=7)
    raw = _record(**fields)
    entry = struct.pack("<IIII", *_expect(bases[full], 16384, 0, 3, gridid=7))
    record = hang.decode_record(raw, "hang", ins, {}, device, entry)
    text = str(record)
    assert record.barrier == "_ZZ4hangE4full" and record.block == (3, 0, 0) and record.thread == (5, 0, 0)
    assert "waited 1000 ms" in text and "for parity 0" in text and "phase of parity 0 is the current one" in text
    assert "posted 16384 bytes" in text and f"PTX line {ins.sites[0].ptx_line}" in text
    # the slot the host reads: block 3's row, the barrier's slot in it
    assert hang.table_offset(raw) == 256 + 16 * (3 * 16 + (bases[full] >> 3) % 16)
    # an entry of another barrier, another block, an earlier launch (or none) is not this barrier's
    for other_entry in (_expect(0x999, 8, 0, 3, 7), _expect(bases[full], 8, 0, 2, 7), _expect(bases[full], 8, 0, 3, 6),
                        (0, 0, 0, 0)):
        other = hang.decode_record(raw, "hang", ins, {}, device, struct.pack("<IIII", *other_entry))
        assert other.last_expect is None and "no expect_tx was posted" in str(other)
    # a thread of cluster rank 1 sees its shared addresses with the rank above bit 24; block 0 wrote the bases
    ranked = hang.decode_record(_record(**{**fields, "address": 0x1000000 + bases[full]}), "hang", ins, {}, device)
    assert ranked.barrier == "_ZZ4hangE4full"
    # without the device record the barrier is named by its shared address
    assert hang.decode_record(raw, "hang", ins, {}).barrier == f"shared address 0x{bases[full]:x}"


class _FakeBound:
    """A bound launch whose 'kernel' does what the instrumented kernel does when a wait gives up: writes
    ``record`` into the module's mailbox (whose device address the host put in the record header), flag last."""

    def __init__(self, driver, address, record, args=()):
        from tmakit import _driver

        self.driver, self.address, self.record, self.args = driver, address, record, tuple(args)
        cfg = _driver.bindings().CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = 4, 1, 1
        cfg.hStream = _driver.bindings().CUstream(0)
        self._config, self.launches = cfg, 0
        self.device, self.entry = None, None

    def __call__(self, stream=None):
        import ctypes

        self.launches += 1
        flag, self.seen_timeout, mailbox = struct.unpack_from("<IIQ", ctypes.string_at(self.address, 16))
        assert flag == 0 and mailbox  # the header says "no hang yet" and where the mailbox is
        if self.device is not None:  # what block 0 and the expect_tx write into the device record
            ctypes.memmove(self.address + 4 * RECORD_FIELDS["nsyms"], self.device[4 * RECORD_FIELDS["nsyms"]:],
                           RECORD_BYTES - 4 * RECORD_FIELDS["nsyms"])
            if self.entry is not None and self.record is not None:
                ctypes.memmove(self.address + hang.table_offset(self.record), self.entry, 16)
        if self.record is not None:
            ctypes.memmove(mailbox + 4, self.record[4:], len(self.record) - 4)
            ctypes.memmove(mailbox, self.record[:4], 4)  # the flag last
            ctypes.memmove(self.address, b"\1\0\0\0", 4)  # and the device flag (the winner's CAS)


class _FakeModule:
    pass


def _checked(fake, record, monkeypatch, code, ins, args=(), deferred=False, module=None):
    import ctypes

    buf = ctypes.create_string_buffer(BUFFER_BYTES)
    address = ctypes.addressof(buf)
    fake.dev[address] = (buf, 0)
    monkeypatch.setattr(hang, "record_address", lambda module: address)
    bound = _FakeBound(fake, address, record, args)
    module = module or _FakeModule()

    class K:
        name, device = "hang", 0

    K.module = module
    bound.kernel = K()
    return hang.CheckedLaunch(K(), bound, ins, code.ptx, 1.0, deferred=deferred), bound, buf


def _hung(ins, **extra) -> tuple[bytes, bytes]:
    """A record of a consumer of block 0 hung on the full barrier, and the device record's symbol bases."""
    bases = tuple(0x400 + 16 * i for i in range(len(ins.symbols["hang"])))
    full = bases[ins.symbols["hang"].index("_ZZ4hangE4full")]
    fields = dict(flag=1, site=ins.sites[0].index, ctaid=(0, 0, 0), tid=(7, 0, 0), address=full, parity=0, phase=0,
                  elapsed=round(1.5 * UNITS_PER_S), nctaid=(4, 1, 1), gridid=9)
    return _record(**{**fields, **extra}), _record(nsyms=len(bases), symbols=bases)


def test_checked_launch_raises_hang_error_with_the_lint_of_that_barrier(compiled, fake, monkeypatch):
    code, ins = compiled[1]
    record, device = _hung(ins)
    launch, bound, buf = _checked(fake, record, monkeypatch, code, ins)
    bound.device = device
    with pytest.raises(HangError, match=r"kernel hang hung: block \(0, 0, 0\) thread \(7, 0, 0\) waited 1501 ms") as err:
        launch()
    assert err.value.record.barrier == "_ZZ4hangE4full" and "full barrier" in err.value.record.role
    assert err.value.record.source_line and err.value.record.source_line.startswith("hang.cu:")
    # no map was bound, so the lint says what it cannot count (notes are left out), and nothing false
    assert all(f.severity != "note" for f in err.value.findings)
    units = struct.unpack_from("<I", bytes(buf), 4)[0]
    assert bound.launches == 1 and units == 1_000_000_000 >> 20  # the timeout (1 s) reached the device, in units


def test_checked_launch_with_the_maps_names_the_tx_finding(compiled, fake, monkeypatch):
    from tmakit.doctor.lint import describe_map

    code, ins = compiled[1]
    tmap = describe_map({"shape": (192, 64), "dtype": "bf16", "box": (64, 64), "swizzle": "128B"})
    record, device = _hung(ins)
    launch, bound, _ = _checked(fake, record, monkeypatch, code, ins, args=(tmap, 0))
    bound.device = device
    with pytest.raises(HangError, match=r"tx\.too_many.*expects 16384 B per phase but .* deliver 8192 B") as err:
        launch()
    assert {f.rule for f in err.value.findings} == {"tx.too_many"}


def test_checked_launch_without_a_hang_returns(compiled, fake, monkeypatch):
    code, ins = compiled[0]
    launch, bound, _ = _checked(fake, None, monkeypatch, code, ins)
    launch()
    launch()
    assert bound.launches == 2


def test_a_deferred_launch_raises_later_for_the_launch_that_hung(compiled, fake, monkeypatch):
    import tmakit

    code, ins = compiled[1]
    record, device = _hung(ins, ctaid=(1, 0, 0))
    launch, bound, buf = _checked(fake, record, monkeypatch, code, ins, deferred=True)
    bound.device = device
    bound.entry = struct.pack("<IIII", *_expect(_u32(record, "address"), 16384, 0, 1, gridid=9))
    syncs = []
    monkeypatch.setattr(type(fake), "cuStreamSynchronize", lambda self, h: syncs.append(h) or (OK,), raising=False)
    bound.record = None
    launch()  # the first writes the module's header (waiting for the stream once)
    syncs.clear()
    launch()  # nothing flagged, nothing waited for
    assert launch._stream is not None and syncs == []
    bound.record = record
    launch()  # hangs on the GPU: the call does not wait
    assert syncs == []
    with pytest.raises(HangError, match=r"block \(1, 0, 0\).*posted 16384 bytes"):
        tmakit.check_hangs()  # waits for the stream and raises for the launch that hung
    assert launch._stream is None and len(syncs) == 1
    bound.record = None
    launch()  # the header is written again (the device flag was left set): the next launch is clean
    launch.check()
    assert bytes(buf[:4]) == b"\0\0\0\0" and bound.launches == 4
    bound.record = record
    launch()  # its mailbox is flagged at once here: the next launch raises for it
    bound.record = None
    with pytest.raises(HangError):
        launch()


def _u32(raw: bytes, field: str) -> int:
    return struct.unpack_from("<I", raw, 4 * RECORD_FIELDS[field])[0]


def test_bindings_of_one_module_share_its_record(compiled, fake, monkeypatch):
    code, ins = compiled[0]
    module = _FakeModule()
    first, bound, _ = _checked(fake, None, monkeypatch, code, ins, module=module)
    second, _, _ = _checked(fake, None, monkeypatch, code, ins, module=module)
    assert first._record is second._record


@pytest.mark.parametrize("checked", ["yes", 2, "sync"])
def test_checked_takes_true_false_or_deferred(monkeypatch, checked):
    from _fake_driver import fake_kernel_of

    from tmakit.kernel_signature import ParamInfo

    kernel, _, _ = fake_kernel_of(monkeypatch, [ParamInfo(0, 0, 4, "p0", ".u32", 4)])
    with pytest.raises(InvalidArgumentError, match=r'checked=.*must be True, False, "deferred" or None'):
        kernel.bind(7, grid=1, block=32, checked=checked)


@pytest.mark.parametrize("timeout", [0, -1, 1e9, True, "2"])
def test_timeout_is_checked(timeout):
    with pytest.raises(InvalidArgumentError, match=r"timeout=.*seconds in \(0, 3600\]"):
        hang.timeout_ms(timeout)


def test_no_assembler_says_how_to_get_one(monkeypatch):
    monkeypatch.setattr(assemble, "_nvjitlink", lambda: None)
    monkeypatch.setattr(assemble, "_ptxas", lambda: None)
    with pytest.raises(UnsupportedDeviceError, match="ptxas.*nvidia-nvjitlink"):
        assemble.ptx_to_cubin(".version 8.0", "sm_90a")


@requires_ptxas
def test_ptxas_assembles_what_ptx_to_cubin_is_given(monkeypatch):
    monkeypatch.setattr(assemble, "_nvjitlink", lambda: None)
    assert assemble.assembler() == assemble._ptxas()  # ptxas first: it compiles the module whole, as NVRTC did
    code, ins = _scenario(4)
    assert assemble.ptx_to_cubin(ins.ptx, "sm_90a")[:4] == b"\x7fELF"
    from tmakit.errors import CompileError

    with pytest.raises(CompileError, match="checked.ptx"):
        assemble.ptx_to_cubin(ins.ptx.replace("membar.sys", "membar.no_such_scope"), "sm_90a")


def test_nvjitlink_is_refused_for_an_overaligned_dynamic_shared_array(monkeypatch):
    # nvJitLink links relocatable code: a dynamic shared array lands 16-byte aligned whatever its .align says
    # (on the H100 an __align__(1024) buffer landed at 0x410 and its 128B-swizzled TMA faulted).
    monkeypatch.setattr(assemble, "_ptxas", lambda: None)
    monkeypatch.setattr(assemble, "_nvjitlink", lambda: object())  # refused before nvJitLink is called
    code, ins = _scenario(4)
    assert assemble.overaligned_extern_shared(ins.ptx) == [("smem", 1024)]
    with pytest.raises(UnsupportedDeviceError, match=r"smem is declared 1024-byte aligned.*ptxas"):
        assemble.ptx_to_cubin(ins.ptx, "sm_90a")
    shipped = compile_cuda("tile_load.cu", arch="sm_90a").ptx  # tmakit's kernels align by hand: 16 is enough
    assert assemble.overaligned_extern_shared(shipped) == []


@pytest.mark.skipif(assemble._nvjitlink() is None, reason="nvJitLink is not installed (pip install nvidia-nvjitlink); "
                    "the ptxas path is tested above")
def test_nvjitlink_assembles_what_ptx_to_cubin_is_given(monkeypatch):
    monkeypatch.setattr(assemble, "_ptxas", lambda: None)
    assert assemble.assembler() == "nvjitlink"
    ins = instrument(compile_cuda("tile_load.cu", arch="sm_90a").ptx)
    assert assemble.ptx_to_cubin(ins.ptx, "sm_90a")[:4] == b"\x7fELF"
    from tmakit.errors import CompileError

    with pytest.raises(CompileError, match="no_such_scope"):
        assemble.ptx_to_cubin(ins.ptx.replace("membar.sys", "membar.no_such_scope"), "sm_90a")


def test_bind_checked_and_tmakit_check_reach_the_hang_doctor(monkeypatch):
    from _fake_driver import fake_kernel_of

    from tmakit.kernel_signature import ParamInfo

    calls = []
    monkeypatch.setattr(hang, "checked_bind", lambda kernel, args, options, timeout, deferred=False: calls.append(
        (kernel.name, args, options, timeout, deferred)) or "checked")
    kernel, drv, _ = fake_kernel_of(monkeypatch, [ParamInfo(0, 0, 4, "p0", ".u32", 4)])
    assert kernel.bind(7, grid=1, block=32, checked=True, timeout=0.5) == "checked"
    assert calls[-1][1:] == ((7,), {"grid": 1, "block": 32, "shared_mem": 0, "stream": None, "cluster": None,
                                    "pdl": False, "keep_args": True}, 0.5, False)
    kernel.bind(7, grid=1, block=32)  # off by default
    assert len(calls) == 1
    monkeypatch.setenv("TMAKIT_CHECK", "1")
    kernel2, _, _ = fake_kernel_of(monkeypatch, [ParamInfo(0, 0, 4, "p0", ".u32", 4)])
    assert kernel2.bind(7, grid=1, block=32) == "checked" and len(calls) == 2 and calls[-1][-1] is False
    monkeypatch.setenv("TMAKIT_CHECK", "deferred")
    kernel3, _, _ = fake_kernel_of(monkeypatch, [ParamInfo(0, 0, 4, "p0", ".u32", 4)])
    assert kernel3.bind(7, grid=1, block=32) == "checked" and calls[-1][-1] is True
    assert kernel3.bind(7, grid=1, block=32, checked=True) == "checked" and calls[-1][-1] is False


def test_plans_pass_checked_to_their_bound_launch(fake_launch):
    ops.plan_copy(device_view(0x10000, (64, 64)), device_view(0x20000, (64, 64)), checked=True)
    ops.plan_transpose(device_view(0x30000, (64, 128)), device_view(0x40000, (128, 64)), backend="cp.async",
                       checked=True)
    ops.plan_copy(device_view(0x50000, (64, 64)), device_view(0x60000, (64, 64)))
    options = [k.bound[0].options for k in fake_launch]
    assert [o["checked"] for o in options] == [True, True, None]


GUARDED_PTX = """.version 8.0
.target sm_90a
.address_size 64
.visible .entry guarded(.param .u32 n)
{
.reg .pred %p<3>;
.reg .b32 %r<6>;
.reg .b64 %rd<3>;
.shared .align 8 .b64 bar;
ld.param.u32 %r1, [n];
mov.u32 %r2, bar;
setp.eq.u32 %p1, %r1, 0;
@%p1 mbarrier.init.shared::cta.b64 [%r2], 1;
@%p1 mbarrier.arrive.expect_tx.shared::cta.b64 %rd1, [%r2], 128;
@!%p1 mbarrier.arrive.shared::cta.b64 %rd2, [%r2];
mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%r2], 64;
$WAIT:
mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r2], 0;
@!%p2 bra $WAIT;
ret;
}
"""


@requires_ptxas
def test_guarded_arrives_keep_their_own_predicate_and_assemble():
    ins = instrument(GUARDED_PTX)
    _assemble(ins.ptx, "sm_90a")
    text = ins.ptx
    assert "and.pred %tmkd_x, %tmkd_x, %p1;" in text  # @%p1 op: runs when p1 and not gone
    assert "not.pred %tmkd_y, %p1;" in text  # @!%p1 op: runs when !p1 and not gone
    assert len(ins.expects) == 2 and len(ins.sites) == 1
    assert text.count("@%tmkd_x st.global.v4.u32") == 2  # the table entry only when the expect_tx was made


def test_flatten_leaves_what_the_scope_does_not_declare():
    """A local %r<2> leaves the outer %r10 alone; a register named like a qualifier or a label named like an
    opcode renames only the register or label; a scope's .local variable gets a name of its own; a brace in a
    string is no scope; the tails sit behind a ret and outside a trailing comment."""
    block = (" {{\n .reg .b32 %r<2>;\n .reg .pred cta;\n .local .align 4 .b8 tmp[8];\n"
             " mov.u32 %r1, %r10;\n bar:\n mbarrier.try_wait.parity.shared::cta.b64 cta, [%r1], {p};\n"
             " @!cta bra bar;\n bar.sync 0;\n }}\n")
    ptx = (".version 8.0\n.target sm_90a\n.address_size 64\n.file 1 \"/tmp/a{{b.cu\"\n"
           ".visible .entry k()\n{\n .reg .b32 %r<12>;\n .shared .align 8 .b64 bar0;\n mov.u32 %r10, bar0;\n"
           + block.format(p=0) + block.format(p=1) + "} // end }\n").replace("{{", "{").replace("}}", "}")
    flat = flatten_wait_scopes(ptx)
    assert flat.count("\n") == ptx.count("\n")
    assert "mov.u32 %r_tmkd1_1, %r10;" in flat and "mov.u32 %r_tmkd2_1, %r10;" in flat
    assert "shared::cta.b64 cta_tmkd1, [%r_tmkd1_1], 0;" in flat and "@!cta_tmkd2 bra bar_tmkd2;" in flat
    assert "bar.sync 0;" in flat and ".b8 tmp_tmkd1[8];" in flat and ".b8 tmp_tmkd2[8];" in flat
    ins = instrument(ptx)
    assert ins.ptx.rstrip().endswith("} // end }") and "ret;\n$TMKD_TAIL_0:" in ins.ptx
    if assemble.shutil.which("ptxas"):
        _assemble(ins.ptx, "sm_90a")
