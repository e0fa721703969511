// tmakit_transpose: dst (cols x rows) = src (rows x cols)^T for 1/2/4/8-byte elements, both row-major.
//
// Each tile is H = 256 source rows (TMAKIT_TRANSPOSE_TILE_ROWS) by one 128-byte swizzle span of columns
// (W = 128/E elements of E bytes):
//   load   one box [W, H] (innermost first) through the one-source box load, 128B swizzle;
//   turn   the tile is cut into H/W images of 8x8 micro-blocks of V x V elements (V = 16/E: one 16-byte chunk
//          per row), and each micro-block into P = max(1, 4/E) column slices, so that every element size
//          gives the block's threads the same work: a thread reads V rows of one 4E-byte slice (16 bytes for
//          E >= 4), turns them in registers (PRMT for bytes and half-words) and writes the R = V/P transposed
//          16-byte rows into H/W destination images, each a 128B-swizzled box [W, W] of dst;
//   store  the images through the block's store pipeline (box_store.cuh): a TMA store on sm_90 (one bulk group
//          per tile, clipped at the edges by TMA); on the cp.async path, whole dst rows of H*E bytes by
//          consecutive threads with streaming stores, clipped at the edges in whole 16-byte chunks (Plain2dBox).
// One block per tile, one stage (the box ring of box_pipeline.cuh) and one image buffer: the blocks resident on an
// SM (three with 256-row tiles on sm_90) overlap each other's loads, turns and stores, which beat a persistent
// grid walking the tiles through a deeper ring (docs/PERFORMANCE.md, "Transpose: what the kernel keeps").
// A tile's element size and row classes are compile-time (TMAKIT_TRANSPOSE_ELEMENT_BYTES, _ROW_CLASSES): one
// turn per build, not four sizes behind a switch.
//
// Sector-aligned runs. A dst row that starts 16 bytes into a 32-byte sector (a dst pitch of 16 mod 32 bytes
// puts every other row there) would begin and end each tile's run with half a sector, the other half written
// by another block at another time, which costs a large part of the bandwidth (docs/PERFORMANCE.md). So the
// host splits dst rows into `row_classes` (1, or 2 by parity, each its own tensor map of every other row) and
// marks the classes whose rows start mid-sector in `shifted`; a tile then also loads the V source rows before
// it (the prefix, one more box in the same stage) and writes a shifted class's rows over [r0 - V, r0 + H - V):
// every run starts and ends on a sector boundary, but for the first tile row, whose
// runs stay unshifted (see turn_and_store), and a dst that is not 16-byte aligned (nothing to align to).
//
// Line-aligned source rows. A tile row is 128 bytes of one source row; where the source base lies inside a
// 128-byte line and the pitch is whole lines, every tile row would straddle two lines. The host then passes
// `lead` and the tile columns after the first start that many elements early (see the kernel's parameters).
// A pitch of 64 mod 128 leaves every other row straddling whatever the columns; evict_last on the source
// loads (TMAKIT_TRANSPOSE_SOURCE_EVICTION) keeps the other halves for the next tile column instead.
//
// Shared memory: the tile's own items are bank-conflict free: lane order (g fastest, then slice p, then q)
// puts 8 micro-blocks (g, c(g, q)) with 8 different chunks under the 128B swizzle (chunk ^= row % 8) in each
// phase of a warp's loads and stores; the exceptions are 8-byte elements in two classes (the shifted class's
// stores 2-way, column_chunk says why). The prefix's items take the same order, as one more group of 8
// micro-block rows of which only the last (the prefix's V rows) works: its stores are then as conflict free
// as the tile's (in a compact order they all landed in one image column, up to 8-way).
// tests/test_transpose_banks.py counts the kernel's own accesses on the GPU (TMAKIT_TRANSPOSE_TRACE).
#include "tmakit/box_pipeline.cuh"
#include "tmakit/box_store.cuh"
#include "tmakit/grid_dependency.cuh"
#include "tmakit/swizzle.cuh"

// TMAKIT_TRANSPOSE_TRACE(pointer, bytes): called before each shared-memory access of the turn (the tile's
// loads, the images' stores) with its address and width. Empty (no code) unless defined before this file is
// compiled: tests/test_transpose_banks.py records every lane's address with it and counts bank conflicts.
#ifndef TMAKIT_TRANSPOSE_TRACE
#define TMAKIT_TRANSPOSE_TRACE(pointer, bytes) ((void)0)
#endif

// Compile-time parameters the host passes (tmakit/ops/transpose.py sizes shared memory from the same numbers).
// The element size (1, 2, 4, 8 bytes) and dst row classes (1, or 2: even and odd rows, see above).
#ifndef TMAKIT_TRANSPOSE_ELEMENT_BYTES
#define TMAKIT_TRANSPOSE_ELEMENT_BYTES 2
#endif
#ifndef TMAKIT_TRANSPOSE_ROW_CLASSES
#define TMAKIT_TRANSPOSE_ROW_CLASSES 1
#endif
// Source rows per tile: 256 (dst runs of 256*E bytes) where shared memory allows, else 128.
#ifndef TMAKIT_TRANSPOSE_TILE_ROWS
#define TMAKIT_TRANSPOSE_TILE_ROWS 256
#endif
// The L2 priority of the source lines (an L2Eviction value; TMA loads only, box_load_part says why): evict_last
// keeps the halves of lines that the next tile column reads where the source pitch is 64 mod 128 bytes.
#ifndef TMAKIT_TRANSPOSE_SOURCE_EVICTION
#define TMAKIT_TRANSPOSE_SOURCE_EVICTION 2
#endif

// Where dst is written from: 0 = the one-source box store (a TMA store on sm_90), 1 = the block's plain
// stores from BoxParams (store_run). The cp.async path always stores plainly; the host sets 1 on the TMA path
// where TMA can describe src but not dst (a dst pitch or base that is not a multiple of 16 bytes): TMA loads
// the source, the block writes dst in aligned 16-byte stores (store_run_unaligned).
#ifndef TMAKIT_TRANSPOSE_PLAIN_STORE
#define TMAKIT_TRANSPOSE_PLAIN_STORE 0
#endif
#define TMAKIT_TRANSPOSE_STORES_PLAINLY (TMAKIT_TRANSPOSE_PLAIN_STORE || !TMAKIT_USE_TMA)
// Per-row sector-aligned runs (1: the host sets it where dst's rows are not 16-byte aligned, which the
// plain stores write). Each dst row g starts s_g = (its address mod 32) / E elements past a 32-byte sector;
// as tile rows start at multiples of H (H * E a multiple of 32 bytes), the run of row g that starts s_g
// elements early ([r0 - s_g, r0 + H - s_g)) is whole sectors. Every tile then loads the 32/E source rows
// before it (a prefix of two micro-block rows) and writes each dst row's sector-aligned run in aligned
// 16-byte stores; only the pieces at dst's own row ends are written byte by byte (runs that straddle sectors
// are slow, as above).
#ifndef TMAKIT_TRANSPOSE_ROW_SECTORS
#define TMAKIT_TRANSPOSE_ROW_SECTORS 0
#endif
#if TMAKIT_TRANSPOSE_ROW_SECTORS && !TMAKIT_TRANSPOSE_STORES_PLAINLY
#error "row-sector runs are written by the plain stores"
#endif
// Source row classes (TMA only; 0: off). A source pitch that is not a multiple of 16 bytes, on a 16-byte
// aligned base, is still a TMA tensor seen k = 16 / gcd(pitch, 16) rows at a time: "super-rows" of k source
// rows back to back (k * pitch bytes, a multiple of 16), source row k*R + j, column c at element j*cols + c
// of super-row R. The host describes that view (box [W + 16/E, (prefix + H) / k], no swizzle) and passes src
// itself as BoxParams in src_prefix's place. A stage is k boxes, box j holding the tile's rows of class j (the
// prefix rows first), each row the 144-byte window from the 16-byte boundary at or before its first element
// (a TMA box must start 16-byte aligned in dim 0: boxes started mid-window stopped the kernel with an illegal
// instruction on the H100), (j * pitch) mod 16 bytes in; the turn reads it as aligned words shifted into
// place (source_offset, transpose_tile). Columns past `cols` hold the next row's elements (dst rows past the
// end, never stored); the last rows % k rows, which no whole super-row holds, are copied in by the block
// (patch_source_tail). The class boxes' reads were not counted for bank conflicts (tests/test_transpose_banks.py
// covers the swizzled layout). Reading odd pitches through TMA this way, not the cp.async path's gather, is what
// keeps them near copy speed (docs/PERFORMANCE.md).
#ifndef TMAKIT_TRANSPOSE_SOURCE_CLASSES
#define TMAKIT_TRANSPOSE_SOURCE_CLASSES 0
#endif
#if TMAKIT_TRANSPOSE_SOURCE_CLASSES
#if !TMAKIT_USE_TMA
#error "source row classes are TMA loads"
#endif
#define TMAKIT_TRANSPOSE_SRC_PREFIX const __grid_constant__ tmakit::BoxParams
#else
#define TMAKIT_TRANSPOSE_SRC_PREFIX TMAKIT_BOX_SOURCE
#endif
#if TMAKIT_TRANSPOSE_STORES_PLAINLY
#define TMAKIT_TRANSPOSE_DST const __grid_constant__ tmakit::BoxParams
#else
#define TMAKIT_TRANSPOSE_DST TMAKIT_BOX_SOURCE
#endif

