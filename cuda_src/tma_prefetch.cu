// tmakit_prefetch_load: for each of n coordinate sets, prefetch the box into L2, then load it and dump the
// shared-memory footprint (like tile_load.cu), so the host can check that a prefetched box loads the same bytes
// (tmakit.ops.modes.prefetch_load). One source for both backends: TMA issues cp.async.bulk.prefetch.tensor; the
// cp.async path has no tensor prefetch and only loads. Launch: 1-D blocks, grid n, dynamic shared memory
// image_bytes + align.
#include "tmakit/box_pipeline.cuh"
#include "tmakit/fence.cuh"

extern "C" __global__ void tmakit_prefetch_load(TMAKIT_BOX_SOURCE src, const tmakit::int32_t* coords, int n, int rank,
                                                tmakit::uint32_t box_bytes, tmakit::uint32_t image_bytes,
                                                tmakit::uint32_t align, tmakit::uint32_t poison, tmakit::uint8_t* out) {
  using namespace tmakit;
  extern __shared__ __align__(16) uint8_t smem_raw[];
  __shared__ BoxPipeline<1> pipe;
  uint8_t* smem = align_shared(smem_raw, align);
  for (uint32_t i = threadIdx.x; i < image_bytes; i += blockDim.x) smem[i] = (uint8_t)poison;
  fence_proxy_async_shared_cta();  // the poison is ordered before the async proxy's writes
  auto coords_of = [&](uint64_t b) {
    Coords at;
    for (int i = 0; i < 5; ++i) at.c[i] = coords[b * 5 + i];
    return at;
  };
  for_each_stage_pipelined<1>(
      smem, image_bytes, pipe, blockIdx.x, gridDim.x, (uint64_t)n,
      [&](uint64_t b, uint8_t* buffer, Mbarrier* full) {
        const Coords at = coords_of(b);
#if TMAKIT_USE_TMA
        if (threadIdx.x == 0) {
          switch (rank) {
            case 1: cp_async_bulk_prefetch_tensor<1>(&src, at); break;
            case 2: cp_async_bulk_prefetch_tensor<2>(&src, at); break;
            case 3: cp_async_bulk_prefetch_tensor<3>(&src, at); break;
            case 4: cp_async_bulk_prefetch_tensor<4>(&src, at); break;
            default: cp_async_bulk_prefetch_tensor<5>(&src, at); break;
          }
        }
#endif
        box_load(src, buffer, at, rank, box_bytes, full);
      },
      [&](uint64_t b, const uint8_t* image) {
        const uint4* from = reinterpret_cast<const uint4*>(image);
        uint4* to = reinterpret_cast<uint4*>(out + b * image_bytes);
        for (uint32_t i = threadIdx.x; i < image_bytes / 16u; i += blockDim.x) to[i] = from[i];
      });
}
