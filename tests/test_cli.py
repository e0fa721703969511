"""The tmakit command line: info, describe (text, --json, exit code 2 when invalid), swizzle."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tmakit.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    return code, capsys.readouterr().out


def run_failing(capsys, *argv):
    """A text-mode command that fails: its message, which must be on stderr (stdout stays empty)."""
    code = main(list(argv))
    captured = capsys.readouterr()
    assert captured.out == "", f"text-mode errors go to stderr; stdout had: {captured.out!r}"
    return code, captured.err


def test_info_says_plainly_when_there_is_no_gpu(capsys, gpu):
    code, out = run(capsys, "info")
    assert code == 0 and "tmakit" in out and "cuda-bindings" in out
    if not gpu.available:
        assert "No GPU" in out
    code, out = run(capsys, "info", "--json")
    info = json.loads(out)
    assert code == 0 and set(info) >= {"tmakit", "driver", "devices", "nvrtc"}


def test_describe_valid_prints_layout(capsys):
    code, out = run(capsys, "describe", "--shape", "4096,4096", "--dtype", "bf16", "--box", "64,64")
    assert code == 0 and "box bytes (expect_tx) 8192" in out and "swizzle 128B" in out and "c7" in out


def test_describe_json(capsys):
    code, out = run(capsys, "describe", "--shape", "1024,1024", "--dtype", "f32", "--box", "8,32", "--swizzle", "128B",
                    "--json")
    doc = json.loads(out)
    assert code == 0 and doc["valid"] and doc["tensor_map"]["box_bytes"] == 1024
    assert doc["tensor_map"]["dims"] == [1024, 1024] and doc["tensor_map"]["smem_alignment"] == 1024
    # not encoded (described by shape): that says nothing about the path a GPU would take, so no backend is named
    assert "backend" not in doc["tensor_map"] and "cp.async" not in out
    assert doc["tensor_map"]["encoded"] is False and "described by shape" in doc["tensor_map"]["not_encoded_reason"]


def test_describe_invalid_exits_2_with_fixes(capsys):
    code, out = run(capsys, "describe", "--shape", "4096,4095", "--dtype", "bf16", "--box", "64,300", "--swizzle",
                    "64B", "--json")
    doc = json.loads(out)
    assert code == 2 and not doc["valid"]
    assert {v["rule"] for v in doc["violations"]} >= {"strides.align16", "box.range", "box.inner_vs_swizzle"}
    assert all(v["fix"] for v in doc["violations"])
    code, err = run_failing(capsys, "describe", "--shape", "4096,4095", "--dtype", "bf16", "--box", "64,64")
    assert code == 2 and "strides[0]" in err and "8192" in err


def test_describe_bad_enum_is_a_clear_error(capsys):
    code, err = run_failing(capsys, "describe", "--shape", "64,64", "--dtype", "bf16", "--box", "8,8", "--swizzle", "96B")
    assert code == 2 and "swizzle" in err and "96B" in err


def test_swizzle_pattern(capsys):
    code, out = run(capsys, "swizzle", "128B", "--dtype", "bf16")
    assert code == 0 and "swizzle 128B" in out
    code, out = run(capsys, "swizzle", "64B", "--json")
    doc = json.loads(out)
    assert doc["span"] == 64 and doc["chunk_positions"][2] == [1, 0, 3, 2]


def test_module_entry_point_runs():
    proc = subprocess.run([sys.executable, "-m", "tmakit", "describe", "--shape", "64,64", "--dtype", "f16", "--box",
                           "8,64", "--json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["tensor_map"]["swizzle"] == "128B"


@pytest.mark.requires_sm90
def test_corpus_check_on_gpu(capsys):
    code, out = run(capsys, "corpus-check", "--n", "300", "--seed", "7", "--json")
    assert code == 0 and json.loads(out)["disagreements"] == 0


# ---- errors, JSON, pipes, ranges (issue: every input checked) ----------------------------------------------
def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.startswith("tmakit 0.")


@pytest.mark.parametrize("argv, parameter", [
    (["describe", "--shape", "64,64", "--dtype", "fp9", "--box", "8,8"], "dtype"),
    (["describe", "--shape", "64,64", "--dtype", "bf16", "--box", "8,8", "--arch", "sm_9999"], "arch"),
    (["describe", "--shape", "4096,-4096", "--dtype", "bf16", "--box", "8,8"], "shape[1]"),
    (["describe", "--shape", "64,64", "--dtype", "bf16", "--box", "8,8", "--swizzle", "96B"], "swizzle"),
    (["swizzle", "128B_ATOM_32B"], "mode"),
])
def test_json_errors_are_json_and_exit_2(capsys, argv, parameter):
    code, out = run(capsys, *argv, "--json")
    doc = json.loads(out)
    assert code == 2 and doc["valid"] is False and doc["error"]["parameter"] == parameter
    code, err = run_failing(capsys, *argv)
    assert code == 2 and parameter in err and "error" in err


@pytest.mark.parametrize("argv", [
    ["swizzle", "128B", "--rows", "-3"], ["swizzle", "128B", "--rows", "100000"], ["swizzle", "128B", "--rows", "2.5"],
    ["swizzle", "128B", "--rows", "0"], ["corpus-check", "--n", "-1"], ["corpus-check", "--n", "10000000"],
    ["corpus-check", "--device", "-2"], ["describe", "--shape", "64,y", "--dtype", "f32", "--box", "8,8"],
])
def test_numeric_options_are_range_checked(capsys, argv):
    code, out = run(capsys, *argv, "--json")
    assert code == 2 and json.loads(out)["error"]["type"] == "UsageError"
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and "tmakit: error: argument" in err


def test_an_invalid_map_shows_one_fix_in_numpy_order(capsys):
    code, err = run_failing(capsys, "describe", "--shape", "4096,4096", "--dtype", "bf16", "--box", "64,100",
                            "--swizzle", "64B")
    assert code == 2 and "box[1]" in err and "box[0]" not in err and "try: box=(64, 32)" in err
    assert "numpy order" in err
    code, out = run(capsys, "describe", "--shape", "4096,4096", "--dtype", "bf16", "--box", "64,100", "--swizzle", "64B",
                    "--json")
    doc = json.loads(out)
    assert doc["order"] == "numpy" and doc["try"] == "try: box=(64, 32)" and doc["suggestion"]["box"] == [64, 32]
    assert {v["parameter"] for v in doc["violations"]} == {"box[1]"}
    code, out = run(capsys, "describe", "--shape", "0,4096", "--dtype", "bf16", "--box", "8,8", "--json")
    doc = json.loads(out)
    assert doc["suggestion"] is None and doc["violations"][0]["parameter"] == "shape[0]"


def test_dtype_aliases_are_named_for_what_they_become(capsys):
    for alias in ("fp8", "e4m3", "e5m2", "i8"):
        code, out = run(capsys, "describe", "--shape", "64,64", "--dtype", alias, "--box", "8,64", "--json")
        doc = json.loads(out)
        assert code == 0 and doc["tensor_map"]["dtype"] == "u8" and "moved as u8" in doc["notes"][0]
    code, out = run(capsys, "describe", "--shape", "64,64", "--dtype", "fp8", "--box", "8,64")
    assert code == 0 and "moved as u8" in out.replace("\n", " ")


def test_info_says_each_thing_once(capsys, gpu):
    code, out = run(capsys, "info")
    text = out.lower().replace("\n", " ")
    assert code == 0 and text.count("no gpu") <= 1 and text.count("still validate") <= 1


def test_arch_error_suggests_a_form_the_cli_parses(capsys):
    code, out = run(capsys, "describe", "--shape", "64,64", "--dtype", "bf16", "--box", "8,8", "--arch", "(99, 99)",
                    "--json")
    fix = json.loads(out)["error"]["fix"]
    assert code == 2 and "sm_90" in fix and "(9, 0)" not in fix
    code, out = run(capsys, "describe", "--shape", "64,64", "--dtype", "bf16", "--box", "8,64", "--arch", "sm_90a")
    assert code == 0


def test_a_closed_pipe_ends_quietly(tmp_path):
    script = (f"{sys.executable} -m tmakit describe --shape 4096,4096 --dtype bf16 --box 64,64 --json | head -2; "
              f"{sys.executable} -m tmakit swizzle 128B --rows 256 | head -1")
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.stdout.startswith("{") and "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr


@pytest.mark.parametrize("reader", ["head -c 1", "true"])
def test_a_closed_pipe_never_changes_the_exit_code(reader):
    """Whether the reader leaves before, during or after the output (a race the OS decides), the command exits
    with its own code: 0 for a valid request, 2 for an invalid one (the module docstring of tmakit/cli.py)."""
    runs = {0: f"{sys.executable} -m tmakit swizzle 128B --rows 256", 2: f"{sys.executable} -m tmakit describe "
            "--shape 4096,4095 --dtype bf16 --box 64,64 --json"}
    script = "; ".join(f"{cmd} | {reader}; echo rc=${{PIPESTATUS[0]}}" for cmd in runs.values() for _ in range(2))
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=180)
    codes = [int(c) for c in re.findall(r"rc=(\d+)", proc.stdout)]
    assert codes == [0, 0, 2, 2], (codes, proc.stderr)
    assert proc.stderr == "", proc.stderr


def test_describe_for_an_arch_without_tma_blames_the_arch_not_the_tensor(capsys):
    code, err = run_failing(capsys, "describe", "--shape", "4096,4096", "--dtype", "bf16", "--box", "64,64", "--arch",
                            "sm_80")
    text = " ".join(err.split())
    assert code == 2 and "sm_80 has no TMA" in text and "tensor itself" not in text and "--arch sm_90" in text
    code, out = run(capsys, "describe", "--shape", "4096,4096", "--dtype", "bf16", "--box", "64,64", "--arch", "sm_80",
                    "--json")
    doc = json.loads(out)
    assert code == 2 and doc["try"] is None and doc["unfixable"].startswith("sm_80 has no TMA")
    assert [v["rule"] for v in doc["violations"]] == ["arch.no_tma"]
    code, out = run(capsys, "describe", "--shape", "4096,4095", "--dtype", "bf16", "--box", "64,64", "--json")
    assert "the tensor itself (strides) breaks a rule" in json.loads(out)["unfixable"]