namespace {
using namespace tmakit;
#if TMAKIT_TRANSPOSE_SOURCE_CLASSES
typedef BoxParams PrefixSource;
#else
typedef BoxSource PrefixSource;
#endif
#if TMAKIT_TRANSPOSE_STORES_PLAINLY
typedef BoxParams DstBox;
#else
typedef BoxSource DstBox;
#endif
// The store pipeline of the tile's images: TMA stores, or the block's plain stores (a buffer is rewritten once
// every thread is past its stores from it).
typedef StorePipeline<1, !TMAKIT_TRANSPOSE_STORES_PLAINLY> ImageStores;
// The element type moved (the transpose moves bits) and the dst row classes.
template <uint32_t E> struct Bits;
template <> struct Bits<1> { typedef uint8_t type; };
template <> struct Bits<2> { typedef uint16_t type; };
template <> struct Bits<4> { typedef uint32_t type; };
template <> struct Bits<8> { typedef uint64_t type; };
typedef Bits<TMAKIT_TRANSPOSE_ELEMENT_BYTES>::type Element;
constexpr uint32_t kRowClasses = TMAKIT_TRANSPOSE_ROW_CLASSES;
static_assert(kRowClasses == 1 || kRowClasses == 2, "dst rows in one class or two (even, odd)");
constexpr uint32_t kTileRows = TMAKIT_TRANSPOSE_TILE_ROWS;  // source rows per tile
constexpr L2Eviction kSourceEviction = static_cast<L2Eviction>(TMAKIT_TRANSPOSE_SOURCE_EVICTION);
static_assert(kTileRows == 128 || kTileRows == 256, "a box dimension is at most 256; images need 128-row steps");
constexpr uint32_t kSpan = 128;                      // bytes per image row: the 128B swizzle span
constexpr uint32_t kTileBytes = kTileRows * kSpan;   // 16 or 32 KiB, for every element size
// Micro-block rows (16 bytes of dst each) in the prefix: one for shifted classes, two for row-sector runs.
constexpr uint32_t kPrefixChunks = TMAKIT_TRANSPOSE_ROW_SECTORS ? 2u : 1u;
constexpr bool kRowSectors = TMAKIT_TRANSPOSE_ROW_SECTORS != 0;
// Room for the prefix (at most 16 rows per chunk: 1-byte elements) after the tile in each stage, when classes
// are shifted or runs row-sector aligned; whole 2 KiB units keep each stage 1024-byte aligned for the swizzle.
constexpr uint32_t kPrefixBytes = kPrefixChunks * 16u * kSpan;
constexpr uint32_t kSourceClasses = TMAKIT_TRANSPOSE_SOURCE_CLASSES;
constexpr uint32_t kClassCount = kSourceClasses ? kSourceClasses : 1u;  // a divisor in code compiled either way
static_assert(kSourceClasses == 0 || kSourceClasses == 2 || kSourceClasses == 4 || kSourceClasses == 8 || kSourceClasses == 16,
              "source row classes: 2, 4, 8 or 16");

// Source row classes: each class box row is 144 bytes, the aligned 16-byte window around the row's 128
// (a TMA box must start on a 16-byte boundary in dim 0: tma_model.check_box_start); class j's rows start
// (j * pitch) mod 16 bytes into it.
constexpr uint32_t kClassRowBytes = kSpan + 16u;
// Split turns (TMAKIT_TRANSPOSE_SPLIT_TURN, 1: set by the host for 1-byte elements in 16 source row classes
// with row-sector runs): the lower half of the images is turned first, then, after a block barrier, the upper
// half into the class boxes' rows that the lower half read (RunRows). The image buffer shrinks from 36 to
// 22 KiB, and the block's shared memory from 79 to 65 KiB: three blocks per SM on sm_90 in place of two.
#ifndef TMAKIT_TRANSPOSE_SPLIT_TURN
#define TMAKIT_TRANSPOSE_SPLIT_TURN 0
#endif
#if TMAKIT_TRANSPOSE_SPLIT_TURN && !(TMAKIT_TRANSPOSE_ROW_SECTORS && TMAKIT_TRANSPOSE_SOURCE_CLASSES == 16 && TMAKIT_TRANSPOSE_TILE_ROWS == 256)
#error "split turns are for 256-row tiles of 1-byte elements in 16 source row classes with row-sector runs"
#endif
constexpr bool kSplitTurn = TMAKIT_TRANSPOSE_SPLIT_TURN != 0;
// In each class box: past the prefix's two rows (2 * 144 bytes), 128-byte aligned (bank-conflict free as the
// images are); 8 image rows of 128 bytes end within the rows of the prefix and the lower half, (32 + H/2) / 16.
constexpr uint32_t kSplitOffset = 3u * 128u;
static_assert(!kSplitTurn || kSplitOffset >= 2u * kClassRowBytes, "the upper images start past the prefix's rows");
static_assert(!kSplitTurn || kSplitOffset + 8u * kSpan <= (32u + kTileRows / 2u) / 16u * kClassRowBytes,
              "the upper images end within the rows the lower half's turn read");
// Class box j at j * class_box_stride (TMA writes to 128-byte aligned shared memory), the stage rounded up
// to 1 KiB (the images after it stay 1024-aligned for the swizzle).
__device__ __forceinline__ uint32_t class_box_stride(uint32_t prefix_rows) {
  return ((kTileRows + prefix_rows) / kClassCount * kClassRowBytes + 127u) & ~127u;
}
__device__ __forceinline__ uint32_t class_stage_bytes(uint32_t prefix_rows) {
  return (kSourceClasses * class_box_stride(prefix_rows) + 1023u) & ~1023u;
}

// Byte offset in a stage of row x of the tile's numbering (0 .. H-1 the tile's rows, H .. the prefix's) at
// 16-byte chunk `chunk`: the 128B-swizzled box (and prefix box after it), or with source row classes the
// class boxes of (prefix_rows + H) / k rows each, the prefix's rows first, unswizzled, each row `pitch16`
// (the source pitch mod 16) times its class bytes into its window (then not 16-byte aligned).
__device__ __forceinline__ uint32_t source_offset(uint32_t x, uint32_t chunk, uint32_t prefix_rows, uint32_t pitch16) {
  if constexpr (kSourceClasses != 0) {
    const uint32_t e = x < kTileRows ? x + prefix_rows : x - kTileRows;  // row from the stage's first
    const uint32_t j = e % kClassCount;
    return j * class_box_stride(prefix_rows) + e / kClassCount * kClassRowBytes + ((j * pitch16) & 15u) + chunk * 16u;
  } else {
    (void)prefix_rows, (void)pitch16;
    return swizzle_offset(x * kSpan + chunk * 16u, kSwizzle128B);
  }
}
// Tiles are ordered in groups of tile rows (see tile_origin), so that the blocks in flight write each dst row
// in a run of TMAKIT_TRANSPOSE_RUN_BYTES (group rows = run bytes / (H * E), at least 1): a trade between
// the dst run and the source run (128 B times the tile columns in flight, which shrink as groups grow).
// 64 KiB makes whole columns of tiles for sources up to 64 Ki rows of 1 byte, 8 Ki rows of 8 bytes.
#ifndef TMAKIT_TRANSPOSE_RUN_BYTES
#define TMAKIT_TRANSPOSE_RUN_BYTES 65536
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
  static constexpr uint32_t W = kSpan / E;               // elements per image row = dst rows per tile
  static constexpr uint32_t P = E >= 4 ? 1u : 4u / E;    // column slices per micro-block
  static constexpr uint32_t S = 16u / P;                 // bytes per slice row
  static constexpr uint32_t R = V / P;                   // transposed rows per slice
  static constexpr uint32_t kImages = kTileRows / (8u * V);  // destination images: tile rows / W
  static constexpr uint32_t kItems = 64u * kImages * P;  // (micro-block, slice) pairs per tile
  static constexpr uint32_t kPrefixItems = 64u * P;      // the prefix's round: a group of 8 micro-block rows
  static constexpr uint32_t kChunksPerRun = kTileRows / V;  // 16-byte chunks in a tile's run of one dst row
};

