// tmakit device types: fixed-width integers, the TMA descriptor and the cp.async-path BoxParams.
// NVRTC compiles these with no CUDA runtime headers, so nothing here includes <cstdint>.
#pragma once

// Pure integer helpers (swizzle, box geometry) are also host functions, so a CPU harness can run the
// cp.async path's address arithmetic against the Python layout model (tests/test_device_headers.py,
// test_cp_async_plan_matches_layout_model).
#define TMAKIT_HD __host__ __device__ __forceinline__

namespace tmakit {

typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef int int32_t;
typedef unsigned long long uint64_t;
typedef long long int64_t;

// The 128-byte CUtensorMap as the driver encodes it. Kernels take it as `const __grid_constant__` so
// its address is in parameter space, which is what cp.async.bulk.tensor and prefetch.tensormap read.
struct alignas(64) TensorMapDesc {
  unsigned long long opaque[16];
};
static_assert(sizeof(TensorMapDesc) == 128, "CUtensorMap is 128 bytes");

// What the cp.async path gets instead of a descriptor: the same box, in plain numbers
// (docs/CONTRACTS.md, "The box-load parameter block"). Everything is innermost first.
struct BoxParams {
  unsigned long long address;
  unsigned long long dims[5];
  unsigned long long strides[5];  // bytes; strides[0] = element size
  unsigned int box[5];
  unsigned int elem_strides[5];
  unsigned int rank;
  unsigned int elem_size;
  unsigned int swizzle;     // 0 none, 1 32B, 2 64B, 3 128B
  unsigned int interleave;  // 0 none, 1 16B, 2 32B
  unsigned int oob_nan;
  unsigned int dtype;       // CUtensorMapDataType
  unsigned int l2_promotion;  // CUtensorMapL2promotion: 0 none, 1 64B, 2 128B, 3 256B (cp.async's L2 prefetch hint)
  unsigned int reserved;      // the listed fields total 156 bytes; the contract's block is 160 (zero)
};
static_assert(sizeof(BoxParams) == 160, "BoxParams must match TensorMap.box_params() (160 bytes)");
static_assert(alignof(BoxParams) == 8, "BoxParams alignment is 8");

// Box coordinates, innermost first; unused ranks are 0.
struct Coords {
  int32_t c[5];
};

// 32-bit shared-window address of a generic pointer to shared memory: the form every
// .shared operand below takes.
__device__ __forceinline__ uint32_t shared_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Round a shared-memory pointer up to `align` bytes (a power of two). Dynamic shared memory is only
// guaranteed 16-byte aligned; swizzled TMA destinations need 256/512/1024.
__device__ __forceinline__ uint8_t* align_shared(uint8_t* p, uint32_t align) {
  const uint32_t a = shared_addr(p);
  return p + (((a + align - 1) & ~(align - 1)) - a);
}

}  // namespace tmakit
