// tmakit_transpose: dst (cols x rows) = src (rows x cols)^T for 1/2/4/8-byte elements, both row-major.
// The source is read as boxes of [tile_cols, tile_rows] elements (innermost first) through the one-source
// box load, double-buffered; rows of tile_cols * esize = 128 bytes with the 128B swizzle, so the column-wise
// reads below hit 8 different bank groups instead of one. dst is written with plain stores, consecutive
// threads along a dst row (coalesced), clipped at the edges.
#include "tmakit/box_pipeline.cuh"
#include "tmakit/swizzle.cuh"

using namespace tmakit;

extern "C" __global__ void tmakit_transpose(TMAKIT_BOX_SOURCE src, uint8_t* dst, uint64_t rows, uint64_t cols,
                                            uint32_t esize, uint32_t tile_rows, uint32_t tile_cols,
                                            uint32_t swizzle) {
  constexpr int kStages = 2;
  extern __shared__ __align__(16) uint8_t smem_raw[];
  __shared__ uint64_t bars[kStages];
  uint8_t* smem = align_shared(smem_raw, 1024);
  const uint32_t row_bytes = tile_cols * esize;
  const uint32_t box_bytes = tile_rows * row_bytes;
  const uint32_t stage_bytes = (box_bytes + 1023u) & ~1023u;
  const uint64_t tiles_c = (cols + tile_cols - 1) / tile_cols;
  const uint64_t tiles = tiles_c * ((rows + tile_rows - 1) / tile_rows);
  auto coords_of = [&](uint64_t t) {
    Coords at = {{(int32_t)((t % tiles_c) * tile_cols), (int32_t)((t / tiles_c) * tile_rows), 0, 0, 0}};
    return at;
  };
  auto write_transposed = [&](uint64_t t, const uint8_t* image) {
    const uint64_t c0 = (t % tiles_c) * tile_cols, r0 = (t / tiles_c) * tile_rows;
    for (uint32_t k = threadIdx.x; k < tile_rows * tile_cols; k += blockDim.x) {
      const uint32_t j = k / tile_rows, i = k % tile_rows;  // dst row j (= src column), dst column i
      const uint64_t r = r0 + i, c = c0 + j;
      if (r < rows && c < cols) {
        const uint8_t* from = image + swizzle_offset(i * row_bytes + j * esize, swizzle);
        store_bits(dst + (c * rows + r) * esize, load_bits(from, esize), esize);
      }
    }
  };
  for_each_box_pipelined<kStages>(src, 2, box_bytes, smem, stage_bytes, bars, blockIdx.x, gridDim.x, tiles,
                                  coords_of, write_transposed);
}
