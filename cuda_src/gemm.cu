// GEMM: C[M, N] = alpha * A[M, K] @ B[K, N] (+ beta * C), fp32 accumulation. A is row-major (K-major); B is
// K-major (stored [N, K], TMAKIT_GEMM_B_KMAJOR=1) or N-major (stored [K, N], 0). Inputs bf16 or fp16
// (TMAKIT_GEMM_BF16), output the input type or fp32 (TMAKIT_GEMM_OUT_F32). Any M, N, K >= 1; row pitches are
// multiples of 16 bytes (tmakit/ops/gemm.py checks). One source, two engines (config.cuh picks; both entry points
// exist in every build, the one the build does not serve traps):
//
//   tmakit_gemm_tma (sm_90a): warp-specialized and persistent, 384 threads, one tmakit::Pipeline (TmaProducer):
//     warpgroup 0  producer (setmaxnreg down to 40): one elected thread walks the same tile sequence as the
//                  consumers and, per BK-deep k-block, acquires a ring stage, arms its FULL barrier with the
//                  stage's bytes and issues the TMA loads: its CTA's A tile (BM x BK) and its share of the B tile
//                  (BN x BK; with a 2-CTA cluster each CTA loads half and multicasts it to both, as the two CTAs of
//                  a cluster work on vertically adjacent tiles of the same N; with TMAKIT_GEMM_MULTICAST_A the pair
//                  works on horizontally adjacent tiles of the same rows and shares A's tile the same way).
//     warpgroups 1, 2  consumers (setmaxnreg up to 232): each owns 64 rows x BN columns (BN/2 fp32 accumulators
//                  per thread); with 64-row tiles (BM 64) both own the same 64 rows, each BN/2 of the columns.
//                  Per k-block: wait FULL, BK/16 wgmma m64nBNk16 (A and B from shared memory through the
//                  descriptors tmakit.wgmma_descriptors derives from the tensor maps), commit, wait for the
//                  previous k-block's batch (so one batch is always in flight) and release that stage to the
//                  producers of every CTA of the cluster. Epilogue: 128-byte-wide swizzled slabs through the
//                  warpgroup's StorePipeline (two slab buffers), each slab a TMA store (clipped at the edges of C):
//                  a 16-bit output without beta staged by stmatrix (the slabs past the two buffers packed in
//                  registers and stored while the next tile's first k-block multiplies); with beta C's slab is
//                  first loaded by TMA into the buffer and read back in place (the first slab under the tile's
//                  mainloop, each next one while its predecessor is computed); fp32 outputs by per-thread shared
//                  stores. With
//                  TMAKIT_GEMM_STORE_ADD the slabs go out as TMA reduce-adds (C += the slab, atomic per element:
//                  several GEMMs, on this GPU or on peers writing over NVLink, may add into one C).
//     Tiles are handed out persistently (blockIdx / gridDim stride) in grouped order: GROUP_M (cluster-)rows
//     of tiles sweep N together, so the A and B panels in flight stay in L2. Split-K (splits > 1, an fp32
//     build): each tile's k-blocks are cut into `splits` ranges, each range a unit whose partial product goes
//     to its own slice of an fp32 workspace (the C map), and tmakit_gemm_splitk_reduce sums the slices into C
//     with alpha and beta: for outputs of few tiles and long K, where the tiles alone leave most SMs idle.
//   tmakit_gemm_cp_async (sm_80..89, or TMAKIT_FORCE_CP_ASYNC): the same BM x BN tiles and the same
//     128B-swizzled shared-memory images, filled by cp.async (zero fill past the edges) through a STAGES-deep
//     tmakit::Pipeline (CpAsyncBlockProducer: cp.async.wait_group + block barrier), 8 warps of 64 x BN/4 each on
//     ldmatrix + mma.sync m16n8k16 with double-buffered fragments (the next k16 slice, or the next stage's first,
//     is read while the current one is multiplied; the ring's wait sits before the last slice of a stage), the
//     epilogue stored from registers.
//
// Shared-memory images (both engines): an A stage is BM rows of BK = 64 elements (128 bytes, 128B swizzle,
// 1024-byte aligned: the box (BM, 64) of a TMA map, or two boxes of BM / 2 rows where the pair shares A); an MN-major
// A stage (tma, TMAKIT_GEMM_A_KMAJOR=0) is BM/64 slabs of BK k-rows x 64 m, slab j at j * BK * 128 bytes. A K-major
// B stage is BN rows of 128 bytes likewise; an N-major B stage is ceil(BN/64) slabs of BK k-rows x 64 n (128 bytes),
// slab j at j * BK * 128 bytes.
//
// Compile-time parameters (defines): TMAKIT_GEMM_BM (128 | 64 (tma)), TMAKIT_GEMM_BN (128 | 192 (tma) | 256; on tma
// also a narrow width, any other multiple of 16 from 64 to 240: see kNarrow),
// TMAKIT_GEMM_STAGES, TMAKIT_GEMM_CLUSTER (1 | 2, tma), TMAKIT_GEMM_MULTICAST_A (tma, CLUSTER 2), TMAKIT_GEMM_BF16,
// TMAKIT_GEMM_B_KMAJOR, TMAKIT_GEMM_OUT_F32, TMAKIT_GEMM_STORE_ADD (tma), TMAKIT_GEMM_SPLIT_K (tma: C's map is
// split-K's (splits, M, N) workspace), TMAKIT_GEMM_SWAP_AB (tma: the caller's A and B swapped, C stored transposed;
// see kSwapAB), TMAKIT_GEMM_A_KMAJOR (tma, SWAP_AB: 0 for MN-major A stages), and the wgmma descriptors of the
// stages (tmakit/ops/gemm.py: descriptor_defines, from
// tmakit.wgmma_descriptors): TMAKIT_GEMM_DESC_A, the 8 descriptors of A's four k16 slices for the first consumer
// warpgroup's rows 0-63 and then the second's (64-127, or 0-63 again at BM 64), and TMAKIT_GEMM_DESC_B, B's four,
// each for a stage at shared address 0. The defaults are the derivation's for the default configuration.
#include "tmakit/cluster.cuh"
#include "tmakit/config.cuh"
#include "tmakit/cp_async.cuh"
#include "tmakit/grid_dependency.cuh"
#include "tmakit/mma_sync.cuh"
#include "tmakit/named_barrier.cuh"
#include "tmakit/pipeline.cuh"
#include "tmakit/swizzle.cuh"
#include "tmakit/tensormap_replace.cuh"
#include "tmakit/tma.cuh"
#include "tmakit/types.cuh"
#include "tmakit/warp.cuh"
#include "tmakit/wgmma.cuh"

#ifndef TMAKIT_GEMM_BM
#define TMAKIT_GEMM_BM 128  // 64 (tma): one 64-row A slab the two consumer warpgroups share, each its half of BN
#endif
#ifndef TMAKIT_GEMM_BN
#define TMAKIT_GEMM_BN 256
#endif
#ifndef TMAKIT_GEMM_STAGES
#define TMAKIT_GEMM_STAGES 4
#endif
#ifndef TMAKIT_GEMM_CLUSTER
#define TMAKIT_GEMM_CLUSTER 2
#endif
#ifndef TMAKIT_GEMM_BF16
#define TMAKIT_GEMM_BF16 1
#endif
#ifndef TMAKIT_GEMM_B_KMAJOR
#define TMAKIT_GEMM_B_KMAJOR 1
#endif
#ifndef TMAKIT_GEMM_OUT_F32
#define TMAKIT_GEMM_OUT_F32 0
#endif
#ifndef TMAKIT_GEMM_STORE_ADD
#define TMAKIT_GEMM_STORE_ADD 0  // 1: C tiles stored by cp.reduce.async.bulk.tensor .add (beta 0, no split-K)
#endif
#ifndef TMAKIT_GEMM_SPLIT_K
#define TMAKIT_GEMM_SPLIT_K 0  // 1: C's map is the splits' fp32 workspace, rank 3 (tma; ops/gemm.py, splits > 1)
#endif
#ifndef TMAKIT_GEMM_MULTICAST_A
#define TMAKIT_GEMM_MULTICAST_A 0  // 1 (CLUSTER 2): the pair takes horizontally adjacent tiles and shares A (below)
#endif
#ifndef TMAKIT_GEMM_GROUPED
#define TMAKIT_GEMM_GROUPED 0
#endif
#ifndef TMAKIT_GEMM_SWAP_AB
#define TMAKIT_GEMM_SWAP_AB 0  // 1 (tma): C^T = B^T A^T, the caller's operands swapped, each slab stored transposed
#endif
#ifndef TMAKIT_GEMM_A_KMAJOR
#define TMAKIT_GEMM_A_KMAJOR 1  // 0 (tma, SWAP_AB): A's stages MN-major, the caller's N-major B as the kernel's A
#endif
#ifndef TMAKIT_GEMM_FP8
#define TMAKIT_GEMM_FP8 0  // 1: e4m3 A and B with per-128 block scales, bf16 out (tma; tmakit/ops/fp8_gemm.py)
#endif
#ifndef TMAKIT_GEMM_DESC_A
#define TMAKIT_GEMM_DESC_A                                                                                  \
  0x4000004000010000ull, 0x4000004000010002ull, 0x4000004000010004ull, 0x4000004000010006ull,              \
      0x4000004000010200ull, 0x4000004000010202ull, 0x4000004000010204ull, 0x4000004000010206ull
