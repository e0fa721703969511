// Attention forward, O = softmax(scale * Q K^T [+ causal mask]) V, and the log-sum-exp of each row (fp32).
// One source, two engines (config.cuh picks, tmakit/ops/attention.py launches; both entry points exist in every
// build, the one the build does not serve traps):
//
//   tmakit_attention_fwd_tma (sm_90a): persistent (at most one CTA per SM, work tiles of 128 query rows of one
//     head claimed from an atomic counter) with three warpgroups. Warpgroup 0 is the producer (setmaxnreg down;
//     one elected thread issues TMA): per tile the Q tile (BLOCK_M = 64 rows a consumer; two Q slots where they fit, so
//     the next tile's Q loads while this one is computed), then K and V tiles of BLOCK_N keys
//     through two tmakit::Pipeline rings of STAGES stages (TmaProducer) that run on across tiles, one for K and one
//     for V, so that a K stage is refilled as soon as S = Q K^T has read it. Warpgroups 1.. are consumers
//     (setmaxnreg up), each owning 64 query rows: S = Q K^T by wgmma SS (both K-major), online softmax in fp32
//     registers (exp2 of log2(e)-scaled logits, running max and sum per row), P packed to bf16/f16 in registers as
//     the A operand of an RS wgmma O += P V (V, stored [keys, D], is an MN-major B operand: the transpose bit),
//     block j's S issued with block j-1's P V; at the end O / l through shared memory (a buffer of its own at
//     D <= 128, else the Q tile's bytes; the warpgroup's StorePipeline) and TMA stores, lse by plain stores. The
//     wgmma descriptors are the ones tmakit.wgmma_descriptors derives from the tensor maps (defines below).
//   tmakit_attention_fwd_cp_async (sm_80..89, or TMAKIT_FORCE_CP_ASYNC): the same tiles and the same shared-memory
//     images (128B-swizzled slabs of 64 columns) filled by cp.async with zero fill past the sequence end, a
//     STAGES-deep tmakit::Pipeline of K/V stages (CpAsyncBlockProducer), TMAKIT_ATTN_WARPS warps of
//     TMAKIT_ATTN_WARP_ROWS (16 or 32) query rows each on ldmatrix + mma.sync m16n8k16 (FlashAttention-2's
//     structure: a warp of 32 rows reads each K and V fragment once for two m16 tiles), O stored from registers.
//
// Tiles in shared memory: a tile of R rows by D columns is D/64 slabs of R x 64 elements (128 bytes a row),
// each 128B-swizzled and 1024-byte aligned: exactly the boxes of a TMA map with box (.., R, 64) and 128B
// swizzle, and what the cp.async twin writes at swizzle_offset().
//
// Causal masking is top-left aligned (query i sees keys 0..i), as torch's scaled_dot_product_attention
// with is_causal=True: with Sq != Sk, query rows i >= Sk see every key. Key blocks wholly above the diagonal
// are skipped; the block that crosses it, and the block past the key length, are masked element by element.
// A row that sees no key gives O = 0 and lse = -inf, never NaN (top-left causal rows always see key 0, so with
// Sk >= 1, which the op requires, that is only the kernel's guard).
//
// Split keys (tma, kv_splits > 1; flash-decoding): each work tile's key blocks are cut into kv_splits ranges, each
// range a tile of its own whose O (normalised by its own row sums, fp32) and lse go to a workspace, rows
// (split, batch, head, query row); tmakit_attention_combine then weighs the splits' O by exp(lse_split - lse) into
// O and lse. For problems of fewer work tiles than SMs and long keys (decode), which would leave SMs idle.
//
// Compile-time parameters (defines): TMAKIT_ATTN_HEAD_DIM (64 | 128 | 256), TMAKIT_ATTN_BF16 (1 bf16, 0 fp16),
// TMAKIT_ATTN_BLOCK_N (keys per stage), TMAKIT_ATTN_STAGES, TMAKIT_ATTN_CONSUMERS (tma: consumer warpgroups, 2 or 3;
// BLOCK_M = 64 per warpgroup), TMAKIT_ATTN_Q_SLOTS (tma: 1 or 2 Q tiles), TMAKIT_ATTN_WARPS and TMAKIT_ATTN_WARP_ROWS
// (cp.async path: warps of 16 or 32 rows), TMAKIT_ATTN_SHARED_MEM (the host's size of the layout, asserted), and
// the wgmma descriptors of a stage at shared address 0 (tmakit/ops/attention.py: descriptor_defines):
// TMAKIT_ATTN_DESC_Q (Q's D/16 k16 slices for the rows 0-63, then for 64-127), TMAKIT_ATTN_DESC_K (D/16 slices),
// TMAKIT_ATTN_DESC_V (BLOCK_N/16 slices). The defaults are the derivation's for the default configuration.
#include "tmakit/config.cuh"
#include "tmakit/cp_async.cuh"
#include "tmakit/grid_dependency.cuh"
#include "tmakit/mbarrier.cuh"
#include "tmakit/mma_sync.cuh"
#include "tmakit/named_barrier.cuh"
#include "tmakit/pipeline.cuh"
#include "tmakit/swizzle.cuh"
#include "tmakit/tensormap_replace.cuh"
#include "tmakit/tma.cuh"
#include "tmakit/types.cuh"
#include "tmakit/warp.cuh"
#include "tmakit/wgmma.cuh"

#ifndef TMAKIT_ATTN_HEAD_DIM
#define TMAKIT_ATTN_HEAD_DIM 128
#endif
#ifndef TMAKIT_ATTN_BF16
#define TMAKIT_ATTN_BF16 1
#endif
#ifndef TMAKIT_ATTN_BLOCK_N
#define TMAKIT_ATTN_BLOCK_N 128
#endif
#ifndef TMAKIT_ATTN_STAGES
#define TMAKIT_ATTN_STAGES 2
#endif
#ifndef TMAKIT_ATTN_WARPS
#define TMAKIT_ATTN_WARPS 8
#endif
#ifndef TMAKIT_ATTN_WARP_ROWS
#define TMAKIT_ATTN_WARP_ROWS 16
#endif
#ifndef TMAKIT_ATTN_CONSUMERS
#define TMAKIT_ATTN_CONSUMERS 2  // tma: consumer warpgroups of 64 query rows (2 or 3; 3 pays at D = 64)
#endif
#ifndef TMAKIT_ATTN_VARLEN
#define TMAKIT_ATTN_VARLEN 0  // 1: packed sequences of different lengths (tma; tmakit/ops/attention_varlen.py)
#endif
#ifndef TMAKIT_ATTN_PAGED
#define TMAKIT_ATTN_PAGED 0  // 1: K and V from a paged cache through a block table (tma; tmakit/ops/attention_paged.py)
#endif
#ifndef TMAKIT_ATTN_DESC_Q
#define TMAKIT_ATTN_DESC_Q                                                                                   \
  0x4000004000010000ull, 0x4000004000010002ull, 0x4000004000010004ull, 0x4000004000010006ull,               \
      0x4000004000010400ull, 0x4000004000010402ull, 0x4000004000010404ull, 0x4000004000010406ull,           \
      0x4000004000010200ull, 0x4000004000010202ull, 0x4000004000010204ull, 0x4000004000010206ull,           \
      0x4000004000010600ull, 0x4000004000010602ull, 0x4000004000010604ull, 0x4000004000010606ull
#endif
#ifndef TMAKIT_ATTN_DESC_K
#define TMAKIT_ATTN_DESC_K                                                                                   \
  0x4000004000010000ull, 0x4000004000010002ull, 0x4000004000010004ull, 0x4000004000010006ull,               \
      0x4000004000010400ull, 0x4000004000010402ull, 0x4000004000010404ull, 0x4000004000010406ull
