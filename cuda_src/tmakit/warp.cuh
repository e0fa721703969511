// Warp-level helpers, named after the PTX they emit: which lane of a warp does the one-thread work (arming a
// barrier, issuing a TMA copy or store). PTX ISA "elect.sync" (9.7.13.x, sm_90).
#pragma once
#include "tmakit/config.cuh"
#include "tmakit/types.cuh"

namespace tmakit {

// elect.sync _|p, 0xffffffff: true in exactly one lane of the (fully active) warp; every lane calls it. Below
// sm_90, the lowest active lane.
__device__ __forceinline__ bool elect_one_sync() {
#if TMAKIT_HAS_SM90
  uint32_t pred = 0;
  asm volatile("{\n .reg .b32 r;\n .reg .pred p;\n elect.sync r|p, 0xffffffff;\n selp.u32 %0, 1, 0, p;\n}"
               : "=r"(pred));
  return pred != 0;
#else
  return (threadIdx.x & 31u) == static_cast<uint32_t>(__ffs(__activemask()) - 1);
#endif
}

}  // namespace tmakit
