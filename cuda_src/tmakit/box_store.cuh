// The one-source box store, inverse of box_load: shared-memory image -> global box; out-of-bounds elements
// are not written, except along dim 0 up to the row's next 16-byte boundary (TMA writes whole 16-byte chunks).
// TMA path: cp.async.bulk.tensor store from one thread. cp.async path (there is no Ampere async store):
// plain global stores by the block that read the image through the same swizzle map.
//
// The block's stores go through a tmakit::StorePipeline over the whole block (make_box_stores): acquire a buffer,
// write the image, publish, box_store_issue per box, commit; drain at the end. ALL threads make each call.
#pragma once
#include "tmakit/box_load.cuh"
#include "tmakit/fence.cuh"
#include "tmakit/named_barrier.cuh"
#include "tmakit/pipeline.cuh"

namespace tmakit {

// One box of a published image: TMA, thread 0 issues the bulk store (committed by BoxStores::commit); cp.async
// path, the block writes the box with plain stores, done when it returns. ALL threads call it.
__device__ __forceinline__ void box_store_issue(const BoxSource& dst, const void* smem, const Coords& at, int rank,
                                                uint32_t bytes) {
#if TMAKIT_USE_TMA
  if (threadIdx.x == 0) cp_async_bulk_tensor_s2g(rank, &dst, at, smem);
#else
  if (dst.interleave != 0 || (int)dst.rank != rank || box_image_bytes(dst) != bytes) asm volatile("trap;");
  // A TMA store box starting at a negative coordinate faults (illegal instruction, measured on the H100:
  // tma_model.check_store_start); the twin faults too, so no kernel works on sm_80 and fails on sm_90.
  for (int i = 0; i < rank; ++i)
    if (at.c[i] < 0) asm volatile("trap;");
  // TMA writes whole 16-byte chunks along dim 0: the elements past dims[0] up to the row's next 16-byte boundary
  // are written too (measured on the H100: tmakit.layout.tma_model.store_element_map). The twin does the same
  // for every map TMA can encode (rank 1, or a row pitch that is a multiple of 16 bytes: the widened row stays
  // inside its pitch), through a copy of the parameters whose dims[0] reaches that boundary. Pitches only the
  // twin can express (not multiples of 16) are written exactly: widening them would write into the next row.
  BoxParams wide = dst;
  if (dst.rank == 1 || dst.strides[1] % 16u == 0)
    wide.dims[0] = ((dst.dims[0] * dst.elem_size + 15u) / 16u) * 16u / dst.elem_size;
  const uint8_t* base = static_cast<const uint8_t*>(smem);
  const Plain2dBox box(wide, at);
  if (box.plain) {  // whole 16-byte stores for the chunks inside, nothing for those outside: no per-chunk geometry
    plain_box_walk(box, wide.swizzle, threadIdx.x, blockDim.x, [&](uint32_t offset, uint64_t address, bool inside) {
      if (inside) *reinterpret_cast<uint4*>(address) = *reinterpret_cast<const uint4*>(base + offset);
    });
    return;
  }
  for (uint32_t k = threadIdx.x; k < bytes / 16u; k += blockDim.x) {
    const BoxChunk ch = box_chunk(wide, at, k);
    const uint8_t* s = base + swizzle_offset(ch.image_offset, wide.swizzle);
    const ChunkKind kind = chunk_kind(wide, ch);
    if (kind == kChunkCopy16) {
      *reinterpret_cast<uint4*>(element_address(wide, ch, 0)) = *reinterpret_cast<const uint4*>(s);
    } else if (kind == kChunkElements) {
      for (uint32_t e = 0; e < chunk_elements(wide); ++e) {
        if (element_in_bounds(wide, ch, e))
          store_bits(reinterpret_cast<void*>(element_address(wide, ch, e)), load_bits(s + e * wide.elem_size, wide.elem_size),
                     wide.elem_size);
      }
    }  // kChunkZero16 / NaN-filled chunks that are wholly out of bounds: nothing to store
  }
#endif
}

// The block's store pipeline for box stores: every thread writes the images, thread 0 issues (TMA).
template <int Buffers>
using BoxStores = StorePipeline<Buffers, TMAKIT_USE_TMA != 0>;

template <int Buffers>
__device__ __forceinline__ BoxStores<Buffers> make_box_stores(uint8_t* buffers, uint32_t buffer_bytes) {
  return BoxStores<Buffers>(buffers, buffer_bytes, NamedBarrier(0, blockDim.x));
}

}  // namespace tmakit
