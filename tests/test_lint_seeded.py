"""The seeded-bug suite: each kernel reproduces one public thread's bug (tests/lint_seeds.py names it); the lint
flags every bug with the rule it belongs to and finds nothing at all in its correct twin.

CPU only: NVRTC compiles each kernel (through the disk cache, with line info) and the lint reads its PTX.
"""
from __future__ import annotations

import pytest

from lint_seeds import RING_PRODUCER, SEEDS, Seed
from tmakit.doctor import lint
from tmakit.doctor.lint import describe_map

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _lint(seed: Seed, bug: bool):
    maps = seed.bug_maps if bug and seed.bug_maps is not None else seed.maps
    defines = {**seed.defines, **(seed.bug_defines if bug else seed.twin_defines)}
    return lint(seed.source, entry=seed.entry, maps={k: describe_map(v) for k, v in maps.items()},
                defines=defines, cluster=seed.cluster)


def _assert_flagged_or_clean(source: str, entry: str, defines: dict, rule: str, flagged: bool) -> None:
    """A kernel of ours (no public thread) over one bf16 map ``a``: flagged by ``rule`` as an error, or clean."""
    from lint_seeds import BF16_128B, PRELUDE

    report = lint(PRELUDE + source, entry=entry, maps={"a": describe_map(BF16_128B)}, defines=defines)
    if flagged:
        assert rule in report.rules("error"), str(report)
    else:
        assert report.findings == [], str(report)


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


PEELED_RING = r"""
__device__ __noinline__ void give_up() { asm volatile("trap;"); }  // a bounded wait's timeout, out of line
__device__ __forceinline__ void bounded_wait(u64* b, u32 parity) {
  long long start = clock64();
  while (!try_wait(b, parity)) {
    if (clock64() - start > (1ll << 40)) give_up();
  }
}
extern "C" __global__ void __launch_bounds__(128) peeled_ring(const __grid_constant__ TMap a, int k_tiles) {
""" + RING_PRODUCER + r""" else if (threadIdx.x >= 32 && k_tiles > 0) {
    bounded_wait(&full[0], 0);  // the first trip, peeled (a software-pipelined loop's prologue)
    arrive(&empty[0]);
#pragma unroll 1
    for (int k = 1; k < k_tiles; ++k) {
      const int s = k & 1;
      bounded_wait(&full[s], PARITY);
      arrive(&empty[s]);
    }
  }
}
"""


@pytest.mark.parametrize("parity, flagged", [("(k >> 1) & 1", False), ("((k >> 1) & 1) ^ (s == 0)", True)])
def test_a_peeled_first_trip_and_an_out_of_line_timeout(parity, flagged):
    """A ring consumed by a loop whose first trip was peeled (its slot 0 is one phase on when the loop starts),
    waiting through a bounded wait that calls an out-of-line trap: clean with the ring's parity; with slot 0's
    parity a phase off inside the loop, flagged by phase.parity_sequence."""
    _assert_flagged_or_clean(PEELED_RING, "peeled_ring", {"PARITY": parity}, "phase.parity_sequence", flagged)


UNROLLED_LOADS = r"""
extern "C" __global__ void __launch_bounds__(128) unrolled_loads(const __grid_constant__ TMap a, int n, float beta) {
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ u64 bar;
  if (threadIdx.x == 0) { bar_init(&bar, 1); fence_init(); }
  __syncthreads();
  u32 phase = 0;
#pragma unroll
  for (int s = 0; s < 6; ++s) {  // an epilogue's slabs: each loaded only where it is needed (data conditions)
    if (beta != 0.f && s * 64 + 64 <= n) {
      if (threadIdx.x == 0) {
        EXPECT_GUARD expect(&bar, 8192);
        load2d(smem, &a, s * 64, 0, &bar);
      }
      wait(&bar, phase);
      phase ^= 1;
    }
  }
}
"""


@pytest.mark.parametrize("guard, flagged", [("if (true)", False), ("if (n > 100)", True)])
def test_expect_tx_and_copies_under_the_same_conditions_balance(guard, flagged):
    """Six unrolled (expect_tx, load) pairs, each under its own data condition (more than the rule enumerates):
    balanced pair by pair, they lint clean; an expect_tx under a condition its load does not share is an error
    (tx.conditional: when the condition is false the copy's bytes land on no expect_tx)."""
    _assert_flagged_or_clean(UNROLLED_LOADS, "unrolled_loads", {"EXPECT_GUARD": guard}, "tx.conditional", flagged)


GROUP_RELEASE = r"""
extern "C" __global__ void __launch_bounds__(384) group_release(const __grid_constant__ TMap a, int k_tiles) {
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ u64 full, empty;
  if (threadIdx.x == 0) { bar_init(&full, 1); bar_init(&empty, 2); fence_init(); }
  __syncthreads();
  const int group = threadIdx.x / 128;
  if (group < 2) {  // two consumer warpgroups, each releasing through its thread 0
#pragma unroll 1
    for (int k = 0; k < k_tiles; ++k) {
      wait(&full, k & 1);
      GROUP_SYNC;
      if (RELEASER) arrive(&empty);
    }
  } else if (threadIdx.x == 256) {
#pragma unroll 1
    for (int k = 0; k < k_tiles; ++k) {
      wait(&empty, (k & 1) ^ 1);
      expect(&full, 8192);
      load2d(smem, &a, 0, k * 64, &full);
    }
  }
}
"""


@pytest.mark.parametrize("releaser", ["threadIdx.x == 128 * group", "threadIdx.x % 128 == 0"])
@pytest.mark.parametrize("sync, flagged", [
    ('asm volatile("bar.sync %0, 128;" :: "r"(1 + group) : "memory")', False),
    ("(void)0", True),
    # one id for both warpgroups: any four of their warps complete it, a laggard may still be waiting
    ('asm volatile("bar.sync %0, 128;" :: "r"(1 + (group >> 8)) : "memory")', True),
    # one id a warp pair across the warpgroups: no warpgroup meets whole
    ('asm volatile("bar.sync %0, 128;" :: "r"(1 + ((threadIdx.x / 32) & 1)) : "memory")', True)])
def test_a_warpgroup_named_barrier_orders_its_waiters_before_the_release(sync, flagged, releaser):
    """Two consumer warpgroups wait on FULL and release through one thread each: clean when each warpgroup first
    meets on a named barrier of its own 128 threads (bar.sync 1 + warpgroup, 128), flagged by
    phase.lagging_waiter without it, or where the 128-thread barrier's id is shared between warpgroups or does
    not follow them. Either way of naming each warpgroup's thread 0 lints the same (with ``% 128`` ptxas gives
    the wait's retry loop the trip loop's header, whose retry edge is not a trip without a release)."""
    _assert_flagged_or_clean(GROUP_RELEASE, "group_release", {"GROUP_SYNC": sync, "RELEASER": releaser},
                             "phase.lagging_waiter", flagged)
