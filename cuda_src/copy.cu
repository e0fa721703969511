// tmakit_copy: dst[0:nbytes] = src[0:nbytes] for buffers whose addresses agree modulo 16 (the host checks;
// tmakit_copy_bytes handles the rest). Bytes before dst's first 16-byte boundary and after the last whole
// 16-byte piece are copied by block 0's threads; the 16-byte-aligned body goes through shared memory:
//   TMA path:     one thread per block runs a ring of kStages bulk copies (cp.async.bulk global->shared on
//                 an mbarrier, then cp.async.bulk shared->global), kChunk bytes each, in dynamic shared
//                 memory of kStages * kChunk bytes (TMAKIT_COPY_STAGES, TMAKIT_COPY_CHUNK: plan arguments).
//   cp.async path: every thread streams its own 16-byte slots through a kStages ring with cp.async.cg and
//                 wait_group, so no block-wide synchronisation is needed at all.
#include "tmakit/bulk_copy.cuh"
#include "tmakit/cp_async.cuh"
#include "tmakit/fence.cuh"
#include "tmakit/mbarrier.cuh"
#include "tmakit/tma.cuh"

using namespace tmakit;

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
#if TMAKIT_USE_TMA
constexpr int kStages = TMAKIT_COPY_STAGES;
constexpr uint32_t kChunk = TMAKIT_COPY_CHUNK;  // the ring lives in dynamic shared memory: kStages * kChunk
static_assert(kChunk % 16 == 0 && kStages >= 2 && kStages <= 8, "chunks of whole 16 bytes, a ring of 2..8");
constexpr L2Eviction kSourceEviction = static_cast<L2Eviction>(TMAKIT_COPY_SOURCE_EVICTION);
#else
constexpr int kStages = 4;
constexpr uint32_t kThreads = 256, kVec = 2;  // 16-byte slots per thread per stage
constexpr uint32_t kChunk = kThreads * kVec * 16u;
#endif

__device__ __forceinline__ void copy_edges(uint8_t* dst, const uint8_t* src, uint64_t head, uint64_t tail_begin,
                                           uint64_t nbytes) {
  if (blockIdx.x != 0) return;
  for (uint64_t i = threadIdx.x; i < head; i += blockDim.x) dst[i] = src[i];
  for (uint64_t i = tail_begin + threadIdx.x; i < nbytes; i += blockDim.x) dst[i] = src[i];
}
}  // namespace

extern "C" __global__ void tmakit_copy(uint8_t* dst, const uint8_t* src, uint64_t nbytes) {
  const uint64_t head = ((16u - ((uint64_t)dst & 15u)) & 15u) < nbytes ? ((16u - ((uint64_t)dst & 15u)) & 15u) : nbytes;
  const uint64_t body = (nbytes - head) & ~15ull;
  copy_edges(dst, src, head, head + body, nbytes);
  uint8_t* out = dst + head;
  const uint8_t* in = src + head;
  const uint64_t chunks = (body + kChunk - 1) / kChunk;
  const uint64_t mine = chunks > blockIdx.x ? (chunks - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
  auto chunk_offset = [&](uint64_t t) { return (blockIdx.x + t * gridDim.x) * (uint64_t)kChunk; };
#if TMAKIT_USE_TMA
  extern __shared__ __align__(128) uint8_t ring[];  // kStages * kChunk bytes, from the host
  auto buf = [&](int s) { return ring + s * kChunk; };
  __shared__ uint64_t bars[kStages];
  if (threadIdx.x != 0 || mine == 0) return;  // a single thread drives the copy engine
  for (int s = 0; s < kStages; ++s) mbarrier_init(&bars[s], 1);
  fence_mbarrier_init();
  auto issue = [&](uint64_t t) {
    const int s = (int)(t % kStages);
    const uint64_t off = chunk_offset(t);
    const uint32_t len = (uint32_t)(body - off < kChunk ? body - off : kChunk);
    mbarrier_arrive_expect_tx(&bars[s], len);
    cp_async_bulk_g2s_hinted<kSourceEviction>(buf(s), in + off, len, &bars[s]);
  };
  for (uint64_t t = 0; t < kStages - 1 && t < mine; ++t) issue(t);
  for (uint64_t t = 0; t < mine; ++t) {
    const int s = (int)(t % kStages);
    mbarrier_wait_parity(&bars[s], (uint32_t)((t / kStages) & 1));
    const uint64_t off = chunk_offset(t);
    cp_async_bulk_s2g(out + off, buf(s), (uint32_t)(body - off < kChunk ? body - off : kChunk));
    cp_async_bulk_commit_group();
    // Stage (t-1) % kStages is refilled next: its store (group t-1) must have finished reading it.
    cp_async_bulk_wait_group_read<1>();
    if (t + kStages - 1 < mine) issue(t + kStages - 1);
  }
  cp_async_bulk_wait_group<0>();  // global writes complete before the block retires
#else
  __shared__ __align__(128) uint4 buf[kStages][kVec][kThreads];
  if (blockDim.x != kThreads) asm volatile("trap;");  // the slot layout assumes kThreads threads
  auto issue = [&](uint64_t t) {
    if (t < mine) {
      const int s = (int)(t % kStages);
      for (uint32_t v = 0; v < kVec; ++v) {
        const uint64_t off = chunk_offset(t) + (uint64_t)(v * kThreads + threadIdx.x) * 16u;
        if (off < body) cp_async_cg_16(&buf[s][v][threadIdx.x], in + off);
      }
    }
    cp_async_commit_group();  // commit even when empty: wait_group counts groups
  };
  for (uint64_t t = 0; t < kStages - 1; ++t) issue(t);
  for (uint64_t t = 0; t < mine; ++t) {
    issue(t + kStages - 1);  // refills the slots this thread emptied in iteration t-1
    cp_async_wait_group<kStages - 1>();
    const int s = (int)(t % kStages);
    for (uint32_t v = 0; v < kVec; ++v) {
      const uint64_t off = chunk_offset(t) + (uint64_t)(v * kThreads + threadIdx.x) * 16u;
      if (off < body) *reinterpret_cast<uint4*>(out + off) = buf[s][v][threadIdx.x];
    }
  }
  cp_async_wait_all();
#endif
}

// tmakit_copy_bytes: buffers whose addresses differ modulo 16 cannot use 16-byte pieces on both sides.
extern "C" __global__ void tmakit_copy_bytes(uint8_t* dst, const uint8_t* src, uint64_t nbytes) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < nbytes; i += (uint64_t)gridDim.x * blockDim.x)
    dst[i] = src[i];
}