#endif
#ifndef TMAKIT_ATTN_DESC_V
#define TMAKIT_ATTN_DESC_V                                                                                   \
  0x4000004004000000ull, 0x4000004004000080ull, 0x4000004004000100ull, 0x4000004004000180ull,               \
      0x4000004004000200ull, 0x4000004004000280ull, 0x4000004004000300ull, 0x4000004004000380ull
#endif

namespace attn {
using namespace tmakit;

constexpr int kD = TMAKIT_ATTN_HEAD_DIM;
constexpr bool kBf16 = TMAKIT_ATTN_BF16 != 0;
constexpr int kBlockN = TMAKIT_ATTN_BLOCK_N;
constexpr int kStages = TMAKIT_ATTN_STAGES;
constexpr int kSlabCols = 64;              // columns per 128-byte swizzled slab
constexpr uint32_t kRowBytes = 128;        // bytes per slab row
static_assert(kD == 64 || kD == 128 || kD == 256, "head dim 64, 128 or 256");
static_assert(kBlockN % 16 == 0 && kBlockN >= 16 && kBlockN <= 256, "BLOCK_N: a multiple of 16 up to 256");
static_assert(kStages >= 2, "the K/V ring has at least two stages");
constexpr int kConsumers = TMAKIT_ATTN_CONSUMERS;          // tma: consumer warpgroups of 64 query rows
static_assert(kConsumers == 2 || kConsumers == 3, "2 or 3 consumer warpgroups");
constexpr int kTmaThreads = 128 * (1 + kConsumers);       // producer warpgroup + the consumer warpgroups
constexpr int kCpAsyncThreads = 32 * TMAKIT_ATTN_WARPS;   // warps of TMAKIT_ATTN_WARP_ROWS query rows

constexpr float kLn2 = 0.6931471805599453f;
#define TMAKIT_ATTN_NEG_INF __int_as_float(0xff800000)
__device__ __forceinline__ float neg_inf() { return TMAKIT_ATTN_NEG_INF; }

__device__ __forceinline__ float exp2_approx(float x) {  // ex2.approx.ftz.f32 (PTX ISA "ex2"): exp2(-inf) = 0
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// A paged cache: sequence j's keys, seqlens_k[j] clamped to [0, the table's capacity] (unchecked on the host: the
// maps kernel and the attention kernel clamp alike).
__device__ __forceinline__ int paged_keys(const int* seqlens_k, int j, int capacity) {
  return min(max(seqlens_k[j], 0), capacity);
}

// Keys this query block needs: all of them, or (causal, top-left) those up to its last row.
__device__ __forceinline__ int key_blocks(int m0, int block_m, int sk, int causal) {
  const int keys = causal ? min(sk, m0 + block_m) : sk;
  return keys <= 0 ? 0 : (keys + kBlockN - 1) / kBlockN;
}

// The online-softmax state of the two rows a thread holds in an m16 accumulator fragment (rows g and g + 8 of
// its warp's 16; PTX ISA "Matrix Fragments for mma.m16n8k16" and wgmma's m64nNk16 accumulator, which is the
// same per warp): running max (log2-scaled) and the thread's partial row sums (quad-reduced at the end).
struct RowState {
  float m[2];
  float l[2];
};

// One step of the online softmax over a block of scores s[NT][4] (NT n8 tiles; element [n][2i + j] is row
// g + 8i, column 8n + 2t + j). Masks columns >= kv_len and, causal, columns > row (absolute indices from
// row0 / col0), updates the running max and sum, leaves p = exp2(s * scale_log2 - m) in s and the factor the
// output accumulator must be multiplied by in alpha (rescale_rows; the caller picks the moment).
template <int NT>
__device__ __forceinline__ void online_softmax(float (&s)[NT][4], RowState& st, float (&alpha)[2], int lane, int row0,
                                               int col0, int kv_len, bool mask, int causal, float scale_log2) {
  const int g = lane >> 2, t = lane & 3;
  if (mask) {
#pragma unroll
    for (int n = 0; n < NT; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = col0 + 8 * n + 2 * t + (e & 1);
        const int row = row0 + g + 8 * (e >> 1);
        if (col >= kv_len || (causal && col > row)) s[n][e] = neg_inf();
      }
    }
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float mx = st.m[i];
#pragma unroll
    for (int n = 0; n < NT; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * i], s[n][2 * i + 1]) * scale_log2);
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_use = mx == neg_inf() ? 0.f : mx;  // a row with nothing seen yet: exp2(-inf - 0) = 0, not NaN
    alpha[i] = exp2_approx(st.m[i] - m_use);
    st.m[i] = mx;
    float sum = 0.f;
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      s[n][2 * i] = exp2_approx(fmaf(s[n][2 * i], scale_log2, -m_use));
      s[n][2 * i + 1] = exp2_approx(fmaf(s[n][2 * i + 1], scale_log2, -m_use));
      sum += s[n][2 * i] + s[n][2 * i + 1];
    }
    st.l[i] = st.l[i] * alpha[i] + sum;
  }
}

// O *= alpha per row (the correction of the running max), on the accumulator fragment.
template <int OT>
__device__ __forceinline__ void rescale_rows(float (&o)[OT][4], const float (&alpha)[2]) {
#pragma unroll
  for (int n = 0; n < OT; ++n) {
    o[n][0] *= alpha[0];
    o[n][1] *= alpha[0];
    o[n][2] *= alpha[1];
    o[n][3] *= alpha[1];
  }
}

// Final normalisation: quad-reduce the row sums, O /= l (0 for a row that saw no key), lse = ln(sum exp).
template <int OT>
__device__ __forceinline__ void finish_rows(float (&o)[OT][4], RowState& st, float (&lse)[2]) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float l = st.l[i];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const float inv = l > 0.f ? 1.f / l : 0.f;
    lse[i] = l > 0.f ? (st.m[i] + __log2f(l)) * kLn2 : neg_inf();
#pragma unroll
    for (int n = 0; n < OT; ++n) {
      o[n][2 * i] *= inv;
      o[n][2 * i + 1] *= inv;
    }
  }
}

// Byte offset of element (row, col) in a tile image of `rows` rows (slabs of 64 columns, 128B swizzle).
__device__ __forceinline__ uint32_t tile_offset(int rows, int row, int col) {
  return static_cast<uint32_t>(col / kSlabCols) * rows * kRowBytes +
         swizzle_offset(static_cast<uint32_t>(row) * kRowBytes + (col % kSlabCols) * 2u, kSwizzle128B);
}

}  // namespace attn

