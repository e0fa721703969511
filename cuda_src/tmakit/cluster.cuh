// Thread-block cluster helpers, named after the PTX they emit. PTX ISA sections: "Special Registers:
// %cluster_ctarank, %cluster_nctarank, %clusterid" (10.x), "barrier.cluster" (9.7.13.2). The remote side of
// mbarriers (mapa, mbarrier.arrive.shared::cluster) is in mbarrier.cuh; TMA multicast to a CTA mask in tma.cuh.
// Below sm_90 there are no clusters: every block is a cluster of one (rank 0 of 1, its barrier the block's).
#pragma once
#include "tmakit/config.cuh"
#include "tmakit/types.cuh"

namespace tmakit {

// %cluster_ctarank: this CTA's rank in its cluster (0 .. cluster size - 1; 0 without a cluster launch). Any thread.
__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t r = 0;
#if TMAKIT_HAS_SM90
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
#endif
  return r;
}

// %cluster_nctarank: CTAs in this cluster (1 without a cluster launch). Any thread.
__device__ __forceinline__ uint32_t cluster_nctarank() {
  uint32_t r = 1;
#if TMAKIT_HAS_SM90
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
#endif
  return r;
}

// %clusterid.x: this cluster's index along x in the grid of clusters (blockIdx.x below sm_90). Any thread.
__device__ __forceinline__ uint32_t cluster_id_x() {
#if TMAKIT_HAS_SM90
  uint32_t r;
  asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(r));
  return r;
#else
  return blockIdx.x;
#endif
}

// barrier.cluster.arrive.release.aligned: this thread's arrival at the cluster barrier (its earlier writes,
// shared::cluster included, are released). Every thread of every CTA of the cluster arrives, then waits.
__device__ __forceinline__ void barrier_cluster_arrive() {
#if TMAKIT_HAS_SM90
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
#else
  TMAKIT_REQUIRES_SM90();
#endif
}

// barrier.cluster.wait.acquire.aligned: wait until every thread of the cluster arrived. Every thread.
__device__ __forceinline__ void barrier_cluster_wait() {
#if TMAKIT_HAS_SM90
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
#else
  TMAKIT_REQUIRES_SM90();
#endif
}

// Both halves: the cluster-wide __syncthreads (e.g. after mbarrier.init, before a peer may arrive remotely or
// multicast into this CTA). Every thread of every CTA of the cluster. Below sm_90, __syncthreads().
__device__ __forceinline__ void cluster_sync() {
#if TMAKIT_HAS_SM90
  barrier_cluster_arrive();
  barrier_cluster_wait();
#else
  __syncthreads();
#endif
}

}  // namespace tmakit
