// Device-side tensor maps (sm_90a): edit a CUtensorMap's fields on the GPU and publish it to the TMA unit, named
// after the PTX they emit. PTX ISA sections: "tensormap.replace" and "tensormap.cp_fenceproxy" (Data Movement and
// Conversion Instructions), "membar / fence" (fence.proxy.tensormap::generic).
//   https://docs.nvidia.com/cuda/parallel-thread-execution/#data-movement-and-conversion-instructions-tensormap-replace
//
// The recipe (CUTLASS's grouped GEMM and Triton's device-side descriptors do the same):
//   1. copy a host-encoded template into 128-byte-aligned shared memory (or start from 128 zero bytes);
//   2. one thread replaces the fields that change (tensormap_replace_*);
//   3. __syncwarp(), then the whole warp publishes it to global memory: tensormap_cp_fenceproxy (a copy plus a
//      release of the generic-proxy writes to the tensormap proxy, at GPU scope);
//   4. every thread that will issue TMA through it: fence_proxy_tensormap_acquire(global map), then
//      cp.async.bulk.tensor with the global map's address.
// A map edited in place in global memory (the .global forms) is published with fence_proxy_tensormap_release().
//
// Values are PTX's, not the driver's: `rank` is the rank minus 1; box_dim, global_dim and element_stride are the
// counts themselves; global_stride is in bytes (a multiple of 16); elemtype, interleave_layout, swizzle_mode and
// fill_mode are immediates (template arguments) in PTX's numbering (elemtype: u8 0, u16 1, u32 2, s32 3, u64 4,
// s64 5, f16 6, f32 7, f32.ftz 8, f64 9, bf16 10, tf32 11, tf32.ftz 12), and so are the ordinals (dimension
// `Ord`, innermost first, as the driver orders them). tmakit.tensormap_replace_steps(tensor_map) lists the
// values that turn any map into `tensor_map`, and tmakit.apply_tensormap_replace models what they write.
// Nothing checks a replaced map: the TMA faults or hangs on an invalid one, so check it on the host first.
#pragma once
#include "tmakit/config.cuh"
#include "tmakit/types.cuh"

