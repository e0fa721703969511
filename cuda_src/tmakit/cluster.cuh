// Thread-block cluster helpers (sm_90), named after the PTX they emit. PTX ISA sections: "Special Registers:
// %cluster_ctarank, %cluster_nctarank" (10.x), "barrier.cluster" (9.7.13.x), "mapa" (9.7.9.x), "mbarrier.arrive"
// with .shared::cluster (9.7.13.15.13). TMA multicast to a CTA mask is in tma.cuh
// (cp_async_bulk_tensor_g2s_multicast).
#pragma once
#include "tmakit/config.cuh"
#include "tmakit/types.cuh"

namespace tmakit {
#if TMAKIT_HAS_SM90
// %cluster_ctarank: this CTA's rank in its cluster (0 .. cluster size - 1). Any thread.
__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
// %cluster_nctarank: CTAs in this cluster. Any thread.
__device__ __forceinline__ uint32_t cluster_nctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
  return r;
}
// barrier.cluster.arrive.release.aligned: this thread's arrival at the cluster barrier (its earlier writes,
// shared::cluster included, are released). All threads of every CTA of the cluster arrive, then wait.
__device__ __forceinline__ void barrier_cluster_arrive() {
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}
// barrier.cluster.wait.acquire.aligned: wait until every thread of the cluster arrived. All threads.
__device__ __forceinline__ void barrier_cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }
// Both halves: the cluster-wide __syncthreads (e.g. after mbarrier.init, before a peer may arrive remotely).
__device__ __forceinline__ void cluster_sync() {
  barrier_cluster_arrive();
  barrier_cluster_wait();
}
// mapa.shared::cluster.u32: the shared::cluster address of the variable at `smem_addr` (a shared::cta address of
// this CTA) in the CTA of rank `cta_rank`. Any thread.
__device__ __forceinline__ uint32_t mapa_shared_cluster(uint32_t smem_addr, uint32_t cta_rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(smem_addr), "r"(cta_rank));
  return r;
}
// mbarrier.arrive.shared::cluster.b64 (default .release.cta semantics): one arrival on the barrier at
// `cluster_addr` (from mapa_shared_cluster; may be this CTA's own). Enough for "I am done reading this stage"
// (the reads were the tensor cores' or the copy engine's); a .release.cluster arrival costs a MEMBAR.ALL.GPU per
// call in SASS, which halved the GEMM's throughput when it released every stage that way.
__device__ __forceinline__ void mbarrier_arrive_cluster(uint32_t cluster_addr) {
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(cluster_addr) : "memory");
}
#endif  // TMAKIT_HAS_SM90
}  // namespace tmakit
