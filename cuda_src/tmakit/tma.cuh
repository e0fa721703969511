// Tensor Memory Accelerator wrappers (sm_90), named after the PTX they emit. PTX ISA sections:
// "cp.async.bulk.tensor", "cp.reduce.async.bulk.tensor", "cp.async.bulk.prefetch.tensor",
// "cp.async.bulk.commit_group", "cp.async.bulk.wait_group", "prefetch{.tensormap}", "createpolicy".
//
// All take the descriptor by generic address: it must be a `const __grid_constant__` kernel parameter,
// in constant memory, or in global memory made visible with a tensormap fence. Coordinates are elements,
// innermost first (driver order), and may be negative or past the end: TMA fills/clips out-of-bounds.
// Each rank has its own instruction; the operand list is the same for all ranks (dst/src %0, descriptor
// %1, coordinates %2..%6, barrier %7, multicast mask %8) so one macro writes the coordinate text.
#pragma once
#include "tmakit/cache_policy.cuh"
#include "tmakit/config.cuh"
#include "tmakit/mbarrier.cuh"
#include "tmakit/types.cuh"

#define TMAKIT_TMA_COORDS_1 "{%2}"
#define TMAKIT_TMA_COORDS_2 "{%2, %3}"
#define TMAKIT_TMA_COORDS_3 "{%2, %3, %4}"
#define TMAKIT_TMA_COORDS_4 "{%2, %3, %4, %5}"
#define TMAKIT_TMA_COORDS_5 "{%2, %3, %4, %5, %6}"
#define TMAKIT_TMA_OPERANDS(smem, desc, c, bar) \
  "r"(smem), "l"(desc), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]), "r"(c[4]), "r"(bar)

// The tile load with one more qualifier and the operand it takes as %8 (.L2::cache_hint and the policy,
// .multicast::cluster and the CTA mask); `dst`, `desc`, `at` and `mbar` are the caller's locals.
#define TMAKIT_TMA_LOAD_WITH_OPERAND(N, QUALIFIER, OPERAND)                                                   \
  asm volatile("cp.async.bulk.tensor." #N "d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"      \
               QUALIFIER " [%0], [%1, " TMAKIT_TMA_COORDS_##N "], [%7], %8;"                                  \
               ::TMAKIT_TMA_OPERANDS(dst, desc, at.c, mbar), OPERAND                                         \
               : "memory")

// Expand `BODY(N)` for the compile-time rank (1..5), keeping each rank's asm text a literal.
#define TMAKIT_TMA_BY_RANK(Rank, BODY)  \
  if constexpr (Rank == 1) {            \
    BODY(1);                            \
  } else if constexpr (Rank == 2) {     \
    BODY(2);                            \
  } else if constexpr (Rank == 3) {     \
    BODY(3);                            \
  } else if constexpr (Rank == 4) {     \
    BODY(4);                            \
  } else {                              \
    static_assert(Rank >= 1 && Rank <= 5, "TMA tensors have rank 1..5"); \
    BODY(5);                            \
  }

