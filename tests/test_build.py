"""CPU tests of compile_cuda / load_ptx / assemble_ptx and the disk cache (no GPU needed)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from tmakit import Arch, CompileError, InvalidArgumentError, UnsupportedDeviceError
from tmakit.build import assemble_ptx, compile_cuda, load_ptx, source_dirs
from tmakit.build import cache as cache_mod
from tmakit.build import compile as compile_mod
from tmakit.build.compile import is_ptx_text
from tmakit.build.module import choose_image

from conftest import gpu_probe, requires_ptxas

ELF_MAGIC = b"\x7fELF"

KERNEL = r'''
#include "tmakit/echo_test.cuh"
struct __align__(64) Desc { unsigned char bytes[128]; };
extern "C" __global__ void echo(unsigned char* out, int a, float b, const __grid_constant__ Desc d) {
    out[0] = (unsigned char)(a + ECHO_BIAS) + d.bytes[3] + (unsigned char)b;
}
'''

PTX = r'''
//
// tmakit test PTX
//
.version 8.0
.target sm_80
.address_size 64

.visible .entry store_one(
    .param .u64 store_one_param_0,   // out
    .param .u32 store_one_param_1
)
{
    .reg .b32 %r<2>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [store_one_param_0];
    ld.param.u32 %r1, [store_one_param_1];
    cvta.to.global.u64 %rd2, %rd1;
    st.global.u32 [%rd2], %r1;
    ret;
}
'''


@pytest.fixture()
def src_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private source tree (TMAKIT_SOURCE_DIR) and cache (TMAKIT_CACHE_DIR) for each test."""
    (tmp_path / "cuda_src" / "tmakit").mkdir(parents=True)
    (tmp_path / "ptx").mkdir()
    (tmp_path / "cuda_src" / "tmakit" / "echo_test.cuh").write_text("#define ECHO_BIAS 1\n")
    (tmp_path / "cuda_src" / "echo.cu").write_text(KERNEL)
    (tmp_path / "ptx" / "store_one.ptx").write_text(PTX)
    monkeypatch.setenv("TMAKIT_SOURCE_DIR", str(tmp_path))
    monkeypatch.setenv("TMAKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TMAKIT_CACHE", raising=False)
    monkeypatch.delenv("TMAKIT_DUMP_DIR", raising=False)
    return tmp_path


def test_source_dirs_follow_env(src_root: Path) -> None:
    assert source_dirs() == (src_root / "cuda_src", src_root / "ptx")


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_compiles_to_cubin_with_signature(src_root: Path, arch: str) -> None:
    code = compile_cuda("echo.cu", arch=arch)
    assert code.kind == "cubin" and code.code[:4] == ELF_MAGIC
    assert code.arch == Arch.parse(arch) and f"-arch={arch}" in code.options
    assert "--std=c++17" in code.options
    assert code.entry_names() == ["echo"]
    params = code.params("echo")
    assert [(p.offset, p.size) for p in params] == [(0, 8), (8, 4), (12, 4), (64, 128)]
    assert [p.kind for p in params] == ["int", "int", "float", "bytes"]
    assert f".target {arch}" in code.ptx


def test_source_as_text_and_path(src_root: Path) -> None:
    by_text = compile_cuda(KERNEL, arch="sm_90a", name="echo_text.cu")
    by_path = compile_cuda(src_root / "cuda_src" / "echo.cu", arch="sm_90a")
    assert by_text.name == "echo_text.cu" and by_path.name == "echo.cu"
    # the cubins may differ by the embedded file name; what was compiled must not
    assert by_text.entry_names() == by_path.entry_names() and by_text.entry_names()
    assert all(by_text.params(e) == by_path.params(e) for e in by_text.entry_names())


def test_cache_miss_then_hit(src_root: Path) -> None:
    first = compile_cuda("echo.cu", arch="sm_90a")
    second = compile_cuda("echo.cu", arch="sm_90a")
    assert not first.from_cache and second.from_cache
    assert second.code == first.code and second.cache_key == first.cache_key and second.ptx == first.ptx
    entries = list((src_root / "cache").rglob("*"))
    assert not [p for p in entries if p.name.endswith(".tmp")], "atomic writes leave no temporary files"


