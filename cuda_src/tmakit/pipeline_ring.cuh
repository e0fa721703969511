// A producer/consumer ring of shared-memory stages guarded by mbarriers (PTX ISA "mbarrier", 9.7.13.15): each
// stage has a FULL barrier (the producer's bytes have landed) and an EMPTY barrier (every consumer is done
// with the stage). Phase bits are tracked by RingCursor, so kernels never do the parity arithmetic.
//
//   producer (one elected thread)                 consumers
//   ------------------------------                ------------------------------------------
//   acquire(c): wait EMPTY[s] (parity c.phase^1)   wait_full(c): wait FULL[s] (parity c.phase)
//   TMA:  arm FULL[s] with expect_tx(bytes)        ... read stage s (wgmma / ldmatrix) ...
//         issue the box loads onto FULL[s]         release(c): arrive EMPTY[s] (one per consumer;
//   cp.async: every producer thread issues its     ..          in a cluster also the peer CTA's EMPTY[s]
//         chunks, then commit_cp_async(c)          ..          when the stage was multicast into it)
//   c.advance()                                    c.advance()
//
// The first pass over a fresh ring must not wait for consumers: waiting on EMPTY with parity phase^1 = 1 on a
// barrier still in phase 0 returns at once (the "preceding phase" of a fresh barrier counts as complete).
//
// TMA (sm_90): FULL[s] expects `producer_arrivals` arrivals (normally 1: the thread that calls expect_tx) plus
// the transaction bytes (the TensorMaps' box_bytes summed over the boxes of one stage).
// cp.async (sm_80..89): FULL[s] expects one arrival per producer thread, each made by
// cp.async.mbarrier.arrive.noinc when that thread's copies have landed; the same stage bytes, the same waits.
#pragma once
#include "tmakit/config.cuh"
#include "tmakit/mbarrier.cuh"
#include "tmakit/types.cuh"
#if TMAKIT_HAS_SM90
#include "tmakit/cluster.cuh"
#endif

namespace tmakit {

// Stage index and phase bit of one side of the ring. Producer and consumers each keep their own.
template <int Stages>
struct RingCursor {
  int stage = 0;
  uint32_t phase = 0;
  __device__ __forceinline__ void advance() {
    if (++stage == Stages) {
      stage = 0;
      phase ^= 1u;
    }
  }
};

// The barriers live in shared memory (this struct is placed there by the kernel).
template <int Stages>
struct PipelineRing {
  uint64_t full[Stages];
  uint64_t empty[Stages];

  // ONE thread, before any other thread uses the ring; then fence_mbarrier_init + __syncthreads / cluster_sync.
  __device__ __forceinline__ void init(uint32_t producer_arrivals, uint32_t consumer_arrivals) {
#pragma unroll
    for (int s = 0; s < Stages; ++s) {
      mbarrier_init(&full[s], producer_arrivals);
      mbarrier_init(&empty[s], consumer_arrivals);
    }
    fence_mbarrier_init();
  }

  // Producer: block until consumers released stage c.stage from its previous use.
  __device__ __forceinline__ void acquire(const RingCursor<Stages>& c) {
    mbarrier_wait_parity(&empty[c.stage], c.phase ^ 1u);
  }
  // Producer (TMA, the issuing thread): one arrival + `bytes` expected transaction bytes on FULL.
  __device__ __forceinline__ uint64_t* arm_tma(const RingCursor<Stages>& c, uint32_t bytes) {
    mbarrier_arrive_expect_tx(&full[c.stage], bytes);
    return &full[c.stage];
  }
  // Producer (cp.async, every producer thread after issuing its copies): arrive on FULL when they land.
  __device__ __forceinline__ void commit_cp_async(const RingCursor<Stages>& c) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(shared_addr(&full[c.stage]))
                 : "memory");
  }
  // Consumers: block until stage c.stage is full.
  __device__ __forceinline__ void wait_full(const RingCursor<Stages>& c) {
    mbarrier_wait_parity(&full[c.stage], c.phase);
  }
  // Consumers (one arrival each, e.g. one elected thread per consumer warpgroup): the stage may be refilled.
  __device__ __forceinline__ void release(const RingCursor<Stages>& c) { mbarrier_arrive(&empty[c.stage]); }
#if TMAKIT_HAS_SM90
  // The same arrival on the EMPTY barrier of the cluster CTA `cta_rank` (its producer multicasts into us).
  __device__ __forceinline__ void release_cluster(const RingCursor<Stages>& c, uint32_t cta_rank) {
    mbarrier_arrive_cluster(mapa_shared_cluster(shared_addr(&empty[c.stage]), cta_rank));
  }
#endif
};

}  // namespace tmakit