#if TMAKIT_USE_TMA
// =============================================================================================================
// sm_90a: TMA rings + wgmma, producer/consumer warp specialization.
namespace attn {
constexpr bool kVarlen = TMAKIT_ATTN_VARLEN != 0;
constexpr bool kPaged = TMAKIT_ATTN_PAGED != 0;
static_assert(!(kVarlen && kPaged), "one of TMAKIT_ATTN_VARLEN and TMAKIT_ATTN_PAGED");

constexpr WgmmaType kType = kBf16 ? WgmmaType::kBf16 : WgmmaType::kF16;
constexpr int kSlabs = kD / kSlabCols;           // slabs per tile row
constexpr int kBlockM = 64 * kConsumers;          // the consumer warpgroups' 64 rows each
constexpr uint32_t kQBytes = kBlockM * kD * 2;    // also the O staging buffer
constexpr uint32_t kKVBytes = kBlockN * kD * 2;   // one K (or V) stage
constexpr int kProducerRegs = 24;
// The register file shared out at run time (setmaxnreg): 24 for the producer, the rest to the consumers
// (128 x 24 + 256 x 240 and 128 x 24 + 384 x 160 of the 65536).
constexpr int kConsumerRegs = kConsumers == 2 ? 240 : 160;
typedef Pipeline<kStages, TmaProducer, 128> Ring;  // consumers release per warpgroup

// O is staged for its TMA stores in a buffer of its own where it fits (D <= 128), so that the next work tile's Q
// loads while this one's O is stored; at D = 256 it is staged in the Q tile's bytes.
constexpr bool kOwnOBuffer = kD <= 128;
// Q slots (TMAKIT_ATTN_Q_SLOTS, the host's AttentionConfig.q_slots): with two, the producer loads the next work
// tile's Q (and, not waiting for this tile's Q to be released, its first K and V blocks) while this tile is
// computed, so a tile's first S does not wait for loads at the tile boundary (short sequences have few key blocks
// a tile to hide them). One where O is staged in the Q tile (D = 256), where two do not fit, or where the host
// asks for one (each CTA takes one work tile). Without the define: two where they fit.
#ifdef TMAKIT_ATTN_Q_SLOTS
constexpr int kQSlots = TMAKIT_ATTN_Q_SLOTS;
#else
constexpr int kQSlots = kOwnOBuffer && 3u * kQBytes + 2u * kStages * kKVBytes + 2048u <= 227u * 1024u ? 2 : 1;
#endif
static_assert(kQSlots == 1 || kQSlots == 2, "one or two Q slots");

struct SharedBarriers {
  Mbarrier q_full[kQSlots];   // the Q tile of a slot's work tile has landed
  Mbarrier q_empty[kQSlots];  // every consumer is done with it: the slot may take another tile's Q
  int tile[kQSlots];          // the work tile q_full's phase brings (-1: none left), written before the producer arrives
  Ring k_ring;  // K stages: released once S = Q K^T has read them
  Ring v_ring;  // V stages: released once O += P V has read them
};

static_assert(kOwnOBuffer || kQSlots == 1, "O staged in the Q tile: one Q slot");
// Dynamic shared memory: [Q slots | K stages | V stages | O (kOwnOBuffer) | barriers], 1024-byte aligned tiles.
constexpr uint32_t kSmemTiles = kQSlots * kQBytes + 2u * kStages * kKVBytes + (kOwnOBuffer ? kQBytes : 0u);
constexpr uint32_t kSmemBytes = kSmemTiles + sizeof(SharedBarriers) + 1024;
static_assert(kSmemBytes <= 227u * 1024u, "the tiles exceed a block's shared memory");
// The host's size of this layout (AttentionConfig.shared_mem), checked in the engine its defines are for: tma
// configs pass TMAKIT_ATTN_Q_SLOTS, cp.async ones TMAKIT_ATTN_WARP_ROWS (a multi-architecture nvcc compile builds
// the other engine's layout in its other passes).
#if defined(TMAKIT_ATTN_SHARED_MEM) && defined(TMAKIT_ATTN_Q_SLOTS)
static_assert(kSmemBytes == TMAKIT_ATTN_SHARED_MEM, "AttentionConfig.shared_mem differs from this layout");
#endif

// The wgmma descriptors of a stage at shared address 0 (tmakit.wgmma_descriptors from the tensor maps): Q as A
// (K-major; slice kk of consumer 0's rows, items kD/16 .. of consumer 1's), K as B (K-major), V as B (MN-major:
// stored [keys, D], a k16 slice is 16 keys).
TMAKIT_HD constexpr uint64_t desc_q(int kk) { return list_item(kk, TMAKIT_ATTN_DESC_Q); }
TMAKIT_HD constexpr uint64_t desc_k(int kk) { return list_item(kk, TMAKIT_ATTN_DESC_K); }
TMAKIT_HD constexpr uint64_t desc_v(int kk) { return list_item(kk, TMAKIT_ATTN_DESC_V); }
constexpr uint32_t kQConsumerBytes = static_cast<uint32_t>(desc_q(kD / 16) - desc_q(0)) * 16u;
// The defines must describe this kernel's tiles (a compile with other tile defines and the built-in descriptor
// defaults stops here): slabs of 64 columns, Q's BLOCK_M rows and K's and V's BLOCK_N rows of 128 bytes, 128B
// swizzle; a k16 slice 32 bytes along a K-major row (the next slab every 4) or 16 keys of V; V's slabs LBO apart.
TMAKIT_HD constexpr bool descriptors_match_tiles() {
  if (list_size(TMAKIT_ATTN_DESC_Q) != 2 * kD / 16 || list_size(TMAKIT_ATTN_DESC_K) != kD / 16 ||
      list_size(TMAKIT_ATTN_DESC_V) != kBlockN / 16 || kQConsumerBytes != 64 * kRowBytes)
    return false;
  for (int kk = 0; kk < kD / 16; ++kk) {
    const uint64_t q0 = desc_q(kk), q1 = desc_q(kD / 16 + kk), k = desc_k(kk);
    if (wgmma_desc_start(q0) != (kk / 4) * kBlockM * kRowBytes + (kk % 4) * 32u || q1 - q0 != desc_q(kD / 16) - desc_q(0)) return false;
    if (wgmma_desc_start(k) != (kk / 4) * kBlockN * kRowBytes + (kk % 4) * 32u) return false;
    if (wgmma_desc_sbo(q0) != 1024 || wgmma_desc_sbo(k) != 1024) return false;
    if (wgmma_desc_swizzle(q0) != kWgmmaSwizzle128B || wgmma_desc_swizzle(k) != kWgmmaSwizzle128B) return false;
  }
  for (int kk = 0; kk < kBlockN / 16; ++kk) {
    const uint64_t v = desc_v(kk);
    if (wgmma_desc_start(v) != 16u * kRowBytes * kk || wgmma_desc_lbo(v) != kBlockN * kRowBytes) return false;
    if (wgmma_desc_sbo(v) != 1024 || wgmma_desc_swizzle(v) != kWgmmaSwizzle128B) return false;
  }
  return true;
}
static_assert(descriptors_match_tiles(), "TMAKIT_ATTN_DESC_Q/K/V do not describe this build's tiles: pass "
                                         "tmakit.ops.attention.descriptor_defines(config)");

// TMA coordinates of the slab `slab` of a tile starting at sequence row `s0` (maps are 4-D (B, H, S, D) in
// numpy order whatever the memory layout; driver order is innermost first).
__device__ __forceinline__ Coords tile_coords(int slab, int s0, int head, int batch) {
  Coords c;
  c.c[0] = slab * kSlabCols;
  c.c[1] = s0;
  c.c[2] = head;
  c.c[3] = batch;
  c.c[4] = 0;
  return c;
}

}  // namespace attn
#endif  // TMAKIT_USE_TMA

