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
#include "tmakit/swizzle.cuh"
#include "tmakit/types.cuh"

namespace tmakit {

TMAKIT_HD uint32_t interleave_slice_bytes(const BoxParams& p) { return p.interleave == 1 ? 16u : 32u; }

// Positions traversed along dim i: ceil(box / element stride); dim 0 ignores its stride without interleave.
TMAKIT_HD uint32_t box_count(const BoxParams& p, int i) {
  if (p.interleave == 0 && i == 0) return p.box[0];
  if (p.interleave != 0 && i == (int)p.rank - 2) return 1;
  if (p.elem_strides[i] == 1) return p.box[i];  // the usual case, without a division (every box load asks)
  return (p.box[i] + p.elem_strides[i] - 1) / p.elem_strides[i];
}

TMAKIT_HD uint32_t box_rows(const BoxParams& p) {
  uint32_t n = p.interleave != 0 ? box_count(p, 0) : 1u;  // interleaved: one row per slice
  for (int i = 1; i < (int)p.rank; ++i) n *= box_count(p, i);
  return n;
}

// Data bytes of an image row of `elements` positions along dim 0 (an interleaved row is one whole slice).
TMAKIT_HD uint32_t image_row_bytes(const BoxParams& p, uint32_t elements) {
  return p.interleave != 0 ? interleave_slice_bytes(p) : elements * p.elem_size;
}

TMAKIT_HD uint32_t box_row_bytes(const BoxParams& p) { return image_row_bytes(p, box_count(p, 0)); }

// Bytes from one image row to the next in shared memory: rows narrower than the swizzle span are padded.
TMAKIT_HD uint32_t image_row_pitch(const BoxParams& p, uint32_t elements) {
  const uint32_t span = (p.swizzle == 0 || p.interleave != 0) ? 0u : 16u << p.swizzle;  // 32/64/128 bytes
  const uint32_t row = image_row_bytes(p, elements);
  return row > span ? row : span;
}

// Bytes from one box row to the next in shared memory.
TMAKIT_HD uint32_t box_row_pitch(const BoxParams& p) { return image_row_pitch(p, box_count(p, 0)); }

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

// log2 of a power of two
TMAKIT_HD uint32_t log2_pow2(uint32_t d) {
#ifdef __CUDA_ARCH__
  return (uint32_t)__ffs((int)d) - 1u;
#else
  return (uint32_t)__builtin_ctz(d);
#endif
}

// n / d and n % d, by shifts when d is a power of two (box rows usually are whole chunks of a power of two).
TMAKIT_HD uint32_t divide(uint32_t n, uint32_t d) { return (d & (d - 1)) == 0 ? n >> log2_pow2(d) : n / d; }
TMAKIT_HD uint32_t remainder(uint32_t n, uint32_t d) { return (d & (d - 1)) == 0 ? n & (d - 1) : n % d; }

// A plain 2-D box: rank 2, no interleave, unit element strides, 16-byte aligned tensor rows, and every
// 16-byte chunk of the box wholly inside or wholly outside the tensor (the tiles of copy and transpose, the
// edge tiles of a row-major array included: clipped at either end of either dimension). Its chunks are
// whole 16-byte copies at plain row-major offsets inside one rectangle of rows x chunks, the same bytes
// box_chunk/chunk_kind give without their per-chunk division over a runtime rank. `plain` is false for any
// other box (the general walk then applies). The box extent may be given apart from BoxParams.box, for a
// kernel that stores several images as one wider box (the transpose's whole tile rows).
struct Plain2dBox {
  bool plain;
  uint32_t per_row, pitch;            // chunks per box row; image bytes per row
  uint32_t rows;                      // box rows (the extent in dim 1)
  uint32_t rows_begin, rows_end;      // box rows inside the tensor
  uint32_t chunks_begin, chunks_end;  // chunks of a row inside the tensor
  uint64_t origin, stride;            // global address of the box's first element (if it were inside); row pitch

