// im2col-mode TMA loads (sm_90), named after the PTX they emit. PTX ISA sections: "cp.async.bulk.tensor" (load_mode
// .im2col, the im2colInfo operand) and "Tensors / im2col mode".
//
// An im2col load takes rank coordinates {c, w, (h), (d), n} (innermost first, like the tile load) and
// rank-2 16-bit offsets {w, (h), (d)} that are added to the spatial coordinates of every pixel; the
// descriptor must come from cuTensorMapEncodeIm2col. The shared-memory image is pixels_per_column rows of
// channels_per_pixel elements (tmakit.layout.im2col_load_image says exactly which bytes).
#pragma once
#include "tmakit/config.cuh"
#include "tmakit/mbarrier.cuh"
#include "tmakit/types.cuh"

namespace tmakit {

// Im2col offsets, W first; unused entries are 0.
struct Im2colOffsets {
  uint16_t o[3];
};

// cp.async.bulk.tensor.Nd.shared::cluster.global.im2col.mbarrier::complete_tx::bytes
// [dst], [desc, {coords}], [bar], {offsets}: N = 3, 4 or 5 (runtime `rank`). ONE thread issues it after
// arming `bar` with mbarrier_arrive_expect_tx(bar, pixels_per_column * channels_per_pixel * elem size).
__device__ __forceinline__ void cp_async_bulk_tensor_g2s_im2col(int rank, void* smem, const TensorMapDesc* desc,
                                                                const Coords& at, const Im2colOffsets& off,
                                                                MbarrierRef bar) {
#if TMAKIT_HAS_SM90
  const uint32_t dst = shared_addr(smem), mbar = bar.address;
  if (rank == 3) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4}], [%5], {%6};"
                 ::"r"(dst), "l"(desc), "r"(at.c[0]), "r"(at.c[1]), "r"(at.c[2]), "r"(mbar), "h"(off.o[0])
                 : "memory");
  } else if (rank == 4) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4, %5}], [%6], {%7, %8};"
                 ::"r"(dst), "l"(desc), "r"(at.c[0]), "r"(at.c[1]), "r"(at.c[2]), "r"(at.c[3]), "r"(mbar),
                 "h"(off.o[0]), "h"(off.o[1])
                 : "memory");
  } else {
    asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4, %5, %6}], [%7], {%8, %9, %10};"
                 ::"r"(dst), "l"(desc), "r"(at.c[0]), "r"(at.c[1]), "r"(at.c[2]), "r"(at.c[3]), "r"(at.c[4]),
                 "r"(mbar), "h"(off.o[0]), "h"(off.o[1]), "h"(off.o[2])
                 : "memory");
  }
#else
  TMAKIT_REQUIRES_SM90();
#endif
}

}  // namespace tmakit
