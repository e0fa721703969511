"""The hang doctor on the CPU: the rewritten PTX of every seeded hang and of tmakit's own kernels assembles with
ptxas (the GPU loads exactly that), every wait is bounded, every expect_tx remembered; a record decodes into
words; a checked launch over the fake driver raises HangError with the lint's findings for the barrier; the
option reaches the launch from ``bind``, ``TMAKIT_CHECK`` and the plans. tests/test_hang_gpu.py runs the hangs.
"""
from __future__ import annotations

import struct
import subprocess
import tempfile
from pathlib import Path

import pytest
from _fake_driver import device_view, fake, fake_launch  # noqa: F401 - fixtures
from conftest import requires_ptxas
from hang_kernels import SCENARIOS, SOURCE

from tmakit import ops
from tmakit.build import compile_cuda
from tmakit.doctor import assemble, hang
from tmakit.doctor.instrument import BUFFER_BYTES, RECORD_FIELDS, SYMBOL, TABLE_OFFSET, instrument
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
    assert text.count("mbarrier.pending_count") == len(ins.sites)
    assert len(ins.expects) == code.ptx.count("expect_tx") and text.count("st.global.v4.u32") >= len(ins.expects)


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
    if assemble.shutil.which("ptxas"):
        _assemble(ins.ptx, "sm_90a")


def test_instrumenting_twice_is_refused():
    ins = instrument(compile_cuda(SOURCE, arch="sm_90a", defines={"SCENARIO": 1}, name="hang.cu").ptx)
    with pytest.raises(InvalidArgumentError, match="already instrumented"):
        instrument(ins.ptx)


def _record(**fields) -> bytes:
    raw = bytearray(TABLE_OFFSET)
    for name, value in fields.items():
        if isinstance(value, tuple):
            for i, v in enumerate(value):
                struct.pack_into("<I", raw, 4 * (RECORD_FIELDS[name] + i), v)
        elif name in ("state", "elapsed_ns"):
            struct.pack_into("<Q", raw, 4 * RECORD_FIELDS[name], value)
        else:
            struct.pack_into("<I", raw, 4 * RECORD_FIELDS[name], value)
    return bytes(raw)


def _scenario(n: int):
    code = compile_cuda(SOURCE, arch="sm_90a", defines={"SCENARIO": n}, options=["-lineinfo"], name="hang.cu")
    return code, instrument(code.ptx)


@pytest.fixture(scope="module")
def compiled():
    """Scenarios 0 and 1, compiled and instrumented before any fake driver is in place."""
    return {n: _scenario(n) for n in (0, 1)}


def test_a_record_reads_as_words():
    code, ins = _scenario(1)
    full = ins.symbols.index("_ZZ4hangE4full")
    bases = tuple(0x400 + 16 * i for i in range(len(ins.symbols)))
    raw = _record(flag=1, site=0, ctaid=(3, 0, 0), tid=(5, 0, 0), address=bases[full], parity=0, phase=0,
                  state=0x1234, pending=1, elapsed_ns=1_000_000_000, nsyms=len(ins.symbols), symbols=bases)
    entry = struct.pack("<IIII", bases[full], 16384, 0, 4)
    record = hang.decode_record(raw, "hang", ins, lambda address: entry, {})
    text = str(record)
    assert record.barrier == "_ZZ4hangE4full" and record.block == (3, 0, 0) and record.thread == (5, 0, 0)
    assert "waited 1000 ms" in text and "for parity 0" in text and "phase of parity 0 is the current one" in text
    assert "posted 16384 bytes" in text and f"PTX line {ins.sites[0].ptx_line}" in text
    # an entry left by another barrier (or none) is not reported as this barrier's
    other = hang.decode_record(raw, "hang", ins, lambda address: struct.pack("<IIII", 0x999, 8, 0, 4), {})
    assert other.last_expect is None and "no expect_tx was posted" in str(other)


class _FakeBound:
    """A bound launch whose 'kernel' writes ``record`` into the hang buffer when launched."""

    def __init__(self, driver, address, record, args=()):
        from tmakit import _driver

        self.driver, self.address, self.record, self.args = driver, address, record, tuple(args)
        cfg = _driver.bindings().CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = 4, 1, 1
        cfg.hStream = _driver.bindings().CUstream(0)
        self._config, self.launches = cfg, 0

    def __call__(self, stream=None):
        import ctypes

        self.launches += 1
        flag, self.seen_timeout = struct.unpack_from("<II", self.driver.view_bytes(self.address, 8))
        assert flag == 0  # reset before the launch
        if self.record is not None:
            ctypes.memmove(self.address, self.record, len(self.record))


def _checked(fake, record, monkeypatch, code, ins, args=()):
    import ctypes

    buf = ctypes.create_string_buffer(BUFFER_BYTES)
    address = ctypes.addressof(buf)
    fake.dev[address] = (buf, 0)
    fake.view_bytes = lambda p, n: ctypes.string_at(p, n)
    monkeypatch.setattr(hang.HangBuffer, "of", classmethod(lambda cls, module: cls(address, BUFFER_BYTES)))
    bound = _FakeBound(fake, address, record, args)

    class K:
        name, module = "hang", None

    bound.kernel = K()
    return hang.CheckedLaunch(K(), bound, ins, code.ptx, 1.0), bound, buf