#endif
#ifndef TMAKIT_GEMM_DESC_B
#define TMAKIT_GEMM_DESC_B 0x4000004000010000ull, 0x4000004000010002ull, 0x4000004000010004ull, 0x4000004000010006ull
#endif

namespace gemm {
using namespace tmakit;

// BM: TMAKIT_GEMM_BM on tma; the cp.async twin's tiles are always 128 rows (its stages and loads assume them).
constexpr int kBM = TMAKIT_USE_TMA ? TMAKIT_GEMM_BM : 128;
constexpr int kBN = TMAKIT_GEMM_BN;
// A narrow tile: BN other than 128, 192 or 256 (tma only: the tma namespace below says what it takes).
constexpr bool kNarrow = kBN != 128 && kBN != 192 && kBN != 256;
constexpr bool kFp8 = TMAKIT_GEMM_FP8 != 0;
constexpr int kBK = kFp8 ? 128 : 64;  // one 128-byte swizzled row of K: 128 e4m3 or 64 16-bit elements
constexpr int kStages = TMAKIT_GEMM_STAGES;
constexpr bool kBf16 = TMAKIT_GEMM_BF16 != 0;
constexpr bool kBKMajor = TMAKIT_GEMM_B_KMAJOR != 0;
constexpr bool kOutF32 = TMAKIT_GEMM_OUT_F32 != 0;
constexpr uint32_t kRowBytes = 128;
constexpr uint32_t kABytes = kBM * kRowBytes;  // one A stage
// One B stage: BN rows of K (K-major), or BN's 64-column slabs of BK rows (N-major; a narrow BN's last slab is
// loaded whole, its columns past the tile's unread).
constexpr int kBSlabs = (kBN + 63) / 64;
constexpr uint32_t kBBytes = kBKMajor ? kBN * kRowBytes : kBSlabs * kBK * kRowBytes;
constexpr uint32_t kSABytes = kFp8 ? kBM * 4 : 0;  // fp8: the A tile's row scales of the k-block (fp32)
constexpr uint32_t kLoadBytes = kABytes + kBBytes + kSABytes;  // a stage's TMA bytes (its expect_tx)
constexpr uint32_t kStageBytes = (kLoadBytes + 1023) / 1024 * 1024;  // stages stay 1024-byte aligned (128B swizzle)
static_assert(kBN % 16 == 0 && kBN >= 64 && kBN <= 256, "BN is a multiple of 16 from 64 to 256");
static_assert(kStages >= 2, "the ring has at least two stages");

typedef uint16_t half_bits;

// fp32 -> the output's bits (bf16/fp16 round to nearest even).
__device__ __forceinline__ uint32_t pack_out2(float lo, float hi) { return pack_f32x2<kBf16>(lo, hi); }
__device__ __forceinline__ float in_to_f32(half_bits h) {
  if constexpr (kBf16) return __uint_as_float(static_cast<uint32_t>(h) << 16);
  float f;
  asm("{ .reg .f16 t; mov.b16 t, %1; cvt.f32.f16 %0, t; }" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ float load_c(const void* c, long long idx) {
  if constexpr (kOutF32) return static_cast<const float*>(c)[idx];
  return in_to_f32(static_cast<const half_bits*>(c)[idx]);
}
__device__ __forceinline__ void store_c(void* c, long long idx, float v) {
  if constexpr (kOutF32) static_cast<float*>(c)[idx] = v;
  else static_cast<half_bits*>(c)[idx] = static_cast<half_bits>(pack_f32x2<kBf16>(v, 0.f) & 0xffffu);
}
// The output value of one accumulator: alpha * acc (+ beta * C). alpha == 0 does not reference A @ B (BLAS, and
// torch.addmm: a NaN in A or B is not propagated); beta == 0 does not read C.
__device__ __forceinline__ float epilogue_value(float acc, float alpha, float beta, const void* c, long long idx, bool in) {
  float v = alpha == 0.f ? 0.f : alpha * acc;
  if (beta != 0.f && in) v += beta * load_c(c, idx);
  return v;
}

// Grouped ("L2-friendly") order of the work units: unit u -> (row of units, column of units). A unit is CLUSTER
// vertically adjacent tiles of one column, or with MULTICAST_A horizontally adjacent tiles of one row (unit_grid_rows,
// unit_grid_cols, tile_origin below).
__device__ __forceinline__ void unit_coords(int u, int rows, int cols, int group, int& row, int& col) {
  const int per_group = group * cols;
  const int first = (u / per_group) * group;
  const int size = min(rows - first, group);
  const int in_group = u % per_group;
  row = first + in_group % size;
  col = in_group / size;
}

}  // namespace gemm

#if TMAKIT_USE_TMA
namespace gemm {
// BM 128: each consumer warpgroup computes 64 rows of the whole BN. BM 64 (few-tile problems: twice the tiles): both
// take the same 64 rows, each its half of BN (a wgmma of N = BN / 2).
// A narrow tile: BN other than 128, 192 or 256, for outputs whose N those widths cover poorly (BN a multiple of 16
// that fits N; cuBLAS's kernels tile such N likewise). Its last slab (64 columns of a 16-bit output, 32 of fp32) may
// be part of one: that slab is stored from registers (a TMA store of the whole slab would write the next tile's
// columns), C read there too where beta != 0. Either B major (N-major: its last 64-column slab loaded whole), BM 128,
// no split-K, fp8 or groups (ops/gemm.py plans it so).
constexpr bool kSplitN = kBM == 64;
constexpr bool kAKMajor = TMAKIT_GEMM_A_KMAJOR != 0;  // MN-major: swapped operands with the caller's N-major B
constexpr int kWgN = kSplitN ? kBN / 2 : kBN;  // a consumer warpgroup's columns
static_assert(kBM == 128 || (kBM == 64 && (kBN == 128 || kBN == 256)), "BM is 128, or 64 with BN 128 or 256");
constexpr WgmmaType kType = kFp8 ? WgmmaType::kE4m3 : kBf16 ? WgmmaType::kBf16 : WgmmaType::kF16;
constexpr int kSlices = 4;  // wgmma k-slices of a 128-byte row: k16 of 16-bit, k32 of 8-bit operands (32 bytes)
constexpr int kOutBytes = kOutF32 ? 4 : 2;
// The descriptors of a stage at shared address 0 (tmakit.wgmma_descriptors): A's k16 slice kk of consumer 0, B's.
TMAKIT_HD constexpr uint64_t desc_a(int kk) { return list_item(kk, TMAKIT_GEMM_DESC_A); }
TMAKIT_HD constexpr uint64_t desc_b(int kk) { return list_item(kk, TMAKIT_GEMM_DESC_B); }
// Consumer 1's slices (items 4..7) are consumer 0's moved by a fixed number of bytes (its 64 rows further on; none
// at BM 64, where both read the same rows).
constexpr uint32_t kAConsumerBytes = static_cast<uint32_t>(desc_a(4) - desc_a(0)) * 16u;
// BM 64: consumer 1's half of B, kWgN rows further on (K-major) or kWgN / 64 slabs (N-major).
constexpr int kCols1 = kSplitN ? kWgN : 0;  // consumer warpgroup 1's first column in the tile
constexpr uint32_t kBConsumerBytes = !kSplitN ? 0u : kBKMajor ? kWgN * kRowBytes : (kWgN / 64) * kBK * kRowBytes;
// The defines must describe this kernel's stages (a compile with other tile defines and the built-in descriptor
// defaults stops here): 128B-swizzled rows of 128 bytes, a k16 slice 32 bytes along a K-major row or 16 rows of an
// MN-major slab, MN-major slabs BK rows apart, the second consumer 64 rows on (BM 128: 64 K-major rows or one
// MN-major slab, 8 KiB either way) or on the same rows (BM 64).
TMAKIT_HD constexpr bool descriptors_match_stages() {
  if (list_size(TMAKIT_GEMM_DESC_A) != 2 * kSlices || list_size(TMAKIT_GEMM_DESC_B) != kSlices) return false;
  if (kAConsumerBytes != (kSplitN ? 0u : 64 * kRowBytes)) return false;
  for (int kk = 0; kk < kSlices; ++kk) {
    const uint64_t a0 = desc_a(kk), a1 = desc_a(kSlices + kk), b = desc_b(kk);
    if (wgmma_desc_start(a0) != (kAKMajor ? 32u * kk : 16u * kRowBytes * kk)) return false;
    if (a1 - a0 != desc_a(kSlices) - desc_a(0)) return false;
    if (wgmma_desc_sbo(a0) != 1024 || wgmma_desc_swizzle(a0) != kWgmmaSwizzle128B) return false;
    if (!kAKMajor && wgmma_desc_lbo(a0) != kBK * kRowBytes) return false;
    if (wgmma_desc_start(b) != (kBKMajor ? 32u * kk : 16u * kRowBytes * kk)) return false;
    if (wgmma_desc_sbo(b) != 1024 || wgmma_desc_swizzle(b) != kWgmmaSwizzle128B) return false;
    if (!kBKMajor && wgmma_desc_lbo(b) != kBK * kRowBytes) return false;
  }
  return true;
}
static_assert(descriptors_match_stages(), "TMAKIT_GEMM_DESC_A/B do not describe this build's stages: pass "
                                          "tmakit.ops.gemm.descriptor_defines(config)");

constexpr int kCluster = TMAKIT_GEMM_CLUSTER;
static_assert(kCluster == 1 || kCluster == 2, "CLUSTER is 1 or 2");
// Which operand a cluster's CTAs share. B (the default): the pair computes vertically adjacent tiles of the same
// columns, each loads half of B's tile and multicasts it. A (TMAKIT_GEMM_MULTICAST_A): the pair computes
// horizontally adjacent tiles of the same rows, each loads half of A's tile rows and multicasts them, and B's tile
// whole. Either halves the L2 reads of one operand; A's pairing keeps whole tile rows where an odd count of them
// would leave B's pairs a turn more (1288 rows: 11 tile rows of 128, 6 pairs; docs/PERFORMANCE.md, GEMM).
constexpr bool kMulticastA = TMAKIT_GEMM_MULTICAST_A != 0 && kCluster > 1;
constexpr int kAShare = kMulticastA ? kCluster : 1;  // CTAs loading parts of one A tile
constexpr int kBShare = kMulticastA ? 1 : kCluster;  // CTAs loading parts of one B tile
static_assert(TMAKIT_GEMM_MULTICAST_A == 0 || kCluster == 2, "MULTICAST_A pairs CTAs: CLUSTER 2");
// A cluster's work unit is kCluster tiles: the unit grid's rows and columns, and this CTA's tile origin.
__device__ __forceinline__ int unit_grid_rows(int tiles_m) { return kMulticastA ? tiles_m : (tiles_m + kCluster - 1) / kCluster; }
__device__ __forceinline__ int unit_grid_cols(int tiles_n) { return kMulticastA ? (tiles_n + kCluster - 1) / kCluster : tiles_n; }
__device__ __forceinline__ void tile_origin(int row, int col, uint32_t rank, int m_begin, int& m0, int& n0) {
  const int r = static_cast<int>(rank);
  m0 = m_begin + (kMulticastA ? row : row * kCluster + r) * kBM;
  n0 = (kMulticastA ? col * kCluster + r : col) * kBN;
}
constexpr int kSlabCols = kRowBytes / kOutBytes;  // output columns per 128-byte slab
constexpr int kSlabs = (kWgN + kSlabCols - 1) / kSlabCols;  // a consumer warpgroup's slabs of a tile
constexpr int kFullSlabs = kWgN / kSlabCols;  // all of them but a narrow tile's part slab
constexpr uint32_t kSlabBytes = 64 * kRowBytes;  // 64 rows per consumer warpgroup
constexpr uint32_t kEpilogueBytes = 2 * 2 * kSlabBytes;  // 2 warpgroups x 2 slab buffers
// The C read-ahead (beta != 0) takes the store pipeline's buffers in its rotation, which runs on across tiles, and
// alternates two barriers a warpgroup, each armed once and waited once in turn: any number of slabs a tile.
constexpr int kProducerRegs = 40;
constexpr int kConsumerRegs = 232;
typedef Pipeline<kStages, TmaProducer, 128> Ring;  // consumers release per warpgroup
constexpr bool kGrouped = TMAKIT_GEMM_GROUPED != 0;
// A 16-bit output without beta, every slab stored by TMA: the slabs past the two store buffers (whose stores would
// wait for the first ones' reads) leave the mainloop packed in registers and are staged and stored while the next
// tile's first k-block multiplies, so the tensor pipe does not wait on them. Plain GEMMs of the usual widths only (a
// grouped one changes C's map between tiles).
constexpr int kDeferredSlabs =
    !kOutF32 && !kFp8 && !kGrouped && !kNarrow && TMAKIT_GEMM_STORE_ADD == 0 && kSlabs > 2 ? kSlabs - 2 : 0;
constexpr int kFirstDeferred = kSlabs - kDeferredSlabs;
constexpr int kPackedRegs = kDeferredSlabs > 0 ? kDeferredSlabs * (kSlabCols / 16) * 4 : 1;  // 4 stmatrix.x4 a slab
// A 16-bit slab staged whole: each warp's 16 rows x 64 columns by four stmatrix.x4, the accumulator fragments as they
// are. The accumulator index of the fp32 pair packed into matrix e of slab s's 16-column group q (e: rows g / g + 8 x
// n8 blocks 2q / 2q + 1 of the slab, stmatrix's matrix order), and group q's stmatrix into a slab buffer.
TMAKIT_HD constexpr int stmatrix_acc(int s, int q, int e) {
  return 4 * (s * (kSlabCols / 8) + 2 * q + (e >> 1)) + 2 * (e & 1);
}
// Swapped operands (TMAKIT_GEMM_SWAP_AB): the kernel computes C^T = B^T A^T, its M and N the caller's N and M (A's
// map the caller's B, in MN-major slabs where it is N-major: kAKMajor; B's the caller's A), so that a tile's BN
// side, any multiple of 16, runs along the caller's M (cuBLAS's kernels tile so: ncu names 256 x 128 tiles, 256
// along M, at 1000 x 4097 x 2048, one turn of 132 where 128-row tiles take two). A warpgroup's 64 rows are then 128
// bytes of the caller's columns and a slab's 64 columns are 64 of its rows: the slab is staged transposed
// (stmatrix .trans: matrix e of the fragment order lands where matrix e with its two bits swapped would in the row
// order) and stored at (row0, slab's n0). A 16-bit output of a plain GEMM only (ops/gemm.py plans it so).
constexpr bool kSwapAB = TMAKIT_GEMM_SWAP_AB != 0;
static_assert(kAKMajor || (kSwapAB && !kMulticastA), "MN-major A: swapped operands (the caller's N-major B), its "
                                                      "slabs loaded whole by each CTA");
__device__ __forceinline__ void stmatrix_group(uint32_t base, int t, int q, const uint32_t (&r)[4]) {
  if constexpr (kSwapAB) {
    const uint32_t rt[4] = {r[0], r[2], r[1], r[3]};
    stmatrix_sync_aligned_m8n8_x4_shared_b16<true>(ldmatrix_x4_address(base, t % 32, 16 * q, 16 * (t / 32),
                                                                       kRowBytes, kSwizzle128B), rt);
  } else {
    stmatrix_sync_aligned_m8n8_x4_shared_b16(ldmatrix_x4_address(base, t % 32, 16 * (t / 32), 16 * q, kRowBytes,
                                                                 kSwizzle128B), r);
  }
}
static_assert(!kNarrow || (kBM == 128 && !kFp8 && !kGrouped && TMAKIT_GEMM_SPLIT_K == 0 && TMAKIT_GEMM_STORE_ADD == 0),
              "a narrow BN: BM 128, no fp8, groups, split-K or reduce-add (its part slab is stored, not added)");
static_assert(!kGrouped || kCluster == 1, "a grouped GEMM runs without clusters (a tile pair may straddle groups)");
static_assert(!kMulticastA || !kFp8, "MULTICAST_A: not fp8 (its A scales are loaded per CTA with its rows)");
static_assert(!kSplitN || (!kGrouped && !kFp8), "BM 64: a plain GEMM");
constexpr int kBRank = kGrouped ? 3 : 2;  // grouped: B is (G, N, K) or (G, K, N), the group its outermost coordinate
static_assert(!kFp8 || (kBKMajor && kBN == 128 && !kGrouped && !kOutF32 && kBf16),
              "fp8: B K-major, BN 128 (one B scale a tile and k-block), no groups, bf16 out");

// Grouped: the work unit u's group (the last g with tile_start[g] <= u, tile_start[] the groups' first units in
// shared memory, `groups` + 1 entries; row_end[] their row ends) and its place in the group.
struct GroupedUnit {
  int group, m_begin, m_end, local, tiles_m;
};
__device__ __forceinline__ GroupedUnit grouped_unit(int u, const int* tile_start, const int* row_end, int groups,
                                                    int tiles_n) {
  int lo = 0, hi = groups - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (tile_start[mid] <= u) lo = mid;
    else hi = mid - 1;
  }
  GroupedUnit g;
  g.group = lo;
  g.m_begin = lo ? row_end[lo - 1] : 0;
  g.m_end = row_end[lo];
  g.local = u - tile_start[lo];
  g.tiles_m = (tile_start[lo + 1] - tile_start[lo]) / tiles_n;
  return g;
}

// A slab that ends inside C's last 16 bytes of a row when N * element size is not a multiple of 16: stored from
// registers, element by element (measured on the H100: a TMA store clipped at such an N wrote the whole 16-byte
// chunk, past column N into the row's padding). Every slab from there on is direct too.
// Swapped (kSwapAB): C's rows are the warpgroup's 64 rows (row0 on), so a warpgroup whose rows end past M is direct.
__device__ __forceinline__ bool slab_direct(int slab_n0, int N, int row0, int M) {
  if constexpr (kSwapAB) return row0 + 64 > M && (M * kOutBytes) % 16 != 0;
  return slab_n0 + kSlabCols > N && (N * kOutBytes) % 16 != 0;
}
// C's element (row gm, column gn) of the kernel's product: the caller's C, transposed where the operands are swapped
// (then (gm, gn + 1) is ldc further on, not 1).
__device__ __forceinline__ long long c_index(int gm, int gn, long long ldc) {
  return kSwapAB ? static_cast<long long>(gn) * ldc + gm : static_cast<long long>(gm) * ldc + gn;
}

// C's map: the output (N, M) (the caller's, whose M is the kernel's N where the operands are swapped), or split-K's
// workspace (N, M, splits), so that TMA clips each split's tile rows at M (a workspace of splits x M rows; rows past
// M would land in the next split's slice of a rank-2 one).
constexpr bool kSplitK = TMAKIT_GEMM_SPLIT_K != 0;
constexpr int kCRank = kSplitK ? 3 : 2;
static_assert(!kSplitK || (kOutF32 && !kGrouped && !kFp8 && TMAKIT_GEMM_STORE_ADD == 0),
              "split-K: fp32 partials of a plain GEMM, stored (not reduce-added)");
static_assert(!kSwapAB || (!kOutF32 && !kFp8 && !kGrouped && !kSplitK && TMAKIT_GEMM_STORE_ADD == 0),
              "swapped operands: a 16-bit output of a plain GEMM (a slab transposed is 64 rows of 128 bytes)");
__device__ __forceinline__ Coords c_coords(int n0, int row0, int split) {
  return kSwapAB ? Coords{{row0, n0, 0, 0, 0}} : Coords{{n0, row0, split, 0, 0}};
}

// beta != 0: C's slab at (n0, row0) into a store buffer by TMA, completing on `bar` (the issuer alone).
__device__ __forceinline__ void load_c_slab(Mbarrier& bar, uint8_t* buf, const TensorMapDesc* c_map, int n0,
                                            int row0) {
  bar.arrive_expect_tx(kSlabBytes);
  cp_async_bulk_tensor_g2s<kCRank>(buf, c_map, c_coords(n0, row0, 0), bar);  // split-K runs with beta 0
}
}  // namespace gemm
#endif  // TMAKIT_USE_TMA

extern "C" __global__ void __launch_bounds__(384, 1)
    tmakit_gemm_tma(const __grid_constant__ tmakit::TensorMapDesc map_a, const __grid_constant__ tmakit::TensorMapDesc map_b,
                    const __grid_constant__ tmakit::TensorMapDesc map_c, void* c_ptr, int M, int N, int K,
                    long long ldc, float alpha, float beta, int group_m, int splits, int split_rows,
                    const int* group_ends, int groups, tmakit::TensorMapDesc* c_maps,
                    const __grid_constant__ tmakit::TensorMapDesc map_sa, const float* scale_b, int scale_b_pitch) {
#if TMAKIT_USE_TMA
  using namespace tmakit;
  using namespace gemm;
  extern __shared__ __align__(16) uint8_t smem_raw[];
  uint8_t* smem = align_shared(smem_raw, 1024);
  uint8_t* epi = smem + kStages * kStageBytes;
  Ring& ring = *reinterpret_cast<Ring*>(epi + kEpilogueBytes);
  // Grouped: each consumer warpgroup's C map is edited in shared memory (128-byte aligned) and published to its own
  // slot c_maps[2 * blockIdx.x + consumer]; the groups' first units and row ends follow.
  // The barriers of the C slabs the consumer warpgroups load by TMA (beta != 0), one per slab buffer: consumer 0's
  // two, then consumer 1's; after the ring.
  Mbarrier* c_full = reinterpret_cast<Mbarrier*>(epi + kEpilogueBytes + sizeof(Ring));
  TensorMapDesc* c_edit = reinterpret_cast<TensorMapDesc*>(
      epi + kEpilogueBytes + ((sizeof(Ring) + 4 * sizeof(Mbarrier) + 127) / 128) * 128);
  int* tile_start = reinterpret_cast<int*>(c_edit + 2);
  int* row_end = tile_start + groups + 1;

  const int wg = threadIdx.x / 128;
  const int t = threadIdx.x % 128;
  const uint32_t rank = kCluster > 1 ? cluster_ctarank() : 0;
  const int tiles_m = (M + kBM - 1) / kBM, tiles_n = (N + kBN - 1) / kBN;
  const int unit_rows = unit_grid_rows(tiles_m), unit_cols = unit_grid_cols(tiles_n);
  if (threadIdx.x == 0) {
    for (int i = 0; i < 4; ++i) c_full[i].init(1);
    ring.init(1, 2 * kCluster);  // FULL: the arming thread; EMPTY: 2 consumer warpgroups of each CTA
    prefetch_tensormap(&map_a);
    prefetch_tensormap(&map_b);
    prefetch_tensormap(&map_c);
  }
  __syncthreads();
  // Launched with pdl=True: the launch and the set-up above overlap the previous kernel in the stream; nothing
  // in global memory (operands, group ends, C, the workspaces) is touched before it has completed.
  griddepcontrol_wait();
  // Split-K (splits > 1): a unit is (tile unit, split); split s sums k-blocks [s kb / splits, (s + 1) kb / splits)
  // into slice s of C, an fp32 workspace of split_rows (= M) rows a slice that tmakit_gemm_splitk_reduce adds up
  // (every split has at least one k-block: the host keeps splits <= k-blocks).
  int units = unit_rows * unit_cols * splits;
  if constexpr (kGrouped) {  // the units of every group, from the row ends on the device (no host synchronisation)
    for (int g = threadIdx.x; g < groups; g += blockDim.x) row_end[g] = group_ends[g];
    __syncthreads();
    if (threadIdx.x == 0) {
      // The offsets are unchecked: each end is clamped to [the previous end, M], so a decreasing or too large end
      // makes an empty or shorter group, and no tile reads or writes past the operands or another group's rows.
      int prev = 0, total = 0;
      tile_start[0] = 0;
      for (int g = 0; g < groups; ++g) {
        const int end = min(max(row_end[g], prev), M);
        total += (end - prev + kBM - 1) / kBM * tiles_n;
        row_end[g] = end, tile_start[g + 1] = total, prev = end;
      }
    }
    __syncthreads();
    units = tile_start[groups];
  }
  const int k_total = (K + kBK - 1) / kBK;
  const int first_unit = blockIdx.x / kCluster, unit_stride = gridDim.x / kCluster;

  if constexpr (kCluster > 1) cluster_sync();  // peers' barriers exist before multicasts and remote arrivals

  if (wg == 0) {
    // ---------------- producer ----------------
    setmaxnreg_dec<kProducerRegs>();
    if (threadIdx.x < 32 && elect_one_sync()) {
      Ring::State p = make_producer_start_state<kStages>();
      for (int u = first_unit; u < units; u += unit_stride) {
        int row, col, group = 0, m_begin = 0;
        const int split = u % splits;
        if constexpr (kGrouped) {
          const GroupedUnit gu = grouped_unit(u, tile_start, row_end, groups, tiles_n);
          unit_coords(gu.local, gu.tiles_m, tiles_n, group_m, row, col);
          group = gu.group, m_begin = gu.m_begin;
        } else {
          unit_coords(u / splits, unit_rows, unit_cols, group_m, row, col);
        }
        int m0, n0;
        tile_origin(row, col, rank, m_begin, m0, n0);
        const int kb_end = (split + 1) * k_total / splits;
        for (int kb = split * k_total / splits; kb < kb_end; ++kb) {
          ring.producer_acquire(p);
          Mbarrier& full = ring.producer_expect(p, kLoadBytes);
          uint8_t* a_st = smem + p.index * kStageBytes;
          uint8_t* b_st = a_st + kABytes;
          const int k0 = kb * kBK;
          if constexpr (!kAKMajor) {  // MN-major A (the caller's N-major B, swapped): BM / 64 slabs of 64 m
#pragma unroll
            for (int slab = 0; slab < kBM / 64; ++slab)
              cp_async_bulk_tensor_g2s<2>(a_st + slab * kBK * kRowBytes, &map_a, Coords{{m0 + slab * 64, k0, 0, 0, 0}},
                                          full);
          } else if constexpr (kAShare > 1) {  // this CTA's half of the A tile's rows, to both CTAs of the pair
            constexpr int rows = kBM / kAShare;
            cp_async_bulk_tensor_g2s_multicast<2>(a_st + rank * rows * kRowBytes, &map_a,
                                                  Coords{{k0, m0 + static_cast<int>(rank) * rows, 0, 0, 0}}, full, 0x3);
          } else {
            cp_async_bulk_tensor_g2s<2>(a_st, &map_a, Coords{{k0, m0, 0, 0, 0}}, full);
          }
          // fp8: the tile's row scales of this k-block, from scales stored (K / 128, M) (M contiguous)
          if constexpr (kFp8) cp_async_bulk_tensor_g2s<2>(b_st + kBBytes, &map_sa, Coords{{m0, kb, 0, 0, 0}}, full);
          if constexpr (kBKMajor) {
            constexpr int rows = kBN / kBShare;  // each CTA sharing B loads its share of B's rows
            const uint32_t part = kBShare > 1 ? rank : 0u;
            uint8_t* dst = b_st + part * rows * kRowBytes;
            const Coords at{{k0, n0 + static_cast<int>(part) * rows, group, 0, 0}};
            if constexpr (kBShare > 1) cp_async_bulk_tensor_g2s_multicast<2>(dst, &map_b, at, full, 0x3);
            else cp_async_bulk_tensor_g2s<kBRank>(dst, &map_b, at, full);
          } else {
            // each CTA of a cluster its run of whole 64-column slabs, the last CTA's shorter where they do not
            // divide (BN 192 or a narrow BN in a pair); slab numbers fixed at compile time (the destinations'
            // alignment, to ptxas and the lint)
            constexpr int slabs = (kBSlabs + kBShare - 1) / kBShare;
#pragma unroll
            for (int slab = 0; slab < kBSlabs; ++slab) {
              if (kBShare > 1 && slab / slabs != static_cast<int>(rank)) continue;
              uint8_t* dst = b_st + slab * kBK * kRowBytes;
              const Coords at{{n0 + slab * 64, k0, group, 0, 0}};
              if constexpr (kBShare > 1) cp_async_bulk_tensor_g2s_multicast<2>(dst, &map_b, at, full, 0x3);
              else cp_async_bulk_tensor_g2s<kBRank>(dst, &map_b, at, full);
            }
          }
          p.advance();
        }
      }
      // No griddepcontrol.launch_dependents: a pdl launch after this one starts as this grid's CTAs exit
      // (triggering here, once every load is issued, measured slower: docs/PERFORMANCE.md, GEMM).
    }
  } else {
    // ---------------- consumers ----------------
    setmaxnreg_inc<kConsumerRegs>();
    const int consumer = wg - 1;
    StorePipeline<2> store(epi + consumer * 2 * kSlabBytes, kSlabBytes, NamedBarrier(1 + consumer, 128));
    uint32_t c_phase = 0;  // bit b: the phase of this warpgroup's barrier of buffer b that its next C slab completes
    // Every CTA of the cluster filled the stage (its share of B, or of A, by multicast): release it to each of them.
    auto release = [&](const Ring::State& s) {
      if constexpr (kCluster > 1) ring.consumer_release_cluster(s, kCluster);
      else ring.consumer_release(s);
    };
    Ring::State c = make_consumer_start_state<kStages>();
    float acc[kWgN / 2];
    uint32_t packed[kPackedRegs];  // the last tile's deferred slabs, stmatrix's fragments in slab order
    bool pending = false;          // their stores are still to be issued, the tile at (pending_n0, pending_row0)
    int pending_n0 = 0, pending_row0 = 0;
    // The deferred slabs into the store buffers (stmatrix) and out by TMA; rows past M and columns past N clipped
    // by the TMA stores.
    auto store_packed = [&]() {
#pragma unroll
      for (int s = kFirstDeferred; s < kSlabs; ++s) {
        uint8_t* buf = store.acquire();
        const uint32_t base = shared_addr(buf);
#pragma unroll
        for (int q = 0; q < kSlabCols / 16; ++q) {
          uint32_t r[4];
#pragma unroll
          for (int e = 0; e < 4; ++e) r[e] = packed[4 * ((s - kFirstDeferred) * (kSlabCols / 16) + q) + e];
          stmatrix_group(base, t, q, r);
        }
        store.publish();
        const int slab_n0 = pending_n0 + s * kSlabCols;
        if (store.issuer() && slab_n0 < N)
          cp_async_bulk_tensor_s2g<kCRank>(&map_c, c_coords(slab_n0, pending_row0, 0), buf);
        store.commit();
      }
      pending = false;
    };
    const uint32_t smem_base = shared_addr(smem) + consumer * kAConsumerBytes;
    const uint32_t b_base = shared_addr(smem) + kABytes + consumer * kBConsumerBytes;
    const TensorMapDesc* c_map = &map_c;
    int c_map_group = -1;
    for (int u = first_unit; u < units; u += unit_stride) {
      int row, col, m_begin = 0, m_end = M;
      const int split = u % splits;
      if constexpr (kGrouped) {
        const GroupedUnit gu = grouped_unit(u, tile_start, row_end, groups, tiles_n);
        unit_coords(gu.local, gu.tiles_m, tiles_n, group_m, row, col);
        m_begin = gu.m_begin, m_end = gu.m_end;
        if (gu.group != c_map_group) {
          // This warpgroup's C map for the group: the whole C with its rows ending at the group's end, so TMA
          // clips the tile's rows past it (they are the next group's). The stores through the old map finish first.
          store.drain();
          TensorMapDesc* slot = c_maps + 2 * blockIdx.x + consumer;
          if (t < 32) {
            if (t < 16) c_edit[consumer].opaque[t] = map_c.opaque[t];
            __syncwarp();
            if (t == 0) tensormap_replace_global_dim<1>(TensorMapSmem(c_edit + consumer), static_cast<uint32_t>(m_end));
            __syncwarp();
            tensormap_cp_fenceproxy(slot, TensorMapSmem(c_edit + consumer));
            if (t == 0) fence_proxy_tensormap_acquire(slot);  // the issuer's stores go through it
          }
          c_map = slot;
          c_map_group = gu.group;
        }
      } else {
        unit_coords(u / splits, unit_rows, unit_cols, group_m, row, col);
      }
      int m0, n0;
      tile_origin(row, col, rank, m_begin, m0, n0);
      // this warpgroup's rows and columns of the tile
      const int row0 = m0 + (kSplitN ? 0 : consumer * 64), cn0 = n0 + consumer * kCols1;
      const int kb_begin = split * k_total / splits, kb_end = (split + 1) * k_total / splits;
      // beta != 0: C's first slab goes into its store buffer now, under the mainloop; in the epilogue each next
      // slab's load is issued one slab ahead of its use (docs/PERFORMANCE.md, GEMM epilogues). row0 and cn0 stay
      // live across the mainloop (recomputing them after it measured the same: docs/PERFORMANCE.md).
      // (Each warpgroup's own barriers, named: the hang doctor's lint then counts each one's bytes.)
      if (beta != 0.f && t == 0) {
        if (consumer == 0) {
          if (!slab_direct(n0, N, row0, M)) load_c_slab(c_full[0], store.reserve<0>(), c_map, n0, row0);
        } else if (!slab_direct(n0 + kCols1, N, row0, M)) {
          load_c_slab(c_full[2], store.reserve<0>(), c_map, n0 + kCols1, row0);
        }
      }
      if constexpr (kFp8) {
        // Per k-block: the block's product into a fresh partial accumulator, then acc += part * scale_a[row] *
        // scale_b: fp32 promotion every 128 of K, as the block scales require (DeepGEMM's recipe). Two partials
        // alternate, so block kb's wgmma run while block kb - 1 is promoted (its stage, which holds its A scales,
        // is released after that).
        float part[2][kBN / 2];
#pragma unroll
        for (int i = 0; i < kBN / 2; ++i) acc[i] = 0.f;
        const int r = consumer * 64 + wgmma_d_row(t, 0);  // this thread's rows r and r + 8 of the tile
        const float* sb_row = scale_b + static_cast<long long>(n0 / kBN) * scale_b_pitch;
        Ring::State done = c;  // the stage of the block being promoted
        auto issue = [&](float (&d)[kBN / 2]) {
          ring.consumer_wait(c);
          const uint32_t a_st = smem_base + c.index * kStageBytes, b_st = shared_addr(smem) + c.index * kStageBytes + kABytes;
          wgmma_fence();
#pragma unroll
          for (int kk = 0; kk < kSlices; ++kk) {
            wgmma_mma_async_ss<kBN, kType, kType>(d, wgmma_desc_rebase(desc_a(kk), a_st),
                                                   wgmma_desc_rebase(desc_b(kk), b_st), kk > 0);
          }
          wgmma_commit_group();
          c.advance();
        };
        // acc += d * the scales of block kb (stage `done`), then that stage is released.
        auto promote = [&](float (&d)[kBN / 2], float sb) {
          wgmma_fence_operands(d);
          const float* sa = reinterpret_cast<const float*>(smem + done.index * kStageBytes + kABytes + kBBytes);
          const float s0 = sa[r] * sb, s1 = sa[r + 8] * sb;
          release(done);
          done.advance();
#pragma unroll
          for (int i = 0; i < kBN / 2; ++i) acc[i] += d[i] * ((i & 2) ? s1 : s0);
        };
        float sb_prev = sb_row[kb_begin];
        issue(part[0]);
        int kb = kb_begin + 1;
        for (; kb + 1 < kb_end; kb += 2) {  // two blocks a trip, so that each partial is one register array
          const float sb1 = sb_row[kb];  // loaded before the waits: off the promotion's path
          issue(part[1]);
          wgmma_wait_group<1>();
          promote(part[0], sb_prev);
          const float sb0 = sb_row[kb + 1];
          issue(part[0]);
          wgmma_wait_group<1>();
          promote(part[1], sb1);
          sb_prev = sb0;
        }
        if (kb < kb_end) {  // one block left: into part[1]
          const float sb1 = sb_row[kb];
          issue(part[1]);
          wgmma_wait_group<1>();
          promote(part[0], sb_prev);
          wgmma_wait_group<0>();
          promote(part[1], sb1);
        } else {
          wgmma_wait_group<0>();
          promote(part[0], sb_prev);
        }
      } else {
        Ring::State done = c;  // the oldest stage not yet released
        for (int kb = kb_begin; kb < kb_end; ++kb) {
          ring.consumer_wait(c);
          const uint32_t a_st = smem_base + c.index * kStageBytes, b_st = b_base + c.index * kStageBytes;
          wgmma_fence();
  #pragma unroll
          for (int kk = 0; kk < kBK / 16; ++kk) {
            wgmma_mma_async_ss<kWgN, kType, kType, !kAKMajor, !kBKMajor>(acc, wgmma_desc_rebase(desc_a(kk), a_st),
                                                                     wgmma_desc_rebase(desc_b(kk), b_st), kb > kb_begin || kk > 0);
          }
          wgmma_commit_group();
          if constexpr (kDeferredSlabs > 0) {
            if (pending) store_packed();  // the last tile's stores, while this tile's first k-block multiplies
          }
          wgmma_wait_group<1>();  // the previous k-block's batch is done: its stage may be refilled
          if (kb > kb_begin) {
            release(done);
            done.advance();
          }
          c.advance();
        }
        wgmma_wait_group<0>();
        wgmma_fence_operands(acc);
        release(done);
      }

      // ---- epilogue: alpha/beta, then 128-byte slabs through the store pipeline and TMA stores ----
      // Every warpgroup runs the epilogue, rows past M (or the group's end) included: the TMA stores clip them
      // (a guard on row0 would make the C loads' barrier depend on thread and data at once).
      // C not read and no slab stored from registers (columns short of a 16-byte row end): the deferred slabs are
      // packed as stmatrix takes them.
      const bool defer = kDeferredSlabs > 0 && beta == 0.f && !slab_direct(cn0 + (kSlabs - 1) * kSlabCols, N, row0, M);
      {
#pragma unroll
        for (int s = 0; s < kFullSlabs; ++s) {
          if (s >= kFirstDeferred && defer) {
#pragma unroll
            for (int q = 0; q < kSlabCols / 16; ++q) {
#pragma unroll
              for (int e = 0; e < 4; ++e) {
                const int i = stmatrix_acc(s, q, e);
                packed[4 * ((s - kFirstDeferred) * (kSlabCols / 16) + q) + e] =
                    pack_out2(alpha == 0.f ? 0.f : alpha * acc[i], alpha == 0.f ? 0.f : alpha * acc[i + 1]);
              }
            }
            continue;
          }
          const int slab_n0 = cn0 + s * kSlabCols;
          const bool direct = slab_direct(slab_n0, N, row0, M);
          uint8_t* buf = store.acquire();  // the store that last read this buffer is done with it
          if (!kOutF32 && beta == 0.f && !direct) {
            // C not read, a 16-bit output, staged whole by stmatrix, no per-element addressing. Rows past M and
            // columns past N are clipped by the TMA store.
            const uint32_t base = shared_addr(buf);
#pragma unroll
            for (int q = 0; q < kSlabCols / 16; ++q) {
              uint32_t r[4];
#pragma unroll
              for (int e = 0; e < 4; ++e) {
                const int i = stmatrix_acc(s, q, e);
                r[e] = pack_out2(alpha == 0.f ? 0.f : alpha * acc[i], alpha == 0.f ? 0.f : alpha * acc[i + 1]);
              }
              stmatrix_group(base, t, q, r);
            }
          } else if (direct) {
#pragma unroll
            for (int j = 0; j < kSlabCols / 8; ++j) {
              const int jj = s * (kSlabCols / 8) + j;  // n8 block of the accumulator
#pragma unroll
              for (int h = 0; h < 2; ++h) {
                const int i = 4 * jj + 2 * h;
                const int r = wgmma_d_row(t, i), cl = wgmma_d_col(t, i) - s * kSlabCols;
                const int gm = row0 + r, gn = slab_n0 + cl;
                const long long at = c_index(split * split_rows + gm, gn, ldc);
                const long long at1 = at + (kSwapAB ? ldc : 1);
                const float v0 = epilogue_value(acc[i], alpha, beta, c_ptr, at, gm < m_end && gn < N);
                const float v1 = epilogue_value(acc[i + 1], alpha, beta, c_ptr, at1, gm < m_end && gn + 1 < N);
                if (gm < m_end) {
                  if (gn < N) store_c(c_ptr, at, v0);
                  if (gn + 1 < N) store_c(c_ptr, at1, v1);
                }
              }
            }
          } else {
            // beta != 0: C's slab comes by TMA into the buffer (rows and columns past C read as zeros), and each
            // thread reads its values back where it then writes the result; fp32 outputs the same way.
            if (beta != 0.f) {
              // Slab s's C is in flight to buf (issued a slab ahead, or under the mainloop for slab 0); the issuer
              // first sends slab s + 1's into the other buffer, once the store that last read it is done.
              const int b = s & 1;  // a constant once the loop is unrolled
              if (t == 0 && s + 1 < kFullSlabs) {  // the store issuer (a narrow tile's part slab reads C itself)
                const int next0 = n0 + (s + 1) * kSlabCols;  // consumer 0's next slab; consumer 1's kCols1 on
                if (consumer == 0) {
                  if (!slab_direct(next0, N, row0, M))
                    load_c_slab(c_full[b ^ 1], store.reserve<1>(), c_map, next0, row0);
                } else if (!slab_direct(next0 + kCols1, N, row0, M)) {
                  load_c_slab(c_full[2 + (b ^ 1)], store.reserve<1>(), c_map, next0 + kCols1, row0);
                }
              }
              if (consumer == 0) c_full[b].wait_parity((c_phase >> b) & 1u);  // each warpgroup its own barriers,
              else c_full[2 + b].wait_parity((c_phase >> b) & 1u);            // named (not indexed)
              c_phase ^= 1u << b;
            }
#pragma unroll
            for (int j = 0; j < kSlabCols / 8; ++j) {
              const int jj = s * (kSlabCols / 8) + j;  // n8 block of the accumulator
#pragma unroll
              for (int h = 0; h < 2; ++h) {
                const int i = 4 * jj + 2 * h;
                const int r = wgmma_d_row(t, i), cl = wgmma_d_col(t, i) - s * kSlabCols;
                float v0 = alpha == 0.f ? 0.f : alpha * acc[i], v1 = alpha == 0.f ? 0.f : alpha * acc[i + 1];
                if constexpr (kSwapAB) {  // the pair is two rows of the transposed slab, one element each
                  half_bits* h0 = reinterpret_cast<half_bits*>(buf + swizzle_offset(cl * kRowBytes + r * 2,
                                                                                    kSwizzle128B));
                  half_bits* h1 = reinterpret_cast<half_bits*>(buf + swizzle_offset((cl + 1) * kRowBytes + r * 2,
                                                                                    kSwizzle128B));
                  v0 += beta * in_to_f32(*h0), v1 += beta * in_to_f32(*h1);  // (a 16-bit output here reads C)
                  const uint32_t p = pack_out2(v0, v1);
                  *h0 = static_cast<half_bits>(p & 0xffffu), *h1 = static_cast<half_bits>(p >> 16);
                  continue;
                }
                const uint32_t off = swizzle_offset(r * kRowBytes + cl * kOutBytes, kSwizzle128B);
                if constexpr (kOutF32) {
                  if (beta != 0.f) {
                    const float2 c2 = *reinterpret_cast<const float2*>(buf + off);
                    v0 += beta * c2.x, v1 += beta * c2.y;
                  }
                  *reinterpret_cast<float2*>(buf + off) = make_float2(v0, v1);
                } else {
                  if (beta != 0.f) {
                    const uint32_t c2 = *reinterpret_cast<const uint32_t*>(buf + off);
                    v0 += beta * in_to_f32(static_cast<half_bits>(c2 & 0xffffu));
                    v1 += beta * in_to_f32(static_cast<half_bits>(c2 >> 16));
                  }
                  *reinterpret_cast<uint32_t*>(buf + off) = pack_out2(v0, v1);
                }
              }
            }
          }
          store.publish();
          if (store.issuer() && !direct && slab_n0 < N) {
            if constexpr (TMAKIT_GEMM_STORE_ADD != 0)  // ops/gemm.py refuses the direct (ragged-N) path here
              cp_reduce_async_bulk_tensor_add<2>(c_map, c_coords(slab_n0, row0, 0), buf);
            else
              cp_async_bulk_tensor_s2g<kCRank>(c_map, c_coords(slab_n0, row0, split), buf);
          }
          store.commit();  // one bulk group per slab, stored or not: the buffer rotation stays in step
        }
        if (defer) pending = true, pending_n0 = cn0, pending_row0 = row0;  // stored under the next mainloop
        if constexpr (kFullSlabs < kSlabs) {
          // A narrow tile's part slab, from registers (a TMA store of the whole slab would write the next tile's
          // columns; with beta != 0 C's values are read likewise); no store buffer, so the rotation above is untouched.
          const int slab_n0 = cn0 + kFullSlabs * kSlabCols;
#pragma unroll
          for (int jj = kFullSlabs * (kSlabCols / 8); jj < kWgN / 8; ++jj) {  // n8 blocks of the accumulator
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int i = 4 * jj + 2 * h;
              const int gm = row0 + wgmma_d_row(t, i), gn = slab_n0 + wgmma_d_col(t, i) - kFullSlabs * kSlabCols;
              if (gm < m_end && gn < N) {
                const long long at = c_index(gm, gn, ldc);
                const float v0 = epilogue_value(acc[i], alpha, beta, c_ptr, at, true);
                if constexpr (kSwapAB) {  // gn + 1 is the next row of C
                  store_c(c_ptr, at, v0);
                  if (gn + 1 < N)
                    store_c(c_ptr, at + ldc, epilogue_value(acc[i + 1], alpha, beta, c_ptr, at + ldc, true));
                } else if (gn + 1 < N) {  // gn even, rows of whole 16 bytes: aligned pairs
                  const float v1 = epilogue_value(acc[i + 1], alpha, beta, c_ptr, at + 1, true);
                  if constexpr (kOutF32)
                    *reinterpret_cast<float2*>(static_cast<float*>(c_ptr) + at) = make_float2(v0, v1);
                  else
                    *reinterpret_cast<uint32_t*>(static_cast<half_bits*>(c_ptr) + at) = pack_out2(v0, v1);
                } else {
                  store_c(c_ptr, at, v0);
                }
              }
            }
          }
        }
      }
    }
    if constexpr (kDeferredSlabs > 0) {
      if (pending) store_packed();
    }
    store.drain();
  }
  __syncwarp();
  if constexpr (kCluster > 1) cluster_sync();  // no CTA leaves while its peer may still arrive on its barriers
#else
  TMAKIT_NOT_THIS_BUILD();  // this build serves tmakit_gemm_cp_async
#endif
}

