// The hardware check of tmakit/layout/wgmma.py: one warpgroup loads a 64 x 64 A tile and a 64 x 64 B tile
// (stored as B^T, (N, K), when K-major) with TMA, as `boxes_a` / `boxes_b` boxes of `chunk` innermost elements
// placed box-bytes apart (the stage geometry the host model describes), then runs four wgmma m64n64k16 (bf16)
// with the descriptors the host computed (`descs`: A's four k-slices, then B's, start addresses relative to the
// 1024-aligned stage buffer) and writes D = A B (64 x 64 fp32, row-major) to `out`. trans_a / trans_b: the
// operand is MN-major (imm-trans-a / imm-trans-b = 1). sm_90a only; 128 threads, one block.
#include "tmakit/config.cuh"
#include "tmakit/mbarrier.cuh"
#include "tmakit/tma.cuh"
#include "tmakit/types.cuh"
#include "tmakit/wgmma.cuh"

using namespace tmakit;

#if TMAKIT_HAS_SM90
template <bool TA, bool TB>
__device__ __forceinline__ void probe_mma(float (&acc)[32], const uint64_t* descs, uint32_t base16) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) wgmma_m64nNk16_ss<64, true, TA, TB>(acc, descs[kk] + base16, descs[4 + kk] + base16, true);
}
#endif

extern "C" __global__ void __launch_bounds__(128, 1)
    tmakit_wgmma_probe(const __grid_constant__ TensorMapDesc map_a, const __grid_constant__ TensorMapDesc map_b,
                       const uint64_t* descs, float* out, int chunk, int boxes_a, int boxes_b, int trans_a, int trans_b) {
#if TMAKIT_HAS_SM90
  extern __shared__ __align__(16) uint8_t smem_raw[];
  uint8_t* smem = align_shared(smem_raw, 1024);
  uint64_t* bar = reinterpret_cast<uint64_t*>(smem + 16384);
  if (threadIdx.x == 0) {
    mbarrier_init(bar, 1);
    fence_mbarrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    mbarrier_arrive_expect_tx(bar, 16384);
    for (int j = 0; j < boxes_a; ++j)
      cp_async_bulk_tensor_g2s<2>(smem + j * (8192 / boxes_a), &map_a, Coords{{j * chunk, 0, 0, 0, 0}}, bar);
    for (int j = 0; j < boxes_b; ++j)
      cp_async_bulk_tensor_g2s<2>(smem + 8192 + j * (8192 / boxes_b), &map_b, Coords{{j * chunk, 0, 0, 0, 0}}, bar);
  }
  mbarrier_wait_parity(bar, 0);
  float acc[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) acc[i] = 0.f;
  const uint32_t base16 = shared_addr(smem) >> 4;
  wgmma_fence();
  if (trans_a) {
    if (trans_b) probe_mma<true, true>(acc, descs, base16); else probe_mma<true, false>(acc, descs, base16);
  } else {
    if (trans_b) probe_mma<false, true>(acc, descs, base16); else probe_mma<false, false>(acc, descs, base16);
  }
  wgmma_commit_group();
  wgmma_wait_group<0>();
  wgmma_fence_operands(acc);
#pragma unroll
  for (int i = 0; i < 32; ++i) out[wgmma_d_row(threadIdx.x, i) * 64 + wgmma_d_col(threadIdx.x, i)] = acc[i];
#else
  TMAKIT_REQUIRES_SM90();
#endif
}
