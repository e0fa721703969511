// The one pipeline of every tmakit kernel: a ring of shared-memory stages that producers fill and consumers read,
// and the TMA-store pipeline that epilogues write out through.
//
// Ring (PTX ISA 9.7.13.15, mbarrier): each stage has a FULL barrier (its bytes have landed) and an EMPTY barrier
// (every consumer is done with it). Producer and consumers each walk the stages with a PipelineState (stage index
// and phase bit; advance() flips the phase at the wrap), so no kernel does parity arithmetic:
//
//   producer                                          consumers
//   --------------------------------------------      ------------------------------------------------
//   producer_acquire(p)    wait EMPTY (its phase)      consumer_wait(c)     wait FULL (its phase)
//   producer_expect(p, n)  TMA: arm FULL with n bytes  ... read stage c.index (wgmma, ldmatrix, loads) ...
//   ... issue the copies of stage p.index ...          consumer_release(c)  arrive on EMPTY
//   producer_commit(p)     cp.async: arrive on FULL    c.advance()
//   p.advance()
//
// The producer starts one phase ahead (make_producer_start_state: phase 1), so its first pass over a fresh ring
// does not wait: a wait for parity 1 on a barrier still in phase 0 returns at once (the phase "before" the first
// counts as complete).
//
// Producers, the `Producer` parameter (the rest of the interface is the same):
//   TmaProducer           one thread arms FULL with the stage's bytes (mbarrier.arrive.expect_tx), then issues
//                         the TMA / bulk copies that complete_tx on it. FULL expects 1 arrival.
//   CpAsyncBlockProducer  every thread of the block produces and consumes (Ampere's ring): producer_commit is
//                         cp.async.commit_group, consumer_wait<LaterCommits> is cp.async.wait_group plus a block
//                         barrier, which also releases every stage the block read before it; consumer_release is
//                         that block barrier on its own. No mbarriers.
//   CpAsyncThreadProducer every thread consumes only the bytes it copied itself (a streaming copy): the same
//                         groups, no barrier at all.
// Consumers release in groups of ReleaseThreads threads, one arrival per group (EMPTY expects as many arrivals as
// there are groups); a kernel says which it has, there is no default:
//   128  a wgmma warpgroup; thread 0 of the group arrives once the warpgroup's wgmma.wait_group says the reads
//        are done (the tensor cores read for the whole group), in a cluster thread r arrives at CTA r's EMPTY;
//   32   a warp of readers (ordinary loads, ldmatrix): __syncwarp, then lane 0;
//   1    every consumer thread for itself (a ring driven by one thread).
//
// Store pipeline (PTX ISA 9.7.9.25, cp.async.bulk.commit_group / cp.async.bulk.wait_group.read): epilogue tiles
// go through a ring of Buffers shared-memory buffers into TMA stores. A buffer is written again only once the
// store that read it is known to be done reading it, whatever stores were skipped or made element-wise: every use
// of a buffer commits one bulk group (an empty one when nothing was stored), so "at most Buffers - 1 groups still
// reading" always means "this buffer's last store has read it".
#pragma once
#include "tmakit/config.cuh"
#include "tmakit/cp_async.cuh"
#include "tmakit/fence.cuh"
#include "tmakit/mbarrier.cuh"
#include "tmakit/named_barrier.cuh"
#include "tmakit/tma.cuh"
#include "tmakit/types.cuh"

