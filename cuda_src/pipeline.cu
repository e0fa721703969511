// tmakit_pipeline_scale: y = alpha * x over a 2-D float32 tensor, double-buffered: the block loads tile
// k+1 (TMA or cp.async, one source) while it scales tile k. x is read through a box source with box
// [tile_cols, tile_rows] (innermost first, no swizzle); y is a dense row-major array of the same shape.
#include "tmakit/box_pipeline.cuh"

extern "C" __global__ void tmakit_pipeline_scale(TMAKIT_BOX_SOURCE x, float* y, tmakit::uint64_t rows, tmakit::uint64_t cols,
                                                 tmakit::uint32_t tile_rows, tmakit::uint32_t tile_cols, float alpha) {
  using namespace tmakit;
  constexpr int kStages = 2;
  extern __shared__ __align__(16) uint8_t smem_raw[];
  __shared__ BoxPipeline<kStages> pipe;
  uint8_t* smem = align_shared(smem_raw, 128);
  const uint32_t box_bytes = tile_rows * tile_cols * 4u;
  const uint64_t tiles_c = (cols + tile_cols - 1) / tile_cols;
  const uint64_t tiles = tiles_c * ((rows + tile_rows - 1) / tile_rows);
  auto coords_of = [&](uint64_t t) {
    Coords at = {{(int32_t)((t % tiles_c) * tile_cols), (int32_t)((t / tiles_c) * tile_rows), 0, 0, 0}};
    return at;
  };
  auto scale = [&](uint64_t t, const uint8_t* image) {
    const float* tile = reinterpret_cast<const float*>(image);
    const uint64_t c0 = (t % tiles_c) * tile_cols, r0 = (t / tiles_c) * tile_rows;
    for (uint32_t i = threadIdx.x; i < tile_rows * tile_cols; i += blockDim.x) {
      const uint64_t r = r0 + i / tile_cols, c = c0 + i % tile_cols;
      if (r < rows && c < cols) y[r * cols + c] = alpha * tile[i];
    }
  };
  for_each_box_pipelined<kStages>(x, 2, box_bytes, smem, (box_bytes + 127u) & ~127u, pipe, blockIdx.x, gridDim.x,
                                  tiles, coords_of, scale);
}
