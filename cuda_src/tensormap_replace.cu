// tmakit_tensormap_replace: tensor maps built on the device (tmakit.ops.replace_tensormaps). Block b takes case b:
// it copies bases[b] (or 128 zero bytes) into shared memory, applies its replace steps there with
// tensormap.replace, publishes the map to maps[b] with tensormap.cp_fenceproxy and, when the case has a box
// (rank > 0), acquires the map and loads the box at its coordinates through maps[b] into shared memory and dumps the
// image to out. Tests compare maps[b] with a host encode and the image with tmakit.layout.tma_load_image.
// Launch: grid n (one block a map), 1-D blocks of whole warps, dynamic shared memory max(image_bytes) + align. TMA only (sm_90a).
#include "tmakit/box_pipeline.cuh"
#include "tmakit/fence.cuh"
#include "tmakit/tensormap_replace.cuh"

namespace tmakit {

// One replace step, as tmakit.tensormap.device_edit packs it: field (its index in FIELDS there), ordinal, value.
struct TensorMapReplaceStep {
  uint32_t field;
  uint32_t ord;
  uint64_t value;
};
static_assert(sizeof(TensorMapReplaceStep) == 16, "the host packs 16-byte steps");

// A case's numbers (int64 each, kCaseWords a case): its steps, its box and where its image goes.
enum : int { kFirstStep, kSteps, kFromZero, kRank, kBoxBytes, kImageBytes, kImageOffset, kCoord0, kCaseWords = 12 };

#if TMAKIT_USE_TMA
// PTX wants the ordinals and the enumerations as immediates: one case per value (a value out of range is a
// packing bug on the host, which validated the step: trap).
#define TMAKIT_IMM_CASE(K, CALL) \
  case K: CALL(K); break;
#define TMAKIT_IMM_CASES_2(CALL) TMAKIT_IMM_CASE(0, CALL) TMAKIT_IMM_CASE(1, CALL)
#define TMAKIT_IMM_CASES_3(CALL) TMAKIT_IMM_CASES_2(CALL) TMAKIT_IMM_CASE(2, CALL)
#define TMAKIT_IMM_CASES_4(CALL) TMAKIT_IMM_CASES_3(CALL) TMAKIT_IMM_CASE(3, CALL)
#define TMAKIT_IMM_CASES_5(CALL) TMAKIT_IMM_CASES_4(CALL) TMAKIT_IMM_CASE(4, CALL)
#define TMAKIT_IMM_CASES_13(CALL)                                                                           \
  TMAKIT_IMM_CASES_5(CALL) TMAKIT_IMM_CASE(5, CALL) TMAKIT_IMM_CASE(6, CALL) TMAKIT_IMM_CASE(7, CALL)        \
  TMAKIT_IMM_CASE(8, CALL) TMAKIT_IMM_CASE(9, CALL) TMAKIT_IMM_CASE(10, CALL) TMAKIT_IMM_CASE(11, CALL)      \
  TMAKIT_IMM_CASE(12, CALL)
#define TMAKIT_IMM_SWITCH(N, V, CALL) \
  switch (V) { TMAKIT_IMM_CASES_##N(CALL) default: asm volatile("trap;"); }

__device__ __forceinline__ void apply_replace_step(TensorMapSmem m, const TensorMapReplaceStep& s) {
  const uint32_t v32 = (uint32_t)s.value;
#define TMAKIT_BOX_DIM(K) tensormap_replace_box_dim<K>(m, v32)
#define TMAKIT_GLOBAL_DIM(K) tensormap_replace_global_dim<K>(m, v32)
#define TMAKIT_GLOBAL_STRIDE(K) tensormap_replace_global_stride<K>(m, s.value)
#define TMAKIT_ELEMENT_STRIDE(K) tensormap_replace_element_stride<K>(m, v32)
#define TMAKIT_ELEMTYPE(K) tensormap_replace_elemtype<K>(m)
#define TMAKIT_INTERLEAVE(K) tensormap_replace_interleave_layout<K>(m)
#define TMAKIT_SWIZZLE(K) tensormap_replace_swizzle_mode<K>(m)
#define TMAKIT_FILL(K) tensormap_replace_fill_mode<K>(m)
  switch (s.field) {
    case 0: tensormap_replace_global_address(m, reinterpret_cast<const void*>(s.value)); break;
    case 1: tensormap_replace_rank(m, v32); break;
    case 2: TMAKIT_IMM_SWITCH(5, s.ord, TMAKIT_BOX_DIM) break;
    case 3: TMAKIT_IMM_SWITCH(5, s.ord, TMAKIT_GLOBAL_DIM) break;
    case 4: TMAKIT_IMM_SWITCH(5, s.ord, TMAKIT_GLOBAL_STRIDE) break;
    case 5: TMAKIT_IMM_SWITCH(5, s.ord, TMAKIT_ELEMENT_STRIDE) break;
    case 6: TMAKIT_IMM_SWITCH(13, v32, TMAKIT_ELEMTYPE) break;
    case 7: TMAKIT_IMM_SWITCH(3, v32, TMAKIT_INTERLEAVE) break;
    case 8: TMAKIT_IMM_SWITCH(4, v32, TMAKIT_SWIZZLE) break;
    case 9: TMAKIT_IMM_SWITCH(2, v32, TMAKIT_FILL) break;
    default: asm volatile("trap;");
  }
}
#endif

}  // namespace tmakit

extern "C" __global__ void tmakit_tensormap_replace(const tmakit::TensorMapDesc* bases,
                                                    const tmakit::TensorMapReplaceStep* steps,
                                                    const tmakit::int64_t* cases, int n, tmakit::TensorMapDesc* maps,
                                                    tmakit::uint32_t align, tmakit::uint32_t poison,
                                                    tmakit::uint8_t* out) {
  using namespace tmakit;
#if TMAKIT_USE_TMA
  __shared__ alignas(128) TensorMapDesc edit;  // tensormap.replace and cp_fenceproxy want 128-byte alignment
  __shared__ BoxPipeline<1> pipe;
  extern __shared__ __align__(128) uint8_t smem_raw[];
  uint8_t* smem = align_shared(smem_raw, align);
  // Block b builds map b (one map a block: the shared-memory copy is not reused), then loads its box.
  const uint64_t b = blockIdx.x;
  if (b >= (uint64_t)n) return;
  const int64_t* c = cases + b * kCaseWords;
  if (threadIdx.x < 32) {
    if (threadIdx.x < 16) edit.opaque[threadIdx.x] = c[kFromZero] ? 0ull : bases[b].opaque[threadIdx.x];
    __syncwarp();
    if (threadIdx.x == 0) {
      const TensorMapSmem m(&edit);
      for (int64_t s = 0; s < c[kSteps]; ++s) apply_replace_step(m, steps[c[kFirstStep] + s]);
    }
    __syncwarp();  // the edits before the warp's copy-out
    tensormap_cp_fenceproxy(&maps[b], TensorMapSmem(&edit));
  }
  const uint32_t rank = (uint32_t)c[kRank], box_bytes = (uint32_t)c[kBoxBytes];
  const uint32_t image_bytes = (uint32_t)c[kImageBytes];
  if (rank == 0) return;  // no box for this map
  __syncthreads();  // the map is published before any thread acquires it
  fence_proxy_tensormap_acquire(&maps[b]);  // by every thread: cheap, and whichever issues the TMA has it
  for_each_stage_pipelined<1>(
      smem, image_bytes, pipe, b, 1, b + 1,
      [&](uint64_t, uint8_t* buffer, Mbarrier* full) {
        for (uint32_t i = threadIdx.x; i < image_bytes; i += blockDim.x) buffer[i] = (uint8_t)poison;
        fence_proxy_async_shared_cta();  // the poison (generic proxy) before the TMA's writes (async proxy)
        __syncthreads();
        Coords at;
        for (int i = 0; i < 5; ++i) at.c[i] = (int32_t)c[kCoord0 + i];
        box_load(maps[b], buffer, at, (int)rank, box_bytes, full);
      },
      [&](uint64_t, const uint8_t* image) {
        uint8_t* to = out + c[kImageOffset];
        for (uint32_t i = threadIdx.x; i < image_bytes; i += blockDim.x) to[i] = image[i];
      });
#else
  (void)bases, (void)steps, (void)cases, (void)n, (void)maps, (void)align, (void)poison, (void)out;
  TMAKIT_NOT_THIS_BUILD();
#endif
}
