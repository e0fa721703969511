// The one-source box store, inverse of box_load: shared-memory image -> global box; out-of-bounds elements
// are not written, except along dim 0 up to the row's next 16-byte boundary (TMA writes whole 16-byte chunks).
// TMA path: cp.async.bulk.tensor store from one thread. cp.async path (there is no Ampere async store):
// plain global stores by the block that read the image through the same swizzle map.
//
// Two ways to use it:
//   box_store(...)                  one box, synchronous: returns when smem may be reused and the writes are done.
//   box_store_begin();              streaming (several boxes, buffers reused while earlier stores drain):
//   box_store_issue(...) per box;     ALL threads call each step; the TMA path keeps up to N committed groups
//   box_store_commit_wait_read<N>();  in flight, so a buffer used N+1 groups ago may be rewritten after the
//   ... box_store_drain() at the end  next __syncthreads().
#pragma once
#include "tmakit/box_load.cuh"
#include "tmakit/fence.cuh"

namespace tmakit {

// ALL threads call it after writing the images: orders their generic-proxy writes before the store reads.
__device__ __forceinline__ void box_store_begin() {
#if TMAKIT_USE_TMA
  fence_proxy_async_shared_cta();  // every writer: order its generic stores before the async-proxy read
#endif
  __syncthreads();
}

// ALL threads call it, after box_store_begin(). TMA: thread 0 issues the bulk store (not yet committed).
// cp.async path: the block writes the box with plain stores, done when it returns.
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

// ALL threads call it after the boxes of one group are issued. TMA: thread 0 commits them as one bulk group
// and waits until at most N groups still read shared memory. The caller's next __syncthreads() publishes
// that to the block.
template <int N>
__device__ __forceinline__ void box_store_commit_wait_read() {
#if TMAKIT_USE_TMA
  if (threadIdx.x == 0) {
    cp_async_bulk_commit_group();
    cp_async_bulk_wait_group_read<N>();
  }
#endif
}

// ALL threads call it last: the TMA path waits for every committed store's global writes, so a following
// kernel or host copy sees them.
__device__ __forceinline__ void box_store_drain() {
#if TMAKIT_USE_TMA
  if (threadIdx.x == 0) cp_async_bulk_wait_group<0>();
#endif
  __syncthreads();
}

// ALL threads call it after writing `smem`; it returns when `smem` may be reused and the writes are done.
__device__ __forceinline__ void box_store(const BoxSource& dst, const void* smem, const Coords& at, int rank,
                                          uint32_t bytes) {
  box_store_begin();
  box_store_issue(dst, smem, at, rank, bytes);
  box_store_commit_wait_read<0>();
  box_store_drain();
}

}  // namespace tmakit
