// Warpgroup matrix multiply-accumulate (sm_90a), named after the PTX it emits. PTX ISA sections:
// "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions" (9.7.15): wgmma.mma_async (9.7.15.5.2),
// wgmma.fence (9.7.15.6.1), wgmma.commit_group (9.7.15.6.2), wgmma.wait_group (9.7.15.6.3), "Matrix Descriptor
// Format" (9.7.15.5.1); "setmaxnreg" (9.7.19.x); "elect.sync".
//
// Who calls what:
//   - wgmma.* are .sync.aligned over a WARPGROUP: all 128 threads of 4 consecutive warps whose first warp index
//     is a multiple of 4 call them together, with the same descriptors and immediates.
//   - setmaxnreg: every thread of the warpgroup; the kernel needs a register cap at entry
//     (__launch_bounds__(threads, 1)) and each warpgroup role in one branch of a single if/else.
//   - elect_one_sync: every thread of a warp; exactly one lane gets true.
//
// Accumulator fragment of m64nNk16 (fp32, N/2 registers per thread): thread t of the warpgroup (warp w = t/32,
// lane l) holds rows 16w + l/4 (+8) and columns 8j + 2(l%4) (+1): d[4j + 0/1] = (row, col 0/1), d[4j + 2/3] =
// (row + 8, col 0/1), j = 0 .. N/8 - 1 (wgmma_d_row / wgmma_d_col below).
//
// The wgmma operand lists (N/2 "+f" registers, up to 128) are written by the TMAKIT_WG_* macros below, one
// macro per register count, and each instruction string by one macro over (N, type, operand source): no
// hand-copied lists.
#pragma once
#include "tmakit/config.cuh"
#include "tmakit/types.cuh"

