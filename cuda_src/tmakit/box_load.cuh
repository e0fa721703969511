// The one-source box load: the stages of a box ring (box_pipeline.cuh, a tmakit::Pipeline) are filled with
// box_load() once per box, or box_load_expect + box_load_part per box for a stage of several boxes.
//
//   TMAKIT_USE_TMA == 1 (sm_90, not forced): the parameter is the 128-byte TensorMapDesc; thread 0 arms the
//     stage's FULL barrier with the box's byte count and issues one cp.async.bulk.tensor load (TmaProducer).
//   TMAKIT_USE_TMA == 0 (sm_80..89, or TMAKIT_FORCE_CP_ASYNC): the parameter is BoxParams; the whole block
//     loads the box with cp.async (16-byte chunks where aligned and in bounds, cp.async zero-fill or a
//     16-byte fill store for whole out-of-bounds chunks, element copies elsewhere) into the SAME bytes TMA would
//     write: same traversal, element strides, OOB zero/NaN fill and swizzle permutation (CpAsyncBlockProducer:
//     the ring's wait is cp.async.wait_group and a block barrier).
//
// Declare the parameter with TMAKIT_BOX_SOURCE; TensorMap.__kernel_param__ hands over 128 or 160 bytes by
// the parameter's declared size. Blocks are 1-D (threadIdx.x) for the cooperative path.
#pragma once
#include "tmakit/box_geometry.cuh"
#include "tmakit/config.cuh"
#include "tmakit/cp_async.cuh"
#include "tmakit/mbarrier.cuh"
#include "tmakit/pipeline.cuh"
#include "tmakit/swizzle.cuh"
#include "tmakit/tma.cuh"
#include "tmakit/types.cuh"

namespace tmakit {
#if TMAKIT_USE_TMA
typedef TensorMapDesc BoxSource;
typedef TmaProducer BoxProducer;
#else
typedef BoxParams BoxSource;
typedef CpAsyncBlockProducer BoxProducer;
#endif
}  // namespace tmakit

#define TMAKIT_BOX_SOURCE const __grid_constant__ tmakit::BoxSource