// The column chunk c of item (g, q), g the micro-block row in its group of 8 (fastest across lanes): the
// diagonal (g + q) % 8 makes the 8 lanes of every load and store phase touch 8 different chunks under the
// swizzle. For 8-byte elements in two row classes no (g + q)-like order does that for both a shifted and an
// unshifted class (a search over all lane orders found none); XOR with the permutation {0,4,3,7,2,6,1,5}
// keeps the loads and the unshifted class's stores conflict free and the shifted class's stores 2-way.
template <typename T, uint32_t Classes>
__device__ __forceinline__ uint32_t column_chunk(uint32_t g, uint32_t q) {
  if constexpr (sizeof(T) == 8 && Classes == 2) {
    constexpr uint32_t kOrder = 0u | 4u << 3 | 3u << 6 | 7u << 9 | 2u << 12 | 6u << 15 | 1u << 18 | 5u << 21;
    return ((kOrder >> (3u * g)) & 7u) ^ q;
  } else {
    return (g + q) % 8u;
  }
}

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

// The (micro-block, slice) items [first, last) of a tile (of K::kItems, image `sub` the items
// [sub * 64P, (sub + 1) * 64P)), then with `prefix` those of the kPrefixChunks * V source rows before
// it (stored after the tile's H rows in the stage): sink(m, d, value) for each transposed 16-byte row, `m`
// the micro-block row (source rows r0 + m*V ..; -1 and -2 for the prefix), `d` the dst row in the tile
// (source column c0 + d). The prefix's items of shifted classes are one more group of 8 micro-block rows
// (m = -8 .. -1) in the tile's lane order, all but the last idle, so that their stores into the swizzled
// images are as conflict free as the tile's; those of row-sector runs (two micro-block rows, stored into
// chunks 0 and 1 of the extended rows: RunRows) are packed, slices fastest, then column chunks, in a quarter of
// the warp instructions (the spread round was a third of the 1-byte turn's); their stores conflict.
template <typename T, uint32_t Classes, class Sink>
__device__ __forceinline__ void transpose_tile(const uint8_t* source, uint32_t first, uint32_t last, bool prefix,
                                               uint32_t prefix_rows, uint32_t pitch16, Sink sink) {
  typedef Turn<T> K;
  typedef typename Slice<K::S>::type SliceBits;
  constexpr uint32_t kPrefixItems = kRowSectors ? kPrefixChunks * 8u * K::P : K::kPrefixItems;
  const uint32_t items = last - first + (prefix ? kPrefixItems : 0u);
  for (uint32_t a = threadIdx.x; a < items; a += blockDim.x) {
    const uint32_t b = a < last - first ? first + a : K::kItems + (a - (last - first));  // the item (prefix after kItems)
    uint32_t c, p;
    int32_t m;
    if (kRowSectors && b >= K::kItems) {  // the packed prefix
      const uint32_t i = b - K::kItems;
      p = i % K::P, c = (i / K::P) % 8u, m = (int32_t)(i / (8u * K::P)) - (int32_t)kPrefixChunks;
    } else {
      const uint32_t g = b % 8u, q = (b / (8u * K::P)) % 8u, sub = b / (64u * K::P);
      p = (b / 8u) % K::P, c = column_chunk<T, Classes>(g, q);
      m = sub < K::kImages ? (int32_t)(sub * 8u + g) : (int32_t)g - 8;
      if (m < -(int32_t)kPrefixChunks) continue;  // the spread prefix's idle rows
    }
    uint32_t in[K::V][K::S / 4u];
    if constexpr (kSourceClasses != 0) {
      // Row e0 + j of the stage (the prefix's rows first): e0 is a multiple of V, and k divides V (k = 16 /
      // gcd(pitch, 16) <= 16 / E), so row j's class box is j % k, a constant of the unrolled loop. The reads are
      // aligned words at offsets from the stage (a pointer cast to an integer and back would be a generic load).
      const uint32_t e0 = m >= 0 ? (uint32_t)m * K::V + prefix_rows : (uint32_t)(m + (int32_t)kPrefixChunks) * K::V;
      const uint32_t stride = class_box_stride(prefix_rows);
      const uint8_t* item = source + e0 / kClassCount * kClassRowBytes + c * 16u + p * K::S;  // 4-byte aligned
#pragma unroll
      for (uint32_t j = 0; j < K::V; ++j) {
        const uint32_t jc = j % kClassCount;
        const uint32_t at = jc * stride + j / kClassCount * kClassRowBytes + ((jc * pitch16) & 15u);
        TMAKIT_TRANSPOSE_TRACE(item + at, K::S);
        const uint32_t* w = reinterpret_cast<const uint32_t*>(item + (at & ~3u));
        if constexpr (K::E >= 4) {  // whole words (the pitch a multiple of 4 bytes)
#pragma unroll
          for (uint32_t q = 0; q < K::S / 4u; ++q) in[j][q] = w[q];
        } else {
          const uint32_t shift = (at & 3u) * 8u;
          uint32_t x[K::S / 4u + 1u];
#pragma unroll
          for (uint32_t q = 0; q <= K::S / 4u; ++q) x[q] = w[q];
#pragma unroll
          for (uint32_t q = 0; q < K::S / 4u; ++q) in[j][q] = __funnelshift_r(x[q], x[q + 1], shift);
        }
      }
    } else {
      const uint32_t first_row = m >= 0 ? (uint32_t)m * K::V : kTileRows + (uint32_t)(m + (int32_t)kPrefixChunks) * K::V;
#pragma unroll
      for (uint32_t j = 0; j < K::V; ++j) {
        const uint8_t* at = source + source_offset(first_row + j, c, prefix_rows, pitch16) + p * K::S;
        TMAKIT_TRANSPOSE_TRACE(at, K::S);
        const SliceBits x = *reinterpret_cast<const SliceBits*>(at);
        memcpy(in[j], &x, K::S);
      }
    }
    uint4 out[K::R];
    turn_slice<T>(in, out);
#pragma unroll
    for (uint32_t r = 0; r < K::R; ++r) sink(m, c * K::V + p * K::R + r, out[r]);
  }
}

