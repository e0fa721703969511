// Non-tensor bulk copies (sm_90; PTX ISA "cp.async.bulk"): contiguous bytes moved by the TMA unit, no
// descriptor. Addresses 16-byte aligned, sizes a multiple of 16.
#pragma once
#include "tmakit/cache_policy.cuh"
#include "tmakit/config.cuh"
#include "tmakit/mbarrier.cuh"
#include "tmakit/types.cuh"

namespace tmakit {

// cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes: global -> shared, `bytes` complete_tx
// on `bar`. ONE thread issues it after mbarrier_arrive_expect_tx(bar, bytes) (or expect_tx for several).
__device__ __forceinline__ void cp_async_bulk_g2s(void* smem, const void* gmem, uint32_t bytes, MbarrierRef bar) {
#if TMAKIT_HAS_SM90
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   shared_addr(smem)),
               "l"(gmem), "r"(bytes), "r"(bar.address)
               : "memory");
#else
  TMAKIT_REQUIRES_SM90();
#endif
}

// cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint (PTX ISA 9.7.9.25.4.1,
// cp.async.bulk): cp_async_bulk_g2s with the source lines' L2 priority (cache_policy.cuh; kNormal: no hint).
template <L2Eviction Eviction>
__device__ __forceinline__ void cp_async_bulk_g2s_hinted(void* smem, const void* gmem, uint32_t bytes, MbarrierRef bar) {
#if TMAKIT_HAS_SM90
  if constexpr (Eviction == L2Eviction::kNormal) {
    cp_async_bulk_g2s(smem, gmem, bytes, bar);
  } else {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;"
                 ::"r"(shared_addr(smem)), "l"(gmem), "r"(bytes), "r"(bar.address), "l"(l2_cache_policy<Eviction>())
                 : "memory");
  }
#else
  TMAKIT_REQUIRES_SM90();
#endif
}

// cp.async.bulk.global.shared::cta.bulk_group: shared -> global. ONE thread issues it (after the writers'
// fence_proxy_async_shared_cta() and a block sync if other threads wrote `smem`); completes through
// cp_async_bulk_commit_group() / cp_async_bulk_wait_group[_read]<N>() from tma.cuh.
__device__ __forceinline__ void cp_async_bulk_s2g(void* gmem, const void* smem, uint32_t bytes) {
#if TMAKIT_HAS_SM90
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(gmem), "r"(shared_addr(smem)),
               "r"(bytes)
               : "memory");
#else
  TMAKIT_REQUIRES_SM90();
#endif
}

}  // namespace tmakit