namespace tmakit {

// A tensor map being edited in shared memory (128 bytes, 128-byte aligned): the shared::cta forms take it.
struct TensorMapSmem {
  uint32_t address;
  __device__ __forceinline__ explicit TensorMapSmem(TensorMapDesc* in_shared) : address(shared_addr(in_shared)) {}
};

// One wrapper per (field, state space). The shared::cta forms address the map by its 32-bit shared address,
// the global forms by its generic address (which must point to global memory).
#define TMAKIT_TMR_SPACE_shared "shared::cta"
#define TMAKIT_TMR_SPACE_global "global"
#define TMAKIT_TMR_MAP_shared TensorMapSmem map
#define TMAKIT_TMR_MAP_global TensorMapDesc* map
#define TMAKIT_TMR_ADDR_shared "r"(map.address)
#define TMAKIT_TMR_ADDR_global "l"(map)

// tensormap.replace.tile.{global_address,rank}.space.b1024.type [map], new_val;
#define TMAKIT_TMR_FIELD1(SPACE, FIELD, TYPE, CTYPE, CONSTRAINT)                                               \
  __device__ __forceinline__ void tensormap_replace_##FIELD(TMAKIT_TMR_MAP_##SPACE, CTYPE new_val) {          \
    TMAKIT_TMR_BODY(asm volatile("tensormap.replace.tile." #FIELD "." TMAKIT_TMR_SPACE_##SPACE ".b1024." TYPE \
                                 " [%0], %1;" ::TMAKIT_TMR_ADDR_##SPACE, CONSTRAINT(new_val) : "memory"))      \
  }
// tensormap.replace.tile.{box_dim,global_dim,global_stride,element_stride}.space.b1024.type [map], ord, new_val;
#define TMAKIT_TMR_FIELD2(SPACE, FIELD, TYPE, CTYPE, CONSTRAINT)                                               \
  template <int Ord>                                                                                          \
  __device__ __forceinline__ void tensormap_replace_##FIELD(TMAKIT_TMR_MAP_##SPACE, CTYPE new_val) {          \
    static_assert(Ord >= 0 && Ord < 5, "a tensor map has dimensions 0..4");                                   \
    TMAKIT_TMR_BODY(asm volatile("tensormap.replace.tile." #FIELD "." TMAKIT_TMR_SPACE_##SPACE ".b1024." TYPE \
                                 " [%0], %1, %2;" ::TMAKIT_TMR_ADDR_##SPACE, "n"(Ord), CONSTRAINT(new_val)     \
                                 : "memory"))                                                                 \
  }
// tensormap.replace.tile.{elemtype,interleave_layout,swizzle_mode,fill_mode}.space.b1024.b32 [map], imm;
#define TMAKIT_TMR_FIELD3(SPACE, FIELD, LIMIT)                                                                 \
  template <int Value>                                                                                        \
  __device__ __forceinline__ void tensormap_replace_##FIELD(TMAKIT_TMR_MAP_##SPACE) {                         \
    static_assert(Value >= 0 && Value < LIMIT, "tensormap.replace." #FIELD ": value out of PTX's range");     \
    TMAKIT_TMR_BODY(asm volatile("tensormap.replace.tile." #FIELD "." TMAKIT_TMR_SPACE_##SPACE                \
                                 ".b1024.b32 [%0], %1;" ::TMAKIT_TMR_ADDR_##SPACE, "n"(Value) : "memory"))     \
  }
#define TMAKIT_TMR_R(x) "r"(x)
#define TMAKIT_TMR_L(x) "l"(x)
#if TMAKIT_HAS_SM90
#define TMAKIT_TMR_BODY(STATEMENT) STATEMENT;
#else
#define TMAKIT_TMR_BODY(STATEMENT) TMAKIT_REQUIRES_SM90();
#endif

#define TMAKIT_TMR_ALL(SPACE)                                                         \
  TMAKIT_TMR_FIELD1(SPACE, global_address, "b64", const void*, TMAKIT_TMR_L)          \
  TMAKIT_TMR_FIELD1(SPACE, rank, "b32", uint32_t, TMAKIT_TMR_R)                      \
  TMAKIT_TMR_FIELD2(SPACE, box_dim, "b32", uint32_t, TMAKIT_TMR_R)                   \
  TMAKIT_TMR_FIELD2(SPACE, global_dim, "b32", uint32_t, TMAKIT_TMR_R)                \
  TMAKIT_TMR_FIELD2(SPACE, global_stride, "b64", uint64_t, TMAKIT_TMR_L)             \
  TMAKIT_TMR_FIELD2(SPACE, element_stride, "b32", uint32_t, TMAKIT_TMR_R)            \
  TMAKIT_TMR_FIELD3(SPACE, elemtype, 13)                                             \
  TMAKIT_TMR_FIELD3(SPACE, interleave_layout, 3)                                     \
  TMAKIT_TMR_FIELD3(SPACE, swizzle_mode, 4)                                          \
  TMAKIT_TMR_FIELD3(SPACE, fill_mode, 2)

TMAKIT_TMR_ALL(shared)
TMAKIT_TMR_ALL(global)

#undef TMAKIT_TMR_ALL
#undef TMAKIT_TMR_BODY
#undef TMAKIT_TMR_L
#undef TMAKIT_TMR_R
#undef TMAKIT_TMR_FIELD3
#undef TMAKIT_TMR_FIELD2
#undef TMAKIT_TMR_FIELD1
#undef TMAKIT_TMR_ADDR_global
#undef TMAKIT_TMR_ADDR_shared
#undef TMAKIT_TMR_MAP_global
#undef TMAKIT_TMR_MAP_shared
#undef TMAKIT_TMR_SPACE_global
#undef TMAKIT_TMR_SPACE_shared

// tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned [dst], [src], 128;
// Copy the edited map to global memory and release it to the tensormap proxy. .sync.aligned: every thread of the
// warp executes it, with the same operands, after a __syncwarp() that orders the edits before it.
__device__ __forceinline__ void tensormap_cp_fenceproxy(TensorMapDesc* global_dst, TensorMapSmem src) {
#if TMAKIT_HAS_SM90
  asm volatile("tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned [%0], [%1], 128;"
               ::"l"(global_dst), "r"(src.address) : "memory");
#else
  (void)global_dst, (void)src;
  TMAKIT_REQUIRES_SM90();
#endif
}

// fence.proxy.tensormap::generic.release.gpu: make this thread's generic-proxy writes to a map in global memory
// (the .global replace forms, or plain stores) visible to the tensormap proxy of the GPU.
__device__ __forceinline__ void fence_proxy_tensormap_release() {
#if TMAKIT_HAS_SM90
  asm volatile("fence.proxy.tensormap::generic.release.gpu;" ::: "memory");
#else
  TMAKIT_REQUIRES_SM90();
#endif
}

// fence.proxy.tensormap::generic.acquire.gpu [map], 128: before this thread's first TMA through a map that was
// written on the device (after the writer's release, e.g. in the same thread, or seen through a flag).
__device__ __forceinline__ void fence_proxy_tensormap_acquire(const TensorMapDesc* map) {
#if TMAKIT_HAS_SM90
  asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;" ::"l"(map) : "memory");
#else
  (void)map;
  TMAKIT_REQUIRES_SM90();
#endif
}

}  // namespace tmakit