#if !TMAKIT_USE_TMA
namespace gemm {
constexpr int kWarps = 8;  // 2 (M) x 4 (N) warps of 64 x BN/4
constexpr int kWarpN = kBN / 4;
// (BN 192 and the narrow widths compile here too, one source for every build, but the host plans them on tma only.)
constexpr int kN8 = kWarpN / 8;  // n8 tiles per warp
typedef Pipeline<kStages, CpAsyncBlockProducer, 32> CpAsyncRing;  // warps read; the block barrier releases

// Issue the cp.async chunks of k-block kb into stage `st` (16 bytes each, zero fill past the edges). A thread
// copies one 16-byte column chunk of every (256 / chunks a row)-th row: its source advances by a stride and its
// destination by whole swizzle periods (8 rows), so no chunk recomputes the swizzle.
__device__ __forceinline__ void load_stage(uint8_t* st, const half_bits* A, const half_bits* B, int M, int N, int K,
                                           long long lda, long long ldb, int m0, int n0, int kb) {
  constexpr int kThreads = kWarps * 32;
  const int k0 = kb * kBK;
  uint8_t* a_st = st;
  uint8_t* b_st = st + kABytes;
  // [rows, K] operands (A, and K-major B): 8 chunks a row, 32 rows a pass.
  auto rows_by_k = [&](uint8_t* dst, const half_bits* base, long long ld, int row0, int rows, int limit) {
    const int r = threadIdx.x >> 3, c = threadIdx.x & 7, gk = k0 + c * 8;
    const uint32_t at = swizzle_offset(r * kRowBytes + c * 16, kSwizzle128B);
    const half_bits* src = base + static_cast<long long>(row0 + r) * ld + gk;
#pragma unroll
    for (int it = 0; it < rows * 8 / kThreads; ++it) {  // compile-time trip counts: fully unrolled
      const bool in = row0 + r + it * (kThreads / 8) < limit && gk < K;
      cp_async_cg_16(dst + at + it * (kThreads / 8) * kRowBytes, in ? src : base, in ? min(16, 2 * (K - gk)) : 0);
      src += (kThreads / 8) * ld;
    }
  };
  rows_by_k(a_st, A, lda, m0, kBM, M);
  if constexpr (kBKMajor) {  // B stored [N, K]: BN rows of BK
    rows_by_k(b_st, B, ldb, n0, kBN, N);
  } else if constexpr (kThreads % (kBN / 8) == 0 && kThreads / (kBN / 8) % 8 == 0) {
    // B stored [K, N]: BK rows of BN, as BN/64 slabs, whole swizzle periods (8 rows) a pass
    constexpr int kRowsPass = kThreads / (kBN / 8);
    const int r = threadIdx.x / (kBN / 8), c = threadIdx.x % (kBN / 8), gn = n0 + c * 8;
    const uint32_t at = (c >> 3) * kBK * kRowBytes + swizzle_offset(r * kRowBytes + (c & 7) * 16, kSwizzle128B);
    const half_bits* src = B + static_cast<long long>(k0 + r) * ldb + gn;
#pragma unroll
    for (int it = 0; it < kBK / kRowsPass; ++it) {
      const bool in = k0 + r + it * kRowsPass < K && gn < N;
      cp_async_cg_16(b_st + at + it * kRowsPass * kRowBytes, in ? src : B, in ? min(16, 2 * (N - gn)) : 0);
      src += kRowsPass * ldb;
    }
  } else {  // passes of other than whole swizzle periods (BN 192, most narrow widths: tma only on the host,
           // compiled here for one source): per chunk
#pragma unroll
    for (int it = 0; it < kBK * (kBN / 8) / kThreads; ++it) {
      const int i = threadIdx.x + it * kThreads;
      const int r = i / (kBN / 8), c = i % (kBN / 8);
      const int gk = k0 + r, gn = n0 + c * 8;
      const bool in = gk < K && gn < N;
      const half_bits* src = in ? B + gk * ldb + gn : B;
      cp_async_cg_16(b_st + (c >> 3) * kBK * kRowBytes + swizzle_offset(r * kRowBytes + (c & 7) * 16, kSwizzle128B),
                     src, in ? min(16, 2 * (N - gn)) : 0);
    }
  }
}
}  // namespace gemm
#endif  // !TMAKIT_USE_TMA

