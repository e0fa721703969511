// Warp-level tensor-core wrappers for sm_80+ (the cp.async twin of every wgmma kernel), named after the PTX
// they emit. PTX ISA sections:
//   "Warp-level matrix load instruction: ldmatrix"                       (ldmatrix.sync.aligned.m8n8.x4{.trans})
//   "Warp-level matrix store instruction: stmatrix"                      (stmatrix.sync.aligned.m8n8.x4{.trans}, sm_90)
//   "Warp-level matrix multiply-accumulate instructions: mma"             (mma.sync.aligned.m16n8k16)
//   "Matrix Fragments for mma.m16n8k16 with floating point type"          (which lane holds which element)
//
// Every instruction here is .sync.aligned: ALL 32 lanes of the warp call it, with the same template
// arguments, converged. Fragments are per-lane registers; the helpers below say which (row, col) each
// register of each lane holds, so kernels never re-derive the figures of the ISA.
//
// Shared-memory tiles staged by TMA or by the cp.async twin are 128B/64B/32B-swizzled images (swizzle.cuh,
// the same XOR function as tmakit.layout.swizzle_offset). ldmatrix reads 16 contiguous bytes per row
// address, and a 16-byte chunk stays whole under the swizzle, so a lane's row address is the swizzled
// offset of the chunk's first element: ldmatrix_x4_address() computes it.
#pragma once
#include "tmakit/config.cuh"
#include "tmakit/swizzle.cuh"
#include "tmakit/types.cuh"

namespace tmakit {

// ---------------------------------------------------------------------------------------------------------
// Fragment layouts of mma.m16n8k16 (.bf16/.f16 inputs, .f32 accumulators), PTX ISA "Matrix Fragments for
// mma.m16n8k16 with floating point type". lane = threadIdx % 32, group g = lane / 4, thread-in-group t = lane % 4.
//   A (16x16, row-major), 4 x .b32 registers, each two consecutive-column halves:
//       a[0] = A[g    ][2t .. 2t+1]    a[1] = A[g + 8][2t .. 2t+1]
//       a[2] = A[g    ][2t+8 .. 2t+9]  a[3] = A[g + 8][2t+8 .. 2t+9]
//   B (16x8, "col": element (k, n)), 2 x .b32 registers, each two consecutive-k halves:
//       b[0] = B[2t .. 2t+1][g]        b[1] = B[2t+8 .. 2t+9][g]
//   C/D (16x8, f32), 4 registers:
//       c[0], c[1] = C[g][2t], C[g][2t+1]      c[2], c[3] = C[g + 8][2t], C[g + 8][2t+1]
// The C fragments of two neighbouring n8 tiles (n 0-7 and 8-15), packed to 16 bits in pairs, are exactly
// an A fragment of k16 (mma_c_to_a_fragment): attention's P = softmax(S) never leaves the registers.
struct MmaM16N8K16Layout {
  __device__ __forceinline__ static int group(int lane) { return lane >> 2; }
  __device__ __forceinline__ static int thread_in_group(int lane) { return lane & 3; }
  // Row / first column of A register i (i = 0..3) held by `lane`; the register holds columns col, col + 1.
  __device__ __forceinline__ static int a_row(int lane, int i) { return (lane >> 2) + ((i & 1) << 3); }
  __device__ __forceinline__ static int a_col(int lane, int i) { return ((lane & 3) << 1) + ((i >> 1) << 3); }
  // First k / n of B register i (i = 0..1); the register holds k, k + 1 at column n.
  __device__ __forceinline__ static int b_k(int lane, int i) { return ((lane & 3) << 1) + (i << 3); }
  __device__ __forceinline__ static int b_n(int lane) { return lane >> 2; }
  // Row / column of accumulator element i (i = 0..3).
  __device__ __forceinline__ static int c_row(int lane, int i) { return (lane >> 2) + ((i >> 1) << 3); }
  __device__ __forceinline__ static int c_col(int lane, int i) { return ((lane & 3) << 1) + (i & 1); }
};

// ---------------------------------------------------------------------------------------------------------
// ldmatrix.sync.aligned.m8n8.x4.shared.b16: four 8x8 b16 matrices from shared memory. Lane L supplies the
// address of row (L % 8) of matrix (L / 8) (16 contiguous, 16-byte aligned bytes); afterwards register i of
// lane L holds row L/4, columns 2(L%4), 2(L%4)+1 of matrix i. All 32 lanes call it.
__device__ __forceinline__ void ldmatrix_sync_aligned_m8n8_x4_shared_b16(uint32_t (&r)[4], uint32_t smem_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr)
               : "memory");
}

// ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16: the same rows, each matrix transposed on the way: register
// i of lane L holds elements (row 2(L%4), col L/4) and (row 2(L%4)+1, col L/4) of matrix i. Use it to read a
// B operand stored [k][n] (n contiguous, e.g. V in attention) as the "col" fragment mma wants. All 32 lanes.
__device__ __forceinline__ void ldmatrix_sync_aligned_m8n8_x4_trans_shared_b16(uint32_t (&r)[4], uint32_t smem_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr)
               : "memory");
}

// stmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16 (sm_90; PTX ISA "Warp-level matrix store instruction:
// stmatrix"): four 8x8 b16 matrices to shared memory, ldmatrix's inverse. Register i of lane L holds row L/4, columns
// 2(L%4), 2(L%4)+1 of matrix i (an mma / wgmma accumulator fragment, packed); lane L supplies the address of row
// (L % 8) of matrix (L / 8) as stored, as for ldmatrix (ldmatrix_x4_address gives the A-fragment order). Trans
// (.trans): each matrix stored transposed, register i of lane L into column L/4 of rows 2(L%4), 2(L%4)+1. All 32
// lanes call it.
template <bool Trans = false>
__device__ __forceinline__ void stmatrix_sync_aligned_m8n8_x4_shared_b16(uint32_t smem_addr, const uint32_t (&r)[4]) {
#if TMAKIT_HAS_SM90
  if constexpr (Trans)
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};"
                 ::"r"(smem_addr), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
  else
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};"
                 ::"r"(smem_addr), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
#else
  (void)smem_addr, (void)r;
  TMAKIT_REQUIRES_SM90();
#endif
}

// Byte offset of element (row, col) of a row-major b16 tile image of `row_bytes` bytes per row whose base
// is aligned to swizzle_alignment(mode) (1024 B for 128B), after the TMA swizzle `mode` (SwizzleMode). The
// cp.async twin writes its 16-byte chunks at these offsets, so both engines leave the same bytes.
TMAKIT_HD uint32_t swizzled_tile_offset(uint32_t row, uint32_t col, uint32_t row_bytes, uint32_t mode) {
  return swizzle_offset(row * row_bytes + col * 2u, mode);
}

// Shared address lane `lane` passes to an x4 ldmatrix that reads the 16x16 block at (row0, col0) of a
// swizzled b16 tile (col0 a multiple of 8). Matrix order:
//   matrix 0 = rows 0-7, cols 0-7     matrix 1 = rows 8-15, cols 0-7
//   matrix 2 = rows 0-7, cols 8-15    matrix 3 = rows 8-15, cols 8-15
// which is the A-fragment order a[0..3] of a non-transposed read of a row-major A tile. B operands have their
// own orders: ldmatrix_x4_address_b_kmajor and ldmatrix_x4_trans_address_b_mnmajor.
__device__ __forceinline__ uint32_t ldmatrix_x4_address(uint32_t tile_base, int lane, uint32_t row0, uint32_t col0,
                                                        uint32_t row_bytes, uint32_t mode) {
  const uint32_t m = static_cast<uint32_t>(lane) >> 3;
  const uint32_t row = row0 + (static_cast<uint32_t>(lane) & 7u) + ((m & 1u) << 3);
  const uint32_t col = col0 + ((m >> 1) << 3);
  return tile_base + swizzled_tile_offset(row, col, row_bytes, mode);
}

// Row address for an x4 ldmatrix (non-transposed) of a K-major B tile stored [n][k]: the 16(n) x 16(k) block
// at (n0, k0). Matrix order: (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15), i.e. the
// registers are b[0], b[1] of the n8 tile n0 and b[0], b[1] of the n8 tile n0 + 8.
__device__ __forceinline__ uint32_t ldmatrix_x4_address_b_kmajor(uint32_t tile_base, int lane, uint32_t n0, uint32_t k0,
                                                                 uint32_t row_bytes, uint32_t mode) {
  const uint32_t m = static_cast<uint32_t>(lane) >> 3;
  const uint32_t row = n0 + (static_cast<uint32_t>(lane) & 7u) + ((m >> 1) << 3);
  const uint32_t col = k0 + ((m & 1u) << 3);
  return tile_base + swizzled_tile_offset(row, col, row_bytes, mode);
}

