// mbarrier wrappers, named after the PTX they emit (PTX ISA 9.7.13.15, "Parallel Synchronization and
// Communication Instructions: mbarrier"). Two forms of the same instructions:
//   - free functions on a raw 64-bit barrier (`uint64_t*` in shared memory), for code that keeps its own;
//   - tmakit::Mbarrier, an opaque barrier object: what tmakit's kernels use (pipeline.cuh builds on it), so that
//     no kernel does address arithmetic on barrier words or forgets a fence.
// Copies that complete on a barrier (tma.cuh, bulk_copy.cuh, tma_im2col.cuh) take either, as an MbarrierRef.
//
// Bounded waits: every wait traps after TMAKIT_MBARRIER_TIMEOUT_NS nanoseconds (default 20 s, far beyond any
// legitimate wait, even under compute-sanitizer) instead of spinning forever, so a lost transaction (a wrong
// expect_tx byte count, a copy that never issued) ends the launch with an error instead of hanging the process.
// Define it as 0 for unbounded waits. For a diagnosis of the barrier a hang waits on, launch with checked=True
// (docs/DEBUGGING.md).
#pragma once
#include "tmakit/config.cuh"
#include "tmakit/types.cuh"

#ifndef TMAKIT_MBARRIER_TIMEOUT_NS
#define TMAKIT_MBARRIER_TIMEOUT_NS 20000000000ull
#endif

namespace tmakit {

class Mbarrier;

// The [mbar] operand of the wrappers below and of the copies that complete on a barrier: a tmakit::Mbarrier, or a
// raw 64-bit barrier word in shared memory of whatever 8-byte type the caller declares it with (std::uint64_t,
// unsigned long long).
struct MbarrierRef {
  uint32_t address;
  template <class Word>
  __device__ __forceinline__ MbarrierRef(Word* word) : address(shared_addr(word)) {
    static_assert(sizeof(Word) == 8, "an mbarrier is a 64-bit word in shared memory");
  }
  __device__ __forceinline__ MbarrierRef(Mbarrier& bar);
};

// mbarrier.init.shared::cta.b64 (9.7.13.15.9). ONE thread calls it, before any other thread touches the barrier;
// then fence_mbarrier_init() and a block (or cluster) barrier.
__device__ __forceinline__ void mbarrier_init(MbarrierRef bar, uint32_t expected_arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar.address), "r"(expected_arrivals) : "memory");
}

// fence.mbarrier_init.release.cluster (9.7.13.4, membar/fence): makes earlier mbarrier.init visible to the async
// proxy and to the other CTAs of the cluster. The initialising thread calls it. sm_90; on sm_80 the block barrier
// after the init is the whole story, so it is a no-op there.
__device__ __forceinline__ void fence_mbarrier_init() {
#if TMAKIT_HAS_SM90
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

// mbarrier.arrive.shared::cta.b64 (9.7.13.15.13), release at CTA scope: the caller's earlier writes are visible to
// whoever completes a wait on this phase. Counts one arrival. Returns the phase state.
__device__ __forceinline__ uint64_t mbarrier_arrive(MbarrierRef bar) {
  uint64_t state;
  asm volatile("mbarrier.arrive.shared::cta.b64 %0, [%1];" : "=l"(state) : "r"(bar.address) : "memory");
  return state;
}

// mbarrier.arrive.expect_tx.shared::cta.b64 (9.7.13.15.13): one arrival plus "tx_bytes more bytes will complete on
// this barrier" for the current phase. The thread that issues the copies calls it, before them. sm_90.
__device__ __forceinline__ uint64_t mbarrier_arrive_expect_tx(MbarrierRef bar, uint32_t tx_bytes) {
  uint64_t state = 0;
#if TMAKIT_HAS_SM90
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 %0, [%1], %2;" : "=l"(state) : "r"(bar.address), "r"(tx_bytes)
               : "memory");
#else
  TMAKIT_REQUIRES_SM90();
#endif
  return state;
}

// mbarrier.expect_tx.relaxed.cta.shared::cta.b64 (9.7.13.15.11): add to the expected transaction count without
// arriving. sm_90.
__device__ __forceinline__ void mbarrier_expect_tx(MbarrierRef bar, uint32_t tx_bytes) {
#if TMAKIT_HAS_SM90
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" ::"r"(bar.address), "r"(tx_bytes) : "memory");
#else
  TMAKIT_REQUIRES_SM90();
#endif
}

// cp.async.mbarrier.arrive.shared::cta.b64 (9.7.9.24.3): when every cp.async the CALLING THREAD issued so far has
// completed, arrive on the barrier. Without .noinc the pending count is raised by one first, so it does not consume
// one of the thread's expected arrivals: pair it with a normal mbarrier_arrive(). sm_80.
__device__ __forceinline__ void cp_async_mbarrier_arrive(MbarrierRef bar) {
  asm volatile("cp.async.mbarrier.arrive.shared::cta.b64 [%0];" ::"r"(bar.address) : "memory");
}

// cp.async.mbarrier.arrive.noinc.shared::cta.b64: the same arrival, counted as one of the expected arrivals (a
// barrier initialised with one arrival per producer thread completes when every producer's copies have landed).
__device__ __forceinline__ void cp_async_mbarrier_arrive_noinc(MbarrierRef bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar.address) : "memory");
}

