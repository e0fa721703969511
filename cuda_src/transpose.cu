// tmakit_transpose: dst (cols x rows) = src (rows x cols)^T for 1/2/4/8-byte elements, both row-major.
//
// Each tile is H = 256 source rows (TMAKIT_TRANSPOSE_TILE_ROWS) by one 128-byte swizzle span of columns
// (W = 128/E elements of E bytes):
//   load   one box [W, H] (innermost first) through the one-source box load, 128B swizzle, a ring of stages;
//   turn   the tile is cut into H/W images of 8x8 micro-blocks of V x V elements (V = 16/E: one 16-byte chunk
//          per row), and each micro-block into P = max(1, 4/E) column slices, so that every element size
//          gives the block's threads the same work: a thread reads V rows of one 4E-byte slice (16 bytes for
//          E >= 4), turns them in registers (PRMT for bytes and half-words) and writes the R = V/P transposed
//          16-byte rows into H/W destination images, each a 128B-swizzled box [W, W] of dst;
//   store  the images through the one-source box store: a TMA store on sm_90 (one bulk group per tile, two
//          image buffers so the next tile is turned while this one drains, clipped at the edges by TMA); on
//          the cp.async path, interior tiles as whole dst rows of H*E bytes by consecutive threads with
//          streaming stores, edge tiles through box_store's clipping walk.
// 256-row tiles write dst in runs of 256*E bytes, not 128*E: measured on the H100, that lifted the 1-byte
// cp.async transpose from 0.78x to 0.83x of a plain copy (benchmarks/experiments/transpose_stages.py).
// All shared-memory traffic is bank-conflict free: lane order (g fastest, then slice p, then q) puts 8
// micro-blocks (g, (g + q) % 8) with 8 different chunks under the 128B swizzle (chunk ^= row % 8) in each
// phase of a warp's loads and stores (tests/test_ops.py counts it with tmakit.layout).
#include "tmakit/box_pipeline.cuh"
#include "tmakit/box_store.cuh"
#include "tmakit/swizzle.cuh"

using namespace tmakit;

// Compile-time parameters the host passes (tmakit/ops/transpose.py sizes shared memory from the same numbers).
#ifndef TMAKIT_TRANSPOSE_STAGES
#define TMAKIT_TRANSPOSE_STAGES 3
#endif
#ifndef TMAKIT_TRANSPOSE_TILE_ROWS
#define TMAKIT_TRANSPOSE_TILE_ROWS 256
#endif

