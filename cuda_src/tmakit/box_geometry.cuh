// Where each 16-byte chunk of a box image comes from, computed from BoxParams (docs/CONTRACTS.md, box-load
// semantics, and tmakit/layout/tma_model.py, which the H100 settled). Dim 0 is innermost; a row holds
// n0 * elem_size data bytes, a multiple of 16 (a TMA rule), so a chunk never straddles two rows. With a
// swizzle, rows narrower than the swizzle span are padded to the span (pitch = max(row, span)) and the
// padding is left untouched; without one, rows are dense. Shared by the cp.async box load and the plain-store box store
// so that both walk the box exactly as TMA does.
#pragma once
#include "tmakit/types.cuh"

namespace tmakit {

// Elements traversed along dim i: ceil(box / element stride); dim 0 ignores its stride without interleave.
__device__ __forceinline__ uint32_t box_count(const BoxParams& p, int i) {
  if (i == 0 && p.interleave == 0) return p.box[0];
  return (p.box[i] + p.elem_strides[i] - 1) / p.elem_strides[i];
}

__device__ __forceinline__ uint32_t box_rows(const BoxParams& p) {
  uint32_t n = 1;
  for (int i = 1; i < (int)p.rank; ++i) n *= box_count(p, i);
  return n;
}

__device__ __forceinline__ uint32_t box_row_bytes(const BoxParams& p) { return box_count(p, 0) * p.elem_size; }

// Bytes from one row to the next in shared memory.
__device__ __forceinline__ uint32_t box_row_pitch(const BoxParams& p) {
  const uint32_t span = p.swizzle == 0 ? 0u : 16u << p.swizzle;  // 32/64/128 bytes
  const uint32_t row = box_row_bytes(p);
  return row > span ? row : span;
}

// Data bytes of one box = the mbarrier expect_tx count (padding excluded).
__device__ __forceinline__ uint32_t box_image_bytes(const BoxParams& p) { return box_rows(p) * box_row_bytes(p); }

struct BoxChunk {
  uint32_t image_offset;  // byte offset in the unswizzled image (rows at box_row_pitch)
  int64_t first;          // dim-0 global coordinate of the chunk's first element
  bool row_in_bounds;     // every outer (dim >= 1) coordinate of this row is inside the tensor
  uint64_t row_address;   // global address of the row's dim-0 coordinate 0 (valid when row_in_bounds)
};

// Data chunk `chunk` (0 .. box_image_bytes/16 - 1) of the box at `at`.
__device__ __forceinline__ BoxChunk box_chunk(const BoxParams& p, const Coords& at, uint32_t chunk) {
  BoxChunk out;
  const uint32_t per_row = box_row_bytes(p) / 16u;
  uint32_t row = chunk / per_row;
  const uint32_t in_row = (chunk % per_row) * 16u;
  out.image_offset = row * box_row_pitch(p) + in_row;
  out.first = (int64_t)at.c[0] + in_row / p.elem_size;
  out.row_in_bounds = true;
  out.row_address = p.address;
  for (int i = 1; i < (int)p.rank; ++i) {
    const uint32_t n = box_count(p, i);
    const int64_t g = (int64_t)at.c[i] + (int64_t)(row % n) * p.elem_strides[i];
    row /= n;
    out.row_in_bounds &= g >= 0 && g < (int64_t)p.dims[i];
    out.row_address += (uint64_t)g * p.strides[i];
  }
  return out;
}

// The bit pattern TMA writes for an out-of-bounds element: zero, or with oob_nan the type's canonical NaN
// (all exponent bits and all mantissa bits set, sign clear). Must agree with tmakit.layout.
__device__ __forceinline__ uint64_t oob_fill_bits(const BoxParams& p) {
  if (!p.oob_nan) return 0;
  switch (p.elem_size) {
    case 2: return 0x7FFFull;                 // f16 and bf16
    case 4: return 0x7FFFFFFFull;             // f32, f32_ftz, tf32, tf32_ftz
    case 8: return 0x7FFFFFFFFFFFFFFFull;     // f64
    default: return 0;
  }
}

}  // namespace tmakit
