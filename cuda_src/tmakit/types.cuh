// tmakit device types: fixed-width integers, the TMA descriptor and the cp.async-path BoxParams.
//
// The fixed-width integers are the standard ones wherever a standard library is there (nvcc, or NVRTC given
// <cstdint>): tmakit::uint64_t *is* std::uint64_t, so a user's `std::uint64_t` barrier passes to every wrapper
// and `using namespace tmakit;` next to <cstdint> is not ambiguous. NVRTC without system headers (the pip
// wheel's NVRTC, no CUDA toolkit) gets them defined here, inside namespace tmakit only.
#pragma once

#if defined(__CUDACC_RTC__) && !defined(TMAKIT_HAVE_CSTDINT)
namespace tmakit {
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long long int64_t;
}  // namespace tmakit
#else
#include <cstdint>
namespace tmakit {
using std::int16_t;
using std::int32_t;
using std::int64_t;
using std::int8_t;
using std::uint16_t;
using std::uint32_t;
using std::uint64_t;
using std::uint8_t;
}  // namespace tmakit
#endif

// Pure integer helpers (swizzle, box geometry, wgmma descriptors) are also host functions, so a CPU harness
// can run the device's address arithmetic against the Python layout model (tests/test_device_headers.py).
#define TMAKIT_HD __host__ __device__ __forceinline__

namespace tmakit {

static_assert(sizeof(uint64_t) == 8 && sizeof(int64_t) == 8 && sizeof(uint32_t) == 4, "fixed-width integers");

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

// Whether two types are the same (no <type_traits> under NVRTC).
template <class A, class B>
struct IsSame {
  static constexpr bool value = false;
};
template <class A>
struct IsSame<A, A> {
  static constexpr bool value = true;
};

// Item i of a compile-time list (a define such as TMAKIT_GEMM_DESC_A: "v0, v1, ..."), folded to a constant for a
// constant i. A function rather than a constexpr array: nvcc does not let device code read host arrays.
TMAKIT_HD constexpr uint64_t list_item(int) { return 0; }
template <class... Rest>
TMAKIT_HD constexpr uint64_t list_item(int i, uint64_t first, Rest... rest) {
  return i == 0 ? first : list_item(i - 1, static_cast<uint64_t>(rest)...);
}

// How many items such a list has.
template <class... Items>
TMAKIT_HD constexpr int list_size(Items...) {
  return static_cast<int>(sizeof...(Items));
}

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