namespace {
constexpr int kStages = TMAKIT_TRANSPOSE_STAGES;
constexpr uint32_t kTileRows = TMAKIT_TRANSPOSE_TILE_ROWS;  // source rows per tile
static_assert(kTileRows == 128 || kTileRows == 256, "a box dimension is at most 256; images need 128-row steps");
constexpr uint32_t kSpan = 128;                      // bytes per image row: the 128B swizzle span
constexpr uint32_t kTileBytes = kTileRows * kSpan;   // 16 or 32 KiB, for every element size
// Destination image buffers: TMA stores drain asynchronously, so that path alternates two (one is turned
// into while the other is read by the bulk store); the cp.async path's plain stores are done before the
// ring's barrier, so one suffices.
constexpr uint32_t kImageBuffers = TMAKIT_USE_TMA ? 2u : 1u;
// Tiles are ordered in groups of tile rows (see tile_origin), so that the blocks in flight write each dst row
// in a run of TMAKIT_TRANSPOSE_RUN_BYTES (group rows = run bytes / (H * E), at least 1): a trade between
// the dst run and the source run (128 B times the tile columns in flight, which shrink as groups grow).
#ifndef TMAKIT_TRANSPOSE_RUN_BYTES
#define TMAKIT_TRANSPOSE_RUN_BYTES 4096
#endif
template <uint32_t E>
constexpr uint64_t kGroupRows = TMAKIT_TRANSPOSE_RUN_BYTES / (kTileRows * E) > 1 ? TMAKIT_TRANSPOSE_RUN_BYTES / (kTileRows * E) : 1;

template <uint32_t Bytes> struct Slice;  // a Bytes-wide piece of a 16-byte chunk, as registers
template <> struct Slice<4> { typedef uint32_t type; };
template <> struct Slice<8> { typedef uint2 type; };
template <> struct Slice<16> { typedef uint4 type; };

template <typename T>
struct Turn {
  static constexpr uint32_t E = sizeof(T), V = 16u / E;  // elements per 16-byte chunk = rows per micro-block
  static constexpr uint32_t P = E >= 4 ? 1u : 4u / E;    // column slices per micro-block
  static constexpr uint32_t S = 16u / P;                 // bytes per slice row
  static constexpr uint32_t R = V / P;                   // transposed rows per slice
  static constexpr uint32_t kImages = kTileRows / (8u * V);  // destination images: tile rows / W
  static constexpr uint32_t kItems = 64u * kImages * P;  // (micro-block, slice) pairs per tile
};

// Turn one slice: `in` holds V rows of S bytes (as words), `out` gets its R transposed 16-byte rows. Whole
// words (E >= 4) are only renamed; bytes and half-words are gathered with PRMT: 8 per 4x4-byte block, one
// per output word of half-words.
template <typename T>
__device__ __forceinline__ void turn_slice(const uint32_t (&in)[Turn<T>::V][Turn<T>::S / 4u], uint4 (&out)[Turn<T>::R]) {
  typedef Turn<T> K;
  uint32_t words[K::R][4];
  if constexpr (K::E == 1) {
#pragma unroll
    for (uint32_t j = 0; j < 4; ++j) {  // input rows 4j..4j+3 make word j of the 4 output rows
      const uint32_t t0 = __byte_perm(in[4 * j][0], in[4 * j + 1][0], 0x5140);  // a0 b0 a1 b1
      const uint32_t t1 = __byte_perm(in[4 * j][0], in[4 * j + 1][0], 0x7362);  // a2 b2 a3 b3
      const uint32_t t2 = __byte_perm(in[4 * j + 2][0], in[4 * j + 3][0], 0x5140);
      const uint32_t t3 = __byte_perm(in[4 * j + 2][0], in[4 * j + 3][0], 0x7362);
      words[0][j] = __byte_perm(t0, t2, 0x5410);  // a0 b0 c0 d0
      words[1][j] = __byte_perm(t0, t2, 0x7632);
      words[2][j] = __byte_perm(t1, t3, 0x5410);
      words[3][j] = __byte_perm(t1, t3, 0x7632);
    }
  } else if constexpr (K::E == 2) {
#pragma unroll
    for (uint32_t r = 0; r < K::R; ++r)
#pragma unroll
      for (uint32_t j = 0; j < 4; ++j)
        words[r][j] = __byte_perm(in[2 * j][r / 2], in[2 * j + 1][r / 2], r % 2 ? 0x7632 : 0x5410);
  } else {
    T elems[K::V][K::R];
    memcpy(elems, in, sizeof elems);
#pragma unroll
    for (uint32_t r = 0; r < K::R; ++r) {
      T row[K::V];
#pragma unroll
      for (uint32_t m = 0; m < K::V; ++m) row[m] = elems[m][r];
      memcpy(words[r], row, 16);
    }
  }
#pragma unroll
  for (uint32_t r = 0; r < K::R; ++r) out[r] = make_uint4(words[r][0], words[r][1], words[r][2], words[r][3]);
}

// Every (micro-block, slice) of a tile: sink(sub, image_row, chunk, value) for each transposed 16-byte row,
// `sub` the destination image (source rows sub*W ..), `image_row` its row (source column), `chunk` its
// 16-byte chunk (source rows chunk*V ..).
template <typename T, class Sink>
__device__ __forceinline__ void transpose_tile(const uint8_t* source, Sink sink) {
  typedef Turn<T> K;
  typedef typename Slice<K::S>::type SliceBits;
  for (uint32_t b = threadIdx.x; b < K::kItems; b += blockDim.x) {
    const uint32_t g = b % 8u, p = (b / 8u) % K::P, q = (b / (8u * K::P)) % 8u, sub = b / (64u * K::P);
    const uint32_t c = (g + q) % 8u;
    uint32_t in[K::V][K::S / 4u];
#pragma unroll
    for (uint32_t m = 0; m < K::V; ++m) {
      const uint32_t row = sub * 8u * K::V + g * K::V + m;
      const SliceBits x = *reinterpret_cast<const SliceBits*>(
          source + swizzle_offset(row * kSpan + c * 16u, kSwizzle128B) + p * K::S);
      memcpy(in[m], &x, K::S);
    }
    uint4 out[K::R];
    turn_slice<T>(in, out);
#pragma unroll
    for (uint32_t r = 0; r < K::R; ++r) sink(sub, c * K::V + p * K::R + r, g, out[r]);
  }
}

#if !TMAKIT_USE_TMA
// cp.async path, a tile wholly inside dst: the images hold dst rows c0 .. c0+W-1, columns r0 .. r0+H-1; each
// thread copies 16-byte chunks, consecutive threads along a row, so every warp writes whole lines.
template <typename T>
__device__ __forceinline__ void store_tile_rows(const BoxParams& dst, const uint8_t* images, uint64_t r0, uint64_t c0) {
  constexpr uint32_t E = sizeof(T), W = kSpan / E, kImageBytes = W * kSpan, kChunksPerRow = kTileRows * E / 16u;
  uint8_t* base = reinterpret_cast<uint8_t*>(dst.address) + c0 * dst.strides[1] + r0 * E;
  for (uint32_t k = threadIdx.x; k < W * kChunksPerRow; k += blockDim.x) {
    const uint32_t row = k / kChunksPerRow, j = k % kChunksPerRow;
    const uint4 v = *reinterpret_cast<const uint4*>(images + (j / 8u) * kImageBytes +
                                                    swizzle_offset(row * kSpan + (j % 8u) * 16u, kSwizzle128B));
    __stcs(reinterpret_cast<uint4*>(base + row * dst.strides[1] + j * 16u), v);  // st.global.cs: written once
  }
}
#endif

template <typename T>
__device__ __forceinline__ void transpose_all(const BoxSource& src, const BoxSource& dst, uint64_t rows,
                                              uint64_t cols, uint8_t* smem, uint64_t* bars) {
  constexpr uint32_t E = sizeof(T), W = kSpan / E, kImageBytes = W * kSpan;
  uint8_t* ring = smem;                               // kStages source tiles
  uint8_t* out = smem + kStages * kTileBytes;         // kImageBuffers x H/W destination images
  const uint64_t tiles_c = (cols + W - 1) / W, tiles_r = (rows + kTileRows - 1) / kTileRows;
  const uint64_t tiles = tiles_c * tiles_r;
  // Tile t in groups of G tile rows, column-major inside a group: the blocks in flight read G * H source rows
  // and write dst rows in runs of G * H * E bytes, not H * E.
  constexpr uint64_t G = kGroupRows<E>;
  auto tile_origin = [&](uint64_t t, int32_t& c0, int32_t& r0) {
    const uint64_t group = t / (G * tiles_c), first = group * G;
    const uint64_t height = tiles_r - first < G ? tiles_r - first : G;
    const uint64_t in_group = t - group * G * tiles_c;
    c0 = (int32_t)((in_group / height) * W);
    r0 = (int32_t)((first + in_group % height) * kTileRows);
  };
  auto coords_of = [&](uint64_t t) {
    Coords at = {{0, 0, 0, 0, 0}};
    tile_origin(t, at.c[0], at.c[1]);
    return at;
  };
  uint32_t done = 0;
  auto turn_and_store = [&](uint64_t t, const uint8_t* image) {
    int32_t c0, r0;
    tile_origin(t, c0, r0);
    uint8_t* buffer = out + (done++ % kImageBuffers) * kTileBytes;
    transpose_tile<T>(image, [&](uint32_t sub, uint32_t image_row, uint32_t chunk, const uint4& v) {
      *reinterpret_cast<uint4*>(buffer + sub * kImageBytes +
                                swizzle_offset(image_row * kSpan + chunk * 16u, kSwizzle128B)) = v;
    });
    box_store_begin();
#if !TMAKIT_USE_TMA  // a tile whose first and last image boxes are plain (so all are) is stored as whole rows
    const Coords first = {{r0, c0, 0, 0, 0}}, last = {{r0 + (int32_t)((Turn<T>::kImages - 1) * W), c0, 0, 0, 0}};
    if (box_is_plain_2d(dst, first) && box_is_plain_2d(dst, last)) {
      store_tile_rows<T>(dst, buffer, r0, c0);
      return;
    }
#endif
    for (uint32_t sub = 0; sub < Turn<T>::kImages; ++sub) {
      const Coords at = {{r0 + (int32_t)(sub * W), c0, 0, 0, 0}};
      box_store_issue(dst, buffer + sub * kImageBytes, at, 2, kImageBytes);
    }
    box_store_commit_wait_read<1>();
  };
  for_each_box_pipelined<kStages>(src, 2, kTileBytes, ring, kTileBytes, bars, blockIdx.x, gridDim.x, tiles, coords_of,
                                  turn_and_store);
  box_store_drain();
}

}  // namespace

// src: box [128/E, H], 128B swizzle (tensor map or BoxParams); dst: box [128/E, 128/E], 128B swizzle.
// Launch: 1-D blocks of 256 threads, dynamic shared memory (stages + image buffers) * H * 128 bytes + 1 KiB
// of alignment slack.
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
