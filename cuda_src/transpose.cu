// tmakit_transpose: dst (cols x rows) = src (rows x cols)^T for 1/2/4/8-byte elements, both row-major.
//
// Each tile is 128 source rows by one 128-byte swizzle span of columns (W = 128/E elements of E bytes):
//   load   one box [W, 128] (innermost first) through the one-source box load, 128B swizzle, a kStages ring;
//   turn   every thread transposes VxV micro-blocks (V = 16/E: one 16-byte chunk per row) in registers,
//          from the source image into E destination images, each a 128B-swizzled box [W, W] of dst;
//   store  TMA path: the E boxes through the one-source box store, one bulk group per tile, two image
//          buffers so the next tile is transposed while this one drains, clipped at the edges by TMA;
//          cp.async path (no async store before sm_90): each thread writes its 16-byte rows straight to
//          dst from registers, which saves a shared-memory pass and a barrier per tile.
// All shared-memory traffic is 16 bytes wide and bank-conflict free: the 8 lanes of each quarter-warp take
// micro-blocks (g, (g + q) % 8) for g = 0..7, so under the 128B swizzle (chunk ^= row % 8) their chunks land
// in 8 different 16-byte bank groups on both sides (tests/test_ops.py counts it with tmakit.layout).
#include "tmakit/box_pipeline.cuh"
#include "tmakit/box_store.cuh"
#include "tmakit/swizzle.cuh"

using namespace tmakit;

