// tmakit_copy: dst[0:nbytes] = src[0:nbytes] for buffers whose addresses agree modulo 16 (the host checks;
// tmakit_copy_bytes handles the rest). Bytes before dst's first 16-byte boundary and after the last whole
// 16-byte piece are copied by block 0's threads; the 16-byte-aligned body goes through shared memory:
//   TMA path:     one thread per block runs a tmakit::Pipeline of kStages stages (TmaProducer) as both producer
//                 and consumer: bulk copies global->shared complete on a stage's FULL barrier, a bulk copy
//                 shared->global stores it, and the stage is released once that store has read it; kChunk bytes
//                 each, in dynamic shared memory of kStages * kChunk bytes (TMAKIT_COPY_STAGES, TMAKIT_COPY_CHUNK:
//                 plan arguments).
//   cp.async path: every thread streams its own 16-byte slots through a kStages ring with cp.async.cg and
//                 wait_group (CpAsyncThreadProducer), so no block-wide synchronisation is needed at all.
#include "tmakit/bulk_copy.cuh"
#include "tmakit/cp_async.cuh"
#include "tmakit/grid_dependency.cuh"
#include "tmakit/pipeline.cuh"
#include "tmakit/tma.cuh"

// Tuning (tmakit/ops/copy.py passes them as plan arguments; the defaults are its defaults).
#ifndef TMAKIT_COPY_STAGES
#define TMAKIT_COPY_STAGES 3  // TMA path: chunks in each block's ring
#endif
#ifndef TMAKIT_COPY_CHUNK
#define TMAKIT_COPY_CHUNK 32768  // TMA path: bytes per bulk copy (a multiple of 16)
#endif
#ifndef TMAKIT_COPY_SOURCE_EVICTION
#define TMAKIT_COPY_SOURCE_EVICTION 0  // TMA path: the L2 priority of the source lines (an L2Eviction value)
#endif

namespace {
using namespace tmakit;
#if TMAKIT_USE_TMA
constexpr int kStages = TMAKIT_COPY_STAGES;
constexpr uint32_t kChunk = TMAKIT_COPY_CHUNK;  // the ring lives in dynamic shared memory: kStages * kChunk
static_assert(kChunk % 16 == 0 && kStages >= 2 && kStages <= 8, "chunks of whole 16 bytes, a ring of 2..8");
constexpr L2Eviction kSourceEviction = static_cast<L2Eviction>(TMAKIT_COPY_SOURCE_EVICTION);
typedef Pipeline<kStages, TmaProducer, 1> Ring;  // one thread produces, consumes and releases
#else
constexpr int kStages = 4;
constexpr uint32_t kThreads = 256, kVec = 2;  // 16-byte slots per thread per stage
constexpr uint32_t kChunk = kThreads * kVec * 16u;
typedef Pipeline<kStages, CpAsyncThreadProducer, 1> Ring;  // each thread consumes only its own slots
#endif

__device__ __forceinline__ void copy_edges(uint8_t* dst, const uint8_t* src, uint64_t head, uint64_t tail_begin,
                                           uint64_t nbytes) {
  if (blockIdx.x != 0) return;
  for (uint64_t i = threadIdx.x; i < head; i += blockDim.x) dst[i] = src[i];
  for (uint64_t i = tail_begin + threadIdx.x; i < nbytes; i += blockDim.x) dst[i] = src[i];
}
}  // namespace