// The images of one tile: class k's rows of sub-image `sub` (dst elements r0 + sub*W .. of its run) form one
// 128B-swizzled box [W, W / Classes] of that class's tensor map, image row i = dst row c0 + i*Classes + k.
template <typename T, uint32_t Classes>
struct TileImages {
  static constexpr uint32_t kClassRows = Turn<T>::W / Classes;
  static constexpr uint32_t kBytes = kClassRows * kSpan;  // one image
  __device__ static uint32_t offset(uint32_t sub, uint32_t k) { return (sub * Classes + k) * kBytes; }
};

#if TMAKIT_TRANSPOSE_STORES_PLAINLY
// Plain stores: class k's whole run of the tile, `run` = box [H, W / Classes] of its dst rows at the run's
// start (clipped in whole chunks at the edges); consecutive threads along a row, so every warp writes whole
// lines, from the staged images.
template <typename T, uint32_t Classes>
__device__ __forceinline__ void store_tile_rows(const Plain2dBox& run, const uint8_t* images, uint32_t k) {
  typedef TileImages<T, Classes> I;
  constexpr uint32_t kPerRow = Turn<T>::kChunksPerRun;  // = run.per_row
  auto store = [&](uint32_t i, uint32_t j, uint64_t address) {
    const uint4 v = *reinterpret_cast<const uint4*>(images + I::offset(j / 8u, k) +
                                                    swizzle_offset(i * kSpan + (j % 8u) * 16u, kSwizzle128B));
    __stcs(reinterpret_cast<uint4*>(address), v);  // st.global.cs: written once
  };
  if (run.all_inside() && blockDim.x % kPerRow == 0) {  // interior tiles: one chunk column per thread
    const uint32_t j = threadIdx.x % kPerRow, step = blockDim.x / kPerRow;
    uint64_t address = run.address(threadIdx.x / kPerRow, j);
    for (uint32_t i = threadIdx.x / kPerRow; i < I::kClassRows; i += step, address += step * run.stride) store(i, j, address);
    return;
  }
  for (ChunkCursor c(kPerRow, threadIdx.x, blockDim.x); c.row < I::kClassRows; c.advance())
    if (run.inside(c.row, c.chunk)) store(c.row, c.chunk, run.address(c.row, c.chunk));
}

// Bytes s .. s+15 (s < 16) of the 32 bytes `w` (little-endian words): whole words by selects on s / 4, the
// rest by funnel shifts (SHF.R, PTX ISA 9.7.8.7 shf.r.clamp: __funnelshift_r).
__device__ __forceinline__ uint4 bytes_from(const uint32_t (&w)[8], uint32_t s) {
  const uint32_t q = s >> 2u, shift = (s & 3u) * 8u;
  uint32_t a[5];
#pragma unroll
  for (uint32_t i = 0; i < 5; ++i) a[i] = q == 0 ? w[i] : q == 1 ? w[i + 1] : q == 2 ? w[i + 2] : w[i + 3];
  return make_uint4(__funnelshift_r(a[0], a[1], shift), __funnelshift_r(a[1], a[2], shift),
                    __funnelshift_r(a[2], a[3], shift), __funnelshift_r(a[3], a[4], shift));
}

__device__ __forceinline__ void words_of(uint32_t (&w)[8], uint32_t at, const uint4& v) {
  w[at] = v.x, w[at + 1] = v.y, w[at + 2] = v.z, w[at + 3] = v.w;
}

// The 16-byte aligned piece at `piece` of a dst run [first, end): whole, one st.global.cs (written once);
// shared with a neighbouring run, only its bytes [a, b) in aligned stores of 1, 2, 4 and 8 bytes (E-aligned, as
// the run's bounds are), so the neighbour's bytes stay untouched: straight-line, the head's stores raising a's
// alignment and the tail's lowering it again. (A loop that halved the store size while `a % size` was not 0
// compiled to an integer division a step and a local-memory array: 42% of the instructions of a transpose of
// 311 source rows; docs/PERFORMANCE.md, Copy and transpose.)
__device__ __forceinline__ void store_piece(uint64_t piece, uint64_t first, uint64_t end, const uint4& v) {
  if (piece >= first && piece + 16u <= end) {
    __stcs(reinterpret_cast<uint4*>(piece), v);
    return;
  }
  const uint64_t lo = (uint64_t)v.x | (uint64_t)v.y << 32, hi = (uint64_t)v.z | (uint64_t)v.w << 32;
  uint32_t a = (uint32_t)((piece > first ? piece : first) - piece);
  const uint32_t b = (uint32_t)((piece + 16u < end ? piece + 16u : end) - piece);
  auto put = [&](uint32_t size) {  // bytes [a, a + size) of the piece, a a multiple of size
    store_bits(reinterpret_cast<void*>(piece + a), (a < 8u ? lo : hi) >> (8u * (a & 7u)), size);
    a += size;
  };
  if ((a & 1u) && a + 1u <= b) put(1);
  if ((a & 2u) && a + 2u <= b) put(2);
  if ((a & 4u) && a + 4u <= b) put(4);
  if (a + 8u <= b) put(8);  // a is a multiple of 8 wherever 8 bytes remain
  if (a + 4u <= b) put(4);
  if (a + 2u <= b) put(2);
  if (a + 1u <= b) put(1);
}

// Plain stores where dst's rows are not 16-byte aligned (a pitch or base that is not a multiple of 16 bytes,
// which TMA cannot describe and Plain2dBox refuses): each dst row of the run is written in the 16-byte
// aligned pieces of global memory it covers, consecutive threads along a row (coalesced, 16 bytes each); a
// whole piece gathers its bytes from two staged chunks (bytes_from), the pieces at the run's two ends (shared
// with the neighbouring tiles' runs) element by element. `run`: box [H, W / Classes] of class k's rows at
// (start, row); nothing outside dst is written.
template <typename T, uint32_t Classes>
__device__ __forceinline__ void store_run_unaligned(const BoxParams& dst, const uint8_t* images, uint32_t k, int32_t start,
                                                    int32_t row) {
  typedef TileImages<T, Classes> I;
  constexpr uint32_t E = sizeof(T), kPieces = kTileRows * E / 16u + 1u;
  auto image_chunk = [&](uint32_t i, uint32_t j) -> const uint8_t* {  // chunk j of the run's image row i
    return images + I::offset(j / 8u, k) + swizzle_offset(i * kSpan + (j % 8u) * 16u, kSwizzle128B);
  };
  const int64_t lo = start > 0 ? start : 0;
  const int64_t hi = (int64_t)start + kTileRows < (int64_t)dst.dims[0] ? (int64_t)start + kTileRows : (int64_t)dst.dims[0];
  if (hi <= lo) return;
  for (ChunkCursor c(kPieces, threadIdx.x, blockDim.x); c.row < I::kClassRows; c.advance()) {
    const int64_t g = (int64_t)row + c.row;
    if (g >= (int64_t)dst.dims[1]) break;  // rows only grow along the walk
    const uint64_t base = dst.address + (uint64_t)g * dst.strides[1] + (uint64_t)((int64_t)start * E);  // element `start`
    const uint64_t first = dst.address + (uint64_t)g * dst.strides[1] + (uint64_t)(lo * E), end = base + (uint64_t)(hi - start) * E;
    const uint64_t piece = (first & ~15ull) + 16ull * c.chunk;
    if (piece >= end) continue;
    // run bytes o .. o+15 (o < 0 at the first piece: the bytes before the run are not written)
    const int32_t o = (int32_t)(int64_t)(piece - base), j = o >> 4;  // arithmetic shift: j = -1 before the run
    const uint32_t s = (uint32_t)o & 15u;
    uint32_t w[8];
    words_of(w, 0, j >= 0 ? *reinterpret_cast<const uint4*>(image_chunk(c.row, (uint32_t)j)) : make_uint4(0, 0, 0, 0));
    words_of(w, 4, s != 0 && j + 1 < (int32_t)Turn<T>::kChunksPerRun ? *reinterpret_cast<const uint4*>(image_chunk(c.row, (uint32_t)(j + 1)))
                                                                    : make_uint4(0, 0, 0, 0));
    store_piece(piece, first, end, bytes_from(w, s));
  }
}