// One non-blocking probe of phase `parity` (0/1): true once that phase has completed. Acquire semantics: after it
// returns true the data the phase guarded is visible to the caller (9.7.13.15.16).
//   sm_90: mbarrier.try_wait.parity, which may suspend the thread for a short while.
//   sm_80: mbarrier.test_wait.parity, a pure probe.
__device__ __forceinline__ bool mbarrier_try_wait_parity(MbarrierRef bar, uint32_t parity) {
  uint32_t done;
#if TMAKIT_HAS_SM90
  asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
               : "=r"(done)
               : "r"(bar.address), "r"(parity)
               : "memory");
#else
  asm volatile("{\n .reg .pred p;\n mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
               : "=r"(done)
               : "r"(bar.address), "r"(parity)
               : "memory");
#endif
  return done != 0;
}

// The timeout's trap, out of line: a `trap` inlined into a kernel that raises its registers with setmaxnreg makes
// ptxas allocate the whole kernel within the launch's per-thread share (168 registers for 384 threads) instead of
// the setmaxnreg count, so accumulators that fit the raised count spill and wgmma is serialized (ptxas C7512).
__device__ __noinline__ void mbarrier_timeout_trap() { asm volatile("trap;"); }

__device__ __forceinline__ uint64_t globaltimer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Block until phase `parity` completes. Every thread that consumes the guarded data calls it. With
// timeout_ns > 0 it traps after that many nanoseconds (TMAKIT_MBARRIER_TIMEOUT_NS).
__device__ __forceinline__ void mbarrier_wait_parity(MbarrierRef bar, uint32_t parity,
                                                     uint64_t timeout_ns = TMAKIT_MBARRIER_TIMEOUT_NS) {
  if (mbarrier_try_wait_parity(bar, parity)) return;
  const uint64_t start = timeout_ns ? globaltimer_ns() : 0;
  while (!mbarrier_try_wait_parity(bar, parity)) {
    if (timeout_ns && globaltimer_ns() - start > timeout_ns) mbarrier_timeout_trap();  // a lost arrival/transaction
  }
}

// mbarrier.inval.shared::cta.b64: retire a barrier before its shared memory is reused for other data. One thread,
// after every wait on it has finished.
__device__ __forceinline__ void mbarrier_inval(MbarrierRef bar) {
  asm volatile("mbarrier.inval.shared::cta.b64 [%0];" ::"r"(bar.address) : "memory");
}

// mapa.shared::cluster.u32 (9.7.9.22): the shared::cluster address of the variable at `smem_addr` (a shared::cta
// address of this CTA) in the CTA of rank `cta_rank` of the cluster. Any thread. sm_90.
__device__ __forceinline__ uint32_t mapa_shared_cluster(uint32_t smem_addr, uint32_t cta_rank) {
  uint32_t r = 0;
#if TMAKIT_HAS_SM90
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(smem_addr), "r"(cta_rank));
#else
  TMAKIT_REQUIRES_SM90();
#endif
  return r;
}

// mbarrier.arrive.shared::cluster.b64 (default .release.cta semantics): one arrival on the barrier at
// `cluster_addr` (from mapa_shared_cluster; may be this CTA's own). Enough for "I am done reading this stage" (the
// reads were the tensor cores' or the copy engine's); a .release.cluster arrival costs a MEMBAR.ALL.GPU per call in
// SASS, which halved the GEMM's throughput when it released every stage that way. sm_90.
__device__ __forceinline__ void mbarrier_arrive_cluster(uint32_t cluster_addr) {
#if TMAKIT_HAS_SM90
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(cluster_addr) : "memory");
#else
  TMAKIT_REQUIRES_SM90();
#endif
}

// An mbarrier object in shared memory, opaque: kernels declare `__shared__ tmakit::Mbarrier bar;` (or place it in
// a shared struct) and use the methods, each the instruction of the same name above.
class Mbarrier {
 public:
  // ONE thread, before any other thread touches it; then fence_mbarrier_init() and a block/cluster barrier.
  __device__ __forceinline__ void init(uint32_t expected_arrivals) { mbarrier_init(&word_, expected_arrivals); }
  __device__ __forceinline__ uint64_t arrive() { return mbarrier_arrive(&word_); }
  __device__ __forceinline__ uint64_t arrive_expect_tx(uint32_t tx_bytes) { return mbarrier_arrive_expect_tx(&word_, tx_bytes); }
  __device__ __forceinline__ void expect_tx(uint32_t tx_bytes) { mbarrier_expect_tx(&word_, tx_bytes); }
  __device__ __forceinline__ void cp_async_arrive_noinc() { cp_async_mbarrier_arrive_noinc(&word_); }
  // The same barrier in the CTA of rank `cta_rank` of the cluster: one remote arrival there.
  __device__ __forceinline__ void arrive_cluster(uint32_t cta_rank) {
    mbarrier_arrive_cluster(mapa_shared_cluster(address(), cta_rank));
  }
  __device__ __forceinline__ bool try_wait_parity(uint32_t parity) { return mbarrier_try_wait_parity(&word_, parity); }
  __device__ __forceinline__ void wait_parity(uint32_t parity) { mbarrier_wait_parity(&word_, parity); }
  __device__ __forceinline__ void inval() { mbarrier_inval(&word_); }
  // Its shared-window address: the [mbar] operand of a copy that completes on it.
  __device__ __forceinline__ uint32_t address() const { return shared_addr(&word_); }

 private:
  uint64_t word_;
};
static_assert(sizeof(Mbarrier) == 8, "an mbarrier object is 64 bits");

__device__ __forceinline__ MbarrierRef::MbarrierRef(Mbarrier& bar) : address(bar.address()) {}

}  // namespace tmakit