// Row address for an x4 ldmatrix.trans of an MN-major B tile stored [k][n] (n contiguous): the 16(k) x 16(n)
// block at (k0, n0). Matrix order: (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15), i.e.
// after .trans the registers are b[0], b[1] of the n8 tile n0 and b[0], b[1] of the n8 tile n0 + 8.
__device__ __forceinline__ uint32_t ldmatrix_x4_trans_address_b_mnmajor(uint32_t tile_base, int lane, uint32_t k0,
                                                                        uint32_t n0, uint32_t row_bytes,
                                                                        uint32_t mode) {
  const uint32_t m = static_cast<uint32_t>(lane) >> 3;
  const uint32_t row = k0 + (static_cast<uint32_t>(lane) & 7u) + ((m & 1u) << 3);
  const uint32_t col = n0 + ((m >> 1) << 3);
  return tile_base + swizzled_tile_offset(row, col, row_bytes, mode);
}

// The offset of the x4 block at (row0, col0) of a 128B-swizzled tile of 128-byte rows (64 b16 columns a slab),
// from `lane_offset`, the lane's offset of the block at (0, 0) in the same order (any of the three functions
// above, tile_base 0): row0 a multiple of 8, col0 a multiple of 16 below 64. Eight rows are 1024 bytes, one
// period of the swizzle, so rows add; col0 moves by whole pairs of 16-byte chunks, so it flips chunk-index bits
// (5-6) that the lane's own column (0 or 8: bit 4) never carries into, and the swizzle's XOR takes it as is.
// One LOP3 a load where the functions above spend a swizzle each, which a register-bound mainloop recomputes for
// every ldmatrix (docs/PERFORMANCE.md, the sm_80 twins).
__device__ __forceinline__ uint32_t ldmatrix_x4_swizzle128_offset(uint32_t lane_offset, uint32_t row0, uint32_t col0) {
  return (lane_offset ^ (col0 * 2u)) + row0 * 128u;
}

// ---------------------------------------------------------------------------------------------------------
// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: D = A (16x16 bf16) * B (16x8 bf16) + C, f32. All 32
// lanes call it with their fragments (layouts above).
__device__ __forceinline__ void mma_sync_aligned_m16n8k16_row_col_f32_bf16_bf16_f32(float (&d)[4],
                                                                                    const uint32_t (&a)[4],
                                                                                    const uint32_t (&b)[2],
                                                                                    const float (&c)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %11, %12, %13};"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}

// mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32: the same with f16 inputs.
__device__ __forceinline__ void mma_sync_aligned_m16n8k16_row_col_f32_f16_f16_f32(float (&d)[4],
                                                                                  const uint32_t (&a)[4],
                                                                                  const uint32_t (&b)[2],
                                                                                  const float (&c)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %11, %12, %13};"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}

// In-place accumulate, the input type chosen at compile time (IsBf16: bf16, else f16). All 32 lanes.
template <bool IsBf16>
__device__ __forceinline__ void mma_m16n8k16(float (&acc)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  if constexpr (IsBf16) {
    mma_sync_aligned_m16n8k16_row_col_f32_bf16_bf16_f32(acc, a, b, acc);
  } else {
    mma_sync_aligned_m16n8k16_row_col_f32_f16_f16_f32(acc, a, b, acc);
  }
}

// ---------------------------------------------------------------------------------------------------------
// Packing f32 pairs to the 16-bit operand registers (cvt.rn.bf16x2.f32 / cvt.rn.f16x2.f32, PTX ISA "cvt"):
// `lo` goes to the low half (the lower column), as the fragments above expect. Any thread.
template <bool IsBf16>
__device__ __forceinline__ uint32_t pack_f32x2(float lo, float hi) {
  uint32_t r;
  if constexpr (IsBf16) {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  }
  return r;
}

// The C fragments of n8 tiles 2j and 2j+1 (c0 = tile 2j, c1 = tile 2j+1) as the A fragment of k-slice j:
// a[0] = row g cols 2t..  (c0[0..1]), a[1] = row g+8 (c0[2..3]), a[2] = row g cols 8+2t.. (c1[0..1]), a[3] = row
// g+8 (c1[2..3]). The same register mapping holds for wgmma's accumulator -> RS A operand (per warp of the
// warpgroup, 16 rows each). Any thread, on its own registers.
template <bool IsBf16>
__device__ __forceinline__ void mma_c_to_a_fragment(uint32_t (&a)[4], const float (&c0)[4], const float (&c1)[4]) {
  a[0] = pack_f32x2<IsBf16>(c0[0], c0[1]);
  a[1] = pack_f32x2<IsBf16>(c0[2], c0[3]);
  a[2] = pack_f32x2<IsBf16>(c1[0], c1[1]);
  a[3] = pack_f32x2<IsBf16>(c1[2], c1[3]);
}

}  // namespace tmakit