// Where row-sector runs are staged: dst row i of the tile as one extended row of 16-byte chunks, the prefix's two
// chunks (x = 0, 1) then its run's H / V chunks (x - 2), unswizzled, so that a store piece's 16 bytes are five
// aligned words at its byte offset (no selects between chunks). The turn's stores stay conflict free (8 lanes
// write 8 consecutive chunks of a row); only the packed prefix's (a sixteenth of them) conflict.
// With split turns (TMAKIT_TRANSPOSE_SPLIT_TURN) the image buffer holds chunks 0 .. kLowChunks of each row and
// the rest go, after the lower half's turn, into stage rows that turn read: 8 rows of 128 bytes in each class
// box from byte kSplitOffset (the prefix's and the first H/2 tile rows). Chunk kLowChunks is written to both,
// so that every piece reads one region.
template <typename T>
struct RunRows {
  static constexpr uint32_t kChunks = Turn<T>::kChunksPerRun + 2u;  // of an extended row
  static constexpr bool kSplit = kSplitTurn && sizeof(T) == 1;  // (16 classes hold 1-byte rows only: k <= 16 / E)
  static constexpr uint32_t kLowChunks = kSplit ? 2u + Turn<T>::kChunksPerRun / 2u : kChunks;
  static constexpr uint32_t kRowBytes = (kSplit ? kLowChunks + 1u : kChunks) * 16u;  // in the image buffer
  static constexpr uint32_t kBytes = Turn<T>::W * kRowBytes;
  uint8_t* rows;        // the image buffer
  uint8_t* stage;       // split: the stage
  uint32_t box_stride;  // split: bytes between class boxes
  __device__ __forceinline__ uint8_t* low(uint32_t i) const { return rows + i * kRowBytes; }
  // split: row i's chunk x >= kLowChunks at high(i) + 16 * x
  __device__ __forceinline__ uint8_t* high(uint32_t i) const {
    return stage + (i / 8u) * box_stride + kSplitOffset + (i % 8u) * kSpan - kLowChunks * 16u;
  }
  // the row holding bytes [o, o + 20) (o < 16 * kChunks) of extended row i
  __device__ __forceinline__ const uint8_t* row_of(uint32_t i, uint32_t o) const {
    return kSplit && o >= kLowChunks * 16u ? high(i) : low(i);
  }
};

// Extended row i's 16 bytes from byte o, where o + 16 (o + 20 where o is not a multiple of 4) lies within the row:
// four or five aligned words funnel-shifted (SHF.R, PTX ISA 9.7.8.7 shf.r.clamp: __funnelshift_r).
template <typename T>
__device__ __forceinline__ uint4 run_bytes(const RunRows<T>& staged, uint32_t i, uint32_t o) {
  const uint32_t shift = (o & 3u) * 8u;
  const uint32_t* w = reinterpret_cast<const uint32_t*>(staged.row_of(i, o) + (o & ~3u));
  const uint32_t w4 = w[shift != 0 ? 4 : 3];  // an aligned piece needs four words (the fifth may be past the row)
  return make_uint4(__funnelshift_r(w[0], w[1], shift), __funnelshift_r(w[1], w[2], shift),
                    __funnelshift_r(w[2], w[3], shift), __funnelshift_r(w[3], w4, shift));
}

// Extended row i's 16 bytes from byte o (o < 16 * kChunks, either sign), zeros outside the row: the pieces at a run's
// ends, gathered from two chunks with a funnel shift.
template <typename T>
__device__ __forceinline__ uint4 run_bytes_bounded(const RunRows<T>& staged, uint32_t i, int32_t o) {
  constexpr uint32_t kChunks = RunRows<T>::kChunks;
  auto chunk = [&](int32_t x) -> uint4 {  // zeros outside the extended row
    if (x < 0 || x >= (int32_t)kChunks) return make_uint4(0, 0, 0, 0);
    return *reinterpret_cast<const uint4*>(staged.row_of(i, 16u * (uint32_t)x) + 16u * (uint32_t)x);
  };
  const int32_t x = o >> 4;  // arithmetic shift
  const uint32_t shift = (uint32_t)o & 15u;
  uint32_t w[8];
  words_of(w, 0, chunk(x));
  words_of(w, 4, shift != 0 ? chunk(x + 1) : make_uint4(0, 0, 0, 0));
  return bytes_from(w, shift);
}

// Row-sector runs whose pieces are sector-aligned: each thread keeps one piece column n of the H * E / 16 pieces of
// a run (consecutive threads along a row), a piece being bytes o = 32 - (the row's address mod 32) + 16 n .. of the
// extended row (run_bytes) in one aligned 16-byte store. Interior tiles store every piece whole; with Clip, the pieces are clipped to dst's
// rows and elements (store_piece): the first tile row (its run also starting s early, before element 0, where
// its unloaded prefix chunks are never stored), the last tile column and the last tile row, whose runs go on to
// the end of dst's rows (`last`: the pieces after the run, elements r0 + H - s .. r0 + H, where dst's rows end;
// tmakit/ops/transpose.py: tile_grid counts no tile row for them).
template <typename T, bool Clip>
__device__ __forceinline__ void store_rows_aligned(const BoxParams& dst, const RunRows<T>& staged, int32_t r0, int32_t c0,
                                                   bool last = false) {
  constexpr uint32_t E = sizeof(T), kRunPieces = kTileRows * E / 16u;
  const uint32_t n = threadIdx.x % kRunPieces, step = blockDim.x / kRunPieces;
  uint32_t i = threadIdx.x / kRunPieces;
  const int64_t dst_rows = (int64_t)dst.dims[1] - c0;  // dst rows from the tile's first
  const uint32_t rows = Clip && dst_rows < (int64_t)Turn<T>::W ? (uint32_t)dst_rows : Turn<T>::W;
  const uint64_t row_bytes = (uint64_t)dst.dims[0] * E;  // a dst row's elements, in bytes
  uint64_t row_address = dst.address + (uint64_t)(c0 + (int32_t)i) * dst.strides[1];
  const uint64_t row_step = step * dst.strides[1];
  for (; i < rows; i += step, row_address += row_step) {
    const uint32_t early = (uint32_t)row_address & 31u;  // s * E: the run starts at the sector before the row's r0
    const uint64_t piece = row_address - early + (uint64_t)r0 * E + 16u * n;
    if (Clip && (piece + 16u <= row_address || piece >= row_address + row_bytes)) continue;
    const uint4 v = run_bytes<T>(staged, i, 32u - early + 16u * n);
    if (Clip) store_piece(piece, row_address, row_address + row_bytes, v);
    else __stcs(reinterpret_cast<uint4*>(piece), v);
  }
  if (Clip && last) {  // the (up to 31) bytes after the run: two pieces, item k the row k / 2's piece k % 2
    for (uint32_t k = threadIdx.x; k < 2u * rows; k += blockDim.x) {
      const uint32_t j = k >> 1u, after = 16u * (kRunPieces + (k & 1u));
      const uint64_t address = dst.address + (uint64_t)(c0 + (int32_t)j) * dst.strides[1];
      const uint32_t early = (uint32_t)address & 31u, o = 32u - early + after;
      const uint64_t piece = address - early + (uint64_t)r0 * E + after;
      // past the extended row (the piece starts at r0 + H or later), or past the row's end: nothing to write
      if (o >= 16u * RunRows<T>::kChunks || piece >= address + row_bytes) continue;
      store_piece(piece, address, address + row_bytes, run_bytes_bounded<T>(staged, j, (int32_t)o));
    }
  }
}