extern "C" __global__ void __launch_bounds__(attn::kTmaThreads, 1)
tmakit_attention_fwd_tma(const __grid_constant__ tmakit::TensorMapDesc q_map,
                         const __grid_constant__ tmakit::TensorMapDesc k_map,
                         const __grid_constant__ tmakit::TensorMapDesc v_map,
                         const __grid_constant__ tmakit::TensorMapDesc o_map, float* __restrict__ lse_out, int heads,
                         int sq, int sk, float scale_log2, int causal, int kv_group, const int* __restrict__ cu_q,
                         const int* __restrict__ cu_k, const tmakit::TensorMapDesc* seq_maps,
                         const int* __restrict__ block_table, int page_size, int max_pages, int num_pages,
                         int m_blocks, int batches, int* tile_counter, int kv_splits, float* __restrict__ part_o,
                         float* __restrict__ part_lse) {
#if TMAKIT_USE_TMA
  using namespace tmakit;
  using namespace attn;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = align_shared(smem_raw, 1024);
  uint8_t* q_tile = smem;
  uint8_t* k_tiles = smem + kQSlots * kQBytes;
  uint8_t* v_tiles = k_tiles + kStages * kKVBytes;
  uint8_t* o_tile = kOwnOBuffer ? v_tiles + kStages * kKVBytes : q_tile;
  SharedBarriers& bars = *reinterpret_cast<SharedBarriers*>(smem + kSmemTiles);

  // Persistent: the grid (at most one CTA per SM) walks the work tiles (m_block, head, batch), m_block fastest
  // (the tiles of one head run side by side and share its K and V in L2), heaviest first under the causal mask.
  // Each CTA's producer claims the next unclaimed tile from tile_counter[0] (an atomic add: a CTA that finishes
  // early takes more, as the hardware's block scheduler would) and hands it to the consumers with the Q tile;
  // it loads the next tile's Q and K/V while the consumers finish this one's softmax, P V and O stores. The last
  // CTA to run out of tiles (tile_counter[1] counts them) sets both counters back to 0 for the next launch.
  const int tiles = m_blocks * heads * batches * kv_splits;
  const int warpgroup = threadIdx.x / 128, tid = threadIdx.x % 128;
  const int lane = threadIdx.x % 32, warp_in_group = tid / 32;

  // One work tile: its coordinates, and, for variable lengths or a paged cache, its sequence's place and length.
  struct Tile {
    int m0, head, batch, kv_head, q_row0, k_row0, coord_batch, sq, sk, n_pages, n_blocks, j0, split;
    int64_t lse_base;
    const TensorMapDesc *qm, *km, *vm, *om;
  };
  auto tile_at = [&](int t) -> Tile {
    Tile w;
    w.split = t % kv_splits;  // the splits of one tile side by side
    t /= kv_splits;
    const int m_idx = t % m_blocks, hb = t / m_blocks;
    w.m0 = (causal ? m_blocks - 1 - m_idx : m_idx) * kBlockM;
    w.head = hb % heads, w.batch = hb / heads;
    // A paged cache: the sequences in the maps kernel's order, longest first (after the maps).
    if constexpr (kPaged) w.batch = reinterpret_cast<const int*>(seq_maps + 2 * batches)[w.batch];
    w.kv_head = w.head / kv_group;  // grouped-query heads: kv_group query heads read one K/V head
    w.q_row0 = 0, w.k_row0 = 0, w.coord_batch = w.batch, w.sq = sq, w.sk = sk, w.n_pages = 0;
    w.lse_base = (static_cast<int64_t>(w.batch) * heads + w.head) * sq;
    w.qm = &q_map, w.km = &k_map, w.vm = &v_map, w.om = &o_map;
    // Variable lengths (TMAKIT_ATTN_VARLEN): sequence `batch` is rows cu_q[batch] .. cu_q[batch + 1] of the packed
    // q (sq: all of q's rows) and cu_k's of k and v; its maps (seq_maps[4 batch ..], built by
    // tmakit_attention_varlen_maps) end at its last row, so TMA fills past it. Rows and columns below are the
    // sequence's own; q_row0 / k_row0 place them in the packed tensors.
    if constexpr (kVarlen) {
      // the offsets are unchecked: clamped to the packed rows (sq, sk hold the totals), as the maps kernel does
      w.q_row0 = min(max(cu_q[w.batch], 0), sq), w.k_row0 = min(max(cu_k[w.batch], 0), sk), w.coord_batch = 0;
      w.lse_base = static_cast<int64_t>(w.head) * sq + w.q_row0;  // lse is (H, total q rows)
      w.sq = min(max(cu_q[w.batch + 1], w.q_row0), sq) - w.q_row0;
      w.sk = min(max(cu_k[w.batch + 1], w.k_row0), sk) - w.k_row0;
      w.qm = seq_maps + 4 * w.batch, w.km = w.qm + 1, w.vm = w.qm + 2, w.om = w.qm + 3;
    }
    // Paged K/V (TMAKIT_ATTN_PAGED): k_map / v_map describe the cache as (pages, H_kv, page_size, D); key block j
    // is kBlockN / page_size pages, each its own box at the page id block_table[batch][page]. Sequence `batch`
    // has cu_k[batch] keys (clamped to its table); its last page is read through seq_maps[2 batch ..] (k, v),
    // whose rows end at the sequence's last key, and pages past the end at id num_pages (out of bounds): both
    // are filled with zeros, so no stale cache slot reaches P V.
    if constexpr (kPaged) {
      w.sk = paged_keys(cu_k, w.batch, max_pages * page_size);
      w.n_pages = (w.sk + page_size - 1) / page_size;
    }
    // key blocks [j0, n_blocks): the tile's, or its split's share of them (the host splits unmasked tiles only)
    const int blocks = key_blocks(w.m0, kBlockM, w.sk, causal);
    w.j0 = w.split * blocks / kv_splits;
    w.n_blocks = (w.split + 1) * blocks / kv_splits;
    return w;
  };
  // A tile past its sequence's end (variable lengths: the tiles cover the longest) is skipped by the producer,
  // never handed to the consumers.
  auto skipped = [&](const Tile& w) { return kVarlen && w.m0 >= w.sq; };

  if (threadIdx.x == 0) {
    prefetch_tensormap(&q_map);
    prefetch_tensormap(&k_map);
    prefetch_tensormap(&v_map);
    prefetch_tensormap(&o_map);
    for (int i = 0; i < kQSlots; ++i) {
      bars.q_full[i].init(1);
      bars.q_empty[i].init(128 * kConsumers);  // every consumer thread
    }
    bars.k_ring.init(1, kConsumers);  // FULL: the arming thread; EMPTY: the consumer warpgroups
    bars.v_ring.init(1, kConsumers);
  }
  __syncthreads();
  // Launched with pdl=True: the launch and the set-up above overlap the previous kernel in the stream (for variable
  // lengths and paged caches, the kernel that builds their maps and order, which every thread reads through
  // tile_at); nothing in global memory, the tile counters included, is touched before it has completed.
  griddepcontrol_wait();

  if (warpgroup == 0) {
    // ---------------------------------------------------------------- producer
    setmaxnreg_dec<kProducerRegs>();
    if (threadIdx.x < 32 && elect_one_sync()) {
      Ring::State kp = make_producer_start_state<kStages>(), vp = make_producer_start_state<kStages>();
      int done = 0;  // tiles this CTA has loaded: the Q barriers' phases
      // The slot of the next tile (or of the end signal), once the consumers are done with its previous use.
      auto acquire_q_slot = [&]() {
        const int slot = done % kQSlots;
        if (done >= kQSlots) bars.q_empty[slot].wait_parity((done / kQSlots - 1) & 1);
        return slot;
      };
      for (;;) {
        const int t = atomicAdd(tile_counter, 1);
        if (t >= tiles) {
          griddepcontrol_launch_dependents();  // no more loads: a pdl launch after this one may take the free SMs
          const int slot = acquire_q_slot();
          bars.tile[slot] = -1;  // the consumers' last phase: no tile
          bars.q_full[slot].arrive();
          if (atomicAdd(tile_counter + 1, 1) == static_cast<int>(gridDim.x) - 1) {  // every CTA is past its claims
            tile_counter[0] = 0;
            tile_counter[1] = 0;
          }
          break;
        }
        const Tile w = tile_at(t);
        if (skipped(w)) continue;
        // maps written by the previous kernel: acquired by the thread that issues the TMA through them
        if constexpr (kVarlen) {
          fence_proxy_tensormap_acquire(w.qm);
          fence_proxy_tensormap_acquire(w.km);
          fence_proxy_tensormap_acquire(w.vm);
        }
        if constexpr (kPaged) {
          fence_proxy_tensormap_acquire(seq_maps + 2 * w.batch);
          fence_proxy_tensormap_acquire(seq_maps + 2 * w.batch + 1);
        }
        const int slot = acquire_q_slot();  // the slot's previous tile: its S (and O staging) are done
        bars.tile[slot] = t;
        bars.q_full[slot].arrive_expect_tx(kQBytes);  // releases the tile's number with the arrival
        for (int h = 0; h < kSlabs; ++h)
          cp_async_bulk_tensor_g2s<4>(q_tile + slot * kQBytes + h * kBlockM * kRowBytes, w.qm,
                                      tile_coords(h, w.q_row0 + w.m0, w.head, w.coord_batch), bars.q_full[slot]);
        ++done;
        // Paged: the pages of key block j into a K or V stage (`tail`: the sequence's last page's map).
        auto load_pages = [&](uint8_t* stage, const TensorMapDesc* map, const TensorMapDesc* tail, int j,
                              Mbarrier& full) {
          const int per_block = kBlockN / page_size;
          for (int p = 0; p < per_block; ++p) {
            const int page = j * per_block + p;
            int id = page < w.n_pages ? block_table[static_cast<int64_t>(w.batch) * max_pages + page] : num_pages;
            if (id < 0 || id > num_pages) id = num_pages;  // a table entry past the cache: read as zeros
            const TensorMapDesc* m = page == w.n_pages - 1 ? tail : map;
            for (int h = 0; h < kSlabs; ++h)
              cp_async_bulk_tensor_g2s<4>(stage + h * kBlockN * kRowBytes + p * page_size * kRowBytes, m,
                                          tile_coords(h, 0, w.kv_head, id), full);
          }
        };
        for (int j = w.j0; j < w.n_blocks; ++j) {
          bars.k_ring.producer_acquire(kp);
          Mbarrier& k_full = bars.k_ring.producer_expect(kp, kKVBytes);
          if constexpr (kPaged) {
            load_pages(k_tiles + kp.index * kKVBytes, w.km, seq_maps + 2 * w.batch, j, k_full);
          } else {
            for (int h = 0; h < kSlabs; ++h)
              cp_async_bulk_tensor_g2s<4>(k_tiles + kp.index * kKVBytes + h * kBlockN * kRowBytes, w.km,
                                          tile_coords(h, w.k_row0 + j * kBlockN, w.kv_head, w.coord_batch), k_full);
          }
          kp.advance();
          bars.v_ring.producer_acquire(vp);
          Mbarrier& v_full = bars.v_ring.producer_expect(vp, kKVBytes);
          if constexpr (kPaged) {
            load_pages(v_tiles + vp.index * kKVBytes, w.vm, seq_maps + 2 * w.batch + 1, j, v_full);
          } else {
            for (int h = 0; h < kSlabs; ++h)
              cp_async_bulk_tensor_g2s<4>(v_tiles + vp.index * kKVBytes + h * kBlockN * kRowBytes, w.vm,
                                          tile_coords(h, w.k_row0 + j * kBlockN, w.kv_head, w.coord_batch), v_full);
          }
          vp.advance();
        }
      }
    }
  } else {
    // ---------------------------------------------------------------- consumers
    setmaxnreg_inc<kConsumerRegs>();
    const int cw = warpgroup - 1;  // consumer warpgroup: rows cw*64 .. cw*64+63
    constexpr int NT = kBlockN / 8, OT = kD / 8;
    uint32_t q_base = 0;  // this warpgroup's Q rows in the current tile's slot (set per tile)
    constexpr int KT = kBlockN / 16;  // k16 slices of P
    float o[OT][4];
    float s[NT][4];
    uint32_t p[KT][4];
    float alpha[2];
    RowState st;
    // S = Q K^T: kD/16 wgmma SS into s, one commit group (not waited for).
    auto issue_s = [&](uint32_t stage) {
      const uint32_t k_base = shared_addr(k_tiles + stage * kKVBytes);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kD / 16; ++kk) {
        wgmma_mma_async_ss<kBlockN, kType, kType>(reinterpret_cast<float(&)[NT * 4]>(s), wgmma_desc_rebase(desc_q(kk), q_base),
                                                  wgmma_desc_rebase(desc_k(kk), k_base), kk > 0);
      }
      wgmma_commit_group();
    };
    // O += P V: kBlockN/16 wgmma RS (P from registers, V MN-major), one commit group (not waited for).
    auto issue_pv = [&](uint32_t stage) {
      const uint32_t v_base = shared_addr(v_tiles + stage * kKVBytes);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < KT; ++kk) {
        wgmma_mma_async_rs<kD, kType, /*TransB=*/true>(reinterpret_cast<float(&)[OT * 4]>(o), p[kk],
                                                        wgmma_desc_rebase(desc_v(kk), v_base));
      }
      wgmma_commit_group();
    };
    auto pack_p = [&]() {
#pragma unroll
      for (int kk = 0; kk < KT; ++kk) mma_c_to_a_fragment<kBf16>(p[kk], s[2 * kk], s[2 * kk + 1]);
    };
    // This thread is done with the Q tile and the tile number (its warpgroup's last S has completed, or its O
    // stores have read the Q bytes). Every consumer thread arrives, so the producer loads the slot's next tile
    // (the next one, or with two slots the one after) only once each has read this one's number and seen this
    // q_full phase (none can find q_full two phases on).
    int slot = 0;  // the current tile's Q slot
    auto release_q = [&]() { bars.q_empty[slot].arrive(); };
    StorePipeline<1> store(o_tile + cw * 64 * kRowBytes, 0u, NamedBarrier(1 + cw, 128));
    Ring::State kc = make_consumer_start_state<kStages>(), vc = make_consumer_start_state<kStages>();
    for (int done = 0;; ++done) {
      slot = done % kQSlots;
      bars.q_full[slot].wait_parity((done / kQSlots) & 1);
      q_base = shared_addr(q_tile + slot * kQBytes) + cw * kQConsumerBytes;
      const int t = bars.tile[slot];
      if (t < 0) break;
      const Tile w = tile_at(t);
      const int row0 = w.m0 + cw * 64 + warp_in_group * 16;  // this warp's first query row
#pragma unroll
      for (int n = 0; n < OT; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
      st = RowState{{neg_inf(), neg_inf()}, {0.f, 0.f}};
      auto softmax = [&](int j) {
        const int col0 = j * kBlockN;
        const bool mask = col0 + kBlockN > w.sk || (causal && col0 + kBlockN - 1 > row0);
        online_softmax<NT>(s, st, alpha, lane, row0, col0, w.sk, mask, causal, scale_log2);
      };

      // Software-pipelined over the key blocks (FlashAttention-3's intra-warpgroup overlap): block j's S = Q K^T
      // and block j-1's O += P V are issued together, and block j's softmax runs while the tensor cores work
      // through that P V. Groups complete in issue order, so wait_group<1> finds S done and P V maybe not; P (the
      // previous block's, packed) and O are touched again only after wait_group<0>. The consumer warpgroups
      // also overlap each other. After each wait the accumulators it completed are fenced, so no read of them
      // moves above the wait.
      // Under the causal mask this warpgroup's own 64 rows see key blocks [j0, end) only: the blocks after end,
      // which its rows mask whole (the tile's later rows see them), are waited for and released below, not
      // computed; nor are any of a warpgroup whose rows all lie past the queries (the last tile's), whose O is
      // never stored. Its index is broadcast from lane 0 so that ptxas knows `end` is warp-uniform: the loop's
      // counter and bound then stay in uniform registers, as the tile's own numbers do (from threadIdx.x, they
      // took general registers, which spilled 36-64 bytes at D = 64's 160 registers a consumer).
      const int first_row = w.m0 + __shfl_sync(0xffffffffu, cw, 0) * 64;
      const int end = first_row >= w.sq ? w.j0
                      : causal          ? min(w.n_blocks, key_blocks(first_row, 64, w.sk, causal))
                                        : w.n_blocks;
      if (end > w.j0) {
        bars.k_ring.consumer_wait(kc);
        issue_s(kc.index);
        wgmma_wait_group<0>();
        wgmma_fence_operands(s);
        bars.k_ring.consumer_release(kc);  // S has read the K stage: the producer may refill it
        kc.advance();
        softmax(w.j0);  // O is still zero: no rescale
        pack_p();
        for (int j = w.j0 + 1; j < end; ++j) {
          bars.k_ring.consumer_wait(kc);
          issue_s(kc.index);
          bars.v_ring.consumer_wait(vc);
          issue_pv(vc.index);
          wgmma_wait_group<1>();
          wgmma_fence_operands(s);
          bars.k_ring.consumer_release(kc);
          kc.advance();
          softmax(j);
          wgmma_wait_group<0>();
          wgmma_fence_operands(o);
          bars.v_ring.consumer_release(vc);
          vc.advance();
          rescale_rows<OT>(o, alpha);
          pack_p();
        }
        bars.v_ring.consumer_wait(vc);
        issue_pv(vc.index);
        wgmma_wait_group<0>();
        wgmma_fence_operands(o);
        bars.v_ring.consumer_release(vc);
        vc.advance();
      }
      // The blocks this warpgroup masks whole, each released after its FULL phase (an EMPTY arrival for a use not
      // yet loaded would count toward the stage's previous use and free it before the other consumers read it),
      // and only once the whole warpgroup has seen that phase (the warpgroup's named barrier): the release lets
      // the producer run the stage on, and a thread still waiting would find it two phases on.
      for (int j = max(end, w.j0); j < w.n_blocks; ++j) {
        bars.k_ring.consumer_wait(kc);
        bars.v_ring.consumer_wait(vc);
        NamedBarrier(1 + cw, 128).sync();
        bars.k_ring.consumer_release(kc);
        bars.v_ring.consumer_release(vc);
        kc.advance();
        vc.advance();
      }
      if constexpr (kOwnOBuffer) release_q();  // every S of this tile has completed

      float lse[2];
      finish_rows<OT>(o, st, lse);
      const int g = lane >> 2, tq = lane & 3;
      if (kv_splits > 1) {  // this split's O and lse into the workspace, for tmakit_attention_combine
        const int64_t base = static_cast<int64_t>(w.split) * batches * heads * sq + w.lse_base;
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const int r = row0 + g + 8 * i;
          if (r >= w.sq) continue;
          if (tq == 0) part_lse[base + r] = lse[i];
          float* o_row = part_o + (base + r) * kD;
#pragma unroll
          for (int n = 0; n < OT; ++n)
            *reinterpret_cast<float2*>(o_row + 8 * n + 2 * tq) = make_float2(o[n][2 * i], o[n][2 * i + 1]);
        }
        if constexpr (!kOwnOBuffer) release_q();  // the Q tile is not O's staging buffer this time
        continue;
      }
      if (tq == 0) {
        float* lse_row = lse_out + w.lse_base;
        if (row0 + g < w.sq) lse_row[row0 + g] = lse[0];
        if (row0 + g + 8 < w.sq) lse_row[row0 + g + 8] = lse[1];
      }
      // O (this warpgroup's 64 rows) into its staging rows (at D = 256 the Q tile's, which this warpgroup alone
      // read and its last S wgmma has completed), then one TMA store per slab; acquire waits until the previous
      // tile's stores have read the buffer.
      uint8_t* rows = store.acquire();
#pragma unroll
      for (int n = 0; n < OT; ++n) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const int r = warp_in_group * 16 + g + 8 * i, c = 8 * n + 2 * tq;
          *reinterpret_cast<uint32_t*>(rows + tile_offset(kBlockM, r, c)) = pack_f32x2<kBf16>(o[n][2 * i], o[n][2 * i + 1]);
        }
      }
      store.publish();
      if (store.issuer()) {
        if constexpr (kVarlen) fence_proxy_tensormap_acquire(w.om);
        for (int h = 0; h < kSlabs; ++h)
          cp_async_bulk_tensor_s2g<4>(w.om, tile_coords(h, w.q_row0 + w.m0 + cw * 64, w.head, w.coord_batch),
                                      rows + h * kBlockM * kRowBytes);
      }
      store.commit();
      if constexpr (!kOwnOBuffer) {
        store.drain_reads();  // the issuer: the stores have read the Q bytes
        release_q();
      }
    }
    store.drain_reads();
  }
