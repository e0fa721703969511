"""The hang doctor's seeded hangs: one kernel source, ``SCENARIO`` choosing the bug (0: none).

1 tx too high (expect_tx of two boxes, one copy), 2 tx too low (the phase completes early; the next phase, a
plain arrive, never completes: its tx-count is left negative), 3 a parity that never flips (the producer waits
on a fresh empty barrier for parity 0 instead of 1, the consumer for the full one: neither comes), 4 a missing
release (consumers never arrive on the empty barrier), 5 every thread arriving on a barrier initialised for
64 (128 arrivals complete two phases, so the wait for parity 0 finds phase 2, of parity 0, in progress; on a
count-1 barrier a warp's 32 arrivals at once fault instead of hanging, as measured on the H100), 6 a multicast counted for one CTA (rank 0 multicasts to itself
only; rank 1 expects the box). Every scenario loads boxes of a (rows, 64) bf16 tensor (128B swizzle, 8192-byte
boxes) and copies what landed to ``out`` (``blocks x tiles x 8192`` bytes), so the twin is checked against the
source. tests/test_hang_gpu.py runs them; tests/test_hang_doctor.py assembles their instrumented PTX.
"""
from __future__ import annotations

from lint_seeds import PRELUDE

THREADS = 128
TILES = 3
BOX = (64, 64)  # rows, columns (bf16): 8192 bytes

SOURCE = PRELUDE + r"""
#ifndef SCENARIO
#define SCENARIO 0
#endif
__device__ __forceinline__ void copy_out(const unsigned char* smem, unsigned char* out, int first, int count) {
  for (int i = (int)threadIdx.x - first; i < 8192 / 16; i += count)
    reinterpret_cast<uint4*>(out)[i] = reinterpret_cast<const uint4*>(smem)[i];
}

extern "C" __global__ void __launch_bounds__(128) hang(const __grid_constant__ TMap a, unsigned char* out) {
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ u64 full, empty;
  const int tid = threadIdx.x;
  unsigned char* mine = out + (size_t)blockIdx.x * 3 * 8192;
  if (tid == 0) { bar_init(&full, 1); bar_init(&empty, SCENARIO == 5 ? 64 : 96); fence_init(); }
#if SCENARIO == 6
  asm volatile("barrier.cluster.arrive.release.aligned;\n barrier.cluster.wait.acquire.aligned;" ::: "memory");
#else
  __syncthreads();
#endif
#if SCENARIO == 1 || SCENARIO == 2
  if (tid == 0) {
    expect(&full, SCENARIO == 1 ? 16384 : 4096);  // 1: too many bytes; 2: too few
    load2d(smem, &a, 0, 0, &full);
  }
  wait(&full, 0);
  copy_out(smem, mine, 0, 128);
  __syncthreads();
  if (tid == 0) arrive(&full);  // a second phase signalled without bytes
  wait(&full, 1);
#elif SCENARIO == 5
  __syncthreads();
  if (tid == 0) { expect(&full, 8192); load2d(smem, &a, 0, 0, &full); }
  wait(&full, 0);
  copy_out(smem, mine, 0, 128);
  arrive(&empty);  // every thread arrives on a barrier initialised for one
  __syncthreads();
  wait(&empty, 0);
#elif SCENARIO == 6
  unsigned rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  if (tid == 0) expect(&full, 8192);
  asm volatile("barrier.cluster.arrive.release.aligned;\n barrier.cluster.wait.acquire.aligned;" ::: "memory");
  if (rank == 0 && tid == 0) {
    const unsigned short mask = 1;  // counted for one CTA: rank 1 is left out
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%2, %3}], [%4], %5;" :: "r"(sa(smem)), "l"(&a), "r"(0), "r"(0), "r"(sa(&full)), "h"(mask)
                 : "memory");
  }
  wait(&full, 0);
  copy_out(smem, mine, 0, 128);
  asm volatile("barrier.cluster.arrive.release.aligned;\n barrier.cluster.wait.acquire.aligned;" ::: "memory");
#else
  if (tid == 0) {  // the producer: a one-stage ring
#pragma unroll 1
    for (int k = 0; k < 3; ++k) {
      wait(&empty, SCENARIO == 3 ? (k & 1) : ((k & 1) ^ 1));
      expect(&full, 8192);
      load2d(smem, &a, 0, k * 64, &full);
    }
  } else if (tid >= 32) {  // 96 consumers
#pragma unroll 1
    for (int k = 0; k < 3; ++k) {
      wait(&full, k & 1);
      copy_out(smem, mine + k * 8192, 32, 96);
      asm volatile("bar.sync 1, 96;" ::: "memory");
#if SCENARIO != 4
      arrive(&empty);
#endif
    }
  }
#endif
}
"""

SCENARIOS = {1: "tx_too_high", 2: "tx_too_low", 3: "parity_never_flips", 4: "missing_release",
             5: "every_thread_arrives", 6: "multicast_counted_for_one_cta"}
