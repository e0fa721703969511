"""cuda_src/tmakit/mma_sync.cuh: ldmatrix (plain and .trans) on 128B-swizzled tiles and mma.sync m16n8k16.

CPU: SOURCE, a one-warp kernel using every wrapper, compiles for sm_80 and sm_90a with LDSM and HMMA in its SASS
(tests/test_device_headers.py, INSTRUCTIONS). GPU: the same kernel computes A @ B for a K-major B (stored [n][k],
like attention's K) and for an MN-major B (stored [k][n], like V) from swizzled shared-memory images, against
numpy in float32.
"""
from __future__ import annotations

import numpy as np
import pytest

# One warp: A (16x16), Bk (16(n) x 16(k), K-major), Bn (16(k) x 16(n), MN-major) are staged into swizzled images
# of 16 rows of `row_bytes` bytes (swizzle `mode`: 0 none, 1 32B, 2 64B, 3 128B) at the offsets swizzled_tile_offset
# gives; then C1 = A @ Bk^T and C2 = A @ Bn (16x16 each) through ldmatrix + mma.sync, written row-major in float32.
SOURCE = r"""
#include "tmakit/mma_sync.cuh"
using namespace tmakit;
template <bool IsBf16>
__device__ void body(const uint16_t* a, const uint16_t* bk, const uint16_t* bn, float* c1, float* c2, uint32_t mode,
                     uint32_t rb) {
  __shared__ __align__(1024) uint8_t smem[3 * 4096];
  const int lane = threadIdx.x;
  for (int i = lane; i < 3 * 256; i += 32) {  // element i of tile i / 256 (16 x 16, row-major in global)
    const int t = i / 256, r = (i % 256) / 16, c = i % 16;
    const uint16_t* src = t == 0 ? a : t == 1 ? bk : bn;
    *reinterpret_cast<uint16_t*>(smem + t * 4096 + swizzled_tile_offset(r, c, rb, mode)) = src[r * 16 + c];
  }
  __syncwarp();
  const uint32_t base = shared_addr(smem);
  uint32_t fa[4], fk[4], fn[4];
  ldmatrix_sync_aligned_m8n8_x4_shared_b16(fa, ldmatrix_x4_address(base, lane, 0, 0, rb, mode));
  ldmatrix_sync_aligned_m8n8_x4_shared_b16(fk, ldmatrix_x4_address_b_kmajor(base + 4096, lane, 0, 0, rb, mode));
  ldmatrix_sync_aligned_m8n8_x4_trans_shared_b16(fn, ldmatrix_x4_trans_address_b_mnmajor(base + 8192, lane, 0, 0, rb,
                                                                                          mode));
  for (int nt = 0; nt < 2; ++nt) {
    float acc1[4] = {0.f, 0.f, 0.f, 0.f}, acc2[4] = {0.f, 0.f, 0.f, 0.f};
    const uint32_t b1[2] = {fk[2 * nt], fk[2 * nt + 1]}, b2[2] = {fn[2 * nt], fn[2 * nt + 1]};
    mma_m16n8k16<IsBf16>(acc1, fa, b1);
    mma_m16n8k16<IsBf16>(acc2, fa, b2);
    for (int i = 0; i < 4; ++i) {
      const int r = MmaM16N8K16Layout::c_row(lane, i), c = nt * 8 + MmaM16N8K16Layout::c_col(lane, i);
      c1[r * 16 + c] = acc1[i];
      c2[r * 16 + c] = acc2[i];
    }
  }
}
extern "C" __global__ void mma_probe_bf16(const uint16_t* a, const uint16_t* bk, const uint16_t* bn, float* c1, float* c2,
                                          uint32_t mode, uint32_t row_bytes) {
  body<true>(a, bk, bn, c1, c2, mode, row_bytes);
}
extern "C" __global__ void mma_probe_f16(const uint16_t* a, const uint16_t* bk, const uint16_t* bn, float* c1, float* c2,
                                         uint32_t mode, uint32_t row_bytes) {
  body<false>(a, bk, bn, c1, c2, mode, row_bytes);
}
"""


