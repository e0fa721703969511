// Where each 16-byte chunk of a box image comes from, computed from BoxParams (docs/CONTRACTS.md, box-load
// semantics, and tmakit/layout/tma_model.py, which the H100 settled). Dim 0 is innermost; a row holds
// n0 * elem_size data bytes, a multiple of 16 (a TMA rule), so a chunk never straddles two rows. With a
// swizzle, rows narrower than the swizzle span are padded to the span (pitch = max(row, span)) and the
// padding is left untouched; without one, rows are dense. Shared by the cp.async box load and the plain-store box store
// so that both walk the box exactly as TMA does.
//
// Interleaved layouts (measured on an H100; tma_model.py's docstring has the details): a row is one whole
// interleave slice of 16 or 32 bytes, dim 0 is counted in slices (coordinate, box, element stride and bound),
// dimension rank-2 is loaded at one position, and rows are never padded.
#pragma once
#include "tmakit/types.cuh"

namespace tmakit {

TMAKIT_HD uint32_t interleave_slice_bytes(const BoxParams& p) { return p.interleave == 1 ? 16u : 32u; }

// Positions traversed along dim i: ceil(box / element stride); dim 0 ignores its stride without interleave.
TMAKIT_HD uint32_t box_count(const BoxParams& p, int i) {
  if (p.interleave == 0 && i == 0) return p.box[0];
  if (p.interleave != 0 && i == (int)p.rank - 2) return 1;
  return (p.box[i] + p.elem_strides[i] - 1) / p.elem_strides[i];
}

TMAKIT_HD uint32_t box_rows(const BoxParams& p) {
  uint32_t n = p.interleave != 0 ? box_count(p, 0) : 1u;  // interleaved: one row per slice
  for (int i = 1; i < (int)p.rank; ++i) n *= box_count(p, i);
  return n;
}

TMAKIT_HD uint32_t box_row_bytes(const BoxParams& p) {
  return p.interleave != 0 ? interleave_slice_bytes(p) : box_count(p, 0) * p.elem_size;
}

// Bytes from one row to the next in shared memory.
TMAKIT_HD uint32_t box_row_pitch(const BoxParams& p) {
  const uint32_t span = (p.swizzle == 0 || p.interleave != 0) ? 0u : 16u << p.swizzle;  // 32/64/128 bytes
  const uint32_t row = box_row_bytes(p);
  return row > span ? row : span;
}

// Data bytes of one box = the mbarrier expect_tx count (padding excluded).
TMAKIT_HD uint32_t box_image_bytes(const BoxParams& p) { return box_rows(p) * box_row_bytes(p); }

struct BoxChunk {
  uint32_t image_offset;  // byte offset in the unswizzled image (rows at box_row_pitch)
  int64_t first;          // dim-0 global coordinate of the chunk's first element
  bool row_in_bounds;     // every outer (dim >= 1) coordinate of this row is inside the tensor
  uint64_t row_address;   // global address of the row's dim-0 coordinate 0 (valid when row_in_bounds)
};

// Data chunk `chunk` (0 .. box_image_bytes/16 - 1) of the box at `at`.
TMAKIT_HD BoxChunk box_chunk(const BoxParams& p, const Coords& at, uint32_t chunk) {
  BoxChunk out;
  const uint32_t per_row = box_row_bytes(p) / 16u;
  uint32_t row = chunk / per_row;
  const uint32_t in_row = (chunk % per_row) * 16u;
  out.image_offset = row * box_row_pitch(p) + in_row;
  if (p.interleave != 0) {  // the row is slice x0 of dim 0, copied whole; `first` is then unused (0)
    const uint32_t n0 = box_count(p, 0);
    const int64_t x0 = (int64_t)at.c[0] + (int64_t)(row % n0) * p.elem_strides[0];
    row /= n0;
    out.first = 0;
    out.row_in_bounds = x0 >= 0 && x0 < (int64_t)p.dims[0];
    out.row_address = p.address + (uint64_t)x0 * interleave_slice_bytes(p) + in_row;
  } else {
    out.first = (int64_t)at.c[0] + in_row / p.elem_size;
    out.row_in_bounds = true;
    out.row_address = p.address;
  }
  for (int i = 1; i < (int)p.rank; ++i) {
    const uint32_t n = box_count(p, i);
    const int64_t g = (int64_t)at.c[i] + (int64_t)(row % n) * p.elem_strides[i];
    row /= n;
    out.row_in_bounds &= g >= 0 && g < (int64_t)p.dims[i];
    out.row_address += (uint64_t)g * p.strides[i];
  }
  return out;
}

// The bit pattern TMA writes for an out-of-bounds element: zero, or with oob_nan on a float type the
// "NaN request zero FMA" value, measured on an H100 as 0x7FF7 in every 16-bit half-word (f16/bf16 0x7FF7,
// f32 0x7FF77FF7, f64 0x7FF77FF77FF77FF7). Must agree with tmakit.layout.tma_model.NAN_FILL.
TMAKIT_HD uint64_t oob_fill_bits(const BoxParams& p) {
  const bool is_float = p.dtype >= 6 && p.dtype <= 12;  // CU_TENSOR_MAP_DATA_TYPE_FLOAT16 .. TFLOAT32_FTZ
  if (!p.oob_nan || !is_float) return 0;
  const uint64_t half = 0x7FF7ull;
  switch (p.elem_size) {
    case 2: return half;
    case 4: return half | half << 16;
    case 8: return half | half << 16 | half << 32 | half << 48;
    default: return 0;
  }
}

// What the cp.async path does with one 16-byte data chunk (box_load_chunk executes it; a host harness
// executes the same plan with memcpy to check it against the Python model).
enum ChunkKind : uint32_t {
  kChunkCopy16 = 0,    // fully in bounds, source 16-byte aligned: one cp.async of 16 bytes
  kChunkZero16 = 1,    // fully out of bounds with zero fill: cp.async with src-size 0
  kChunkElements = 2,  // element by element: in-bounds elements copied, the others filled
};

TMAKIT_HD uint32_t chunk_elements(const BoxParams& p) { return 16u / p.elem_size; }

TMAKIT_HD bool element_in_bounds(const BoxParams& p, const BoxChunk& ch, uint32_t e) {
  if (p.interleave != 0) return ch.row_in_bounds;  // slices are in or out whole
  const int64_t g = ch.first + e;
  return ch.row_in_bounds && g >= 0 && g < (int64_t)p.dims[0];
}

// Global address of element e of the chunk (meaningful only when it is in bounds).
TMAKIT_HD uint64_t element_address(const BoxParams& p, const BoxChunk& ch, uint32_t e) {
  return ch.row_address + (uint64_t)(ch.first + e) * p.elem_size;
}

TMAKIT_HD ChunkKind chunk_kind(const BoxParams& p, const BoxChunk& ch) {
  const uint32_t n = chunk_elements(p);
  const int64_t dim0 = (int64_t)p.dims[0];
  const bool whole = p.interleave != 0;  // an interleaved chunk is in or out with its slice
  const bool all_in = ch.row_in_bounds && (whole || (ch.first >= 0 && ch.first + n <= dim0));
  const bool all_out = !ch.row_in_bounds || (!whole && (ch.first + n <= 0 || ch.first >= dim0));
  if (all_in && (element_address(p, ch, 0) & 15u) == 0) return kChunkCopy16;
  if (all_out && !p.oob_nan) return kChunkZero16;
  return kChunkElements;
}

// A rank-2 box with no interleave, unit element strides, 16-byte aligned rows and dim 0 inside the tensor
// (the tiles of copy and transpose): its rows that lie inside the tensor (0 .. box[1]; fewer at the end of
// dim 1, the bottom edge tiles), each chunk of which is a whole 16-byte copy at plain row-major offsets, the
// same bytes box_chunk/chunk_kind would give without their per-chunk division over a runtime rank; the rows
// after them are wholly out of bounds. -1 when the box is not of this kind.
TMAKIT_HD int32_t plain_2d_rows(const BoxParams& p, const Coords& at) {
  if (!(p.rank == 2 && p.interleave == 0 && p.elem_strides[0] == 1 && p.elem_strides[1] == 1 && at.c[0] >= 0 &&
        at.c[1] >= 0 && (uint64_t)at.c[0] + p.box[0] <= p.dims[0] &&
        ((p.address + (uint64_t)at.c[0] * p.elem_size) & 15u) == 0 && (p.strides[1] & 15u) == 0 &&
        (p.box[0] * p.elem_size) % 16u == 0))
    return -1;
  const uint64_t left = (uint64_t)at.c[1] < p.dims[1] ? p.dims[1] - (uint64_t)at.c[1] : 0;
  return (int32_t)(left < p.box[1] ? left : p.box[1]);
}

// The box is wholly inside and plain (plain_2d_rows covers all of it).
TMAKIT_HD bool box_is_plain_2d(const BoxParams& p, const Coords& at) { return plain_2d_rows(p, at) == (int32_t)p.box[1]; }

// Chunk k of a plain 2-D box (plain_2d_rows >= 0, k inside its rows): its offset in the unswizzled image and its global address.
struct Plain2dBox {
  uint32_t per_row, pitch;  // chunks per row; image bytes per row
  uint64_t origin, stride;  // global address of the box's first element; bytes per tensor row

  TMAKIT_HD Plain2dBox(const BoxParams& p, const Coords& at)
      : per_row(p.box[0] * p.elem_size / 16u), pitch(box_row_pitch(p)),
        origin(p.address + (uint64_t)at.c[1] * p.strides[1] + (uint64_t)at.c[0] * p.elem_size), stride(p.strides[1]) {}
  TMAKIT_HD uint32_t image_offset(uint32_t k) const {
    const uint32_t row = k / per_row;
    return row * pitch + (k - row * per_row) * 16u;
  }
  TMAKIT_HD uint64_t address(uint32_t k) const {
    const uint32_t row = k / per_row;
    return origin + row * stride + (k - row * per_row) * 16u;
  }
};

}  // namespace tmakit