// Row-sector runs (TMAKIT_TRANSPOSE_ROW_SECTORS): dst row c0 + i takes the tile's elements r0 - s .. r0 + H - s,
// s = (the row's address mod 32) / E, from extended row i (the last tile row's up to r0 + H: to the rows' end), by
// store_rows_aligned: whole in interior tiles (every run whole and inside dst), clipped in the others. A source of
// one tile row (`tiles_r` 1) starts its runs at element 0 (s = 0) and, like blocks of a size the aligned walk does
// not take, walks the pieces with bounds: consecutive threads along a row, aligned 16-byte pieces, each gathered
// from two chunks with a funnel shift, the pieces at dst's row ends (clipped to [0, rows)) keeping the bytes
// outside untouched.
template <typename T>
__device__ __forceinline__ void store_run_row_sectors(const BoxParams& dst, const RunRows<T>& staged, int32_t r0, int32_t c0,
                                                      uint32_t tiles_r) {
  constexpr uint32_t E = sizeof(T), kRunPieces = kTileRows * E / 16u, kPieces = kRunPieces + 2u;
  constexpr uint32_t kChunks = RunRows<T>::kChunks;
  const int64_t rows = (int64_t)dst.dims[0];
  const bool last = (int64_t)r0 + kTileRows >= rows;  // the last tile row: its runs go on to the rows' end
  if (blockDim.x % kRunPieces == 0) {
    if (r0 > 0 && !last && (int64_t)c0 + Turn<T>::W <= (int64_t)dst.dims[1]) {
      store_rows_aligned<T, false>(dst, staged, r0, c0);
      return;
    }
    if (tiles_r > 1) {
      store_rows_aligned<T, true>(dst, staged, r0, c0, last);
      return;
    }
  }
  for (ChunkCursor c(kPieces, threadIdx.x, blockDim.x); c.row < Turn<T>::W; c.advance()) {
    const int64_t g = (int64_t)c0 + c.row;
    if (g >= (int64_t)dst.dims[1]) break;  // rows only grow along the walk
    const uint64_t row_address = dst.address + (uint64_t)g * dst.strides[1];
    // the first tile row starts at element 0 (a second tile row, where there is one, writes the elements from
    // H - s again)
    const int32_t s = r0 > 0 ? (int32_t)((row_address & 31u) / E) : 0, start = r0 - s;
    const int64_t run_end = (last ? (int64_t)r0 : (int64_t)start) + kTileRows;
    const int64_t lo = start > 0 ? start : 0, hi = run_end < rows ? run_end : rows;
    if (hi <= lo) continue;
    const uint64_t base = row_address + (uint64_t)((int64_t)start * E);
    const uint64_t first = row_address + (uint64_t)(lo * E), end = row_address + (uint64_t)(hi * E);
    const uint64_t piece = (first & ~15ull) + 16ull * c.chunk;
    if (piece >= end) continue;
    // extended row byte of the piece's first byte: the run starts 32 - s*E bytes in (the prefix's chunks)
    const int32_t o = 32 - s * (int32_t)E + (int32_t)(int64_t)(piece - base);
    uint4 v;
    if (o >= 0 && (uint32_t)o + ((o & 3) != 0 ? 20u : 16u) <= 16u * kChunks) {
      v = run_bytes<T>(staged, c.row, (uint32_t)o);  // within the extended row, as the aligned pieces are read
    } else {  // past either end of the extended row (bytes never stored): zeros there
      v = run_bytes_bounded<T>(staged, c.row, o);
    }
    store_piece(piece, first, end, v);
  }
}

// Class k's run of the tile with plain stores: whole aligned chunks where the rows allow, else per piece.
template <typename T, uint32_t Classes>
__device__ __forceinline__ void store_run(const BoxParams& dst, const uint8_t* images, uint32_t k, int32_t start, int32_t row) {
  const Plain2dBox run(dst, Coords{{start, row, 0, 0, 0}}, kTileRows, TileImages<T, Classes>::kClassRows);
  if (run.plain) store_tile_rows<T, Classes>(run, images, k);
  else store_run_unaligned<T, Classes>(dst, images, k, start, row);
}
#endif

#if !TMAKIT_USE_TMA
// The cp.async path's load of a source box whose rows are not 16-byte aligned (a pitch or base that is not a
// multiple of 16 bytes; the general box walk would copy it element by element): each 16-byte chunk of the
// image is gathered from the two aligned 16-byte pieces of global memory it straddles (ld.global.nc, the
// neighbouring thread's pieces hit L1) and stored whole; chunks at the tensor's edges element by element,
// with zeros outside (what TMA's zero fill writes). Synchronous: the ring's wait (box_wait_block's
// __syncthreads) publishes the stores. Rows of 128 bytes, 128B swizzle: the transpose's boxes.
__device__ __forceinline__ void load_box_unaligned(const BoxParams& src, uint8_t* smem, const Coords& at) {
  constexpr uint32_t kBatch = 4;  // items per thread whose loads are all in flight before the first is used
  const uint32_t E = src.elem_size, V = 16u / E, chunks = 8u * src.box[1];
  const int64_t cols = (int64_t)src.dims[0], rows = (int64_t)src.dims[1];
  const uint64_t tensor_end = src.address + (uint64_t)(rows - 1) * src.strides[1] + (uint64_t)cols * E;
  for (uint32_t first = threadIdx.x; first < chunks; first += kBatch * blockDim.x) {
    uint4 lo[kBatch], hi[kBatch];
#pragma unroll
    for (uint32_t b = 0; b < kBatch; ++b) {
      const uint32_t item = first + b * blockDim.x, y = item >> 3u, m = item & 7u;
      const int64_t r = (int64_t)at.c[1] + y, col = (int64_t)at.c[0] + m * V;
      const uint64_t address = src.address + (uint64_t)r * src.strides[1] + (uint64_t)(col * (int64_t)E);
      const uint64_t aligned = address & ~15ull, s = address & 15ull;
      lo[b] = hi[b] = make_uint4(0, 0, 0, 0);
      if (item < chunks && r >= 0 && r < rows && col >= 0 && col + V <= cols && aligned >= src.address &&
          aligned + (s ? 32u : 16u) <= tensor_end) {
        lo[b] = __ldg(reinterpret_cast<const uint4*>(aligned));
        if (s != 0) hi[b] = __ldg(reinterpret_cast<const uint4*>(aligned + 16u));
      }
    }
#pragma unroll
    for (uint32_t b = 0; b < kBatch; ++b) {
      const uint32_t item = first + b * blockDim.x, y = item >> 3u, m = item & 7u;
      if (item >= chunks) break;
      const int64_t r = (int64_t)at.c[1] + y, col = (int64_t)at.c[0] + m * V;
      const bool row_in = r >= 0 && r < rows;
      const uint64_t address = src.address + (uint64_t)r * src.strides[1] + (uint64_t)(col * (int64_t)E);
      const uint64_t aligned = address & ~15ull, s = address & 15ull;
      uint4 v;
      if (row_in && col >= 0 && col + V <= cols && aligned >= src.address && aligned + (s ? 32u : 16u) <= tensor_end) {
        uint32_t w[8];
        words_of(w, 0, lo[b]);
        words_of(w, 4, hi[b]);
        v = bytes_from(w, (uint32_t)s);
      } else {  // the tensor's edges: element by element, zeros outside
        uint64_t half[2] = {0, 0};
        for (uint32_t e = 0; e < V; ++e)
          if (row_in && col + e >= 0 && col + e < cols)
            half[(e * E) >> 3] |= load_bits(reinterpret_cast<const void*>(address + e * E), E) << (8u * ((e * E) & 7u));
        v = make_uint4((uint32_t)half[0], (uint32_t)(half[0] >> 32), (uint32_t)half[1], (uint32_t)(half[1] >> 32));
      }
      *reinterpret_cast<uint4*>(smem + swizzle_offset(y * kSpan + m * 16u, kSwizzle128B)) = v;
    }
  }
}
#endif

