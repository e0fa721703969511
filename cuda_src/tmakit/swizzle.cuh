// The TMA shared-memory swizzle as an address function (docs/CONTRACTS.md): 16-byte chunks are permuted
// by XOR-ing address bits [4:6] with bits [7:9] (128B), [4:5] with [7:8] (64B) or bit 4 with bit 7 (32B),
// relative to a base aligned to 1024/512/256 bytes. The map is an involution, so the same call turns an
// image offset into a shared-memory offset and back. Used by the cp.async twin of every TMA path and by
// kernels that read a swizzled tile element by element.
#pragma once
#include "tmakit/types.cuh"

namespace tmakit {

enum SwizzleMode : uint32_t { kSwizzleNone = 0, kSwizzle32B = 1, kSwizzle64B = 2, kSwizzle128B = 3 };

TMAKIT_HD uint32_t swizzle_offset(uint32_t offset, uint32_t mode) {
  // mode 1/2/3 -> XOR mask of 1/3/7 applied to the 16-byte chunk index within each 128-byte row.
  const uint32_t mask = mode == kSwizzleNone ? 0u : (1u << mode) - 1u;
  return offset ^ (((offset >> 7) & mask) << 4);
}

// Bytes after which the swizzle repeats: swizzle_offset(o + n * period) == swizzle_offset(o) + n * period.
TMAKIT_HD uint32_t swizzle_period(uint32_t mode) { return mode == kSwizzleNone ? 16u : 128u << mode; }

// Alignment the destination of a swizzled box needs (bytes); 128 without swizzle, as TMA requires.
TMAKIT_HD uint32_t swizzle_alignment(uint32_t mode) { return mode == kSwizzleNone ? 128u : 128u << mode; }

}  // namespace tmakit