def test_checked_launch_raises_hang_error_with_the_lint_of_that_barrier(compiled, fake, monkeypatch):
    code, ins = compiled[1]
    bases = tuple(0x400 + 16 * i for i in range(len(ins.symbols)))
    full = bases[ins.symbols.index("_ZZ4hangE4full")]
    wait_site = next(s for s in ins.sites)
    record = _record(flag=1, site=wait_site.index, ctaid=(0, 0, 0), tid=(7, 0, 0), address=full, parity=0, phase=0,
                     state=0, pending=0, elapsed_ns=1_500_000_000, nsyms=len(ins.symbols), symbols=bases)
    launch, bound, buf = _checked(fake, record, monkeypatch, code, ins)
    with pytest.raises(HangError, match=r"kernel hang hung: block \(0, 0, 0\) thread \(7, 0, 0\) waited 1500 ms") as err:
        launch()
    assert err.value.record.barrier == "_ZZ4hangE4full" and "full barrier" in err.value.record.role
    assert err.value.record.source_line and err.value.record.source_line.startswith("hang.cu:")
    # no map was bound, so the lint says what it cannot count (notes are left out), and nothing false
    assert all(f.severity != "note" for f in err.value.findings)
    assert bound.launches == 1 and bound.seen_timeout == 1000  # the timeout (ms) reached the device


def test_checked_launch_with_the_maps_names_the_tx_finding(compiled, fake, monkeypatch):
    from tmakit.doctor.lint import describe_map

    code, ins = compiled[1]
    tmap = describe_map({"shape": (192, 64), "dtype": "bf16", "box": (64, 64), "swizzle": "128B"})
    bases = tuple(0x400 + 16 * i for i in range(len(ins.symbols)))
    full = bases[ins.symbols.index("_ZZ4hangE4full")]
    record = _record(flag=1, site=0, address=full, nsyms=len(ins.symbols), symbols=bases)
    launch, _, _ = _checked(fake, record, monkeypatch, code, ins, args=(tmap, 0))
    with pytest.raises(HangError, match=r"tx\.too_many.*expects 16384 B per phase but .* deliver 8192 B") as err:
        launch()
    assert {f.rule for f in err.value.findings} == {"tx.too_many"}


def test_checked_launch_without_a_hang_returns(compiled, fake, monkeypatch):
    code, ins = compiled[0]
    launch, bound, _ = _checked(fake, None, monkeypatch, code, ins)
    launch()
    launch()
    assert bound.launches == 2


@pytest.mark.parametrize("timeout", [0, -1, 1e9, True, "2"])
def test_timeout_is_checked(timeout):
    with pytest.raises(InvalidArgumentError, match=r"timeout=.*seconds in \(0, 3600\]"):
        hang.timeout_ms(timeout)


def test_no_assembler_says_how_to_get_one(monkeypatch):
    monkeypatch.setattr(assemble, "_nvjitlink", lambda: None)
    monkeypatch.setattr(assemble, "_ptxas", lambda: None)
    with pytest.raises(UnsupportedDeviceError, match="nvidia-nvjitlink.*ptxas"):
        assemble.ptx_to_cubin(".version 8.0", "sm_90a")


@requires_ptxas
def test_ptxas_assembles_what_ptx_to_cubin_is_given(monkeypatch):
    monkeypatch.setattr(assemble, "_nvjitlink", lambda: None)
    code, ins = _scenario(4)
    assert assemble.ptx_to_cubin(ins.ptx, "sm_90a")[:4] == b"\x7fELF"
    from tmakit.errors import CompileError

    with pytest.raises(CompileError, match="checked.ptx"):
        assemble.ptx_to_cubin(ins.ptx.replace("mbarrier.pending_count", "mbarrier.no_such_op"), "sm_90a")


@pytest.mark.skipif(assemble._nvjitlink() is None, reason="nvJitLink is not installed (pip install nvidia-nvjitlink); "
                    "the ptxas path is tested above")
def test_nvjitlink_assembles_what_ptx_to_cubin_is_given():
    assert assemble.assembler() == "nvjitlink"
    code, ins = _scenario(4)
    assert assemble.ptx_to_cubin(ins.ptx, "sm_90a")[:4] == b"\x7fELF"
    from tmakit.errors import CompileError

    with pytest.raises(CompileError, match="no_such_op"):
        assemble.ptx_to_cubin(ins.ptx.replace("mbarrier.pending_count", "mbarrier.no_such_op"), "sm_90a")


def test_bind_checked_and_tmakit_check_reach_the_hang_doctor(monkeypatch):
    from _fake_driver import fake_kernel_of

    from tmakit.kernel_signature import ParamInfo

    calls = []
    monkeypatch.setattr(hang, "checked_bind", lambda kernel, args, options, timeout: calls.append(
        (kernel.name, args, options, timeout)) or "checked")
    kernel, drv, _ = fake_kernel_of(monkeypatch, [ParamInfo(0, 0, 4, "p0", ".u32", 4)])
    assert kernel.bind(7, grid=1, block=32, checked=True, timeout=0.5) == "checked"
    assert calls[-1][1:] == ((7,), {"grid": 1, "block": 32, "shared_mem": 0, "stream": None, "cluster": None,
                                    "keep_args": True}, 0.5)
    kernel.bind(7, grid=1, block=32)  # off by default
    assert len(calls) == 1
    monkeypatch.setenv("TMAKIT_CHECK", "1")
    kernel2, _, _ = fake_kernel_of(monkeypatch, [ParamInfo(0, 0, 4, "p0", ".u32", 4)])
    assert kernel2.bind(7, grid=1, block=32) == "checked" and len(calls) == 2


def test_plans_pass_checked_to_their_bound_launch(fake_launch):
    ops.plan_copy(device_view(0x10000, (64, 64)), device_view(0x20000, (64, 64)), checked=True)
    ops.plan_transpose(device_view(0x30000, (64, 128)), device_view(0x40000, (128, 64)), backend="cp.async",
                       checked=True)
    ops.plan_copy(device_view(0x50000, (64, 64)), device_view(0x60000, (64, 64)))
    options = [k.bound[0].options for k in fake_launch]
    assert [o["checked"] for o in options] == [True, True, None]
