// Named barriers (PTX ISA 9.7.13.1, "bar, barrier"): synchronise a subset of a block's warps on one of the 16
// hardware barriers, e.g. the 128 threads of one consumer warpgroup while the other warpgroups run on. Id 0 is
// the one __syncthreads() uses; a kernel that gives its groups ids 1..15 keeps them apart.
#pragma once
#include "tmakit/types.cuh"

namespace tmakit {

class NamedBarrier {
 public:
  // `threads`: how many threads take part (a multiple of 32, every thread of each participating warp).
  __device__ __forceinline__ NamedBarrier(uint32_t id, uint32_t threads) : id_(id), threads_(threads) {}
  // bar.sync id, threads (barrier.sync.aligned): wait until `threads` threads arrived; orders their shared-memory
  // accesses like __syncthreads() does for the block. Every participating thread.
  __device__ __forceinline__ void sync() const {
    asm volatile("bar.sync %0, %1;" ::"r"(id_), "r"(threads_) : "memory");
  }
  // bar.arrive id, threads: count this thread's arrival without waiting (a producer that signals a consumer
  // group which waits with sync()).
  __device__ __forceinline__ void arrive() const {
    asm volatile("bar.arrive %0, %1;" ::"r"(id_), "r"(threads_) : "memory");
  }
  __device__ __forceinline__ uint32_t id() const { return id_; }
  __device__ __forceinline__ uint32_t threads() const { return threads_; }

 private:
  uint32_t id_, threads_;
};

}  // namespace tmakit
