"""The seeded-bug suite: each kernel reproduces one public thread's bug (tests/lint_seeds.py names it); the lint
flags every bug with the rule it belongs to and finds nothing at all in its correct twin.

CPU only: NVRTC compiles each kernel (through the disk cache, with line info) and the lint reads its PTX.
"""
from __future__ import annotations

import pytest

from lint_seeds import SEEDS, Seed
from tmakit.doctor import lint
from tmakit.doctor.lint import describe_map

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _lint(seed: Seed, bug: bool):
    maps = seed.bug_maps if bug and seed.bug_maps is not None else seed.maps
    defines = {**seed.defines, **(seed.bug_defines if bug else seed.twin_defines)}
    return lint(seed.source, entry=seed.entry, maps={k: describe_map(v) for k, v in maps.items()},
                defines=defines, cluster=seed.cluster)


def test_the_suite_covers_at_least_24_threads_and_every_rule_family():
    assert len(SEEDS) >= 24
    assert len({s.id for s in SEEDS}) == len(SEEDS)
    families = {s.rule.split(".")[0] for s in SEEDS}
    assert families >= {"tx", "arrivals", "phase", "copy", "smem", "proxy", "descriptor"}


@pytest.mark.parametrize("seed", SEEDS, ids=[s.id for s in SEEDS])
def test_seeded_bug_is_flagged_by_its_rule(seed: Seed):
    report = _lint(seed, bug=True)
    assert seed.rule in report.rules("error") | report.rules("warning"), f"{seed.thread}: {seed.what}\n{report}"
    hit = next(f for f in report.findings if f.rule == seed.rule)
    assert hit.ptx_line and hit.source_line and hit.fix and hit.reference.startswith(("PTX ISA", "CUDA"))


@pytest.mark.parametrize("seed", SEEDS, ids=[s.id for s in SEEDS])
def test_correct_twin_has_no_finding(seed: Seed):
    report = _lint(seed, bug=False)
    assert report.findings == [], f"{seed.thread} twin:\n{report}"