namespace tmakit {

// Stage index and phase bit of one side of a ring. Producer and consumers each keep their own.
template <int Stages>
struct PipelineState {
  static_assert(Stages >= 1, "a ring has at least one stage");
  uint32_t index;
  uint32_t phase;
  __device__ __forceinline__ void advance() {
    if (++index == static_cast<uint32_t>(Stages)) {
      index = 0;
      phase ^= 1u;
    }
  }
};

template <int Stages>
__device__ __forceinline__ PipelineState<Stages> make_consumer_start_state() {
  return PipelineState<Stages>{0u, 0u};
}
// The producer starts with the opposite phase: its first acquire of each stage passes at once.
template <int Stages>
__device__ __forceinline__ PipelineState<Stages> make_producer_start_state() {
  return PipelineState<Stages>{0u, 1u};
}

struct TmaProducer {};
struct CpAsyncBlockProducer {};
struct CpAsyncThreadProducer {};

// The FULL and EMPTY barriers, for the producers that have them (the cp.async ones count groups instead).
template <int Stages, bool HasBarriers>
struct PipelineBarriers {
  Mbarrier full_[Stages];
  Mbarrier empty_[Stages];
};
template <int Stages>
struct PipelineBarriers<Stages, false> {};

template <int Stages, class Producer, int ReleaseThreads>
class Pipeline : PipelineBarriers<Stages, !(IsSame<Producer, CpAsyncBlockProducer>::value ||
                                            IsSame<Producer, CpAsyncThreadProducer>::value)> {
  static_assert(ReleaseThreads == 1 || ReleaseThreads == 32 || ReleaseThreads == 128,
                "consumers release per thread (1), warp (32) or wgmma warpgroup (128)");
  static constexpr bool kBlock = IsSame<Producer, CpAsyncBlockProducer>::value;
  static constexpr bool kThread = IsSame<Producer, CpAsyncThreadProducer>::value;
  static constexpr bool kGroups = kBlock || kThread;  // cp.async groups, no mbarriers

 public:
  typedef PipelineState<Stages> State;

  // ONE thread, before any other thread uses the ring; the caller then synchronises the block (or the cluster,
  // where peers arrive remotely or multicast into this CTA). producer_arrivals: the threads that arm FULL (1 for
  // TmaProducer); consumer_arrivals: the consumer groups (times the cluster CTAs releasing here).
  __device__ __forceinline__ void init(uint32_t producer_arrivals, uint32_t consumer_arrivals) {
    if constexpr (!kGroups) {
#pragma unroll
      for (int s = 0; s < Stages; ++s) {
        this->full_[s].init(producer_arrivals);
        this->empty_[s].init(consumer_arrivals);
      }
      fence_mbarrier_init();
    }
  }

  // Producer: wait until the consumers released stage p.index from its previous use.
  __device__ __forceinline__ void producer_acquire(const State& p) {
    if constexpr (!kGroups) this->empty_[p.index].wait_parity(p.phase);
  }

  // TmaProducer, the issuing thread: one arrival on FULL plus `bytes` expected transaction bytes, before the copies
  // that complete on it. Returns FULL, the copies' [mbar] operand. (The other producers have nothing to arm.)
  __device__ __forceinline__ Mbarrier& producer_expect(const State& p, uint32_t bytes) {
    if constexpr (IsSame<Producer, TmaProducer>::value) this->full_[p.index].arrive_expect_tx(bytes);
    return this->full_[p.index];
  }

  // FULL of stage p.index without arming it: the [mbar] operand for loaders that arm it themselves, once per stage
  // and from the thread that issues (box_load_expect); nullptr for the cp.async producers, which have none.
  __device__ __forceinline__ Mbarrier* full_barrier(const State& p) {
    if constexpr (kGroups) return nullptr;
    else return &this->full_[p.index];
  }

  // After the copies of stage p.index: the cp.async producers, every thread closes its cp.async group (also where
  // it issued none: wait_group counts groups). TmaProducer: nothing (the bytes complete the phase).
  __device__ __forceinline__ void producer_commit(const State&) {
    if constexpr (kGroups) cp_async_commit_group();
  }

  // Consumers: wait until stage c.index is full. The cp.async producers: LaterCommits is how many producer_commit
  // this thread made after the awaited stage's (they stay in flight); CpAsyncBlockProducer's block barrier then
  // publishes every thread's copies and releases every stage read before it.
  template <int LaterCommits = 0>
  __device__ __forceinline__ void consumer_wait(const State& c) {
    if constexpr (kGroups) {
      cp_async_wait_group<LaterCommits>();
      if constexpr (kBlock) __syncthreads();
    } else {
      this->full_[c.index].wait_parity(c.phase);
    }
  }

  // Consumers: the group is done reading stage c.index (module comment: who arrives).
  __device__ __forceinline__ void consumer_release(const State& c) {
    if constexpr (kBlock) {
      __syncthreads();
    } else if constexpr (!kThread) {
      if constexpr (ReleaseThreads == 32) __syncwarp();
      if (threadIdx.x % ReleaseThreads == 0) this->empty_[c.index].arrive();
    }
  }

  // consumer_release for a stage that the producers of `ctas` cluster CTAs (ranks 0 .. ctas-1) filled by multicast:
  // the group arrives on EMPTY in each of them, thread r of the group at CTA r. sm_90, TmaProducer.
  __device__ __forceinline__ void consumer_release_cluster(const State& c, uint32_t ctas) {
    static_assert(IsSame<Producer, TmaProducer>::value, "cluster releases are for TMA multicast rings");
    static_assert(ReleaseThreads >= 32, "a group of at least a warp: thread r of it arrives at CTA r");
    if constexpr (ReleaseThreads == 32) __syncwarp();
    const uint32_t r = threadIdx.x % ReleaseThreads;
    if (r < ctas) this->empty_[c.index].arrive_cluster(r);
  }
};

// The store pipeline of one writer group (the threads that fill the buffers; `group` is their named barrier) over
// Buffers buffers of `buffer_bytes` at `buffers`. Every thread of the group makes the same calls in the same
// order; thread 0 of the group (`issuer()`) issues the TMA stores:
//   uint8_t* buf = store.acquire();     the issuer waits until buf's last store read it; the group syncs
//   ... the group writes buf ...
//   store.publish();                    fence.proxy.async by every writer; the group syncs
//   if (store.issuer()) cp_async_bulk_tensor_s2g(...buf...);   (or nothing: skipped, or written element-wise)
//   store.commit();                     the issuer commits one bulk group (empty or not); the next buffer
//   (the issuer may fill a later buffer by TMA first: reserve<Ahead>() waits for its last store's read)
//   ...
//   store.drain();                      the issuer waits until every store's global writes are done; the group syncs
//                                       (drain_reads() instead at the kernel's end: only the buffers' reads)
// Async = false: the group writes global memory itself, from the buffers, with plain stores (the cp.async twins):
// the same calls, a buffer rewritten once every thread of the group is past its stores from it (the group barrier
// in acquire), no bulk groups.
template <int Buffers, bool Async = true>
class StorePipeline {
  static_assert(Buffers >= 1 && Buffers <= 8, "1..8 store buffers");