namespace tmakit {

// Write one element's `size` bytes (1/2/4/8) from a 64-bit value to a naturally aligned address.
__device__ __forceinline__ void store_bits(void* dst, uint64_t bits, uint32_t size) {
  switch (size) {
    case 1: *static_cast<uint8_t*>(dst) = (uint8_t)bits; break;
    case 2: *static_cast<uint16_t*>(dst) = (uint16_t)bits; break;
    case 4: *static_cast<uint32_t*>(dst) = (uint32_t)bits; break;
    default: *static_cast<uint64_t*>(dst) = bits; break;
  }
}

__device__ __forceinline__ uint64_t load_bits(const void* src, uint32_t size) {
  switch (size) {
    case 1: return *static_cast<const uint8_t*>(src);
    case 2: return *static_cast<const uint16_t*>(src);
    case 4: return *static_cast<const uint32_t*>(src);
    default: return *static_cast<const uint64_t*>(src);
  }
}

// 16 zero bytes into shared memory through cp.async (src-size 0 reads nothing; the tensor base is a valid
// address), so that they land with the box's other copies.
__device__ __forceinline__ void cp_async_zero_16(const BoxParams& p, uint8_t* dst) {
  cp_async_cg_16(dst, reinterpret_cast<const void*>(p.address), 0);
}

// The cp.async path's copy of one 16-byte data chunk into shared memory at `dst` (the plan is chunk_kind).
__device__ __forceinline__ void box_load_chunk(const BoxParams& p, const BoxChunk& ch, uint8_t* dst) {
  switch (chunk_kind(p, ch)) {
    case kChunkCopy16:
      cp_async_cg_16_promoted(dst, reinterpret_cast<const void*>(element_address(p, ch, 0)), p.l2_promotion);
      return;
    case kChunkZero16:
      cp_async_zero_16(p, dst);
      return;
    default:
      break;
  }
  const uint64_t fill = oob_fill_bits(p);
  for (uint32_t e = 0; e < chunk_elements(p); ++e) {
    uint8_t* d = dst + e * p.elem_size;
    if (!element_in_bounds(p, ch, e)) {
      store_bits(d, fill, p.elem_size);
      continue;
    }
    const void* s = reinterpret_cast<const void*>(element_address(p, ch, e));
    if (p.elem_size == 8) cp_async_ca<8>(d, s);
    else if (p.elem_size == 4) cp_async_ca<4>(d, s);
    else store_bits(d, load_bits(s, p.elem_size), p.elem_size);  // cp.async has no 1/2-byte form
  }
}

// A stage of several boxes that complete together on one barrier phase (a box and a few rows beside it):
//   box_load_expect(full, total bytes);  box_load_part(...) per box
// box_load() below is that with one box. ALL threads call each step with the same arguments, inside a ring's
// load_stage (box_pipeline.cuh), which acquired the stage and commits it.
//
// TMA: thread 0 arms the stage's FULL barrier with every box's bytes before it issues the copies. cp.async:
// nothing to arm.
__device__ __forceinline__ void box_load_expect(Mbarrier* full, uint32_t bytes) {
#if TMAKIT_USE_TMA
  if (threadIdx.x == 0) full->arrive_expect_tx(bytes);
#else
  (void)full, (void)bytes;
#endif
}

// `full`: the stage's FULL barrier (BoxPipeline::full_barrier; none on the cp.async path).
// One box of the stage into `smem` (aligned to the swizzle's alignment). `rank` and `bytes`
// (TensorMap.rank / .box_bytes) drive the TMA path; the cp.async path reads them from BoxParams and traps if
// the host passed numbers that disagree (a host bug, better loud than wrong). Eviction: the L2 priority of
// the lines the box brings in (cache_policy.cuh), on the TMA path only: the cp.async path's copies carry no
// hint, because a cache-hinted cp.async stopped the forced cp.async transpose on the H100 with an illegal
// instruction (NVRTC 13.0, sm_90a, the per-chunk walk of a 1333-byte pitch).
template <L2Eviction Eviction = L2Eviction::kNormal>
__device__ __forceinline__ void box_load_part(const BoxSource& src, void* smem, const Coords& at, int rank,
                                              uint32_t bytes, Mbarrier* full) {
#if TMAKIT_USE_TMA
  if (threadIdx.x == 0) cp_async_bulk_tensor_g2s<Eviction>(rank, smem, &src, at, *full);
#else
  (void)full;
  if ((int)src.rank != rank || box_image_bytes(src) != bytes) asm volatile("trap;");
  uint8_t* base = static_cast<uint8_t*>(smem);
  const Plain2dBox box(src, at);
  if (box.plain) {  // whole copies inside, whole fill chunks outside: no per-chunk geometry
    const uint64_t fill = oob_fill_8_bytes(src);
    auto copy = [&](uint32_t promotion) {
      return [&, promotion](uint32_t offset, uint64_t address, bool inside) {
        uint8_t* dst = base + offset;
        if (inside)
          cp_async_cg_16_promoted(dst, reinterpret_cast<const void*>(address), promotion);
        else if (fill == 0)
          cp_async_zero_16(src, dst);
        else
          *reinterpret_cast<uint4*>(dst) = make_uint4((uint32_t)fill, (uint32_t)(fill >> 32), (uint32_t)fill, (uint32_t)(fill >> 32));
      };
    };
    // without an L2 hint (the usual case) the hint's switch folds away inside the walk
    if (src.l2_promotion == 0) plain_box_walk(box, src.swizzle, threadIdx.x, blockDim.x, copy(0));
    else plain_box_walk(box, src.swizzle, threadIdx.x, blockDim.x, copy(src.l2_promotion));
  } else {
    for (uint32_t k = threadIdx.x; k < bytes / 16u; k += blockDim.x) {
      const BoxChunk ch = box_chunk(src, at, k);
      box_load_chunk(src, ch, base + swizzle_offset(ch.image_offset, src.swizzle));
    }
  }
#endif
}

// Load the box at `at` into `smem`: the one-box stage.
__device__ __forceinline__ void box_load(const BoxSource& src, void* smem, const Coords& at, int rank,
                                         uint32_t bytes, Mbarrier* full) {
  box_load_expect(full, bytes);
  box_load_part(src, smem, at, rank, bytes, full);
}

}  // namespace tmakit
