// The one-source box store, inverse of box_load: shared-memory image -> global box; out-of-bounds elements
// are not written. TMA path: cp.async.bulk.tensor store from one thread. cp.async path (there is no Ampere
// async store): plain global stores by the block that read the image through the same swizzle map.
#pragma once
#include "tmakit/box_load.cuh"
#include "tmakit/fence.cuh"

namespace tmakit {

// ALL threads call it after writing `smem`; it returns when `smem` may be reused and the global writes
// are issued (TMA: wait_group 0 for full completion, so a following kernel or host copy sees them).
__device__ __forceinline__ void box_store(const BoxSource& dst, const void* smem, const Coords& at, int rank,
                                          uint32_t bytes) {
#if TMAKIT_USE_TMA
  fence_proxy_async_shared_cta();  // every writer: order its generic stores before the async-proxy read
  __syncthreads();
  if (threadIdx.x == 0) {
    cp_async_bulk_tensor_s2g(rank, &dst, at, smem);
    cp_async_bulk_commit_group();
    cp_async_bulk_wait_group<0>();
  }
  __syncthreads();
#else
  if (dst.interleave != 0 || (int)dst.rank != rank || box_image_bytes(dst) != bytes) asm volatile("trap;");
  __syncthreads();
  const uint8_t* base = static_cast<const uint8_t*>(smem);
  for (uint32_t k = threadIdx.x; k < bytes / 16u; k += blockDim.x) {
    const BoxChunk ch = box_chunk(dst, at, k);
    const uint8_t* s = base + swizzle_offset(ch.image_offset, dst.swizzle);
    const ChunkKind kind = chunk_kind(dst, ch);
    if (kind == kChunkCopy16) {
      *reinterpret_cast<uint4*>(element_address(dst, ch, 0)) = *reinterpret_cast<const uint4*>(s);
    } else if (kind == kChunkElements) {
      for (uint32_t e = 0; e < chunk_elements(dst); ++e) {
        if (element_in_bounds(dst, ch, e))
          store_bits(reinterpret_cast<void*>(element_address(dst, ch, e)), load_bits(s + e * dst.elem_size, dst.elem_size),
                     dst.elem_size);
      }
    }  // kChunkZero16 / NaN-filled chunks that are wholly out of bounds: nothing to store
  }
  __syncthreads();
#endif
}

}  // namespace tmakit