// "%0" ", %1" ... placeholder lists, by decades (t##0 .. t##9 with t empty for 0-9).
#define TMAKIT_WG_P(n) ", %" #n
#define TMAKIT_WG_DEC(t)                                                                                         \
  TMAKIT_WG_P(t##0) TMAKIT_WG_P(t##1) TMAKIT_WG_P(t##2) TMAKIT_WG_P(t##3) TMAKIT_WG_P(t##4) TMAKIT_WG_P(t##5)  \
  TMAKIT_WG_P(t##6) TMAKIT_WG_P(t##7) TMAKIT_WG_P(t##8) TMAKIT_WG_P(t##9)
#define TMAKIT_WG_FIRST10 "%0" TMAKIT_WG_P(1) TMAKIT_WG_P(2) TMAKIT_WG_P(3) TMAKIT_WG_P(4) TMAKIT_WG_P(5) \
  TMAKIT_WG_P(6) TMAKIT_WG_P(7) TMAKIT_WG_P(8) TMAKIT_WG_P(9)
#define TMAKIT_WG_REGS_32 "{" TMAKIT_WG_FIRST10 TMAKIT_WG_DEC(1) TMAKIT_WG_DEC(2) TMAKIT_WG_P(30) TMAKIT_WG_P(31) "}"
#define TMAKIT_WG_REGS_64                                                                                  \
  "{" TMAKIT_WG_FIRST10 TMAKIT_WG_DEC(1) TMAKIT_WG_DEC(2) TMAKIT_WG_DEC(3) TMAKIT_WG_DEC(4) TMAKIT_WG_DEC(5) \
  TMAKIT_WG_P(60) TMAKIT_WG_P(61) TMAKIT_WG_P(62) TMAKIT_WG_P(63) "}"
#define TMAKIT_WG_REGS_96                                                                                    \
  "{" TMAKIT_WG_FIRST10 TMAKIT_WG_DEC(1) TMAKIT_WG_DEC(2) TMAKIT_WG_DEC(3) TMAKIT_WG_DEC(4) TMAKIT_WG_DEC(5)   \
  TMAKIT_WG_DEC(6) TMAKIT_WG_DEC(7) TMAKIT_WG_DEC(8) TMAKIT_WG_P(90) TMAKIT_WG_P(91) TMAKIT_WG_P(92)          \
  TMAKIT_WG_P(93) TMAKIT_WG_P(94) TMAKIT_WG_P(95) "}"
#define TMAKIT_WG_REGS_128                                                                                   \
  "{" TMAKIT_WG_FIRST10 TMAKIT_WG_DEC(1) TMAKIT_WG_DEC(2) TMAKIT_WG_DEC(3) TMAKIT_WG_DEC(4) TMAKIT_WG_DEC(5)   \
  TMAKIT_WG_DEC(6) TMAKIT_WG_DEC(7) TMAKIT_WG_DEC(8) TMAKIT_WG_DEC(9) TMAKIT_WG_DEC(10) TMAKIT_WG_DEC(11)    \
  TMAKIT_WG_P(120) TMAKIT_WG_P(121) TMAKIT_WG_P(122) TMAKIT_WG_P(123) TMAKIT_WG_P(124) TMAKIT_WG_P(125)      \
  TMAKIT_WG_P(126) TMAKIT_WG_P(127) "}"

// "+f"(d[i]) ... operand lists.
#define TMAKIT_WG_F4(i) "+f"(d[(i)]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3])
#define TMAKIT_WG_F16(i) TMAKIT_WG_F4(i), TMAKIT_WG_F4((i) + 4), TMAKIT_WG_F4((i) + 8), TMAKIT_WG_F4((i) + 12)
#define TMAKIT_WG_F32(i) TMAKIT_WG_F16(i), TMAKIT_WG_F16((i) + 16)
#define TMAKIT_WG_F64(i) TMAKIT_WG_F32(i), TMAKIT_WG_F32((i) + 32)
#define TMAKIT_WG_F_32 TMAKIT_WG_F32(0)
#define TMAKIT_WG_F_64 TMAKIT_WG_F64(0)
#define TMAKIT_WG_F_96 TMAKIT_WG_F64(0), TMAKIT_WG_F32(64)
#define TMAKIT_WG_F_128 TMAKIT_WG_F64(0), TMAKIT_WG_F64(64)

// Operand numbers after the R = N/2 accumulators: SS takes desc-a %R, desc-b %R+1, scale-d %R+2, then the
// immediates trans-a %R+3, trans-b %R+4. RS takes a0..a3 %R..%R+3, desc-b %R+4, scale-d %R+5, trans-b %R+6.
#define TMAKIT_WG_SS_TAIL_32 ", %32, %33, p, 1, 1, %35, %36;"
#define TMAKIT_WG_SS_TAIL_64 ", %64, %65, p, 1, 1, %67, %68;"
#define TMAKIT_WG_SS_TAIL_96 ", %96, %97, p, 1, 1, %99, %100;"
#define TMAKIT_WG_SS_TAIL_128 ", %128, %129, p, 1, 1, %131, %132;"
#define TMAKIT_WG_SS_PRED_32 "setp.ne.b32 p, %34, 0;\n"
#define TMAKIT_WG_SS_PRED_64 "setp.ne.b32 p, %66, 0;\n"
#define TMAKIT_WG_SS_PRED_96 "setp.ne.b32 p, %98, 0;\n"
#define TMAKIT_WG_SS_PRED_128 "setp.ne.b32 p, %130, 0;\n"
#define TMAKIT_WG_RS_TAIL_32 ", {%32, %33, %34, %35}, %36, p, 1, 1, %38;"
#define TMAKIT_WG_RS_TAIL_64 ", {%64, %65, %66, %67}, %68, p, 1, 1, %70;"
#define TMAKIT_WG_RS_TAIL_96 ", {%96, %97, %98, %99}, %100, p, 1, 1, %102;"
#define TMAKIT_WG_RS_TAIL_128 ", {%128, %129, %130, %131}, %132, p, 1, 1, %134;"
#define TMAKIT_WG_RS_PRED_32 "setp.ne.b32 p, %37, 0;\n"
#define TMAKIT_WG_RS_PRED_64 "setp.ne.b32 p, %69, 0;\n"
#define TMAKIT_WG_RS_PRED_96 "setp.ne.b32 p, %101, 0;\n"
#define TMAKIT_WG_RS_PRED_128 "setp.ne.b32 p, %133, 0;\n"

// One wgmma with A and B from shared memory; R = N/2, TYPE = bf16 | f16.
#define TMAKIT_WGMMA_SS(N, R, TYPE)                                                                            \
  asm volatile("{\n.reg .pred p;\n" TMAKIT_WG_SS_PRED_##R                                                     \
               "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." #TYPE "." #TYPE " " TMAKIT_WG_REGS_##R        \
               TMAKIT_WG_SS_TAIL_##R "\n}"                                                                     \
               : TMAKIT_WG_F_##R                                                                               \
               : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(scale_d)), "n"(int(TransA)), "n"(int(TransB)) \
               : "memory")
// One wgmma with A (64 x 16) from registers and B from shared memory.
#define TMAKIT_WGMMA_RS(N, R, TYPE)                                                                          \
  asm volatile("{\n.reg .pred p;\n" TMAKIT_WG_RS_PRED_##R                                                   \
               "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." #TYPE "." #TYPE " " TMAKIT_WG_REGS_##R      \
               TMAKIT_WG_RS_TAIL_##R "\n}"                                                                   \
               : TMAKIT_WG_F_##R                                                                             \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(static_cast<int>(scale_d)),   \
                 "n"(int(TransB))                                                                            \
               : "memory")

namespace tmakit {

// ---------------------------------------------------------------------------------------------------------
// The shared-memory matrix descriptor (PTX ISA 9.7.15.5.1 "Matrix Descriptor Format"), 64 bits:
//   bits  0-13  matrix start address >> 4 (18-bit shared address, 16-byte units)
//   bits 16-29  leading dimension byte offset >> 4 (LBO)
//   bits 32-45  stride dimension byte offset >> 4 (SBO)
//   bits 49-51  matrix base offset (the start's position within the swizzle pattern when the pattern does not
//               start on its repeat boundary; 0 for stages aligned to 1024/512/256 bytes)
//   bits 62-63  swizzle mode: 0 none (interleave), 1 = 128B, 2 = 64B, 3 = 32B
// Host twin with the meaning of LBO and SBO per layout: tmakit/layout/wgmma.py (wgmma_descriptors).
enum WgmmaSwizzle : uint32_t { kWgmmaSwizzleNone = 0, kWgmmaSwizzle128B = 1, kWgmmaSwizzle64B = 2, kWgmmaSwizzle32B = 3 };

TMAKIT_HD uint64_t wgmma_make_desc(uint32_t smem_addr, uint32_t lbo_bytes, uint32_t sbo_bytes, uint32_t swizzle,
                                   uint32_t base_offset = 0) {
  return static_cast<uint64_t>((smem_addr & 0x3FFFFu) >> 4) |
         (static_cast<uint64_t>((lbo_bytes & 0x3FFFFu) >> 4) << 16) |
         (static_cast<uint64_t>((sbo_bytes & 0x3FFFFu) >> 4) << 32) |
         (static_cast<uint64_t>(base_offset & 7u) << 49) | (static_cast<uint64_t>(swizzle & 3u) << 62);
}

// The descriptor of the same layout `bytes` further on (a k-slice advance): only the start address moves.
TMAKIT_HD uint64_t wgmma_desc_advance(uint64_t desc, uint32_t bytes) { return desc + ((bytes & 0x3FFFFu) >> 4); }

// TMA swizzle mode (swizzle.cuh: 0 none, 1 32B, 2 64B, 3 128B) -> the descriptor's swizzle field.
TMAKIT_HD uint32_t wgmma_swizzle_from_tma(uint32_t tma_mode) {
  return tma_mode == 3u ? kWgmmaSwizzle128B : tma_mode == 2u ? kWgmmaSwizzle64B : tma_mode == 1u ? kWgmmaSwizzle32B
                                                                                                 : kWgmmaSwizzleNone;
}

// Accumulator fragment coordinates (see the header comment): register i of thread t (0..127).
TMAKIT_HD int wgmma_d_row(int t, int i) { return 16 * (t >> 5) + ((t & 31) >> 2) + 8 * ((i >> 1) & 1); }
TMAKIT_HD int wgmma_d_col(int t, int i) { return 8 * (i >> 2) + 2 * (t & 3) + (i & 1); }

#if TMAKIT_HAS_SM90
// wgmma.fence.sync.aligned: earlier register writes (accumulators, A fragments) are ordered before the next
// wgmma reads them. The warpgroup, before the first wgmma of a batch and after touching the accumulators.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }

// wgmma.commit_group.sync.aligned: close the batch of wgmma issued since the last commit. The warpgroup.
__device__ __forceinline__ void wgmma_commit_group() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }

// wgmma.wait_group.sync.aligned N: wait until at most N committed batches are pending; then their
// accumulators may be read and their shared-memory operands overwritten. The warpgroup.
template <int N>
__device__ __forceinline__ void wgmma_wait_group() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// Keeps the compiler from moving accumulator reads/writes across an asynchronous wgmma region.
template <int R>
__device__ __forceinline__ void wgmma_fence_operands(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// wgmma.mma_async.sync.aligned.m64nNk16.f32.{bf16,f16}.{bf16,f16}, A and B from shared memory:
// d (64 x N fp32) = A (64 x 16) * B (16 x N) + (scale_d ? d : 0). TransA / TransB: 0 = K-major operand,
// 1 = MN-major (imm-trans-a / imm-trans-b). N in {64, 128, 192, 256}. The warpgroup.
template <int N, bool IsBf16, bool TransA = false, bool TransB = false>
__device__ __forceinline__ void wgmma_m64nNk16_ss(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, bool scale_d) {
  static_assert(N == 64 || N == 128 || N == 192 || N == 256, "m64nNk16 with N in {64, 128, 192, 256}");
  if constexpr (N == 64) {
    if constexpr (IsBf16) TMAKIT_WGMMA_SS(64, 32, bf16); else TMAKIT_WGMMA_SS(64, 32, f16);
  } else if constexpr (N == 128) {
    if constexpr (IsBf16) TMAKIT_WGMMA_SS(128, 64, bf16); else TMAKIT_WGMMA_SS(128, 64, f16);
  } else if constexpr (N == 192) {
    if constexpr (IsBf16) TMAKIT_WGMMA_SS(192, 96, bf16); else TMAKIT_WGMMA_SS(192, 96, f16);
  } else {
    if constexpr (IsBf16) TMAKIT_WGMMA_SS(256, 128, bf16); else TMAKIT_WGMMA_SS(256, 128, f16);
  }
}

// The same with A from registers: a[0..3] is the warp's 16 x 16 slice of A (rows 16w..16w+15) in the
// m16n8k16 A-fragment order (mma_sync.cuh's MmaFragments). A is always K-major here; TransB as above.
template <int N, bool IsBf16, bool TransB = false>
__device__ __forceinline__ void wgmma_m64nNk16_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b,
                                                  bool scale_d = true) {
  static_assert(N == 64 || N == 128 || N == 192 || N == 256, "m64nNk16 with N in {64, 128, 192, 256}");
  if constexpr (N == 64) {
    if constexpr (IsBf16) TMAKIT_WGMMA_RS(64, 32, bf16); else TMAKIT_WGMMA_RS(64, 32, f16);
  } else if constexpr (N == 128) {
    if constexpr (IsBf16) TMAKIT_WGMMA_RS(128, 64, bf16); else TMAKIT_WGMMA_RS(128, 64, f16);
  } else if constexpr (N == 192) {
    if constexpr (IsBf16) TMAKIT_WGMMA_RS(192, 96, bf16); else TMAKIT_WGMMA_RS(192, 96, f16);
  } else {
    if constexpr (IsBf16) TMAKIT_WGMMA_RS(256, 128, bf16); else TMAKIT_WGMMA_RS(256, 128, f16);
  }
}

// setmaxnreg.inc.sync.aligned.u32 / setmaxnreg.dec.sync.aligned.u32: raise / lower the calling warpgroup's
// per-thread register count to R (24..256, a multiple of 8). Every thread of the warpgroup.
template <int R>
__device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(R >= 24 && R <= 256 && R % 8 == 0, "setmaxnreg: 24..256, a multiple of 8");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(R));
}
template <int R>
__device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(R >= 24 && R <= 256 && R % 8 == 0, "setmaxnreg: 24..256, a multiple of 8");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(R));
}

// elect.sync _|p, 0xffffffff: true in exactly one lane of the (fully active) warp. Every lane of the warp.
__device__ __forceinline__ bool elect_one_sync() {
  uint32_t pred = 0;
  asm volatile(
      "{\n .reg .b32 r;\n .reg .pred p;\n elect.sync r|p, 0xffffffff;\n selp.u32 %0, 1, 0, p;\n}"
      : "=r"(pred));
  return pred != 0;
}
#endif  // TMAKIT_HAS_SM90

}  // namespace tmakit
