"""The rule checker agrees with the real driver.

CPU: every case of the committed driver-truth corpus (recorded on an H100 by tests/data/make_tensormap_corpus.py)
gets the driver's verdict from check_tiled / check_im2col. GPU (sm_90): a fresh corpus with a new seed is
encoded by this machine's driver and compared in the same run.
"""
from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from tmakit.tensormap.corpus import driver_verdict, generate, replay_case

CORPUS = Path(__file__).parent / "data" / "tensormap_corpus.jsonl"


def load_corpus():
    lines = CORPUS.read_text().splitlines()
    header = json.loads(lines[0])
    return header, [json.loads(line) for line in lines[1:]]


def disagreements(cases, arch):
    out = []
    for case in cases:
        if case["verdict"].startswith("PYTHON"):
            continue  # a value the C type cannot hold never reaches the driver
        ours = replay_case(case, arch=arch)
        if (case["verdict"] == "CUDA_SUCCESS") != (not ours):
            out.append((case["id"], case["verdict"], [v.rule for v in ours]))
    return out


def test_corpus_is_large_and_mixed():
    header, cases = load_corpus()
    assert header["arch"].startswith("sm_90")
    kinds = {c["kind"] for c in cases}
    verdicts = [c["verdict"] for c in cases]
    assert kinds == {"tiled", "im2col"} and len(cases) >= 5000
    assert verdicts.count("CUDA_SUCCESS") > 1000 and verdicts.count("CUDA_ERROR_INVALID_VALUE") > 1000


def test_checker_agrees_with_recorded_driver_verdicts():
    header, cases = load_corpus()
    bad = disagreements(cases, header["arch"])
    assert bad == [], f"{len(bad)} of {len(cases)} cases disagree, e.g. {bad[:5]}"


@pytest.mark.requires_sm90
def test_checker_agrees_with_this_driver_on_a_fresh_corpus(tmp_path):
    from tmakit import _driver

    seed = int(os.environ.get("TMAKIT_CORPUS_SEED", random.randrange(1 << 30)))
    _driver.ensure_context(0)
    base = int(_driver.call("cuMemAlloc", 1 << 20))
    base = (base + 1023) // 1024 * 1024
    cases = generate("tiled", 3000, seed) + generate("im2col", 2000, seed)
    for case in cases:
        case["verdict"] = driver_verdict(case, base)
    out = os.environ.get("TMAKIT_CORPUS_OUT")
    if out:
        Path(out).write_text("\n".join(json.dumps(c) for c in cases))
    bad = disagreements(cases, _driver.device_arch(0))
    accepted = sum(c["verdict"] == "CUDA_SUCCESS" for c in cases)
    assert 500 < accepted < len(cases) - 500
    assert bad == [], f"seed {seed}: {len(bad)} of {len(cases)} disagree, e.g. {bad[:5]}"
