// tmakit_tile_load: for each of n coordinate sets, load the box and dump the shared-memory image to
// out[i * image_bytes ...]. Tests compare the dump with tmakit.layout.tma_load_image byte for byte, on both
// box_load paths. image_bytes is the footprint (swizzled rows narrower than the span are padded), box_bytes
// the data the load writes (the expect_tx count); the footprint is first filled with `poison` so padding the
// load leaves untouched reads back as tma_load_image(..., poison=poison).
// Launch: 1-D blocks (e.g. 128 threads), dynamic shared memory image_bytes + align.
#include "tmakit/box_load.cuh"
#include "tmakit/fence.cuh"

using namespace tmakit;

extern "C" __global__ void tmakit_tile_load(TMAKIT_BOX_SOURCE src, const int32_t* coords, int n, int rank,
                                            uint32_t box_bytes, uint32_t image_bytes, uint32_t align,
                                            uint32_t poison, uint8_t* out) {
  extern __shared__ __align__(16) uint8_t smem_raw[];
  __shared__ uint64_t bar;
  uint8_t* smem = align_shared(smem_raw, align);
  for (uint32_t i = threadIdx.x; i < image_bytes; i += blockDim.x) smem[i] = (uint8_t)poison;
  fence_proxy_async_shared_cta();  // the poison (generic proxy) is ordered before the TMA writes (async proxy)
  MbarrierPhase phase = box_barrier_init(&bar);  // synchronises the block
#if TMAKIT_USE_TMA
  if (threadIdx.x == 0) prefetch_tensormap(&src);
#endif
  for (int b = blockIdx.x; b < n; b += gridDim.x) {
    Coords at;
    for (int i = 0; i < 5; ++i) at.c[i] = coords[b * 5 + i];
    box_load(src, smem, at, rank, box_bytes, &bar);
    box_wait(phase);
    // image_bytes is a multiple of 16 and out is 16-byte aligned: copy the image in 16-byte pieces.
    const uint4* from = reinterpret_cast<const uint4*>(smem);
    uint4* to = reinterpret_cast<uint4*>(out + (uint64_t)b * image_bytes);
    for (uint32_t i = threadIdx.x; i < image_bytes / 16u; i += blockDim.x) to[i] = from[i];
    __syncthreads();  // everyone is done reading before the next box overwrites smem
  }
}