extern "C" __global__ void tmakit_copy(tmakit::uint8_t* dst, const tmakit::uint8_t* src, tmakit::uint64_t nbytes) {
  using namespace tmakit;
  griddepcontrol_wait();  // launched with pdl=True on sm_90: the previous kernel may still write src or read dst
  const uint64_t head = ((16u - ((uint64_t)dst & 15u)) & 15u) < nbytes ? ((16u - ((uint64_t)dst & 15u)) & 15u) : nbytes;
  const uint64_t body = (nbytes - head) & ~15ull;
  copy_edges(dst, src, head, head + body, nbytes);
  uint8_t* out = dst + head;
  const uint8_t* in = src + head;
  const uint64_t chunks = (body + kChunk - 1) / kChunk;
  const uint64_t mine = chunks > blockIdx.x ? (chunks - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
  auto chunk_offset = [&](uint64_t t) { return (blockIdx.x + t * gridDim.x) * (uint64_t)kChunk; };
  __shared__ Ring ring;
  Ring::State produced = make_producer_start_state<kStages>(), consumed = make_consumer_start_state<kStages>();
#if TMAKIT_USE_TMA
  extern __shared__ __align__(128) uint8_t buffers[];  // kStages * kChunk bytes, from the host
  if (threadIdx.x != 0 || mine == 0) return;  // a single thread drives the copy engine
  ring.init(1, 1);
  auto length = [&](uint64_t t) { return (uint32_t)(body - chunk_offset(t) < kChunk ? body - chunk_offset(t) : kChunk); };
  auto produce = [&](uint64_t t) {
    ring.producer_acquire(produced);
    const uint32_t len = length(t);
    cp_async_bulk_g2s_hinted<kSourceEviction>(buffers + produced.index * kChunk, in + chunk_offset(t), len,
                                              ring.producer_expect(produced, len));
    produced.advance();
  };
  for (uint64_t t = 0; t < kStages - 1 && t < mine; ++t) produce(t);
  Ring::State stored = consumed;  // the oldest stage whose store may still be reading it
  for (uint64_t t = 0; t < mine; ++t) {
    ring.consumer_wait(consumed);
    cp_async_bulk_s2g(out + chunk_offset(t), buffers + consumed.index * kChunk, length(t));
    cp_async_bulk_commit_group();
    consumed.advance();
    if (t > 0) {  // the store of chunk t-1 (group t-1) has read its stage: release it
      cp_async_bulk_wait_group_read<1>();
      ring.consumer_release(stored);
      stored.advance();
    }
    if (t + kStages - 1 < mine) produce(t + kStages - 1);
  }
  cp_async_bulk_wait_group<0>();  // global writes complete before the block retires
#else
  __shared__ __align__(128) uint4 buf[kStages][kVec][kThreads];
  if (blockDim.x != kThreads) asm volatile("trap;");  // the slot layout assumes kThreads threads
  auto produce = [&](uint64_t t) {
    if (t < mine) {
      for (uint32_t v = 0; v < kVec; ++v) {
        const uint64_t off = chunk_offset(t) + (uint64_t)(v * kThreads + threadIdx.x) * 16u;
        if (off < body) cp_async_cg_16(&buf[produced.index][v][threadIdx.x], in + off);
      }
    }
    ring.producer_commit(produced);  // commit even when empty: wait_group counts groups
    produced.advance();
  };
  for (uint64_t t = 0; t < kStages - 1; ++t) produce(t);
  for (uint64_t t = 0; t < mine; ++t) {
    produce(t + kStages - 1);  // refills the slots this thread emptied in iteration t-1
    ring.consumer_wait<kStages - 1>(consumed);
    for (uint32_t v = 0; v < kVec; ++v) {
      const uint64_t off = chunk_offset(t) + (uint64_t)(v * kThreads + threadIdx.x) * 16u;
      if (off < body) *reinterpret_cast<uint4*>(out + off) = buf[consumed.index][v][threadIdx.x];
    }
    consumed.advance();
  }
  cp_async_wait_all();
#endif
}

// tmakit_copy_bytes: buffers whose addresses differ modulo 16 cannot use 16-byte pieces on both sides.
extern "C" __global__ void tmakit_copy_bytes(tmakit::uint8_t* dst, const tmakit::uint8_t* src, tmakit::uint64_t nbytes) {
  using tmakit::uint64_t;
  tmakit::griddepcontrol_wait();  // launched with pdl=True on sm_90
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < nbytes; i += (uint64_t)gridDim.x * blockDim.x)
    dst[i] = src[i];
}