extern "C" __global__ void __launch_bounds__(256, 1)
    tmakit_gemm_cp_async(const void* a_ptr, const void* b_ptr, void* c_ptr, int M, int N, int K, long long lda,
                         long long ldb, long long ldc, float alpha, float beta, int group_m) {
#if !TMAKIT_USE_TMA
  using namespace tmakit;
  using namespace gemm;
  // A narrow width compiles here too (one source for every build) but does not tile 8 warps of BN / 4 columns:
  // tma only, the host refuses it here.
  if constexpr (kNarrow) TMAKIT_NOT_THIS_BUILD();
  extern __shared__ __align__(16) uint8_t smem_raw[];
  __shared__ CpAsyncRing ring;  // cp.async groups and block barriers: nothing to initialise
  uint8_t* smem = align_shared(smem_raw, 1024);
  const half_bits* A = static_cast<const half_bits*>(a_ptr);
  const half_bits* B = static_cast<const half_bits*>(b_ptr);
  const int tiles_m = (M + kBM - 1) / kBM, tiles_n = (N + kBN - 1) / kBN;
  int row, col;
  unit_coords(blockIdx.x, tiles_m, tiles_n, group_m, row, col);
  const int m0 = row * kBM, n0 = col * kBN;
  const int k_blocks = (K + kBK - 1) / kBK;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp / 4, wn = warp % 4;  // this warp's 64-row, BN/4-column block

  float acc[4][kN8][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < kN8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

  CpAsyncRing::State p = make_producer_start_state<kStages>(), c = make_consumer_start_state<kStages>();
  // One k-block into the producer's stage (nothing past K: the slot still commits its group).
  auto produce = [&](int kb) {
    ring.producer_acquire(p);
    if (kb < k_blocks) load_stage(smem + p.index * kStageBytes, A, B, M, N, K, lda, ldb, m0, n0, kb);
    ring.producer_commit(p);
    p.advance();
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) produce(s);
  const uint32_t base = shared_addr(smem);
  // Fragments of one k16 slice: A (4 m16 tiles) and B (kN8 / 2 pairs of n8 tiles), double-buffered so that the
  // slice kk + 1 (the next stage's first slice at kk = 3) is read by ldmatrix while slice kk is on the tensor cores.
  uint32_t fa[2][4][4], fb[2][kN8 / 2][4];
  // The lanes' ldmatrix offsets of this warp's first A and B blocks, moved per block by
  // ldmatrix_x4_swizzle128_offset (MN-major B: its first block's slab and column, 16 columns a pair of n8 tiles).
  const uint32_t a_lane = ldmatrix_x4_address(0, lane, wm * 64, 0, kRowBytes, kSwizzle128B);
  const uint32_t b_lane = kBKMajor ? ldmatrix_x4_address_b_kmajor(0, lane, wn * kWarpN, 0, kRowBytes, kSwizzle128B)
                                   : ldmatrix_x4_trans_address_b_mnmajor(0, lane, 0, 0, kRowBytes, kSwizzle128B);
  auto load_frags = [&](uint32_t (&a)[4][4], uint32_t (&b)[kN8 / 2][4], uint32_t a_st, int kk) {
    const uint32_t b_st = a_st + kABytes;
#pragma unroll
    for (int i = 0; i < 4; ++i)
      ldmatrix_sync_aligned_m8n8_x4_shared_b16(a[i], a_st + ldmatrix_x4_swizzle128_offset(a_lane, i * 16, kk * 16));
#pragma unroll
    for (int j = 0; j < kN8 / 2; ++j) {
      if constexpr (kBKMajor) {
        ldmatrix_sync_aligned_m8n8_x4_shared_b16(b[j], b_st + ldmatrix_x4_swizzle128_offset(b_lane, j * 16, kk * 16));
      } else {
        const int nb = wn * kWarpN + j * 16;
        ldmatrix_sync_aligned_m8n8_x4_trans_shared_b16(
            b[j], b_st + (nb / 64) * kBK * kRowBytes + ldmatrix_x4_swizzle128_offset(b_lane, kk * 16, nb % 64));
      }
    }
  };
  ring.consumer_wait<kStages - 2>(c);  // k-block 0 has landed, for every thread
  load_frags(fa[0], fb[0], base, 0);
  for (int kb = 0; kb < k_blocks; ++kb) {
    const uint32_t a_st = base + c.index * kStageBytes;
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      // refill the stage every warp finished reading before the last wait (that wait's barrier released it)
      if (kk == 0) produce(kb + kStages - 1);
      if (kk == kBK / 16 - 1) {
        c.advance();
        ring.consumer_wait<kStages - 2>(c);  // k-block kb + 1 has landed; nobody reads stage kb's slot any more
        if (kb + 1 < k_blocks) load_frags(fa[(kk + 1) & 1], fb[(kk + 1) & 1], base + c.index * kStageBytes, 0);
      } else {
        load_frags(fa[(kk + 1) & 1], fb[(kk + 1) & 1], a_st, kk + 1);
      }
#pragma unroll
      for (int j = 0; j < kN8 / 2; ++j) {
        const uint32_t b0[2] = {fb[kk & 1][j][0], fb[kk & 1][j][1]}, b1[2] = {fb[kk & 1][j][2], fb[kk & 1][j][3]};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          mma_m16n8k16<kBf16>(acc[i][2 * j], fa[kk & 1][i], b0);
          mma_m16n8k16<kBf16>(acc[i][2 * j + 1], fa[kk & 1][i], b1);
        }
      }
    }
  }
  cp_async_wait_all();

  // Epilogue from registers: (row, col) of each accumulator pair, clipped to C.
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < kN8; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int gm = m0 + wm * 64 + i * 16 + MmaM16N8K16Layout::c_row(lane, 2 * h);
        const int gn = n0 + wn * kWarpN + j * 8 + MmaM16N8K16Layout::c_col(lane, 0);
        if (gm >= M) continue;
        const long long at = static_cast<long long>(gm) * ldc + gn;
        const float v0 = epilogue_value(acc[i][j][2 * h], alpha, beta, c_ptr, at, gn < N);
        const float v1 = epilogue_value(acc[i][j][2 * h + 1], alpha, beta, c_ptr, at + 1, gn + 1 < N);
        if constexpr (kOutF32) {
          float* cp = static_cast<float*>(c_ptr) + at;
          if (gn + 1 < N) *reinterpret_cast<float2*>(cp) = make_float2(v0, v1);  // ldc and N even: 8-byte aligned
          else if (gn < N) cp[0] = v0;
        } else {
          half_bits* cp = static_cast<half_bits*>(c_ptr) + at;
          const uint32_t packed = pack_out2(v0, v1);
          if (gn + 1 < N) *reinterpret_cast<uint32_t*>(cp) = packed;
          else if (gn < N) cp[0] = static_cast<half_bits>(packed & 0xffffu);
        }
      }
    }
  }