def test_cache_disabled(src_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMAKIT_CACHE", "0")
    compile_cuda("echo.cu", arch="sm_90a")
    assert not compile_cuda("echo.cu", arch="sm_90a").from_cache
    assert not (src_root / "cache").exists()


@pytest.mark.parametrize("change", ["header", "option", "define", "arch", "nvrtc", "driver", "source"])
def test_cache_invalidation(src_root: Path, monkeypatch: pytest.MonkeyPatch, change: str) -> None:
    base = compile_cuda("echo.cu", arch="sm_90a")
    kwargs: dict = {"arch": "sm_90a"}
    if change == "header":
        (src_root / "cuda_src" / "tmakit" / "echo_test.cuh").write_text("#define ECHO_BIAS 2\n")
    elif change == "option":
        kwargs["options"] = ["-lineinfo"]
    elif change == "define":
        kwargs["defines"] = {"UNUSED_FLAG": 3}
    elif change == "arch":
        kwargs["arch"] = "sm_90"
    elif change == "nvrtc":
        monkeypatch.setattr(compile_mod, "nvrtc_version", lambda: (99, 9))
    elif change == "driver":
        monkeypatch.setattr(compile_mod, "driver_version_tag", lambda: "99.9")
    elif change == "source":
        (src_root / "cuda_src" / "echo.cu").write_text(KERNEL + "\n// edited\n")
    again = compile_cuda("echo.cu", **kwargs)
    assert not again.from_cache and again.cache_key != base.cache_key
    assert compile_cuda("echo.cu", **kwargs).from_cache


def test_corrupt_cache_entry_is_rebuilt(src_root: Path) -> None:
    first = compile_cuda("echo.cu", arch="sm_80")
    (entry,) = [p for p in (src_root / "cache").rglob("*.bin")]
    entry.write_bytes(entry.read_bytes()[:40])
    again = compile_cuda("echo.cu", arch="sm_80")
    assert not again.from_cache and again.code == first.code


def test_cache_key_covers_schema(monkeypatch: pytest.MonkeyPatch) -> None:
    a = cache_mod.cache_key({"x": 1})
    monkeypatch.setattr(cache_mod, "SCHEMA_VERSION", cache_mod.SCHEMA_VERSION + 1)
    assert cache_mod.cache_key({"x": 1}) != a


def test_dump_dir_receives_ptx(src_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMAKIT_DUMP_DIR", str(src_root / "dump"))
    monkeypatch.setenv("TMAKIT_CACHE", "0")
    compile_cuda("echo.cu", arch="sm_90a")
    (dumped,) = list((src_root / "dump").glob("echo.*.ptx"))
    assert ".entry echo" in dumped.read_text()


def test_compile_error_carries_log_options_and_numbered_source(src_root: Path) -> None:
    bad = 'extern "C" __global__ void broken(int* out) {\n    out[0] = not_declared_anywhere;\n}\n'
    with pytest.raises(CompileError, match="not_declared_anywhere") as info:
        compile_cuda(bad, arch="sm_90a", name="broken.cu")
    err = info.value
    assert "broken.cu(2)" in err.log and "is undefined" in err.log
    assert "-arch=sm_90a" in err.options
    assert "    2      out[0] = not_declared_anywhere;" in err.dump()
    assert "-arch=sm_90a" in str(err)


def test_options_are_checked(src_root: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="options=.*--no-such-flag.*not an NVRTC flag"):
        compile_cuda("echo.cu", arch="sm_90a", options=["--no-such-flag"])
    with pytest.raises(InvalidArgumentError, match="options=.*sequence of flags"):
        compile_cuda("echo.cu", arch="sm_90a", options="-lineinfo")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="defines=.*not a C identifier"):
        compile_cuda("echo.cu", arch="sm_90a", defines={"1BAD": 1})
    code = compile_cuda("echo.cu", arch="sm_90a", options=["-lineinfo", "--maxrregcount=64", "-DEXTRA=2"])
    assert "--generate-line-info" in code.options or "-lineinfo" in code.options
    assert any("maxrregcount=64" in o for o in code.options)
    assert any("EXTRA=2" in o for o in code.options)


def test_unknown_source_file_lists_known_ones(src_root: Path) -> None:
    with pytest.raises(InvalidArgumentError, match=r"source='nope\.cu'.*echo\.cu"):
        compile_cuda("nope.cu", arch="sm_90a")


@pytest.mark.skipif(gpu_probe().available, reason="checks the no-GPU message; a GPU is present")
def test_default_arch_needs_a_gpu(src_root: Path) -> None:
    with pytest.raises(UnsupportedDeviceError, match="arch=None.*no GPU.*arch='sm_90a'"):
        compile_cuda("echo.cu")


def test_load_ptx_reads_target_and_signature(src_root: Path) -> None:
    code = load_ptx("store_one.ptx")
    assert code.kind == "ptx" and code.arch == Arch(8, 0)
    assert code.entry_names() == ["store_one"]
    assert [(p.offset, p.size, p.ptx_type) for p in code.params("store_one")] == [(0, 8, ".u64"), (8, 4, ".u32")]
    with pytest.raises(CompileError, match="no .target"):
        load_ptx(".version 8.0\n.address_size 64\n")


@requires_ptxas
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_assemble_ptx(src_root: Path, arch: str) -> None:
    assert assemble_ptx("store_one.ptx", arch=arch)[:4] == ELF_MAGIC


@requires_ptxas
def test_assemble_ptx_error_shows_ptxas_log(src_root: Path) -> None:
    broken = PTX.replace("st.global.u32", "st.global.bogus32")
    with pytest.raises(CompileError, match="ptxas") as info:
        assemble_ptx(broken, arch="sm_80")
    assert "bogus32" in info.value.log or "error" in info.value.log.lower()


def test_is_ptx_text() -> None:
    assert is_ptx_text("copy.ptx") and not is_ptx_text("copy.cu")
    assert is_ptx_text(PTX) and not is_ptx_text(KERNEL)


@pytest.mark.parametrize("code_arch, device, expected", [
    ("sm_90a", "sm_90", "cubin"), ("sm_90", "sm_90", "cubin"), ("sm_80", "sm_86", "cubin"),
    ("sm_80", "sm_90", "ptx"), ("sm_90", "sm_100", "ptx"),
])
def test_choose_image(src_root: Path, code_arch: str, device: str, expected: str) -> None:
    code = compile_cuda("echo.cu", arch=code_arch)
    assert choose_image(code, Arch.parse(device)) == expected


@pytest.mark.parametrize("code_arch, device", [("sm_90a", "sm_100"), ("sm_90a", "sm_80"), ("sm_90", "sm_80"),
                                               ("sm_86", "sm_80")])
def test_choose_image_refuses_older_or_other_gpu(src_root: Path, code_arch: str, device: str) -> None:
    code = compile_cuda("echo.cu", arch=code_arch)
    with pytest.raises(UnsupportedDeviceError, match=f"{code_arch}.*{device}") as info:
        choose_image(code, Arch.parse(device))
    assert info.value.required == Arch.parse(code_arch) and info.value.actual == Arch.parse(device)


def test_gemm_for_sm_90_says_use_sm_90a() -> None:
    """The shipped GEMM uses wgmma and setmaxnreg: compiled for plain sm_90 the error's first line names the
    target that has them (ptxas's log follows it, whole)."""
    with pytest.raises(CompileError, match=r"gemm\.cu failed: arch='sm_90': uses the arch-specific instruction\(s\) "
                       r"(wgmma|setmaxnreg)\S*, .*exist only on the 'a' target sm_90a.*fix: use arch='sm_90a'") as info:
        compile_cuda("gemm.cu", arch="sm_90")
    err = info.value
    assert (err.parameter, err.value, err.fix) == ("arch", "sm_90", "use arch='sm_90a'")
    assert "not supported on .target 'sm_90'" in err.log


WGMMA_ASM = r'''extern "C" __global__ void k() { asm volatile("wgmma.fence.sync.aligned;"); }'''
PREFETCH_ASM = r'''extern "C" __global__ void k(unsigned long long* p) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], 16;" :: "l"(p)); }'''


@pytest.mark.parametrize("source, arch, rule, fix", [
    (WGMMA_ASM, "sm_100", r"uses wgmma\.fence, which sm_100 has in no variant \(they exist on sm_90a\)",
     "arch='sm_90a'"),
    (WGMMA_ASM, "sm_80", r"uses wgmma\.fence, which sm_80 does not have", "use arch='sm_90a'"),
    (PREFETCH_ASM, "sm_80", r"uses cp\.async\.bulk\.prefetch, which need\(s\) sm_90 or newer", "use arch='sm_90'"),
])
def test_a_target_without_the_instructions_is_named_with_the_fix(src_root: Path, source, arch, rule, fix) -> None:
    with pytest.raises(CompileError, match=f"arch='{arch}': {rule}") as info:
        compile_cuda(source, arch=arch, name="asm.cu")
    assert fix in info.value.fix and info.value.parameter == "arch"


def test_other_compile_errors_name_no_argument(src_root: Path) -> None:
    with pytest.raises(CompileError) as info:
        compile_cuda('extern "C" __global__ void k() { undeclared(); }', arch="sm_90", name="plain.cu")
    assert info.value.parameter is None and str(info.value).startswith("compiling plain.cu failed:\n")


# ---- a long compile says what it is doing (tmakit/build/status.py) --------------------------------------------

def test_a_long_compile_shows_its_status_on_stderr_when_asked(src_root: Path, monkeypatch, capsys) -> None:
    from tmakit.build import status

    monkeypatch.setattr(status, "DELAY_S", 0.0)  # every compile counts as long here
    monkeypatch.setenv("TMAKIT_COMPILE_STATUS", "1")
    compile_cuda("echo.cu", arch="sm_90a")
    out, err = capsys.readouterr()
    assert out == ""  # never stdout: piped and --json output stay clean
    assert f"tmakit: compiling echo.cu for sm_90a with NVRTC (cached in {src_root / 'cache'} afterwards)" in err
    assert "tmakit: compiled echo.cu for sm_90a in " in err and "\x1b[" not in err  # plain text off a terminal
    compile_cuda("echo.cu", arch="sm_90a")  # a cache hit compiles nothing and says nothing
    assert capsys.readouterr() == ("", "")
    monkeypatch.setenv("TMAKIT_CACHE", "0")
    compile_cuda("echo.cu", arch="sm_80")
    assert "(not cached: TMAKIT_CACHE=0)" in capsys.readouterr().err


def test_without_a_terminal_or_the_variable_a_compile_is_silent(src_root: Path, monkeypatch, capsys) -> None:
    from tmakit.build import status

    monkeypatch.setattr(status, "DELAY_S", 0.0)
    monkeypatch.delenv("TMAKIT_COMPILE_STATUS", raising=False)
    compile_cuda("echo.cu", arch="sm_90a")  # stderr is captured: not a terminal
    monkeypatch.setenv("TMAKIT_COMPILE_STATUS", "0")
    compile_cuda("echo.cu", arch="sm_80")
    assert capsys.readouterr() == ("", "")
    monkeypatch.setenv("TMAKIT_COMPILE_STATUS", "maybe")
    with pytest.raises(InvalidArgumentError, match=r"TMAKIT_COMPILE_STATUS='maybe': must be 1 .* or 0"):
        compile_cuda("echo.cu", arch="sm_89")


def test_a_short_compile_says_nothing_even_when_asked(src_root: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("TMAKIT_COMPILE_STATUS", "1")  # DELAY_S stays 2 s; echo.cu compiles well within it
    compile_cuda("echo.cu", arch="sm_90a")
    assert capsys.readouterr() == ("", "")