// One source box of a stage: the one-source box load, or on the cp.async path, for rows that are not 16-byte
// aligned, load_box_unaligned.
template <L2Eviction Eviction>
__device__ __forceinline__ void load_source_box(const BoxSource& src, uint8_t* smem, const Coords& at, uint32_t bytes,
                                                Mbarrier* full) {
#if !TMAKIT_USE_TMA
  if (!Plain2dBox(src, at).plain && (src.strides[1] % 16u != 0 || src.address % 16u != 0)) {
    if (src.rank != 2 || src.box[0] * src.elem_size != kSpan || box_image_bytes(src) != bytes) asm volatile("trap;");
    load_box_unaligned(src, smem, at);
    return;
  }
#endif
  box_load_part<Eviction>(src, smem, at, 2, bytes, full);
}

#if TMAKIT_TRANSPOSE_SOURCE_CLASSES
// The source rows no whole super-row holds (the last rows % k: TMA loaded zeros there) that fall in this
// stage, copied in element by element from `src` (dims {cols, rows}); then the block barrier publishes them.
// Only the stages of the last tile rows have any (the last one's, and the one before where the last tile row holds
// fewer than k rows); block-uniform.
template <typename T>
__device__ __forceinline__ void patch_source_tail(const BoxParams& src, uint8_t* stage, int32_t r0, int32_t c0,
                                                  uint32_t prefix_rows) {
  constexpr uint32_t E = sizeof(T), W = kSpan / E;
  const int64_t rows = (int64_t)src.dims[1], cols = (int64_t)src.dims[0];
  const int64_t tail = rows - rows % kSourceClasses, first = (int64_t)r0 - prefix_rows;  // stage row 0
  const int64_t lo = tail > first ? tail : first, end = first + kTileRows + prefix_rows, hi = rows < end ? rows : end;
  if (lo >= hi) return;
  const uint32_t pitch16 = (uint32_t)(src.strides[1] & 15u);
  for (uint32_t i = threadIdx.x; i < (uint32_t)(hi - lo) * W; i += blockDim.x) {
    const int64_t r = lo + i / W, col = (int64_t)c0 + i % W;
    if (col >= cols) continue;  // past the row: never stored
    const uint32_t e = (uint32_t)(r - first), x = e >= prefix_rows ? e - prefix_rows : kTileRows + e;
    const T v = *reinterpret_cast<const T*>(src.address + (uint64_t)r * src.strides[1] + (uint64_t)col * E);
    *reinterpret_cast<T*>(stage + source_offset(x, 0, prefix_rows, pitch16) + (i % W) * E) = v;
  }
  __syncthreads();
}
#endif

struct Operands {
  const BoxSource& src;         // box [W, H]
  const PrefixSource& src_prefix;  // box [W, V or 2V]: the source rows before a tile (source classes: src's BoxParams)
  const DstBox& dst_even;       // class 0: every dst row (one class) or the even ones, box [W, W / classes]
  const DstBox& dst_odd;        // class 1: the odd dst rows (two classes)
  uint32_t tiles_r, tiles_c;    // the tile grid: tile rows (H source rows each), tile columns (W source columns)
  uint32_t lead;                // tile columns after the first start this many elements early (source lines)
  uint32_t shifted;             // bit k: class k's rows start 16 bytes into a sector
};

template <typename T, uint32_t Classes>
__device__ __forceinline__ void transpose_all(const Operands& op, uint8_t* smem, BoxPipeline<1>& pipe) {
  typedef Turn<T> K;
  typedef TileImages<T, Classes> I;
  constexpr uint32_t E = K::E, W = K::W, V = K::V;
  const bool prefix = kRowSectors || op.shifted != 0;
  const uint32_t prefix_rows = prefix ? kPrefixChunks * V : 0u;  // rows before the tile in each stage
#if TMAKIT_TRANSPOSE_SOURCE_CLASSES
  const uint32_t pitch16 = (uint32_t)(op.src_prefix.strides[1] & 15u);  // the source pitch mod 16
#else
  const uint32_t pitch16 = 0u;
#endif
  const uint32_t stage_bytes = kSourceClasses ? class_stage_bytes(prefix_rows) : kTileBytes + (prefix ? kPrefixBytes : 0u);
  uint8_t* stage = smem;                        // the source tile (and prefix)
  uint8_t* out = smem + stage_bytes;            // the H/W destination images (and side chunks)
  const uint32_t tiles_c = op.tiles_c, tiles_r = op.tiles_r;
  // Tile t in groups of G tile rows, column-major inside a group: the blocks in flight read G * H source rows
  // and write dst rows in runs of G * H * E bytes, not H * E. 32-bit arithmetic (the host keeps the tile
  // count below 2^32): a 64-bit division is a call of ~70 instructions, and every tile is placed twice.
  // At most the tile rows there are, so that G * tiles_c <= the tile count (below 2^32).
  const uint32_t G = tiles_r < kGroupRows<E> ? tiles_r : (uint32_t)kGroupRows<E>;
  const uint32_t group_tiles = G * tiles_c;
  auto tile_origin = [&](uint64_t tile, int32_t& c0, int32_t& r0) {
    const uint32_t t = (uint32_t)tile, group = t / group_tiles, first = group * G;
    const uint32_t height = tiles_r - first < G ? tiles_r - first : G;
    const uint32_t in_group = t - group * group_tiles, column = in_group / height;
    c0 = (int32_t)(column * W) - (column != 0 ? (int32_t)op.lead : 0);
    r0 = (int32_t)((first + (in_group - column * height)) * kTileRows);
  };
  auto load_stage = [&](uint64_t t, uint8_t* stage, Mbarrier* full) {
    int32_t c0, r0;
    tile_origin(t, c0, r0);
#if TMAKIT_TRANSPOSE_SOURCE_CLASSES
    // box j: super-rows (r0 - prefix) / k .. (r0 - prefix is a multiple of k), from the 16-byte boundary at or
    // before element j * cols + c0 (c0 * E is a multiple of 128: the row starts (j * pitch) mod 16 bytes in)
    const uint32_t box_bytes = (kTileRows + prefix_rows) / kSourceClasses * kClassRowBytes;
    box_load_expect(full, box_bytes * kSourceClasses);
    const int32_t super_row = (r0 - (int32_t)prefix_rows) / (int32_t)kSourceClasses, cols = (int32_t)op.src_prefix.dims[0];
#pragma unroll
    for (uint32_t j = 0; j < kSourceClasses; ++j)
      box_load_part<kSourceEviction>(op.src, stage + j * class_box_stride(prefix_rows),
                                     Coords{{(int32_t)j * cols + c0 - (int32_t)(((j * pitch16) & 15u) / E), super_row, 0, 0, 0}}, 2,
                                     box_bytes, full);
#else
    constexpr uint32_t kPrefixRows = kPrefixChunks * V;
    box_load_expect(full, kTileBytes + (prefix ? kPrefixRows * kSpan : 0u));
    load_source_box<kSourceEviction>(op.src, stage, Coords{{c0, r0, 0, 0, 0}}, kTileBytes, full);
    if (prefix)
      load_source_box<kSourceEviction>(op.src_prefix, stage + kTileBytes, Coords{{c0, r0 - (int32_t)kPrefixRows, 0, 0, 0}},
                                       kPrefixRows * kSpan, full);
#endif
  };
#if TMAKIT_TRANSPOSE_ROW_SECTORS
  constexpr uint32_t kBufferBytes = RunRows<T>::kBytes;  // the extended rows
#else
  constexpr uint32_t kBufferBytes = kTileBytes;  // the images
#endif
  ImageStores stores(out, kBufferBytes, NamedBarrier(0, blockDim.x));
  auto turn_and_store = [&](uint64_t t, const uint8_t* image) {
    int32_t c0, r0;
    tile_origin(t, c0, r0);
#if TMAKIT_TRANSPOSE_SOURCE_CLASSES
    patch_source_tail<T>(op.src_prefix, const_cast<uint8_t*>(image), r0, c0, prefix_rows);
#endif
    uint8_t* buffer = stores.acquire();  // the last tile's stores are done reading it
#if TMAKIT_TRANSPOSE_ROW_SECTORS
    // one class, runs starting up to two chunks early: the prefix's chunks (m = -2, -1) go to the side chunks
    // (the first tile row loads none: its runs' pieces before element 0 are never stored)
    typedef RunRows<T> Rows;
    const Rows staged{buffer, const_cast<uint8_t*>(image), class_box_stride(prefix_rows)};
    auto sink = [&](int32_t m, uint32_t d, const uint4& v) {
      const uint32_t x = (uint32_t)(m + 2);  // chunk of extended row d
      // x < kChunks always holds (m < H / V); said, it keeps the 2-byte kernel at 58 registers (79 without)
      if (x <= Rows::kLowChunks && x < Rows::kChunks) {
        uint4* at = reinterpret_cast<uint4*>(staged.low(d) + 16u * x);
        TMAKIT_TRANSPOSE_TRACE(at, 16u);
        *at = v;
      }
      if (Rows::kSplit && x >= Rows::kLowChunks) {
        uint4* at = reinterpret_cast<uint4*>(staged.high(d) + 16u * x);
        TMAKIT_TRANSPOSE_TRACE(at, 16u);
        *at = v;
      }
    };
    if constexpr (Rows::kSplit) {
      transpose_tile<T, Classes>(image, 0, K::kItems / 2u, r0 > 0, prefix_rows, pitch16, sink);
      __syncthreads();  // the stage rows the lower half read take the upper images
      transpose_tile<T, Classes>(image, K::kItems / 2u, K::kItems, false, prefix_rows, pitch16, sink);
    } else {
      transpose_tile<T, Classes>(image, 0, K::kItems, r0 > 0, prefix_rows, pitch16, sink);
    }
    stores.publish();
    store_run_row_sectors<T>(op.dst_even, staged, r0, c0, tiles_r);
#else
    // The first tile row keeps every class unshifted: a shifted run would start at -V, and a TMA store box
    // at a negative coordinate stops the kernel (illegal instruction on the H100; docs/TMA_SEMANTICS.md,
    // section 5). Its runs then end mid-sector at H, where the second tile row's shifted runs write the same V elements again.
    const uint32_t shifted = r0 > 0 ? op.shifted : 0u;
    transpose_tile<T, Classes>(image, 0, K::kItems, shifted != 0, prefix_rows, pitch16, [&](int32_t m, uint32_t d, const uint4& v) {
      const uint32_t k = d % Classes;
      const int32_t position = m + (int32_t)((shifted >> k) & 1u);  // chunk of the class's run
      if (position < 0 || position >= (int32_t)K::kChunksPerRun) return;  // another tile's run
      uint4* at = reinterpret_cast<uint4*>(buffer + I::offset((uint32_t)position / 8u, k) +
                                           swizzle_offset((d / Classes) * kSpan + ((uint32_t)position % 8u) * 16u, kSwizzle128B));
      TMAKIT_TRANSPOSE_TRACE(at, 16u);
      *at = v;
    });
    stores.publish();
#pragma unroll
    for (uint32_t k = 0; k < Classes; ++k) {
      const DstBox& dst = k == 0 ? op.dst_even : op.dst_odd;
      const int32_t start = r0 - (int32_t)(((shifted >> k) & 1u) * V), row = c0 / (int32_t)Classes;
#if TMAKIT_TRANSPOSE_STORES_PLAINLY  // whole rows of the run: aligned chunks, or aligned pieces of any pitch
      store_run<T, Classes>(dst, buffer, k, start, row);
#else
      for (uint32_t sub = 0; sub < K::kImages; ++sub)
        if (stores.issuer())
          cp_async_bulk_tensor_s2g<2>(&dst, Coords{{start + (int32_t)(sub * W), row, 0, 0, 0}}, buffer + I::offset(sub, k));
#endif
    }
#endif  // TMAKIT_TRANSPOSE_ROW_SECTORS
    stores.commit();
  };
  for_each_stage_pipelined<1>(stage, stage_bytes, pipe, blockIdx.x, gridDim.x, (uint64_t)tiles_c * tiles_r, load_stage,
                              turn_and_store);
  stores.drain_reads();
}

}  // namespace