#else
  TMAKIT_NOT_THIS_BUILD();  // this build serves tmakit_attention_fwd_cp_async
#endif
}

// Split keys' second step: for each query row (b, h, r) of the kernel's geometry (`rows` = batches * heads * sq of
// them), lse = ln(sum_s exp(lse_s)) over the kv_splits partial results and O = sum_s exp(lse_s - lse) O_s, stored
// in q's dtype at o + b o_sb + h o_sh + r o_ss (element strides), lse at lse_out[row]. A row no split saw a key of
// gives O = 0 and lse = -inf. One warp per row, D / 32 columns a lane. Launch: 256 threads a block.
extern "C" __global__ void __launch_bounds__(256)
    tmakit_attention_combine(const float* __restrict__ part_o, const float* __restrict__ part_lse, int kv_splits,
                             int rows, int heads, int sq, tmakit::uint16_t* __restrict__ o, long long o_sb,
                             long long o_sh, long long o_ss, float* __restrict__ lse_out) {
  using tmakit::int64_t;
  using tmakit::uint16_t;
  using tmakit::uint32_t;
  constexpr int kPerLane = attn::kD / 32;
  const int lane = threadIdx.x % 32;
  // Launched with pdl=True right after the split launch that writes the partials: wait for it before reading them.
  tmakit::griddepcontrol_launch_dependents();
  tmakit::griddepcontrol_wait();
  for (int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32; row < rows; row += gridDim.x * blockDim.x / 32) {
    float m = attn::neg_inf();
    for (int sp = 0; sp < kv_splits; ++sp) m = fmaxf(m, part_lse[static_cast<int64_t>(sp) * rows + row]);
    float acc[kPerLane];
#pragma unroll
    for (int c = 0; c < kPerLane; ++c) acc[c] = 0.f;
    float sum = 0.f;
    if (m != attn::neg_inf()) {
      for (int sp = 0; sp < kv_splits; ++sp) {
        const int64_t at = static_cast<int64_t>(sp) * rows + row;
        const float wgt = __expf(part_lse[at] - m);  // 0 for a split that saw no key (lse -inf)
        sum += wgt;
        const float* src = part_o + at * attn::kD + lane * kPerLane;
#pragma unroll
        for (int c = 0; c < kPerLane; ++c) acc[c] += wgt * src[c];
      }
    }
    const int r = row % sq, bh = row / sq, h = bh % heads, b = bh / heads;
    uint16_t* dst = o + b * o_sb + h * o_sh + r * o_ss + lane * kPerLane;
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
#pragma unroll
    for (int c = 0; c < kPerLane; c += 2) {
      *reinterpret_cast<uint32_t*>(dst + c) = tmakit::pack_f32x2<attn::kBf16>(acc[c] * inv, acc[c + 1] * inv);
    }
    if (lane == 0) lse_out[row] = sum > 0.f ? m + __logf(sum) : attn::neg_inf();
  }
}

