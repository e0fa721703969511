// Ampere asynchronous copies (sm_80; PTX ISA "cp.async", "cp.async.commit_group", "cp.async.wait_group").
// Per-thread: each thread copies its own 4/8/16 bytes global -> shared and later waits for its own groups.
// Another thread may read the data only after the waiter also synchronises with it (__syncthreads, or an
// mbarrier arrive via cp_async_mbarrier_arrive in mbarrier.cuh).
#pragma once
#include "tmakit/cache_policy.cuh"
#include "tmakit/types.cuh"

namespace tmakit {

// cp.async.ca.shared.global [dst], [src], Bytes, src_size: cache at all levels. Bytes is 4, 8 or 16;
// src and dst aligned to Bytes. Only the first `src_size` bytes are read; the rest of the Bytes are written
// as zeros. src_size == 0 reads nothing (src must still be a valid address), i.e. an out-of-bounds zero fill.
template <int Bytes>
__device__ __forceinline__ void cp_async_ca(void* smem, const void* gmem, uint32_t src_size = Bytes) {
  static_assert(Bytes == 4 || Bytes == 8 || Bytes == 16, "cp.async.ca copies 4, 8 or 16 bytes");
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;" ::"r"(shared_addr(smem)), "l"(gmem), "n"(Bytes),
               "r"(src_size)
               : "memory");
}

// cp.async.cg.shared.global [dst], [src], 16, src_size: bypass L1 (streaming data); 16 bytes only.
__device__ __forceinline__ void cp_async_cg_16(void* smem, const void* gmem, uint32_t src_size = 16) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(shared_addr(smem)), "l"(gmem), "r"(src_size)
               : "memory");
}

// The same with the .level::prefetch_size hint (PTX ISA, cp.async: .L2::64B/128B/256B): L2 fetches that
// much around the source, the cp.async twin of a tensor map's L2 promotion. `promotion` is the
// CUtensorMapL2promotion value (0 none, 1 64B, 2 128B, 3 256B); warp-uniform in practice, so the branch
// costs nothing. Eviction: .L2::cache_hint with that policy (cache_policy.cuh; kNormal: none). Measured on
// the H100 (the forced cp.async transpose of a 1333-byte pitch): hinted, it ran in a plain strided walk but stopped a kernel with an
// illegal instruction inside a per-chunk walk (NVRTC 13.0, sm_90a); box_load does not use the hint.
template <L2Eviction Eviction = L2Eviction::kNormal>
__device__ __forceinline__ void cp_async_cg_16_promoted(void* smem, const void* gmem, uint32_t promotion,
                                                        uint32_t src_size = 16) {
  const uint32_t s = shared_addr(smem);
  uint64_t policy = 0;
  if constexpr (Eviction != L2Eviction::kNormal) policy = l2_cache_policy<Eviction>();
#define TMAKIT_CP_ASYNC_CG_16_HINTED(HINT)                                                                      \
  if constexpr (Eviction == L2Eviction::kNormal)                                                                \
    asm volatile("cp.async.cg.shared.global" HINT " [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "r"(src_size)      \
                 : "memory");                                                                                   \
  else                                                                                                          \
    asm volatile("cp.async.cg.shared.global.L2::cache_hint" HINT " [%0], [%1], 16, %2, %3;" ::"r"(s), "l"(gmem), \
                 "r"(src_size), "l"(policy)                                                                     \
                 : "memory")
  switch (promotion) {
    case 1: TMAKIT_CP_ASYNC_CG_16_HINTED(".L2::64B"); break;
    case 2: TMAKIT_CP_ASYNC_CG_16_HINTED(".L2::128B"); break;
    case 3: TMAKIT_CP_ASYNC_CG_16_HINTED(".L2::256B"); break;
    default: TMAKIT_CP_ASYNC_CG_16_HINTED("");
  }
#undef TMAKIT_CP_ASYNC_CG_16_HINTED
}

// cp.async.commit_group: close this thread's batch of cp.async issued since the last commit.
__device__ __forceinline__ void cp_async_commit_group() { asm volatile("cp.async.commit_group;" ::: "memory"); }

// cp.async.wait_group N: wait until at most N of this thread's committed groups are pending.
template <int N>
__device__ __forceinline__ void cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// cp.async.wait_all: commit and wait for everything this thread issued.
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

// Runtime N for ring pipelines whose depth is a kernel parameter (the instruction needs an immediate).
__device__ __forceinline__ void cp_async_wait_group_dynamic(int n) {
  switch (n) {
    case 0: cp_async_wait_group<0>(); break;
    case 1: cp_async_wait_group<1>(); break;
    case 2: cp_async_wait_group<2>(); break;
    case 3: cp_async_wait_group<3>(); break;
    case 4: cp_async_wait_group<4>(); break;
    case 5: cp_async_wait_group<5>(); break;
    case 6: cp_async_wait_group<6>(); break;
    default: cp_async_wait_group<7>(); break;  // deeper rings wait conservatively for all but 7
  }
}

}  // namespace tmakit