 public:
  __device__ __forceinline__ StorePipeline(uint8_t* buffers, uint32_t buffer_bytes, NamedBarrier group)
      : buffers_(buffers), buffer_bytes_(buffer_bytes), group_(group), index_(0) {}

  __device__ __forceinline__ bool issuer() const { return threadIdx.x % group_.threads() == 0; }

  __device__ __forceinline__ uint8_t* acquire() {
    if constexpr (Async) {
      if (issuer()) cp_async_bulk_wait_group_read<Buffers - 1>();
    }
    group_.sync();
    return buffers_ + index_ * buffer_bytes_;
  }

  // The buffer `Ahead` places after the current one (the one acquire() hands out, or has handed out until the
  // next commit()), for the issuer alone to fill by TMA before its turn (C read ahead of an epilogue): the issuer
  // waits until the store that last read it is done. No group sync: the group's own writes to it preceded that
  // store (publish).
  template <int Ahead>
  __device__ __forceinline__ uint8_t* reserve() {
    static_assert(Ahead >= 0 && Ahead < Buffers, "a buffer within the ring");
    if constexpr (Async) cp_async_bulk_wait_group_read<Buffers - 1 - Ahead>();
    const uint32_t i = (index_ + static_cast<uint32_t>(Ahead)) % static_cast<uint32_t>(Buffers);
    return buffers_ + i * buffer_bytes_;
  }

  __device__ __forceinline__ void publish() {
    if constexpr (Async) fence_proxy_async_shared_cta();  // each writer's generic stores, before the async proxy reads
    group_.sync();
  }

  __device__ __forceinline__ void commit() {
    if constexpr (Async) {
      if (issuer()) cp_async_bulk_commit_group();
    }
    index_ = index_ + 1 == static_cast<uint32_t>(Buffers) ? 0u : index_ + 1;
  }

  __device__ __forceinline__ void drain() {
    if constexpr (Async) {
      if (issuer()) cp_async_bulk_wait_group<0>();
    }
    group_.sync();
  }

  // Before the CTA exits: its shared memory is released only once every store has read it (the global writes
  // complete on their own; the kernel's end makes them visible).
  __device__ __forceinline__ void drain_reads() {
    if constexpr (Async) {
      if (issuer()) cp_async_bulk_wait_group_read<0>();
    }
  }

 private:
  uint8_t* buffers_;
  uint32_t buffer_bytes_;
  NamedBarrier group_;
  uint32_t index_;
};

}  // namespace tmakit