// tmakit_attention_varlen_maps: block b writes sequence b's four maps (q, k, v, o: copies of the packed tensors'
// maps whose sequence dimension ends at the sequence's last row, so the TMA fills past it and clips o's stores)
// to seq_maps[4 b ..], for tmakit_attention_fwd_tma's variable-length launch right after it. The ends are read on
// the device (no host synchronisation) and clamped to [0, the packed rows]. Launch: grid B, one warp; the attention
// launch after it has pdl=True.
extern "C" __global__ void tmakit_attention_varlen_maps(const __grid_constant__ tmakit::TensorMapDesc q_map,
                                                        const __grid_constant__ tmakit::TensorMapDesc k_map,
                                                        const __grid_constant__ tmakit::TensorMapDesc v_map,
                                                        const __grid_constant__ tmakit::TensorMapDesc o_map,
                                                        const int* __restrict__ cu_q, const int* __restrict__ cu_k,
                                                        int rows_q, int rows_k, tmakit::TensorMapDesc* seq_maps) {
#if TMAKIT_USE_TMA
  using namespace tmakit;
  griddepcontrol_launch_dependents();  // the attention launch (pdl) may start: it waits for these maps
  griddepcontrol_wait();  // launched with pdl=True: the previous launch (of this plan, say) still reads the maps
  __shared__ alignas(128) TensorMapDesc edit[4];
  const int b = blockIdx.x, lane = threadIdx.x % 32;
  if (threadIdx.x >= 32) return;  // one warp does it all
  const TensorMapDesc* from[4] = {&q_map, &k_map, &v_map, &o_map};
  for (int i = lane; i < 4 * 16; i += 32) edit[i / 16].opaque[i % 16] = from[i / 16]->opaque[i % 16];
  __syncwarp();
  if (lane < 4) {
    const bool is_k = lane == 1 || lane == 2;
    const int end = is_k ? min(max(cu_k[b + 1], 0), rows_k) : min(max(cu_q[b + 1], 0), rows_q);
    tensormap_replace_global_dim<1>(TensorMapSmem(edit + lane), static_cast<uint32_t>(max(end, 1)));
  }
  __syncwarp();
  for (int i = 0; i < 4; ++i) tensormap_cp_fenceproxy(seq_maps + 4 * b + i, TensorMapSmem(edit + i));
#else
  (void)q_map, (void)k_map, (void)v_map, (void)o_map, (void)cu_q, (void)cu_k, (void)rows_q, (void)rows_k, (void)seq_maps;
  TMAKIT_NOT_THIS_BUILD();
#endif
}

