// The hardware check of tmakit/layout/wgmma.py and of wgmma.cuh's instruction widths: one warpgroup fills an A
// stage (64 rows of M) and a B stage (N columns, TMAKIT_WGMMA_PROBE_N: 128 by default, any multiple of 16 from 16
// to 256) in shared memory, runs `slices` wgmma m64nNkK with the host's descriptors and writes D = A B (64 x N,
// 32-bit words, row-major) to `out`. tests/test_wgmma_descriptor.py compares D with the product of the matrices
// the stages hold, for every operand type, both majors, every swizzle and stage placement, and every N.
//
// A stage is filled either by TMA (boxes_x > 0: boxes_x boxes of map_x placed bytes_x / boxes_x apart, box j at
// coordinate j * chunk_x of the map's inner dimension, as the host model's stages are) or, with boxes_x == 0, by
// the threads copying the stage image the host built (bytes_x bytes of image_x): a stage whose swizzle pattern
// starts off its repeat boundary (a non-zero base offset) can only be made that way. offset_x: where the stage
// starts in the kernel's 1024-aligned buffer; the descriptors' start addresses are relative to that buffer.
//
// combo: the operand types and majors (kCombos below). sm_90a; 128 threads, one block.
#include "tmakit/config.cuh"
#include "tmakit/fence.cuh"
#include "tmakit/mbarrier.cuh"
#include "tmakit/tma.cuh"
#include "tmakit/types.cuh"
#include "tmakit/wgmma.cuh"

#if TMAKIT_HAS_SM90
namespace wgmma_probe {
using namespace tmakit;
#ifndef TMAKIT_WGMMA_PROBE_N
#define TMAKIT_WGMMA_PROBE_N 128
#endif
constexpr int kN = TMAKIT_WGMMA_PROBE_N;

template <WgmmaType A, WgmmaType B, bool TA, bool TB, class Acc>
__device__ __forceinline__ void run(Acc (&acc)[kN / 2], const uint64_t* descs, int slices, uint32_t base) {
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) acc[i] = 0;
  wgmma_fence();
  for (int kk = 0; kk < slices; ++kk) {
    wgmma_mma_async_ss<kN, A, B, TA, TB>(acc, wgmma_desc_rebase(descs[kk], base), wgmma_desc_rebase(descs[slices + kk], base),
                                         true);
  }
  wgmma_commit_group();
  wgmma_wait_group<0>();
  wgmma_fence_operands(acc);
}

template <class Acc>
__device__ __forceinline__ void write(const Acc (&acc)[kN / 2], uint32_t* out) {
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) {
    uint32_t bits;
    memcpy(&bits, &acc[i], 4);
    out[wgmma_d_row(threadIdx.x, i) * kN + wgmma_d_col(threadIdx.x, i)] = bits;
  }
}

// One stage: TMA boxes or a copy of the host's image.
__device__ __forceinline__ void fill(uint8_t* stage, const TensorMapDesc* map, const uint8_t* image, uint32_t bytes,
                                     int boxes, int chunk, Mbarrier& bar) {
  if (boxes > 0) {
    if (threadIdx.x == 0)
      for (int j = 0; j < boxes; ++j)
        cp_async_bulk_tensor_g2s<2>(stage + j * (bytes / boxes), map, Coords{{j * chunk, 0, 0, 0, 0}}, bar);
  } else {
    for (uint32_t i = threadIdx.x; i < bytes; i += blockDim.x) stage[i] = image[i];
  }
}

}  // namespace wgmma_probe
#endif

