// tmakit_tile_store: for each of n coordinate sets, put image i (image_bytes from images, the layout a box
// load writes) in shared memory and store it to the box at those coordinates: TMA store on sm_90, plain
// stores through the same layout on the cp.async path (the block's store pipeline, box_store.cuh). With
// tile_load.cu it makes a round trip. Boxes of different i must not overlap. Launch: 1-D blocks, dynamic shared
// memory image_bytes + align.
#include "tmakit/box_store.cuh"

extern "C" __global__ void tmakit_tile_store(TMAKIT_BOX_SOURCE dst, const tmakit::int32_t* coords, int n, int rank,
                                             tmakit::uint32_t box_bytes, tmakit::uint32_t image_bytes, tmakit::uint32_t align,
                                             const tmakit::uint8_t* images) {
  using namespace tmakit;
  extern __shared__ __align__(16) uint8_t smem_raw[];
  BoxStores<1> stores = make_box_stores<1>(align_shared(smem_raw, align), image_bytes);
  for (int b = blockIdx.x; b < n; b += gridDim.x) {
    Coords at;
    for (int i = 0; i < 5; ++i) at.c[i] = coords[b * 5 + i];
    uint8_t* smem = stores.acquire();  // the previous box's store has read the buffer
    const uint4* from = reinterpret_cast<const uint4*>(images + (uint64_t)b * image_bytes);
    uint4* to = reinterpret_cast<uint4*>(smem);
    for (uint32_t i = threadIdx.x; i < image_bytes / 16u; i += blockDim.x) to[i] = from[i];
    stores.publish();
    box_store_issue(dst, smem, at, rank, box_bytes);
    stores.commit();
  }
  stores.drain();
}
