// L2 eviction priority for the lines a load brings in (PTX ISA "createpolicy", and the .L2::cache_hint
// operand of "cp.async.bulk.tensor" and "cp.async"; sm_80). The loads that take it (tma.cuh, cp_async.cuh,
// box_load.cuh) are templates on L2Eviction: kNormal emits the plain instruction, the others make the 64-bit
// policy with createpolicy in the calling thread and pass it with .L2::cache_hint.
//
// Why a kernel would ask: evict_last keeps lines that another block reads soon (measured on the H100: the
// transpose's source rows when a row's 128 bytes straddle two lines, benchmarks/copy_bandwidth.py);
// evict_first marks data read once, so it leaves L2 before anything else.
#pragma once
#include "tmakit/types.cuh"

namespace tmakit {

enum class L2Eviction : uint32_t { kNormal = 0, kFirst = 1, kLast = 2 };

// createpolicy.fractional.L2::evict_{first,last}.b64: the policy for every line of the access (fraction 1).
// Any thread; not volatile, so the compiler may make it once per kernel.
template <L2Eviction Eviction>
__device__ __forceinline__ uint64_t l2_cache_policy() {
  static_assert(Eviction != L2Eviction::kNormal, "kNormal loads carry no policy: use the plain instruction");
  uint64_t policy;
  if constexpr (Eviction == L2Eviction::kFirst)
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  else
    asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

}  // namespace tmakit
