// The TMA modes besides the tile load and store, each run once per box so that the host can compare every
// byte with the CPU model (tmakit.layout): im2col loads, multicast loads to the CTAs of a cluster and
// reduce-add stores (prefetch-then-load is the one-source tma_prefetch.cu). benchmarks/tma_modes_vs_model.py
// drives them through tmakit.ops.modes.
//
// Shared memory is first filled with `poison` (ordered before the async proxy's writes), so bytes a load
// leaves untouched read back as the model's poison. Launch: 1-D blocks (e.g. 128 threads), dynamic shared
// memory image_bytes + align. All three are TMA-only (sm_90): the host refuses the cp.async backend for them
// before a launch, because the one-source twin (box_load.cuh) cannot express them.
#include "tmakit/box_load.cuh"
#include "tmakit/cluster.cuh"
#include "tmakit/fence.cuh"
#include "tmakit/tma_im2col.cuh"

namespace {
using namespace tmakit;

__device__ __forceinline__ void poison_fill(uint8_t* smem, uint32_t bytes, uint32_t poison) {
  for (uint32_t i = threadIdx.x; i < bytes; i += blockDim.x) smem[i] = (uint8_t)poison;
  fence_proxy_async_shared_cta();  // the poison (generic proxy) is ordered before the TMA writes (async proxy)
}

// Copy `bytes` (a multiple of 16) of shared memory to global memory; the whole block calls it.
__device__ __forceinline__ void dump(const uint8_t* smem, uint8_t* out, uint32_t bytes) {
  const uint4* from = reinterpret_cast<const uint4*>(smem);
  uint4* to = reinterpret_cast<uint4*>(out);
  for (uint32_t i = threadIdx.x; i < bytes / 16u; i += blockDim.x) to[i] = from[i];
}

__device__ __forceinline__ Coords coords_at(const int32_t* coords, int b) {
  Coords at;
  for (int i = 0; i < 5; ++i) at.c[i] = coords[b * 5 + i];
  return at;
}

}  // namespace

// Block b loads the im2col box at coords[b*5..] with offsets[b*3..] and dumps its footprint to out[b*image_bytes].
extern "C" __global__ void tmakit_im2col_load(const __grid_constant__ tmakit::TensorMapDesc desc, const tmakit::int32_t* coords,
                                              const tmakit::int32_t* offsets, int n, int rank, tmakit::uint32_t box_bytes,
                                              tmakit::uint32_t image_bytes, tmakit::uint32_t align, tmakit::uint32_t poison,
                                              tmakit::uint8_t* out) {
  using namespace tmakit;
  extern __shared__ __align__(16) uint8_t smem_raw[];
  __shared__ Mbarrier bar;
  uint8_t* smem = align_shared(smem_raw, align);
  const int b = blockIdx.x;
  if (b >= n) return;
  poison_fill(smem, image_bytes, poison);
  if (threadIdx.x == 0) {
    bar.init(1);
    fence_mbarrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const Coords at = coords_at(coords, b);
    Im2colOffsets off;
    for (int i = 0; i < 3; ++i) off.o[i] = (uint16_t)offsets[b * 3 + i];
    bar.arrive_expect_tx(box_bytes);
    cp_async_bulk_tensor_g2s_im2col(rank, smem, &desc, at, off, bar);
  }
  bar.wait_parity(0);
  dump(smem, out + (uint64_t)b * image_bytes, image_bytes);
}