// The paged maps kernel's second output: order[i] is the sequence the attention launch walks i-th, the most keys
// first (more keys than b's, or as many with j < b, counts as ahead of b), so that the persistent grid's last
// claims are the short sequences' and no SM is left with a long one after the others ran dry (longest processing
// time first; docs/PERFORMANCE.md, Paged-KV attention). The whole warp of block b ranks sequence b.
__device__ __forceinline__ void rank_longest_first(int* order, int b, int batches, int lane, const int* seqlens_k,
                                                   int capacity) {
  const int mine = attn::paged_keys(seqlens_k, b, capacity);
  int ahead = 0;
  for (int j = lane; j < batches; j += 32) {
    const int c = attn::paged_keys(seqlens_k, j, capacity);
    ahead += c > mine || (c == mine && j < b);
  }
  for (int o = 16; o > 0; o >>= 1) ahead += __shfl_xor_sync(0xffffffffu, ahead, o);
  if (lane == 0) order[ahead] = b;
}

// tmakit_attention_paged_maps: block b writes the maps of sequence b's last cache page (k, v: copies of the cache
// maps whose rows end at the sequence's last key in that page) to seq_maps[2 b ..], for the paged launch right
// after it, and b's place in the launch's order (rank_longest_first by keys) among the B ints after the 2 B maps.
// The lengths are read on the device and clamped to [0, max_pages * page_size]. Launch: grid B, one warp; the
// attention launch after it has pdl=True.
extern "C" __global__ void tmakit_attention_paged_maps(const __grid_constant__ tmakit::TensorMapDesc k_map,
                                                       const __grid_constant__ tmakit::TensorMapDesc v_map,
                                                       const int* __restrict__ seqlens_k, int page_size, int max_pages,
                                                       tmakit::TensorMapDesc* seq_maps) {
#if TMAKIT_USE_TMA
  using namespace tmakit;
  griddepcontrol_launch_dependents();  // the attention launch (pdl) may start: it waits for these maps and order
  griddepcontrol_wait();  // launched with pdl=True: the previous launch (of this plan, say) still reads the maps
  __shared__ alignas(128) TensorMapDesc edit[2];
  const int b = blockIdx.x, lane = threadIdx.x % 32;
  if (threadIdx.x >= 32) return;  // one warp does it all
  const TensorMapDesc* from[2] = {&k_map, &v_map};
  edit[lane / 16].opaque[lane % 16] = from[lane / 16]->opaque[lane % 16];
  __syncwarp();
  if (lane < 2) {
    const int keys = attn::paged_keys(seqlens_k, b, max_pages * page_size);
    const int tail = keys - (keys > 0 ? (keys - 1) / page_size * page_size : 0);  // keys in the last page
    tensormap_replace_global_dim<1>(TensorMapSmem(edit + lane), static_cast<uint32_t>(max(tail, 1)));
  }
  __syncwarp();
  for (int i = 0; i < 2; ++i) tensormap_cp_fenceproxy(seq_maps + 2 * b + i, TensorMapSmem(edit + i));
  rank_longest_first(reinterpret_cast<int*>(seq_maps + 2 * gridDim.x), b, static_cast<int>(gridDim.x), lane,
                     seqlens_k, max_pages * page_size);
#else
  (void)k_map, (void)v_map, (void)seqlens_k, (void)page_size, (void)max_pages, (void)seq_maps;
  TMAKIT_NOT_THIS_BUILD();
#endif
}

#if !TMAKIT_USE_TMA
// =============================================================================================================
// sm_80..89 (and forced): cp.async ring + ldmatrix + mma.sync.
namespace attn {

constexpr int kWarps = TMAKIT_ATTN_WARPS;
constexpr int kWarpRows = TMAKIT_ATTN_WARP_ROWS;
static_assert(kWarpRows == 16 || kWarpRows == 32, "a warp holds one or two m16 row tiles");
constexpr int kMT = kWarpRows / 16;  // m16 tiles a warp: each B fragment it loads feeds kMT mma
constexpr int kBlockM = kWarpRows * kWarps;
constexpr uint32_t kQBytes = kBlockM * kD * 2;
constexpr uint32_t kKVBytes = kBlockN * kD * 2;
constexpr uint32_t kSmemBytes = kQBytes + 2u * kStages * kKVBytes + 1024;
static_assert(kSmemBytes <= 227u * 1024u, "the tiles exceed a block's shared memory");
#if defined(TMAKIT_ATTN_SHARED_MEM) && !defined(TMAKIT_ATTN_Q_SLOTS)  // a cp.async config (see the tma layout's)
static_assert(kSmemBytes == TMAKIT_ATTN_SHARED_MEM, "AttentionConfig.shared_mem differs from this layout");
#endif
typedef Pipeline<kStages, CpAsyncBlockProducer, 32> Ring;  // warps read; the block barrier releases

// Issue this thread's cp.async chunks of a `Rows`-row tile starting at sequence row s0 (rows past `len` are
// zero-filled: src-size 0), into the same swizzled slab image the TMA box would leave. A thread copies one column
// chunk of every kStep-th row: its source advances by a stride and, where kStep is a multiple of the swizzle's
// 8-row period, its destination by a constant (no swizzle per chunk). Other steps (1-2 warps at D = 256, one at
// D <= 128) swizzle each row and stay a loop: unrolled, their per-row offsets and pointers spill.
template <int Rows>
__device__ __forceinline__ void load_tile(uint8_t* tile, const uint16_t* base, long long row_stride, int s0, int len) {
  constexpr int kChunks = kD / 8;  // 16-byte chunks per row
  static_assert(kCpAsyncThreads % kChunks == 0, "whole rows a pass");
  constexpr int kStep = kCpAsyncThreads / kChunks;
  const int c = threadIdx.x % kChunks, r0 = threadIdx.x / kChunks;
  const uint16_t* src = base + static_cast<long long>(s0 + r0) * row_stride + c * 8;
  const long long step = kStep * row_stride;
#pragma unroll(kStep % 8 == 0 ? (Rows + kStep - 1) / kStep : 1)
  for (int n = 0; n < (Rows + kStep - 1) / kStep; ++n) {
    const int r = r0 + n * kStep;
    if (Rows % kStep != 0 && r >= Rows) break;  // a tile of fewer rows than a pass (16 keys at D = 64, 8 warps)
    const uint32_t dst = kStep % 8 == 0 ? tile_offset(Rows, r0, c * 8) + n * kStep * kRowBytes : tile_offset(Rows, r, c * 8);
    const bool ok = s0 + r < len;
    cp_async_cg_16(tile + dst, ok ? src : base, ok ? 16u : 0u);
    src += step;
  }
}

}  // namespace attn
#endif  // !TMAKIT_USE_TMA