#else
  TMAKIT_NOT_THIS_BUILD();  // this build serves tmakit_gemm_tma
#endif
}

// Split-K's second step: C = alpha * (the splits' fp32 partial products, summed) + beta * C, in C's dtype. The
// partials are `splits` slices of `slice` elements, rows `w_pitch` elements apart (a multiple of 4, the slices
// 16-byte aligned); one thread per 4 columns of a row, read as float4 (memory-bound: the partials are read once).
extern "C" __global__ void __launch_bounds__(256)
    tmakit_gemm_splitk_reduce(const float* __restrict__ w, long long w_pitch, long long slice, void* c_ptr, int M,
                              int N, long long ldc, int splits, float alpha, float beta) {
  // Launched with pdl=True right after the GEMM that writes the slices: wait for it before reading them.
  tmakit::griddepcontrol_launch_dependents();
  tmakit::griddepcontrol_wait();
  const int quads = (N + 3) / 4;
  const long long total = static_cast<long long>(M) * quads;
  for (long long i = blockIdx.x * 256ll + threadIdx.x; i < total; i += gridDim.x * 256ll) {
    const int m = static_cast<int>(i / quads), n = static_cast<int>(i % quads) * 4;
    const float* p = w + m * w_pitch + n;
    float4 acc = *reinterpret_cast<const float4*>(p);
    for (int s = 1; s < splits; ++s) {
      const float4 x = *reinterpret_cast<const float4*>(p + s * slice);
      acc.x += x.x;
      acc.y += x.y;
      acc.z += x.z;
      acc.w += x.w;
    }
    const float v[4] = {acc.x, acc.y, acc.z, acc.w};
    const long long at = static_cast<long long>(m) * ldc + n;
#pragma unroll
    for (int j = 0; j < 4; ++j)  // columns past N (the workspace's padding, never written) are not stored
      if (n + j < N) gemm::store_c(c_ptr, at + j, gemm::epilogue_value(v[j], alpha, beta, c_ptr, at + j, true));
  }
}
