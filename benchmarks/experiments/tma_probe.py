"""Experiment: dump what hardware TMA box loads write to shared memory for hand-picked cases.

Each global element holds its own linear index + 1 (in its element width), so every byte of the dumped
image says where it came from. Output: JSON lines with the case and the image as hex. Used to settle the
layout model's open points (narrow boxes under swizzle, interleave, element strides, OOB fill values).
"""
from __future__ import annotations

import ctypes
import json
import sys

import numpy as np

from tmakit import _driver
from tmakit.tensormap.encode import encode_tiled_raw

KERNEL = r"""
struct alignas(64) Desc { unsigned long long v[16]; };
extern "C" __global__ void probe(const __grid_constant__ Desc tm, int rank, int c0, int c1, int c2, int c3, int c4,
                                 unsigned char* out, int nbytes, int dump) {
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ __align__(8) unsigned long long bar;
  unsigned sbar = (unsigned)__cvta_generic_to_shared(&bar);
  unsigned sdst = (unsigned)__cvta_generic_to_shared(smem);
  for (int i = threadIdx.x; i < dump; i += blockDim.x) smem[i] = 0xAB;
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(sbar));
    asm volatile("fence.mbarrier_init.release.cluster;");
  }
  __syncthreads();
  asm volatile("fence.proxy.async.shared::cta;");
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(sbar), "r"(nbytes));
    const void* p = &tm;
    switch (rank) {
      case 1: asm volatile("cp.async.bulk.tensor.1d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2}], [%3];" :: "r"(sdst), "l"(p), "r"(c0), "r"(sbar) : "memory"); break;
      case 2: asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" :: "r"(sdst), "l"(p), "r"(c0), "r"(c1), "r"(sbar) : "memory"); break;
      case 3: asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];" :: "r"(sdst), "l"(p), "r"(c0), "r"(c1), "r"(c2), "r"(sbar) : "memory"); break;
      case 4: asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];" :: "r"(sdst), "l"(p), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(sbar) : "memory"); break;
      default: asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5, %6}], [%7];" :: "r"(sdst), "l"(p), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "r"(sbar) : "memory"); break;
    }
  }
  unsigned done = 0; long spins = 0;
  while (!done) {
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0; selp.u32 %0, 1, 0, p; }" : "=r"(done) : "r"(sbar));
    if (++spins > 20000000) { if (threadIdx.x == 0) out[0] = 0xEE; break; }
  }
  for (int i = threadIdx.x; i < dump; i += blockDim.x) out[i] = smem[i];
}
"""

CASES = [
    # name, dtype, esize, dims, box, es, interleave, swizzle, oob, coords
    ("sw128_full", 7, 4, [64, 64], [32, 8], [1, 1], 0, 3, 0, [0, 0]),
    ("sw128_half", 7, 4, [64, 64], [16, 16], [1, 1], 0, 3, 0, [0, 0]),
    ("sw128_quarter", 7, 4, [64, 64], [8, 16], [1, 1], 0, 3, 0, [0, 0]),
    ("sw128_16B", 7, 4, [64, 64], [4, 32], [1, 1], 0, 3, 0, [0, 0]),
    ("sw64_full", 7, 4, [64, 64], [16, 16], [1, 1], 0, 2, 0, [0, 0]),
    ("sw64_half", 7, 4, [64, 64], [8, 16], [1, 1], 0, 2, 0, [0, 0]),
    ("sw32_full", 7, 4, [64, 64], [8, 16], [1, 1], 0, 1, 0, [0, 0]),
    ("sw32_16B", 7, 4, [64, 64], [4, 16], [1, 1], 0, 1, 0, [0, 0]),
    ("sw128_u8_48B", 0, 1, [256, 64], [48, 24], [1, 1], 0, 3, 0, [16, 0]),
    ("oob_zero_f32", 7, 4, [20, 12], [8, 8], [1, 1], 0, 0, 0, [-3, -2]),
    ("oob_nan_f32", 7, 4, [20, 12], [8, 8], [1, 1], 0, 0, 1, [14, 8]),
    ("oob_nan_f16", 6, 2, [20, 12], [16, 8], [1, 1], 0, 0, 1, [10, -4]),
    ("oob_nan_bf16", 9, 2, [20, 12], [16, 8], [1, 1], 0, 0, 1, [10, -4]),
    ("oob_nan_f64", 8, 8, [20, 12], [4, 8], [1, 1], 0, 0, 1, [18, 9]),
    ("oob_nan_tf32", 11, 4, [20, 12], [8, 8], [1, 1], 0, 0, 1, [16, 8]),
    ("oob_full", 7, 4, [20, 12], [8, 8], [1, 1], 0, 0, 0, [100, 100]),
    ("es_1_2", 7, 4, [64, 64], [8, 8], [1, 2], 0, 0, 0, [0, 0]),
    ("es_4_3", 7, 4, [64, 64], [8, 9], [4, 3], 0, 0, 0, [0, 1]),
    ("es_3_oob", 7, 4, [20, 10], [8, 9], [1, 3], 0, 0, 0, [16, 4]),
    ("es_sw128", 6, 2, [128, 64], [64, 16], [1, 2], 0, 3, 0, [0, 0]),
    ("il16_f16", 6, 2, [8, 32, 4], [8, 16, 2], [1, 1, 1], 1, 0, 0, [0, 0, 0]),
    ("il16_f16_es2", 6, 2, [8, 32, 4], [8, 16, 2], [2, 1, 1], 1, 0, 0, [0, 0, 0]),
    ("il16_f16_sw32", 6, 2, [8, 32, 4], [8, 16, 2], [1, 1, 1], 1, 1, 0, [0, 0, 0]),
    ("il16_f16_sw128", 6, 2, [8, 32, 4], [8, 16, 2], [1, 1, 1], 1, 3, 0, [0, 0, 0]),
    ("il16_f32_box4", 7, 4, [4, 32, 4], [4, 16, 2], [1, 1, 1], 1, 0, 0, [0, 1, 0]),
    ("il32_f32", 7, 4, [8, 32, 4], [8, 16, 2], [1, 1, 1], 2, 1, 0, [0, 0, 0]),
    ("il32_u8_box16", 0, 1, [32, 32, 4], [16, 8, 2], [1, 1, 1], 2, 1, 0, [0, 0, 0]),
    ("r5_neg", 9, 2, [16, 5, 4, 3, 2], [8, 2, 2, 2, 2], [1, 1, 1, 1, 1], 0, 0, 0, [-4, 4, -1, 2, 1]),
    ("r1", 3, 4, [100], [16], [1], 0, 0, 0, [90]),
    ("sw128_3d_half", 7, 4, [64, 8, 4], [16, 4, 3], [1, 1, 1], 0, 3, 0, [0, 0, 0]),
    ("sw64_16B", 7, 4, [64, 64], [4, 16], [1, 1], 0, 2, 0, [0, 0]),
    ("sw128_48B_odd_rows", 0, 1, [256, 64], [48, 5], [1, 1], 0, 3, 0, [0, 0]),
    ("sw64_es", 6, 2, [64, 64], [32, 9], [1, 2], 0, 2, 1, [0, 60]),
    ("oob_neg_aligned", 7, 4, [20, 12], [8, 8], [1, 1], 0, 0, 0, [-4, -2]),
    ("misaligned_c0", 7, 4, [20, 12], [8, 8], [1, 1], 0, 0, 0, [1, 0]),
    ("neg_c1_only", 7, 4, [20, 12], [8, 8], [1, 1], 0, 0, 0, [0, -2]),
    ("neg_c0_m3_only", 7, 4, [20, 12], [8, 8], [1, 1], 0, 0, 0, [-3, 0]),
    ("box_gt_dims", 7, 4, [4, 3], [8, 8], [1, 1], 0, 0, 0, [0, 0]),
]