  TMAKIT_HD Plain2dBox(const BoxParams& p, const Coords& at) : Plain2dBox(p, at, p.box[0], p.box[1]) {}
  TMAKIT_HD Plain2dBox(const BoxParams& p, const Coords& at, uint32_t box0, uint32_t box1)
      : plain(false), per_row(box0 * p.elem_size / 16u), pitch(image_row_pitch(p, box0)), rows(box1), rows_begin(0),
        rows_end(0), chunks_begin(0), chunks_end(0), stride(p.strides[1]) {
    const int64_t c0 = at.c[0], c1 = at.c[1], dim0 = (int64_t)p.dims[0], dim1 = (int64_t)p.dims[1];
    const int64_t e = p.elem_size;
    origin = p.address + (uint64_t)c1 * p.strides[1] + (uint64_t)c0 * (uint64_t)e;  // wraps like two's complement
    if (!(p.rank == 2 && p.interleave == 0 && p.elem_strides[0] == 1 && p.elem_strides[1] == 1 &&
          (e == 1 || e == 2 || e == 4 || e == 8) && (box0 * e) % 16 == 0 && (p.strides[1] & 15u) == 0 &&
          (origin & 15u) == 0))
      return;
    // Dim 0 clipped (either end): the tensor's own chunk grid must be the box's, so no chunk straddles an end
    // (with the origin aligned, a whole-chunk start also means an aligned tensor base).
    const bool inside0 = c0 >= 0 && c0 + (int64_t)box0 <= dim0;
    if (!inside0 && (((c0 * e) & 15) != 0 || ((dim0 * e) & 15) != 0)) return;
    plain = true;
    // elements per chunk: 16 / e = 1 << shift (a shift, not a 64-bit division: this runs once per box)
    const uint32_t shift = 4u - log2_pow2((uint32_t)e);
    const int64_t lo0 = c0 < 0 ? -c0 : 0, hi0 = dim0 - c0 < (int64_t)box0 ? dim0 - c0 : (int64_t)box0;
    const int64_t lo1 = c1 < 0 ? -c1 : 0, hi1 = dim1 - c1 < (int64_t)box1 ? dim1 - c1 : (int64_t)box1;
    if (hi0 > lo0 && hi1 > lo1) {  // otherwise nothing is inside: empty ranges (lo, hi >= 0 here)
      chunks_begin = (uint32_t)(lo0 >> shift);
      chunks_end = (uint32_t)(hi0 >> shift);
      rows_begin = (uint32_t)lo1;
      rows_end = (uint32_t)hi1;
    }
  }
  TMAKIT_HD bool inside(uint32_t row, uint32_t chunk) const {
    return row >= rows_begin && row < rows_end && chunk >= chunks_begin && chunk < chunks_end;
  }
  TMAKIT_HD bool all_inside() const { return rows_begin == 0 && rows_end == rows && chunks_begin == 0 && chunks_end == per_row; }
  TMAKIT_HD uint32_t image_offset(uint32_t row, uint32_t chunk) const { return row * pitch + chunk * 16u; }
  TMAKIT_HD uint64_t address(uint32_t row, uint32_t chunk) const { return origin + row * stride + chunk * 16u; }
};

// A block's strided walk over the chunks of a box (k = first, first + step, ...) as (row, chunk) in rows of
// `per_row` chunks: two divisions to start, none per step (a division is ~20 instructions, and the cp.async
// paths walk every chunk of every tile). Loop while row < the box's rows.
struct ChunkCursor {
  uint32_t row, chunk;
  uint32_t per_row, step_rows, step_chunks;
  TMAKIT_HD ChunkCursor(uint32_t per_row_, uint32_t first, uint32_t step)
      : row(divide(first, per_row_)), chunk(remainder(first, per_row_)), per_row(per_row_),
        step_rows(divide(step, per_row_)), step_chunks(remainder(step, per_row_)) {}
  TMAKIT_HD void advance() {
    row += step_rows;
    chunk += step_chunks;
    if (chunk >= per_row) {
      chunk -= per_row;
      ++row;
    }
  }
};

// The walk of a plain box's chunks k = first, first + step, ... (a block: threadIdx.x, blockDim.x):
// visit(swizzled image offset, global address, inside) for each. Where the box lies wholly inside and a step
// is whole rows of whole swizzle periods (the interior tiles of copy and transpose), both advance by
// constants: a handful of instructions per chunk instead of the cursor, swizzle and bounds.
template <class Visit>
TMAKIT_HD void plain_box_walk(const Plain2dBox& box, uint32_t swizzle, uint32_t first, uint32_t step, Visit visit) {
  if (box.all_inside() && remainder(step, box.per_row) == 0) {
    const uint32_t step_rows = divide(step, box.per_row), offset_step = step_rows * box.pitch;
    if (offset_step % swizzle_period(swizzle) == 0) {
      const uint32_t chunk = remainder(first, box.per_row);
      uint32_t row = divide(first, box.per_row);
      uint32_t offset = swizzle_offset(box.image_offset(row, chunk), swizzle);
      uint64_t address = box.address(row, chunk);
      const uint64_t address_step = (uint64_t)step_rows * box.stride;
      for (; row < box.rows; row += step_rows, offset += offset_step, address += address_step) visit(offset, address, true);
      return;
    }
  }
  for (ChunkCursor c(box.per_row, first, step); c.row < box.rows; c.advance())
    visit(swizzle_offset(box.image_offset(c.row, c.chunk), swizzle), box.address(c.row, c.chunk), box.inside(c.row, c.chunk));
}

// oob_fill_bits repeated over 8 bytes: half of a whole chunk outside the tensor.
TMAKIT_HD uint64_t oob_fill_8_bytes(const BoxParams& p) {
  uint64_t bits = oob_fill_bits(p);
  for (uint32_t width = p.elem_size * 8u; width < 64u; width *= 2u) bits |= bits << width;
  return bits;
}

}  // namespace tmakit
