// tmakit_prefetch_load: for each of n coordinate sets, prefetch the box into L2, then load it and dump the
// shared-memory footprint (like tile_load.cu), so the host can check that a prefetched box loads the same bytes
// (tmakit.ops.modes.prefetch_load). One source for both backends: TMA issues cp.async.bulk.prefetch.tensor; the
// cp.async path has no tensor prefetch and only loads. Launch: 1-D blocks, grid n, dynamic shared memory
// image_bytes + align.
#include "tmakit/box_load.cuh"
#include "tmakit/fence.cuh"

using namespace tmakit;

extern "C" __global__ void tmakit_prefetch_load(TMAKIT_BOX_SOURCE src, const int32_t* coords, int n, int rank,
                                                uint32_t box_bytes, uint32_t image_bytes, uint32_t align,
                                                uint32_t poison, uint8_t* out) {
  extern __shared__ __align__(16) uint8_t smem_raw[];
  __shared__ uint64_t bar;
  uint8_t* smem = align_shared(smem_raw, align);
  const int b = blockIdx.x;
  if (b >= n) return;
  for (uint32_t i = threadIdx.x; i < image_bytes; i += blockDim.x) smem[i] = (uint8_t)poison;
  fence_proxy_async_shared_cta();  // the poison is ordered before the async proxy's writes
  MbarrierPhase phase = box_barrier_init(&bar);  // synchronises the block
  Coords at;
  for (int i = 0; i < 5; ++i) at.c[i] = coords[b * 5 + i];
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
  box_load(src, smem, at, rank, box_bytes, &bar);
  box_wait(phase);
  const uint4* from = reinterpret_cast<const uint4*>(smem);
  uint4* to = reinterpret_cast<uint4*>(out + (uint64_t)b * image_bytes);
  for (uint32_t i = threadIdx.x; i < image_bytes / 16u; i += blockDim.x) to[i] = from[i];
}