// src: box [128/E, H], 128B swizzle; src_prefix: the same tensor, box [128/E, 16/E]; dst_even / dst_odd:
// dst's rows of class 0 / 1 (TMAKIT_TRANSPOSE_ROW_CLASSES 1: dst itself, twice; 2: its even / odd rows, stride
// 2 * pitch), box [128/E, 128/E / row classes], 128B swizzle (tensor maps, or BoxParams on the cp.async path).
// tiles_r, tiles_c: the tile grid, from the host (tmakit/ops/transpose.py: tile_grid): ceil((cols + lead) / W)
// tile columns and ceil(rows / H) tile rows, one more where shifted runs (V rows early) leave rows over (not for
// row-sector runs: the last tile row's reach the rows' end); the
// product below 2^32. lead: where every source row starts `lead` elements past a 128-byte line (a pitch of
// whole lines, a base inside one), the tile columns after the first start that much early, so that each
// tile row is one whole line; the first two columns then overlap and write those dst rows twice, alike (even:
// a multiple of V). shifted: bit k set when class k's rows start 16 bytes into a 32-byte sector.
// Launch: 1-D blocks of any multiple of 32 threads (the host: 256), one per tile (or fewer, each walking several
// tiles), dynamic shared memory 2 * H * 128 bytes (the stage and the image buffer), plus 2 KiB when `shifted`,
// plus 1 KiB of alignment slack; with TMAKIT_TRANSPOSE_ROW_SECTORS (one class, shifted 0) 4 KiB for the prefix and
// 4 KiB for its chunks instead, src_prefix's box [128/E, 32/E]; with TMAKIT_TRANSPOSE_SPLIT_TURN half the image
// buffer and 2 KiB (RunRows); tmakit/ops/transpose.py: shared_mem_for.
// TMAKIT_TRANSPOSE_THREADS / TMAKIT_TRANSPOSE_MIN_BLOCKS: the block size and the blocks the host wants resident
// per SM (shared memory allows three 256-row tiles on sm_90): a register cap, so that registers do not stop the
// third block.
#ifndef TMAKIT_TRANSPOSE_THREADS
#define TMAKIT_TRANSPOSE_THREADS 1024
#endif
#ifndef TMAKIT_TRANSPOSE_MIN_BLOCKS
#define TMAKIT_TRANSPOSE_MIN_BLOCKS 1
#endif
extern "C" __global__ void __launch_bounds__(TMAKIT_TRANSPOSE_THREADS, TMAKIT_TRANSPOSE_MIN_BLOCKS)
tmakit_transpose(TMAKIT_BOX_SOURCE src, TMAKIT_TRANSPOSE_SRC_PREFIX src_prefix, TMAKIT_TRANSPOSE_DST dst_even,
                 TMAKIT_TRANSPOSE_DST dst_odd, tmakit::uint32_t tiles_r, tmakit::uint32_t tiles_c, tmakit::uint32_t lead,
                 tmakit::uint32_t shifted) {
  using namespace tmakit;
  extern __shared__ __align__(16) uint8_t smem_raw[];
  __shared__ BoxPipeline<1> pipe;
  griddepcontrol_wait();  // launched with pdl=True on sm_90: the previous kernel may still write src or read dst
  const Operands op{src, src_prefix, dst_even, dst_odd, tiles_r, tiles_c, lead, shifted};
  transpose_all<Element, kRowSectors ? 1u : kRowClasses>(op, align_shared(smem_raw, 1024), pipe);
}