// Cluster c (cluster=(k,1,1), grid n*k blocks) multicasts the tile box at coords[c*5..] to the CTAs whose bit is
// set in masks[c]; CTA rank 0 issues it. Every CTA dumps its footprint to out[(c*k + rank)*image_bytes]: those
// outside the mask still hold the poison.
extern "C" __global__ void tmakit_multicast_load(const __grid_constant__ tmakit::TensorMapDesc desc, const tmakit::int32_t* coords,
                                                 const tmakit::int32_t* masks, int n, int rank, tmakit::uint32_t box_bytes,
                                                 tmakit::uint32_t image_bytes, tmakit::uint32_t align, tmakit::uint32_t poison,
                                                 tmakit::uint8_t* out) {
  using namespace tmakit;
  extern __shared__ __align__(16) uint8_t smem_raw[];
  __shared__ Mbarrier bar;
  uint8_t* smem = align_shared(smem_raw, align);
  const uint32_t me = cluster_ctarank(), c = cluster_id_x(), k = gridDim.x / (uint32_t)n;
  const uint16_t mask = (uint16_t)masks[c];
  const bool receives = (mask >> me) & 1u;
  poison_fill(smem, image_bytes, poison);
  if (threadIdx.x == 0) {
    bar.init(1);
    fence_mbarrier_init();
    if (receives) bar.arrive_expect_tx(box_bytes);
  }
  cluster_sync();  // every receiver's barrier is armed before any byte can arrive
  if (me == 0 && threadIdx.x == 0) {
    const Coords at = coords_at(coords, (int)c);
    switch (rank) {
      case 1: cp_async_bulk_tensor_g2s_multicast<1>(smem, &desc, at, bar, mask); break;
      case 2: cp_async_bulk_tensor_g2s_multicast<2>(smem, &desc, at, bar, mask); break;
      case 3: cp_async_bulk_tensor_g2s_multicast<3>(smem, &desc, at, bar, mask); break;
      case 4: cp_async_bulk_tensor_g2s_multicast<4>(smem, &desc, at, bar, mask); break;
      default: cp_async_bulk_tensor_g2s_multicast<5>(smem, &desc, at, bar, mask); break;
    }
  }
  if (receives) bar.wait_parity(0);
  __syncthreads();
  dump(smem, out + ((uint64_t)c * k + me) * image_bytes, image_bytes);
  cluster_sync();  // no CTA leaves while a multicast to it may be in flight
}

// Block b puts image b (image_bytes from images, the layout a load writes) in shared memory and reduce-adds
// it into the box at coords[b*5..] (cp.reduce.async.bulk.tensor .add). Boxes of different b must not overlap.
extern "C" __global__ void tmakit_reduce_add(const __grid_constant__ tmakit::TensorMapDesc desc, const tmakit::int32_t* coords,
                                             int n, int rank, tmakit::uint32_t image_bytes, tmakit::uint32_t align,
                                             const tmakit::uint8_t* images) {
  using namespace tmakit;
  extern __shared__ __align__(16) uint8_t smem_raw[];
  uint8_t* smem = align_shared(smem_raw, align);
  const int b = blockIdx.x;
  if (b >= n) return;
  const uint4* from = reinterpret_cast<const uint4*>(images + (uint64_t)b * image_bytes);
  uint4* to = reinterpret_cast<uint4*>(smem);
  for (uint32_t i = threadIdx.x; i < image_bytes / 16u; i += blockDim.x) to[i] = from[i];
  fence_proxy_async_shared_cta();  // the generic-proxy writes are visible to the async proxy's reads
  __syncthreads();
  if (threadIdx.x == 0) {
    const Coords at = coords_at(coords, b);
    switch (rank) {
      case 1: cp_reduce_async_bulk_tensor_add<1>(&desc, at, smem); break;
      case 2: cp_reduce_async_bulk_tensor_add<2>(&desc, at, smem); break;
      case 3: cp_reduce_async_bulk_tensor_add<3>(&desc, at, smem); break;
      case 4: cp_reduce_async_bulk_tensor_add<4>(&desc, at, smem); break;
      default: cp_reduce_async_bulk_tensor_add<5>(&desc, at, smem); break;
    }
    cp_async_bulk_commit_group();
    cp_async_bulk_wait_group<0>();  // the global writes are done before the kernel ends
  }
  __syncthreads();
}
