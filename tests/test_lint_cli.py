"""`tmakit lint` as issue 29 specifies it: FILE (.cu or .ptx) --entry --map PARAM="describe_tensor kwargs"
[--cluster X,Y,Z] [--arch] [--json]; exit 0 clean, 1 with findings, 2 on a usage error; and lint()'s argument
errors. The bug: expect_tx of two boxes where one lands (the tx.too_many rule; its seed is tile-ai/tilelang#1828
in tests/lint_seeds.py)."""
from __future__ import annotations

import json

import pytest

import tmakit
from tmakit.cli import main
from tmakit.errors import InvalidArgumentError

KERNEL = r"""
struct __align__(64) Map { unsigned char bytes[128]; };
extern "C" __global__ void __launch_bounds__(128) load_tile(const __grid_constant__ Map a, int row) {
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ unsigned long long bar;
  const unsigned b = (unsigned)__cvta_generic_to_shared(&bar), s = (unsigned)__cvta_generic_to_shared(smem);
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(b));
    asm volatile("fence.mbarrier_init.release.cluster;");
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], TX;" :: "r"(b));
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];" :: "r"(s), "l"(&a), "r"(0), "r"(row), "r"(b) : "memory");
  }
  unsigned done = 0;
  while (!done)
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n selp.u32 %0, 1, 0, p;\n}"
                 : "=r"(done) : "r"(b) : "memory");
}
"""
MAP = "a=shape=(4096, 4096), dtype='bf16', box=(64, 64), swizzle='128B'"  # 8192-byte boxes


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lint_cli")
    out = {}
    for name, tx in (("bug", 16384), ("twin", 8192)):
        src = KERNEL.replace("TX", str(tx))
        (folder / f"{name}.cu").write_text(src)
        ptx = tmakit.compile_cuda(src, arch="sm_90a", options=["-lineinfo"]).ptx
        (folder / f"{name}.ptx").write_text(ptx)
        out[name] = folder / f"{name}.cu"
    return out


def test_cu_with_a_bug_exits_1_and_json_has_the_issues_shape(files, capsys):
    assert main(["lint", str(files["bug"]), "--entry", "load_tile", "--map", MAP, "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == {"findings"} and len(doc["findings"]) == 1
    f = doc["findings"][0]
    assert set(f) == {"rule", "severity", "message", "fix", "ptx_line", "source_line"}
    assert (f["rule"], f["severity"]) == ("tx.too_many", "error") and "expect_tx(8192)" in f["fix"]
    line = 1 + files["bug"].read_text().splitlines().index(next(
        s for s in files["bug"].read_text().splitlines() if "expect_tx" in s))
    assert isinstance(f["ptx_line"], int) and f["source_line"] == f"bug.cu:{line}"  # the .cu's expect_tx line


def test_the_twin_exits_0_and_a_ptx_file_lints_the_same(files, capsys):
    assert main(["lint", str(files["twin"]), "--entry", "load_tile", "--map", MAP]) == 0
    assert main(["lint", str(files["twin"]), "--entry", "load_tile", "--map", MAP, "--cluster", "1,1,1"]) == 0
    capsys.readouterr()
    ptx = files["bug"].with_suffix(".ptx")
    assert main(["lint", str(ptx), "--entry", "load_tile", "--map", MAP.replace("a=", "0="), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["findings"][0]["rule"] == "tx.too_many"  # bound by index
    assert main(["lint", str(ptx), "--entry", "load_tile", "--map", MAP.replace("a=", "load_tile_param_0=")]) == 1
    assert "tx.too_many" in capsys.readouterr().out  # bound by its PTX name
    assert main(["lint", str(ptx), "--entry", "load_tile", "--map", MAP]) == 2  # a .ptx has no C names
    assert "load_tile_param_0" in capsys.readouterr().err


def test_without_maps_the_box_is_unknown_and_the_doctor_says_so(files, capsys):
    # No map: what a copy delivers cannot be derived; that is a note, never a guessed error.
    assert main(["lint", str(files["bug"]), "--entry", "load_tile", "--json"]) == 0
    findings = json.loads(capsys.readouterr().out)["findings"]
    assert findings and {f["severity"] for f in findings} == {"note"}


@pytest.mark.parametrize("argv, words", [
    (["missing.cu"], "is not a file"),
    (["{bug}", "--entry", "load_tile", "--map", "a shape=(1, 2)"], "PARAM="),
    (["{bug}", "--entry", "load_tile", "--map", "a=shape=(4096,), dtype='bf16', box=(64,), colour=1"], "colour"),
    (["{bug}", "--entry", "load_tile", "--map", "a=shape=(4096, 4096), dtype='bf16', box=(512, 64)"], "box"),
    (["{bug}", "--entry", "load_tile", "--map", "zz=shape=(64, 64), dtype='bf16', box=(64, 64)"], "zz"),
    (["{bug}", "--entry", "load_tile", "--map", MAP, "--cluster", "2,a"], "--cluster"),
    (["{bug}", "--entry", "no_such_kernel"], "no_such_kernel"),
])
def test_usage_errors_exit_2_and_say_what_is_wrong(files, capsys, argv, words):
    argv = [a.replace("{bug}", str(files["bug"])) for a in argv]
    assert main(["lint", *argv]) == 2
    assert words in capsys.readouterr().err  # usage errors go to stderr; --json keeps them on stdout
    assert main(["lint", *argv, "--json"]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["valid"] is False and words in json.dumps(doc)


def test_lint_refuses_what_is_not_a_map_or_a_cluster():
    with pytest.raises(InvalidArgumentError, match="TensorMap"):
        tmakit.lint(KERNEL.replace("TX", "8192"), entry="load_tile", maps={"a": "shape=(64, 64)"})
    m = tmakit.describe_tensor(shape=(64, 64), dtype="bf16", box=(64, 64), encode=False)
    with pytest.raises(InvalidArgumentError, match="cluster"):
        tmakit.lint(KERNEL.replace("TX", "8192"), entry="load_tile", maps={"a": m}, cluster=(0, 1, 1))