// The combos, by number: 0-3 bf16 with (trans_a, trans_b) = 00, 01, 10, 11; 4-7 f16 likewise; 8 tf32; 9 e4m3.e4m3,
// 10 e4m3.e5m2, 11 e5m2.e4m3, 12 e5m2.e5m2; 13 s8.s8, 14 s8.u8, 15 u8.s8, 16 u8.u8 (tmakit.layout.wgmma's probe
// table in the test names them the same way).
extern "C" __global__ void __launch_bounds__(128, 1)
    tmakit_wgmma_probe(const __grid_constant__ tmakit::TensorMapDesc map_a, const __grid_constant__ tmakit::TensorMapDesc map_b,
                       const tmakit::uint8_t* image_a, const tmakit::uint8_t* image_b, tmakit::uint32_t offset_a,
                       tmakit::uint32_t offset_b, tmakit::uint32_t bytes_a, tmakit::uint32_t bytes_b, int boxes_a,
                       int boxes_b, int chunk_a, int chunk_b, const tmakit::uint64_t* descs, int slices, int combo,
                       tmakit::uint32_t* out) {
#if TMAKIT_HAS_SM90
  using namespace tmakit;
  using namespace wgmma_probe;
  extern __shared__ __align__(16) uint8_t smem_raw[];
  __shared__ Mbarrier bar;
  uint8_t* smem = align_shared(smem_raw, 1024);
  if (threadIdx.x == 0) {
    bar.init(1);
    fence_mbarrier_init();
    prefetch_tensormap(&map_a);
    prefetch_tensormap(&map_b);
  }
  __syncthreads();
  const uint32_t tma_bytes = (boxes_a > 0 ? bytes_a : 0u) + (boxes_b > 0 ? bytes_b : 0u);
  if (threadIdx.x == 0 && tma_bytes > 0) bar.arrive_expect_tx(tma_bytes);
  fill(smem + offset_a, &map_a, image_a, bytes_a, boxes_a, chunk_a, bar);
  fill(smem + offset_b, &map_b, image_b, bytes_b, boxes_b, chunk_b, bar);
  fence_proxy_async_shared_cta();  // the threads' copies, before the tensor cores (async proxy) read them
  __syncthreads();
  if (tma_bytes > 0) bar.wait_parity(0);
  const uint32_t base = shared_addr(smem);
  float f[kN / 2];
  int32_t s[kN / 2];
  switch (combo) {
#define TMAKIT_PROBE_F(C, A, B, TA, TB) \
  case C: run<WgmmaType::A, WgmmaType::B, TA, TB>(f, descs, slices, base); write(f, out); break
#define TMAKIT_PROBE_I(C, A, B) \
  case C: run<WgmmaType::A, WgmmaType::B, false, false>(s, descs, slices, base); write(s, out); break
    TMAKIT_PROBE_F(0, kBf16, kBf16, false, false);
    TMAKIT_PROBE_F(1, kBf16, kBf16, false, true);
    TMAKIT_PROBE_F(2, kBf16, kBf16, true, false);
    TMAKIT_PROBE_F(3, kBf16, kBf16, true, true);
    TMAKIT_PROBE_F(4, kF16, kF16, false, false);
    TMAKIT_PROBE_F(5, kF16, kF16, false, true);
    TMAKIT_PROBE_F(6, kF16, kF16, true, false);
    TMAKIT_PROBE_F(7, kF16, kF16, true, true);
    TMAKIT_PROBE_F(8, kTf32, kTf32, false, false);
    TMAKIT_PROBE_F(9, kE4m3, kE4m3, false, false);
    TMAKIT_PROBE_F(10, kE4m3, kE5m2, false, false);
    TMAKIT_PROBE_F(11, kE5m2, kE4m3, false, false);
    TMAKIT_PROBE_F(12, kE5m2, kE5m2, false, false);
    TMAKIT_PROBE_I(13, kS8, kS8);
    TMAKIT_PROBE_I(14, kS8, kU8);
    TMAKIT_PROBE_I(15, kU8, kS8);
    TMAKIT_PROBE_I(16, kU8, kU8);
#undef TMAKIT_PROBE_F
#undef TMAKIT_PROBE_I
    default:
      asm volatile("trap;");  // the host passes only these combos
  }
#else
  TMAKIT_REQUIRES_SM90();
#endif
}