namespace {
constexpr int kStages = 3;
constexpr uint32_t kTileRows = 128;                  // source rows per tile
constexpr uint32_t kSpan = 128;                      // bytes per image row: the 128B swizzle span
constexpr uint32_t kTileBytes = kTileRows * kSpan;   // 16 KiB, for every element size

__device__ __forceinline__ uint4 load_chunk(const uint8_t* image, uint32_t row, uint32_t chunk) {
  return *reinterpret_cast<const uint4*>(image + swizzle_offset(row * kSpan + chunk * 16u, kSwizzle128B));
}

__device__ __forceinline__ void store_chunk(uint8_t* image, uint32_t row, uint32_t chunk, const uint4& v) {
  *reinterpret_cast<uint4*>(image + swizzle_offset(row * kSpan + chunk * 16u, kSwizzle128B)) = v;
}

// Micro-block (sub, g, c): source rows sub*8V + gV .. +V-1, chunk c, transposed in registers; row r of the
// result (16 bytes) goes to sink(r, value).
template <typename T, class Sink>
__device__ __forceinline__ void transpose_micro_block(const uint8_t* source, uint32_t sub, uint32_t g, uint32_t c,
                                                      Sink sink) {
  constexpr uint32_t V = 16u / sizeof(T);
  T in[V][V];
#pragma unroll
  for (uint32_t m = 0; m < V; ++m) {
    const uint4 x = load_chunk(source, sub * 8u * V + g * V + m, c);
    memcpy(in[m], &x, 16);
  }
#pragma unroll
  for (uint32_t r = 0; r < V; ++r) {
    T out[V];
#pragma unroll
    for (uint32_t m = 0; m < V; ++m) out[m] = in[m][r];
    uint4 y;
    memcpy(&y, out, 16);
    sink(r, y);
  }
}

// Every micro-block of a tile, sink(sub, g, c, r, value) for each transposed 16-byte row.
template <typename T, class Sink>
__device__ __forceinline__ void transpose_tile(const uint8_t* source, Sink sink) {
  constexpr uint32_t kBlocks = 64u * sizeof(T);  // 8 x 8 micro-blocks per image, sizeof(T) images per tile
  for (uint32_t b = threadIdx.x; b < kBlocks; b += blockDim.x) {
    const uint32_t g = b % 8u, q = (b / 8u) % 8u, sub = b / 64u, c = (g + q) % 8u;
    transpose_micro_block<T>(source, sub, g, c, [&](uint32_t r, const uint4& v) { sink(sub, g, c, r, v); });
  }
}

#if !TMAKIT_USE_TMA
// The cp.async path has no asynchronous store (sm_80..89): each thread writes its transposed rows straight to
// dst (BoxParams: dims[0] = dst columns, dims[1] = dst rows, strides[1] = dst pitch), 16 bytes at a time where
// the piece is whole and aligned, element by element at the edges.
template <typename T>
__device__ __forceinline__ void store_piece(const BoxParams& dst, uint64_t x0, uint64_t y, const uint4& v) {
  constexpr uint32_t V = 16u / sizeof(T);
  if (y >= dst.dims[1] || x0 >= dst.dims[0]) return;
  uint8_t* p = reinterpret_cast<uint8_t*>(dst.address) + y * dst.strides[1] + x0 * sizeof(T);
  if (x0 + V <= dst.dims[0] && (reinterpret_cast<uint64_t>(p) & 15u) == 0) {
    *reinterpret_cast<uint4*>(p) = v;
    return;
  }
  T e[V];
  memcpy(e, &v, 16);
  for (uint32_t m = 0; m < V && x0 + m < dst.dims[0]; ++m) reinterpret_cast<T*>(p)[m] = e[m];
}
#endif

template <typename T>
__device__ __forceinline__ void transpose_all(const BoxSource& src, const BoxSource& dst, uint64_t rows,
                                              uint64_t cols, uint8_t* smem, uint64_t* bars) {
  constexpr uint32_t E = sizeof(T), W = kSpan / E, V = 16u / E;
  uint8_t* ring = smem;                                  // kStages source tiles
  const uint64_t tiles_c = (cols + W - 1) / W;
  const uint64_t tiles = tiles_c * ((rows + kTileRows - 1) / kTileRows);
  auto coords_of = [&](uint64_t t) {
    Coords at = {{(int32_t)((t % tiles_c) * W), (int32_t)((t / tiles_c) * kTileRows), 0, 0, 0}};
    return at;
  };
#if TMAKIT_USE_TMA
  constexpr uint32_t kImageBytes = W * kSpan;
  uint8_t* out = smem + kStages * kTileBytes;            // 2 buffers of E destination images
  uint32_t done = 0;
  auto turn_and_store = [&](uint64_t t, const uint8_t* image) {
    uint8_t* buffer = out + (done++ % 2u) * kTileBytes;  // freed by the wait_read<1> of the tile before
    transpose_tile<T>(image, [&](uint32_t sub, uint32_t g, uint32_t c, uint32_t r, const uint4& v) {
      store_chunk(buffer + sub * kImageBytes, c * V + r, g, v);
    });
    box_store_begin();
    const int32_t c0 = (int32_t)((t % tiles_c) * W), r0 = (int32_t)((t / tiles_c) * kTileRows);
    for (uint32_t sub = 0; sub < E; ++sub) {
      const Coords at = {{r0 + (int32_t)(sub * W), c0, 0, 0, 0}};
      box_store_issue(dst, buffer + sub * kImageBytes, at, 2, kImageBytes);
    }
    box_store_commit_wait_read<1>();
  };
  for_each_box_pipelined<kStages>(src, 2, kTileBytes, ring, kTileBytes, bars, blockIdx.x, gridDim.x, tiles, coords_of,
                                  turn_and_store);
  box_store_drain();
#else
  auto turn_and_store = [&](uint64_t t, const uint8_t* image) {
    const uint64_t c0 = (t % tiles_c) * W, r0 = (t / tiles_c) * kTileRows;
    transpose_tile<T>(image, [&](uint32_t sub, uint32_t g, uint32_t c, uint32_t r, const uint4& v) {
      store_piece<T>(dst, r0 + sub * W + g * V, c0 + c * V + r, v);
    });
  };
  for_each_box_pipelined<kStages>(src, 2, kTileBytes, ring, kTileBytes, bars, blockIdx.x, gridDim.x, tiles, coords_of,
                                  turn_and_store);
#endif
}
}  // namespace

// src: box [128/E, 128], 128B swizzle (tensor map or BoxParams); dst: box [128/E, 128/E], 128B swizzle.
// Launch: 1-D blocks, dynamic shared memory (kStages + 2) * 16 KiB + 1 KiB of alignment slack (the cp.async
// path uses only the kStages ring).
extern "C" __global__ void tmakit_transpose(TMAKIT_BOX_SOURCE src, TMAKIT_BOX_SOURCE dst, uint64_t rows,
                                            uint64_t cols, uint32_t esize) {
  extern __shared__ __align__(16) uint8_t smem_raw[];
  __shared__ uint64_t bars[kStages];
  uint8_t* smem = align_shared(smem_raw, 1024);
  switch (esize) {
    case 1: transpose_all<uint8_t>(src, dst, rows, cols, smem, bars); break;
    case 2: transpose_all<uint16_t>(src, dst, rows, cols, smem, bars); break;
    case 4: transpose_all<uint32_t>(src, dst, rows, cols, smem, bars); break;
    case 8: transpose_all<uint64_t>(src, dst, rows, cols, smem, bars); break;
    default: asm volatile("trap;");  // the host allows only these sizes
  }
}
