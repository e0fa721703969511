"""The tmakit command line: info, describe (text, --json, exit code 2 when invalid), swizzle."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tmakit.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    return code, capsys.readouterr().out


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


def test_describe_invalid_exits_2_with_fixes(capsys):
    code, out = run(capsys, "describe", "--shape", "4096,4095", "--dtype", "bf16", "--box", "64,300", "--swizzle",
                    "64B", "--json")
    doc = json.loads(out)
    assert code == 2 and not doc["valid"]
    assert {v["rule"] for v in doc["violations"]} >= {"strides.align16", "box.range", "box.inner_vs_swizzle"}
    assert all(v["fix"] for v in doc["violations"])
    code, out = run(capsys, "describe", "--shape", "4096,4095", "--dtype", "bf16", "--box", "64,64")
    assert code == 2 and "strides[0]" in out and "8192" in out


def test_describe_bad_enum_is_a_clear_error(capsys):
    code, out = run(capsys, "describe", "--shape", "64,64", "--dtype", "bf16", "--box", "8,8", "--swizzle", "96B")
    assert code == 2 and "swizzle" in out and "96B" in out


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