@pytest.mark.requires_sm80
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("mode, row_bytes", [(3, 128), (2, 64), (1, 32), (0, 32), (3, 256)])
def test_mma_sync_fragments_on_hardware(dtype: str, mode: int, row_bytes: int) -> None:
    torch = pytest.importorskip("torch")
    from tmakit.build import load_module

    tdt = getattr(torch, dtype)
    gen = torch.Generator().manual_seed(7)
    a, bk, bn = (torch.randn(16, 16, generator=gen).to(tdt) for _ in range(3))
    c1 = torch.full((16, 16), float("nan"), device="cuda")
    c2 = torch.full((16, 16), float("nan"), device="cuda")
    kern = load_module(SOURCE).kernel("mma_probe_bf16" if dtype == "bfloat16" else "mma_probe_f16")
    ga, gk, gn = (t.cuda().view(torch.int16) for t in (a, bk, bn))
    kern(ga, gk, gn, c1, c2, mode, row_bytes, grid=(1, 1, 1), block=(32, 1, 1))
    torch.cuda.synchronize()
    af, kf, nf = (t.float().numpy() for t in (a, bk, bn))
    np.testing.assert_allclose(c1.cpu().numpy(), af @ kf.T, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(c2.cpu().numpy(), af @ nf, rtol=1e-5, atol=1e-4)


# ldmatrix_x4_swizzle128_offset against the three address functions it shortcuts: for every lane, each function's
# offset of block (row0, col0) of a 128B-swizzled tile of 128-byte rows, and the helper's from block (0, 0).
OFFSET_SOURCE = r"""
#include "tmakit/mma_sync.cuh"
extern "C" __global__ void offset_probe(unsigned* out) {
  const int lane = threadIdx.x;
  for (int f = 0; f < 3; ++f) {
    for (unsigned r = 0; r < 16; ++r) {
      for (unsigned c = 0; c < 4; ++c) {
        const unsigned row0 = 8u * r, col0 = 16u * c;
        unsigned first, direct;
        if (f == 0) {
          first = tmakit::ldmatrix_x4_address(0, lane, 0, 0, 128, 3);
          direct = tmakit::ldmatrix_x4_address(0, lane, row0, col0, 128, 3);
        } else if (f == 1) {  // (n0, k0): the block's first coordinate is its row
          first = tmakit::ldmatrix_x4_address_b_kmajor(0, lane, 0, 0, 128, 3);
          direct = tmakit::ldmatrix_x4_address_b_kmajor(0, lane, row0, col0, 128, 3);
        } else {  // (k0, n0)
          first = tmakit::ldmatrix_x4_trans_address_b_mnmajor(0, lane, 0, 0, 128, 3);
          direct = tmakit::ldmatrix_x4_trans_address_b_mnmajor(0, lane, row0, col0, 128, 3);
        }
        const int at = (((f * 16 + r) * 4 + c) * 32 + lane) * 2;
        out[at] = tmakit::ldmatrix_x4_swizzle128_offset(first, row0, col0);
        out[at + 1] = direct;
      }
    }
  }
}
"""


def _swizzle128_reference(f: int, lane: int, row0: int, col0: int) -> int:
    """The byte offset a lane passes for block (row0, col0): its matrix's row and column in each function's
    order, then the 128B swizzle (16-byte chunk index XOR row mod 8)."""
    m, i = lane >> 3, lane & 7
    if f == 1:  # K-major B: matrices (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15)
        row, col = row0 + i + 8 * (m >> 1), col0 + 8 * (m & 1)
    else:  # A and .trans MN-major B: (0-7, 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15)
        row, col = row0 + i + 8 * (m & 1), col0 + 8 * (m >> 1)
    byte = col * 2
    return row * 128 + (((byte >> 4) ^ (row & 7)) << 4) + (byte & 15)


@pytest.mark.requires_sm80
def test_swizzle128_offset_helper_matches_every_address_function() -> None:
    torch = pytest.importorskip("torch")
    from tmakit.build import load_module

    out = torch.full((3 * 16 * 4 * 32 * 2,), -1, dtype=torch.int32, device="cuda")  # poisoned
    load_module(OFFSET_SOURCE).kernel("offset_probe")(out, grid=(1, 1, 1), block=(32, 1, 1))
    torch.cuda.synchronize()
    got = out.cpu().numpy().astype(np.int64).reshape(3, 16, 4, 32, 2)
    ref = np.array([[[[_swizzle128_reference(f, lane, 8 * r, 16 * c) for lane in range(32)] for c in range(4)]
                     for r in range(16)] for f in range(3)])
    np.testing.assert_array_equal(got[..., 1], ref)  # the address functions, as the mma test reads them
    np.testing.assert_array_equal(got[..., 0], ref)  # the helper, from each lane's block (0, 0)