namespace tmakit {

// cp.async.bulk.tensor.Nd.shared::cluster.global.tile.mbarrier::complete_tx::bytes{.L2::cache_hint}
// Global -> shared tile load; the box's bytes complete_tx on `bar`. ONE thread issues it, after
// arming the barrier with mbarrier_arrive_expect_tx(bar, box bytes). `smem` must meet the swizzle's
// alignment (128 B, or 256/512/1024 B with 32B/64B/128B swizzle). Eviction: the L2 priority of the lines
// it brings in (cache_policy.cuh; kNormal: no hint).
template <int Rank, L2Eviction Eviction = L2Eviction::kNormal>
__device__ __forceinline__ void cp_async_bulk_tensor_g2s(void* smem, const TensorMapDesc* desc, const Coords& at,
                                                         MbarrierRef bar) {
#if TMAKIT_HAS_SM90
  const uint32_t dst = shared_addr(smem), mbar = bar.address;
  if constexpr (Eviction == L2Eviction::kNormal) {
#define TMAKIT_BODY(N)                                                                                      \
  asm volatile("cp.async.bulk.tensor." #N "d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"     \
               " [%0], [%1, " TMAKIT_TMA_COORDS_##N "], [%7];" ::TMAKIT_TMA_OPERANDS(dst, desc, at.c, mbar) \
               : "memory")
    TMAKIT_TMA_BY_RANK(Rank, TMAKIT_BODY)
#undef TMAKIT_BODY
  } else {
    const uint64_t policy = l2_cache_policy<Eviction>();
#define TMAKIT_BODY(N) TMAKIT_TMA_LOAD_WITH_OPERAND(N, ".L2::cache_hint", "l"(policy))
    TMAKIT_TMA_BY_RANK(Rank, TMAKIT_BODY)
#undef TMAKIT_BODY
  }
#else
  TMAKIT_REQUIRES_SM90();
#endif
}

// Same load, delivered to the same shared-memory offset in every CTA of the cluster whose bit is set in
// `cta_mask` (.multicast::cluster); each destination CTA's barrier at `bar`'s offset gets the bytes.
// ONE thread of ONE CTA issues it; every receiving CTA arms its own barrier with expect_tx.
template <int Rank>
__device__ __forceinline__ void cp_async_bulk_tensor_g2s_multicast(void* smem, const TensorMapDesc* desc,
                                                                   const Coords& at, MbarrierRef bar,
                                                                   uint16_t cta_mask) {
#if TMAKIT_HAS_SM90
  const uint32_t dst = shared_addr(smem), mbar = bar.address;
#define TMAKIT_BODY(N) TMAKIT_TMA_LOAD_WITH_OPERAND(N, ".multicast::cluster", "h"(cta_mask))
  TMAKIT_TMA_BY_RANK(Rank, TMAKIT_BODY)
#undef TMAKIT_BODY
#else
  TMAKIT_REQUIRES_SM90();
#endif
}

// cp.async.bulk.tensor.Nd.global.shared::cta.tile.bulk_group
// Shared -> global tile store; out-of-bounds parts of the box are not written. ONE thread issues it after
// the writers did fence_proxy_async_shared_cta() and the block synchronised. Completion: commit_group,
// then wait_group_read before reusing `smem`, wait_group before relying on the global writes.
template <int Rank>
__device__ __forceinline__ void cp_async_bulk_tensor_s2g(const TensorMapDesc* desc, const Coords& at,
                                                         const void* smem) {
#if TMAKIT_HAS_SM90
  const uint32_t src = shared_addr(smem), unused = 0;
#define TMAKIT_BODY(N)                                                                                       \
  asm volatile("cp.async.bulk.tensor." #N "d.global.shared::cta.tile.bulk_group"                            \
               " [%1, " TMAKIT_TMA_COORDS_##N "], [%0];" ::TMAKIT_TMA_OPERANDS(src, desc, at.c, unused)     \
               : "memory")
  TMAKIT_TMA_BY_RANK(Rank, TMAKIT_BODY)
#undef TMAKIT_BODY
#else
  TMAKIT_REQUIRES_SM90();
#endif
}

// cp.reduce.async.bulk.tensor.Nd.global.shared::cta.add.tile.bulk_group
// Like cp_async_bulk_tensor_s2g but global[box] += smem (element type from the descriptor), atomically
// per element. Same caller and completion rules as the store.
template <int Rank>
__device__ __forceinline__ void cp_reduce_async_bulk_tensor_add(const TensorMapDesc* desc, const Coords& at,
                                                                const void* smem) {
#if TMAKIT_HAS_SM90
  const uint32_t src = shared_addr(smem), unused = 0;
#define TMAKIT_BODY(N)                                                                                   \
  asm volatile("cp.reduce.async.bulk.tensor." #N "d.global.shared::cta.add.tile.bulk_group"             \
               " [%1, " TMAKIT_TMA_COORDS_##N "], [%0];" ::TMAKIT_TMA_OPERANDS(src, desc, at.c, unused) \
               : "memory")
  TMAKIT_TMA_BY_RANK(Rank, TMAKIT_BODY)
#undef TMAKIT_BODY
#else
  TMAKIT_REQUIRES_SM90();
#endif
}

// cp.async.bulk.prefetch.tensor.Nd.L2.global.tile: pull a box into L2 ahead of its load. Any ONE thread.
template <int Rank>
__device__ __forceinline__ void cp_async_bulk_prefetch_tensor(const TensorMapDesc* desc, const Coords& at) {
#if TMAKIT_HAS_SM90
  const uint32_t unused = 0;
#define TMAKIT_BODY(N)                                                                                     \
  asm volatile("cp.async.bulk.prefetch.tensor." #N "d.L2.global.tile"                                     \
               " [%1, " TMAKIT_TMA_COORDS_##N "];" ::TMAKIT_TMA_OPERANDS(unused, desc, at.c, unused)      \
               : "memory")
  TMAKIT_TMA_BY_RANK(Rank, TMAKIT_BODY)
#undef TMAKIT_BODY
#else
  TMAKIT_REQUIRES_SM90();
#endif
}

// Runtime-rank entry points for kernels whose rank comes from the host (tile_load.cu): one switch here
// instead of one in every kernel.
template <L2Eviction Eviction = L2Eviction::kNormal>
__device__ __forceinline__ void cp_async_bulk_tensor_g2s(int rank, void* smem, const TensorMapDesc* desc,
                                                         const Coords& at, MbarrierRef bar) {
  switch (rank) {
    case 1: cp_async_bulk_tensor_g2s<1, Eviction>(smem, desc, at, bar); break;
    case 2: cp_async_bulk_tensor_g2s<2, Eviction>(smem, desc, at, bar); break;
    case 3: cp_async_bulk_tensor_g2s<3, Eviction>(smem, desc, at, bar); break;
    case 4: cp_async_bulk_tensor_g2s<4, Eviction>(smem, desc, at, bar); break;
    default: cp_async_bulk_tensor_g2s<5, Eviction>(smem, desc, at, bar); break;
  }
}

__device__ __forceinline__ void cp_async_bulk_tensor_s2g(int rank, const TensorMapDesc* desc, const Coords& at,
                                                         const void* smem) {
  switch (rank) {
    case 1: cp_async_bulk_tensor_s2g<1>(desc, at, smem); break;
    case 2: cp_async_bulk_tensor_s2g<2>(desc, at, smem); break;
    case 3: cp_async_bulk_tensor_s2g<3>(desc, at, smem); break;
    case 4: cp_async_bulk_tensor_s2g<4>(desc, at, smem); break;
    default: cp_async_bulk_tensor_s2g<5>(desc, at, smem); break;
  }
}

// prefetch.tensormap: bring the 128-byte descriptor into the TMA unit's cache before first use.
// Any ONE thread, typically at kernel start.
__device__ __forceinline__ void prefetch_tensormap(const TensorMapDesc* desc) {
#if TMAKIT_HAS_SM90
  asm volatile("prefetch.tensormap [%0];" ::"l"(desc) : "memory");
#endif
}

// cp.async.bulk.commit_group: close the bulk-async group of this thread's earlier S2G bulk/tensor
// stores. The issuing thread calls it.
__device__ __forceinline__ void cp_async_bulk_commit_group() {
#if TMAKIT_HAS_SM90
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
#else
  TMAKIT_REQUIRES_SM90();
#endif
}

// cp.async.bulk.wait_group.read N: wait until at most N of this thread's committed groups are still
// READING their shared-memory source (the buffer may then be overwritten). The issuing thread calls it.
template <int N>
__device__ __forceinline__ void cp_async_bulk_wait_group_read() {
#if TMAKIT_HAS_SM90
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
#else
  TMAKIT_REQUIRES_SM90();
#endif
}

// cp.async.bulk.wait_group N: wait until at most N groups are pending at all (their global writes done).
template <int N>
__device__ __forceinline__ void cp_async_bulk_wait_group() {
#if TMAKIT_HAS_SM90
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(N) : "memory");
#else
  TMAKIT_REQUIRES_SM90();
#endif
}

}  // namespace tmakit