def main() -> int:
    from cuda.core import Device, Program, ProgramOptions

    dev = Device(0)
    dev.set_current()
    arch = "sm_%d%da" % dev.compute_capability
    obj = Program(KERNEL, "c++", ProgramOptions(arch=arch, std="c++17")).compile("cubin")
    drv = _driver.driver()
    module = _driver.call("cuModuleLoadData", obj.code)
    func = _driver.call("cuModuleGetFunction", module, b"probe")
    _driver.call("cuFuncSetAttribute", func, drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 200 * 1024)
    out_cap = 1 << 20
    out = _driver.call("cuMemAlloc", out_cap)
    only = sys.argv[1:]
    for name, dtype, esize, dims, box, es, il, sw, oob, coords in CASES:
        if only and name not in only:
            continue
        rank = len(dims)
        # dense strides rounded to 16 (32 for interleave 32B)
        gran = 32 if il == 2 else 16
        strides, acc = [], dims[0] * esize
        for d in dims[1:]:
            acc = -(-acc // gran) * gran
            strides.append(acc)
            acc *= d
        total = acc if rank > 1 else dims[0] * esize
        nelem = total // esize
        host = (np.arange(nelem, dtype=np.uint64) + 1).astype({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[esize])
        buf = _driver.call("cuMemAlloc", max(total, 1024))
        _driver.call("cuMemcpyHtoD", buf, host.ctypes.data, host.nbytes)
        err, tm = encode_tiled_raw(dtype, int(buf), dims, strides, box, es, il, sw, 0, oob)
        record = {"name": name, "dtype": dtype, "esize": esize, "dims": dims, "strides": strides, "box": box,
                  "element_strides": es, "interleave": il, "swizzle": sw, "oob": oob, "coords": coords,
                  "encode": err.name}
        if int(err) == 0:
            loaded = 1
            for i, (b, e) in enumerate(zip(box, es)):
                loaded *= b if (i == 0 and il == 0) else -(-b // e)
            nbytes = loaded * esize
            record["nbytes"] = nbytes
            c = (coords + [0] * 5)[:5]
            vals = [ctypes.c_uint64(int(tm.getPtr()))]
            holders = [np.frombuffer(ctypes.string_at(int(tm.getPtr()), 128), dtype=np.uint8).copy()]
            args = [holders[0].ctypes.data]
            ints = [np.array([v], dtype=np.int32) for v in [rank] + c]
            outp = np.array([int(out)], dtype=np.uint64)
            nb = np.array([nbytes], dtype=np.int32)
            dump = 48 * 1024
            dp = np.array([dump], dtype=np.int32)
            args += [a.ctypes.data for a in ints] + [outp.ctypes.data, nb.ctypes.data, dp.ctypes.data]
            params = np.array(args, dtype=np.uint64)
            res = drv.cuLaunchKernel(func, 1, 1, 1, 128, 1, 1, dump, 0, params.ctypes.data, 0)
            record["launch"] = res[0].name
            sync = drv.cuCtxSynchronize()
            record["sync"] = sync[0].name
            if int(sync[0]) == 0:
                img = np.empty(dump, dtype=np.uint8)
                _driver.call("cuMemcpyDtoH", img.ctypes.data, out, img.nbytes)
                last = int(np.nonzero(img != 0xAB)[0].max()) + 1 if (img != 0xAB).any() else 0
                record["image"] = img[: max(last, nbytes)].tobytes().hex()
            del vals
        print(json.dumps(record))
        _driver.call("cuMemFree", buf)
    return 0


if __name__ == "__main__":
    sys.exit(main())