extern "C" __global__ void __launch_bounds__(attn::kCpAsyncThreads)
tmakit_attention_fwd_cp_async(const tmakit::uint16_t* __restrict__ q, const tmakit::uint16_t* __restrict__ k,
                              const tmakit::uint16_t* __restrict__ v, tmakit::uint16_t* __restrict__ o, float* __restrict__ lse_out,
                              long long q_sb, long long q_sh, long long q_ss, long long k_sb, long long k_sh,
                              long long k_ss, long long v_sb, long long v_sh, long long v_ss, long long o_sb,
                              long long o_sh, long long o_ss, int heads, int sq, int sk, float scale_log2,
                              int causal, int kv_group) {
#if !TMAKIT_USE_TMA
  using namespace tmakit;
  using namespace attn;
  extern __shared__ uint8_t smem_raw[];
  __shared__ Ring ring;  // cp.async groups and block barriers: nothing to initialise
  uint8_t* smem = align_shared(smem_raw, 1024);
  uint8_t* q_tile = smem;
  uint8_t* k_tiles = smem + kQBytes;
  uint8_t* v_tiles = k_tiles + kStages * kKVBytes;

  const int m_blocks = gridDim.x;
  const int m_block = causal ? m_blocks - 1 - static_cast<int>(blockIdx.x) : static_cast<int>(blockIdx.x);
  const int m0 = m_block * kBlockM, head = blockIdx.y, batch = blockIdx.z;
  const int n_blocks = key_blocks(m0, kBlockM, sk, causal);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row0 = m0 + warp * kWarpRows;  // the warp's m16 tile mt starts at row0 + 16 mt
  const uint16_t* qb = q + batch * q_sb + head * q_sh;
  const uint16_t* kb = k + batch * k_sb + (head / kv_group) * k_sh;  // grouped-query heads share K/V
  const uint16_t* vb = v + batch * v_sb + (head / kv_group) * v_sh;

  // The Q tile joins the first stage's group; each K/V block is one stage (nothing past the last: the slot still
  // commits its group).
  Ring::State pr = make_producer_start_state<kStages>(), cr = make_consumer_start_state<kStages>();
  auto produce = [&](int j) {
    ring.producer_acquire(pr);
    if (j < n_blocks) {
      load_tile<kBlockN>(k_tiles + pr.index * kKVBytes, kb, k_ss, j * kBlockN, sk);
      load_tile<kBlockN>(v_tiles + pr.index * kKVBytes, vb, v_ss, j * kBlockN, sk);
    }
    ring.producer_commit(pr);
    pr.advance();
  };
  load_tile<kBlockM>(q_tile, qb, q_ss, m0, sq);
  for (int j = 0; j < kStages - 1; ++j) produce(j);

  constexpr int NT = kBlockN / 8, OT = kD / 8;
  float o_acc[kMT][OT][4];
  RowState st[kMT];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    st[mt] = RowState{{neg_inf(), neg_inf()}, {0.f, 0.f}};
#pragma unroll
    for (int n = 0; n < OT; ++n) o_acc[mt][n][0] = o_acc[mt][n][1] = o_acc[mt][n][2] = o_acc[mt][n][3] = 0.f;
  }
  const uint32_t q_base = shared_addr(q_tile);
  // The lanes' ldmatrix offsets of the block at (0, 0) (Q: this warp's rows), moved per block by
  // ldmatrix_x4_swizzle128_offset.
  const uint32_t q_lane = ldmatrix_x4_address(0, lane, warp * kWarpRows, 0, kRowBytes, kSwizzle128B);
  const uint32_t k_lane = ldmatrix_x4_address_b_kmajor(0, lane, 0, 0, kRowBytes, kSwizzle128B);
  const uint32_t v_lane = ldmatrix_x4_trans_address_b_mnmajor(0, lane, 0, 0, kRowBytes, kSwizzle128B);

  for (int j = 0; j < n_blocks; ++j) {
    produce(j + kStages - 1);  // refills the stage released at the end of iteration j - 1
    ring.consumer_wait<kStages - 1>(cr);  // tile j (and Q) landed, for every thread

    const uint32_t k_base = shared_addr(k_tiles + cr.index * kKVBytes);
    const uint32_t v_base = shared_addr(v_tiles + cr.index * kKVBytes);
    float s[kMT][NT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int n = 0; n < NT; ++n) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      const uint32_t slab = kk / 4, col = (kk % 4) * 16;
      uint32_t a[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
        ldmatrix_sync_aligned_m8n8_x4_shared_b16(
            a[mt], q_base + slab * kBlockM * kRowBytes + ldmatrix_x4_swizzle128_offset(q_lane, 16 * mt, col));
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        uint32_t b[4];
        ldmatrix_sync_aligned_m8n8_x4_shared_b16(
            b, k_base + slab * kBlockN * kRowBytes + ldmatrix_x4_swizzle128_offset(k_lane, np * 16, col));
        const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          mma_m16n8k16<kBf16>(s[mt][2 * np], a[mt], b0);
          mma_m16n8k16<kBf16>(s[mt][2 * np + 1], a[mt], b1);
        }
      }
    }

    const int col0 = j * kBlockN;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      const int r0 = row0 + 16 * mt;
      const bool mask = col0 + kBlockN > sk || (causal && col0 + kBlockN - 1 > r0);
      float alpha[2];
      online_softmax<NT>(s[mt], st[mt], alpha, lane, r0, col0, sk, mask, causal, scale_log2);
      rescale_rows<OT>(o_acc[mt], alpha);
    }

#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      uint32_t a[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) mma_c_to_a_fragment<kBf16>(a[mt], s[mt][2 * kk], s[mt][2 * kk + 1]);
#pragma unroll
      for (int dp = 0; dp < kD / 16; ++dp) {
        const uint32_t slab = (dp * 16) / kSlabCols, col = (dp * 16) % kSlabCols;
        uint32_t b[4];
        ldmatrix_sync_aligned_m8n8_x4_trans_shared_b16(
            b, v_base + slab * kBlockN * kRowBytes + ldmatrix_x4_swizzle128_offset(v_lane, kk * 16, col));
        const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          mma_m16n8k16<kBf16>(o_acc[mt][2 * dp], a[mt], b0);
          mma_m16n8k16<kBf16>(o_acc[mt][2 * dp + 1], a[mt], b1);
        }
      }
    }
    ring.consumer_release(cr);  // every warp is done with this stage before the next iteration refills it
    cr.advance();
  }
  cp_async_wait_all();

  const int g = lane >> 2, t = lane & 3;
  float* lse_row = lse_out + (static_cast<long long>(batch) * heads + head) * sq;
  uint16_t* ob = o + batch * o_sb + head * o_sh;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    float lse[2];
    finish_rows<OT>(o_acc[mt], st[mt], lse);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int r = row0 + 16 * mt + g + 8 * i;
      if (r < sq) {
        if (t == 0) lse_row[r] = lse[i];
#pragma unroll
        for (int n = 0; n < OT; ++n)
          *reinterpret_cast<uint32_t*>(ob + static_cast<long long>(r) * o_ss + 8 * n + 2 * t) =
              pack_f32x2<kBf16>(o_acc[mt][n][2 * i], o_acc[mt][n][2 * i + 1]);
      }
    }
  }
#else
  TMAKIT_NOT_THIS_BUILD();  // this build serves tmakit_attention_fwd_tma
#endif
}
