// mbarrier wrappers, named after the PTX they emit (PTX ISA "Parallel Synchronization and
// Communication Instructions: mbarrier"). The barrier is a 64-bit object in shared memory.
//
// Bounded waits: every wait traps after TMAKIT_MBARRIER_TIMEOUT_NS nanoseconds (default 20 s, far beyond any
// legitimate wait, even under compute-sanitizer) instead of spinning forever. A lost transaction (wrong
// expect_tx byte count, a TMA that never issued) then surfaces as a launch error on the host rather than as
// a hung process. Define it as 0 for unbounded waits.
#pragma once
#include "tmakit/config.cuh"
#include "tmakit/types.cuh"

#ifndef TMAKIT_MBARRIER_TIMEOUT_NS
#define TMAKIT_MBARRIER_TIMEOUT_NS 20000000000ull
#endif

namespace tmakit {

// mbarrier.init. ONE thread calls it, before any other thread touches the barrier;
// follow with fence_mbarrier_init() (sm_90) and a __syncthreads() so the whole block sees the init.
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t expected_arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_addr(bar)), "r"(expected_arrivals)
               : "memory");
}

// fence.mbarrier_init.release.cluster (PTX ISA "membar/fence"): makes a prior mbarrier.init visible to
// the async proxy and to other CTAs of the cluster. The initialising thread calls it. sm_90; on sm_80 the
// __syncthreads() that follows the init is the whole story, so this is a no-op there.
__device__ __forceinline__ void fence_mbarrier_init() {
#if TMAKIT_HAS_SM90
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

// mbarrier.arrive, release semantics at CTA scope: the caller's earlier writes are visible
// to whoever completes a wait on this phase. Any thread; counts one arrival. Returns the phase state.
__device__ __forceinline__ uint64_t mbarrier_arrive(uint64_t* bar) {
  uint64_t state;
  asm volatile("mbarrier.arrive.shared::cta.b64 %0, [%1];" : "=l"(state) : "r"(shared_addr(bar)) : "memory");
  return state;
}

// mbarrier.arrive.expect_tx: one arrival plus "tx_bytes more bytes will land on this
// barrier" for the current phase. The thread that issues the TMA calls it (once per phase). sm_90.
__device__ __forceinline__ uint64_t mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t tx_bytes) {
  uint64_t state = 0;
#if TMAKIT_HAS_SM90
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 %0, [%1], %2;"
               : "=l"(state)
               : "r"(shared_addr(bar)), "r"(tx_bytes)
               : "memory");
#else
  TMAKIT_REQUIRES_SM90();
#endif
  return state;
}

// mbarrier.expect_tx: add to the expected transaction count without arriving. sm_90.
__device__ __forceinline__ void mbarrier_expect_tx(uint64_t* bar, uint32_t tx_bytes) {
#if TMAKIT_HAS_SM90
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" ::"r"(shared_addr(bar)), "r"(tx_bytes)
               : "memory");
#else
  TMAKIT_REQUIRES_SM90();
#endif
}

// cp.async.mbarrier.arrive.shared::cta.b64: when all cp.async the CALLING THREAD issued so
// far have completed, arrive on the barrier. Without .noinc the pending count is raised by one first, so it
// does not consume one of the thread's expected arrivals: pair it with a normal mbarrier_arrive(). sm_80.
__device__ __forceinline__ void cp_async_mbarrier_arrive(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.shared::cta.b64 [%0];" ::"r"(shared_addr(bar)) : "memory");
}

// One non-blocking probe of phase `parity` (0/1): true once that phase has completed. Acquire semantics:
// after it returns true the data the phase guarded is visible to the caller.
//   sm_90: mbarrier.try_wait.parity, which may suspend the thread for a short while.
//   sm_80: mbarrier.test_wait.parity (PTX ISA "mbarrier.test_wait/mbarrier.try_wait"), a pure probe.
__device__ __forceinline__ bool mbarrier_try_wait_parity(uint64_t* bar, uint32_t parity) {
  uint32_t done;
#if TMAKIT_HAS_SM90
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
      : "=r"(done)
      : "r"(shared_addr(bar)), "r"(parity)
      : "memory");
#else
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
      : "=r"(done)
      : "r"(shared_addr(bar)), "r"(parity)
      : "memory");
#endif
  return done != 0;
}

__device__ __forceinline__ uint64_t globaltimer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Block until phase `parity` completes. Every thread that consumes the guarded data calls it.
// With timeout_ns > 0 it traps after that many nanoseconds (see TMAKIT_MBARRIER_TIMEOUT_NS).
__device__ __forceinline__ void mbarrier_wait_parity(uint64_t* bar, uint32_t parity,
                                                     uint64_t timeout_ns = TMAKIT_MBARRIER_TIMEOUT_NS) {
  if (mbarrier_try_wait_parity(bar, parity)) return;
  const uint64_t start = timeout_ns ? globaltimer_ns() : 0;
  while (!mbarrier_try_wait_parity(bar, parity)) {
    if (timeout_ns && globaltimer_ns() - start > timeout_ns) {
      asm volatile("trap;");  // a lost arrival/transaction: fail the launch instead of hanging
    }
  }
}

// mbarrier.inval: retire a barrier before its shared memory is reused for other data.
// One thread, after every wait on it has finished.
__device__ __forceinline__ void mbarrier_inval(uint64_t* bar) {
  asm volatile("mbarrier.inval.shared::cta.b64 [%0];" ::"r"(shared_addr(bar)) : "memory");
}

// Phase tracking for one barrier that is waited on repeatedly (a pipeline stage): remembers the parity
// of the next phase to wait for, so callers never do the bit arithmetic themselves.
struct MbarrierPhase {
  uint64_t* bar;
  uint32_t parity;

  __device__ __forceinline__ void wait(uint64_t timeout_ns = TMAKIT_MBARRIER_TIMEOUT_NS) {
    mbarrier_wait_parity(bar, parity, timeout_ns);
    parity ^= 1u;
  }
};

}  // namespace tmakit
