// tmakit_tile_load: for each of n coordinate sets, load the box and dump the shared-memory image to
// out[i * image_bytes ...]. Tests compare the dump with tmakit.layout.tma_load_image byte for byte, on both
// box_load paths. image_bytes is the footprint (swizzled rows narrower than the span are padded), box_bytes
// the data the load writes (the expect_tx count); the footprint is first filled with `poison` so padding the
// load leaves untouched reads back as tma_load_image(..., poison=poison).
// Launch: 1-D blocks (e.g. 128 threads), dynamic shared memory image_bytes + align.
#include "tmakit/box_pipeline.cuh"
#include "tmakit/fence.cuh"

extern "C" __global__ void tmakit_tile_load(TMAKIT_BOX_SOURCE src, const tmakit::int32_t* coords, int n, int rank,
                                            tmakit::uint32_t box_bytes, tmakit::uint32_t image_bytes, tmakit::uint32_t align,
                                            tmakit::uint32_t poison, tmakit::uint8_t* out) {
  using namespace tmakit;
  extern __shared__ __align__(16) uint8_t smem_raw[];
  __shared__ BoxPipeline<1> pipe;
  uint8_t* smem = align_shared(smem_raw, align);
  for (uint32_t i = threadIdx.x; i < image_bytes; i += blockDim.x) smem[i] = (uint8_t)poison;
  fence_proxy_async_shared_cta();  // the poison (generic proxy) is ordered before the TMA writes (async proxy)
#if TMAKIT_USE_TMA
  if (threadIdx.x == 0) prefetch_tensormap(&src);
#endif
  for_each_box_pipelined<1>(
      src, rank, box_bytes, smem, image_bytes, pipe, blockIdx.x, gridDim.x, (uint64_t)n,
      [&](uint64_t b) {
        Coords at;
        for (int i = 0; i < 5; ++i) at.c[i] = coords[b * 5 + i];
        return at;
      },
      [&](uint64_t b, const uint8_t* image) {
        // image_bytes is a multiple of 16 and out is 16-byte aligned: copy the image in 16-byte pieces.
        const uint4* from = reinterpret_cast<const uint4*>(image);
        uint4* to = reinterpret_cast<uint4*>(out + b * image_bytes);
        for (uint32_t i = threadIdx.x; i < image_bytes / 16u; i += blockDim.x) to[i] = from[i];
      });
}
