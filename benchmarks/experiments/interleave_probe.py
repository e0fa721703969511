"""Experiment: what a TMA tile load writes to shared memory for INTERLEAVE_16B / 32B descriptors.

Why a separate probe: an earlier dump (tma_probe.py, 1-byte data that wrapped, the model's byte count as
expect_tx) was inconclusive and a fault in one case poisoned the context for the rest. Here:
- every global element holds its own linear index + 1 in 2 or 4 bytes (no wrap), so each dumped element says
  where it came from;
- each case is dumped twice with different shared-memory poison bytes (0xAB, 0x54): a byte that is equal in
  both dumps was written by the load, so the written set and the transaction byte count are measured, not
  assumed;
- the barrier waits with a clock-bounded spin and an expect_tx larger than any load, then settles and dumps;
  a third run arms expect_tx with the measured count and records whether the phase then completes;
- cases run in a child process; when a case faults (the context is lost) the parent records the fault and
  starts a new child for the remaining cases.

    PYTHONPATH=. python benchmarks/experiments/interleave_probe.py [--out FILE.jsonl]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys

import numpy as np

KERNEL = r"""
struct alignas(64) Desc { unsigned long long v[16]; };
extern "C" __global__ void probe(const __grid_constant__ Desc tm, int rank, int c0, int c1, int c2, int c3, int c4,
                                 unsigned char* out, int expect, int dump, int poison, int* status) {
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ __align__(8) unsigned long long bar;
  unsigned sbar = (unsigned)__cvta_generic_to_shared(&bar);
  unsigned sdst = (unsigned)__cvta_generic_to_shared(smem);
  for (int i = threadIdx.x; i < dump; i += blockDim.x) smem[i] = (unsigned char)poison;
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(sbar));
    asm volatile("fence.mbarrier_init.release.cluster;");
  }
  __syncthreads();
  asm volatile("fence.proxy.async.shared::cta;");
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(sbar), "r"(expect));
    const void* p = &tm;
    switch (rank) {
      case 3: asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];" :: "r"(sdst), "l"(p), "r"(c0), "r"(c1), "r"(c2), "r"(sbar) : "memory"); break;
      case 4: asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];" :: "r"(sdst), "l"(p), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(sbar) : "memory"); break;
      default: asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5, %6}], [%7];" :: "r"(sdst), "l"(p), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "r"(sbar) : "memory"); break;
    }
  }
  unsigned done = 0;
  long long start = clock64();
  while (!done && clock64() - start < 4000000) {  // about 2 ms
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0; selp.u32 %0, 1, 0, p; }" : "=r"(done) : "r"(sbar));
  }
  start = clock64();
  while (clock64() - start < 2000000) { }  // let every write land before the dump, whatever the barrier said
  __syncthreads();
  if (threadIdx.x == 0) status[0] = (int)done;
  for (int i = threadIdx.x; i < dump; i += blockDim.x) out[i] = smem[i];
}
"""

# name, dtype (CUtensorMapDataType), dims, box, element_strides, interleave (1=16B, 2=32B), swizzle, oob, coords,
# strides (None: dense, rounded to the interleave's granule)
CASES = [
    ("none_base", 7, [8, 8, 4], [8, 4, 2], [1, 1, 1], 0, 0, 0, [0, 0, 0], None),
    ("il16_base", 7, [4, 8, 4], [4, 4, 2], [1, 1, 1], 1, 0, 0, [0, 0, 0], None),
    ("il16_c1", 7, [4, 8, 4], [4, 4, 2], [1, 1, 1], 1, 0, 0, [0, 2, 1], None),
    ("il16_sw32", 7, [4, 8, 4], [4, 4, 2], [1, 1, 1], 1, 1, 0, [0, 0, 0], None),
    ("il16_sw64", 7, [4, 8, 4], [4, 4, 2], [1, 1, 1], 1, 2, 0, [0, 0, 0], None),
    ("il16_sw128", 7, [4, 8, 4], [4, 8, 2], [1, 1, 1], 1, 3, 0, [0, 0, 0], None),
    ("il16_dims8_box8", 7, [8, 8, 4], [8, 4, 2], [1, 1, 1], 1, 0, 0, [0, 0, 0], None),
    ("il16_dims8_box4", 7, [8, 8, 4], [4, 4, 2], [1, 1, 1], 1, 0, 0, [0, 0, 0], None),
    ("il16_dims8_c0_4", 7, [8, 8, 4], [4, 4, 2], [1, 1, 1], 1, 0, 0, [4, 0, 0], None),
    ("il16_es0_2", 7, [8, 8, 4], [8, 4, 2], [2, 1, 1], 1, 0, 0, [0, 0, 0], None),
    ("il16_es1_2", 7, [4, 8, 4], [4, 4, 2], [1, 2, 1], 1, 0, 0, [0, 0, 0], None),
    ("il16_oob", 7, [4, 8, 4], [4, 4, 2], [1, 1, 1], 1, 0, 0, [0, 6, 3], None),
    ("il16_oob_nan", 7, [4, 8, 4], [4, 4, 2], [1, 1, 1], 1, 0, 1, [0, 6, 3], None),
    ("il16_neg", 7, [4, 8, 4], [4, 4, 2], [1, 1, 1], 1, 0, 0, [0, -2, 0], None),
    ("il16_u16", 1, [8, 8, 4], [8, 4, 2], [1, 1, 1], 1, 0, 0, [0, 0, 0], None),
    ("il16_padded", 7, [4, 8, 4], [4, 4, 2], [1, 1, 1], 1, 0, 0, [0, 1, 1], [32, 512]),
    ("il16_4d", 7, [4, 6, 5, 3], [4, 3, 2, 2], [1, 1, 1, 1], 1, 0, 0, [0, 1, 1, 1], None),
    ("il16_box_gt_dims", 7, [4, 3, 2], [4, 4, 4], [1, 1, 1], 1, 0, 0, [0, 0, 0], None),
    ("il32_base", 7, [8, 8, 4], [8, 4, 2], [1, 1, 1], 2, 1, 0, [0, 0, 0], None),
    ("il32_box4", 7, [8, 8, 4], [4, 4, 2], [1, 1, 1], 2, 1, 0, [0, 0, 0], None),
    ("il32_box4_c0_4", 7, [8, 8, 4], [4, 4, 2], [1, 1, 1], 2, 1, 0, [4, 0, 0], None),
    ("il32_dims4", 7, [4, 8, 4], [4, 4, 2], [1, 1, 1], 2, 1, 0, [0, 0, 0], None),
    ("il32_es0_2", 7, [8, 8, 4], [8, 4, 2], [2, 1, 1], 2, 1, 0, [0, 0, 0], None),
    ("il32_c1", 7, [8, 8, 4], [8, 4, 2], [1, 1, 1], 2, 1, 0, [0, 3, 1], None),
    ("il32_oob", 7, [8, 8, 4], [8, 4, 2], [1, 1, 1], 2, 1, 0, [0, 6, 3], None),
    ("il32_u16", 1, [16, 8, 4], [16, 4, 2], [1, 1, 1], 2, 1, 0, [0, 0, 0], None),
    ("il32_u16_box8", 1, [16, 8, 4], [8, 4, 2], [1, 1, 1], 2, 1, 0, [0, 0, 0], None),
    ("il32_dims16", 7, [16, 8, 4], [16, 4, 2], [1, 1, 1], 2, 1, 0, [0, 0, 0], None),
    ("il32_5d", 7, [8, 3, 4, 2, 2], [8, 2, 2, 2, 2], [1, 1, 1, 1, 1], 2, 1, 0, [0, 1, 1, 0, 1], None),
    ("il32_padded", 7, [8, 8, 4], [8, 4, 2], [1, 1, 1], 2, 1, 0, [0, 1, 1], [64, 1024]),
    # second round (after the first showed: slices as rows, c0 in slices, dim rank-2 loaded once)
    ("il16_sw32_big", 7, [4, 64, 4], [64, 1, 2], [1, 1, 1], 1, 1, 0, [0, 0, 0], None),
    ("il16_sw64_big", 7, [4, 64, 4], [64, 1, 2], [1, 1, 1], 1, 2, 0, [0, 0, 0], None),
    ("il16_sw128_big", 7, [4, 64, 4], [64, 1, 2], [1, 1, 1], 1, 3, 0, [0, 0, 0], None),
    ("il16_c0_2", 7, [4, 8, 4], [4, 4, 2], [1, 1, 1], 1, 0, 0, [2, 0, 0], None),
    ("il16_c0_neg", 7, [4, 8, 4], [4, 4, 2], [1, 1, 1], 1, 0, 0, [-1, 1, 0], None),
    ("il16_c0_far", 7, [8, 8, 4], [4, 4, 2], [1, 1, 1], 1, 0, 0, [6, 1, 0], None),
    ("il16_es2_2", 7, [4, 8, 6], [4, 4, 5], [1, 1, 2], 1, 0, 0, [0, 0, 0], None),
    ("il16_4d_es1", 7, [4, 6, 5, 3], [4, 5, 3, 2], [1, 2, 1, 1], 1, 0, 0, [0, 0, 1, 1], None),
    ("il16_4d_box2", 7, [4, 6, 5, 3], [4, 2, 3, 2], [1, 1, 1, 1], 1, 0, 0, [0, 1, 2, 0], None),
    ("il16_c1_top", 7, [4, 8, 4], [4, 4, 2], [1, 1, 1], 1, 0, 0, [0, 8, 0], None),
    ("il16_4d_c2_top", 7, [4, 6, 5, 3], [4, 3, 2, 2], [1, 1, 1, 1], 1, 0, 0, [0, 1, 5, 1], None),
    ("il16_4d_c1_oob", 7, [4, 6, 5, 3], [4, 3, 2, 2], [1, 1, 1, 1], 1, 0, 0, [0, 4, 1, 2], None),
    ("il32_c0_6", 7, [8, 8, 4], [4, 4, 2], [1, 1, 1], 2, 1, 0, [6, 0, 0], None),
    ("il32_c0_neg", 7, [8, 8, 4], [8, 4, 2], [1, 1, 1], 2, 1, 1, [-2, 0, 1], None),
    ("il16_u8", 0, [16, 8, 4], [16, 4, 2], [1, 1, 1], 1, 0, 0, [0, 1, 0], None),
    ("il32_f64", 8, [4, 8, 4], [4, 4, 2], [1, 1, 1], 2, 1, 1, [0, 6, 3], None),
]
SIZES = {0: 1, 1: 2, 2: 4, 3: 4, 4: 8, 5: 8, 6: 2, 7: 4, 8: 8, 9: 2, 10: 4, 11: 4, 12: 4}
DUMP = 16384
HUGE_TX = 1 << 19  # more than any case loads: the barrier never completes early


def dense_strides(dims: list[int], esize: int, granule: int) -> list[int]:
    out, acc = [], dims[0] * esize
    for d in dims[1:]:
        acc = -(-acc // granule) * granule
        out.append(acc)
        acc *= d
    return out


def run_child(names: list[str]) -> int:
    """Dump each named case, one JSON line each (flushed, so the parent sees how far a faulting child got)."""
    from tmakit import _driver
    from tmakit.build import load_module
    from tmakit.tensormap.encode import descriptor_bytes, encode_tiled_raw

    module = load_module(KERNEL)
    kernel = module.kernel("probe")
    drv = _driver.driver()
    out = _driver.call("cuMemAlloc", DUMP)
    status = _driver.call("cuMemAlloc", 16)
    for name in names:
        name_, dtype, dims, box, es, il, sw, oob, coords, strides = next(c for c in CASES if c[0] == name)
        esize = SIZES[dtype]
        strides = strides or dense_strides(dims, esize, 32 if il == 2 else 16)
        total = strides[-1] * dims[-1]
        total_with_slack = total + 4096  # whole slices are read past a dense tensor: define those bytes too
        values = (np.arange(total_with_slack // esize, dtype=np.uint64) + 1).astype({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[esize])
        buf = _driver.call("cuMemAlloc", total_with_slack)
        _driver.call("cuMemcpyHtoD", buf, values.ctypes.data, values.nbytes)
        err, tmap = encode_tiled_raw(dtype, int(buf), dims, strides, box, es, il, sw, 0, oob)
        record = {"name": name, "dtype": dtype, "esize": esize, "dims": dims, "strides": strides, "box": box,
                  "element_strides": es, "interleave": il, "swizzle": sw, "oob": oob, "coords": coords,
                  "encode": err.name}
        if int(err) == 0:
            desc = descriptor_bytes(tmap)

            class Raw:
                device = 0

                def __kernel_param__(self, n: int) -> bytes:
                    return desc

            c = (coords + [0] * 5)[:5]
            images, done = [], []
            for poison, expect in ((0xAB, HUGE_TX), (0x54, HUGE_TX)):
                kernel(Raw(), len(dims), *c, int(out), expect, DUMP, poison, int(status), grid=1, block=128,
                       shared_mem=DUMP)
                _driver.call("cuCtxSynchronize")
                img = np.empty(DUMP, dtype=np.uint8)
                _driver.call("cuMemcpyDtoH", img.ctypes.data, out, DUMP)
                images.append(img)
            written = images[0] == images[1]
            nwritten = int(written.sum())
            kernel(Raw(), len(dims), *c, int(out), nwritten, DUMP, 0xAB, int(status), grid=1, block=128,
                   shared_mem=DUMP)
            _driver.call("cuCtxSynchronize")
            st = np.zeros(4, dtype=np.int32)
            _driver.call("cuMemcpyDtoH", st.ctypes.data, status, 16)
            last = int(np.nonzero(written)[0].max()) + 1 if nwritten else 0
            record.update(written_bytes=nwritten, completes_with_written_tx=bool(st[0]),
                          image=images[0][:last].tobytes().hex(), written_mask=np.packbits(written[:last]).tobytes().hex())
        print(json.dumps(record), flush=True)
        _driver.call("cuMemFree", buf)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", nargs="*")
    parser.add_argument("--out", default=None)
    parser.add_argument("--only", nargs="*", help="case names (default: all)")
    args = parser.parse_args()
    if args.child is not None:
        return run_child(args.child)
    pending = [c[0] for c in CASES if not args.only or c[0] in args.only]
    records: list[dict] = []
    while pending:
        proc = subprocess.run([sys.executable, __file__, "--child", *pending], capture_output=True, text=True,
                              timeout=300)
        got = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        records += got
        done_names = {r["name"] for r in got}
        pending = [n for n in pending if n not in done_names]
        if pending and proc.returncode != 0:  # the first unfinished case faulted: record it, go on with the rest
            tail = (proc.stderr or "").strip().splitlines()[-3:]
            records.append({"name": pending[0], "fault": " | ".join(tail)})
            pending = pending[1:]
        elif pending:
            break
    text = "\n".join(json.dumps(r) for r in records) + "\n"
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text)
    for r in records:
        brief = {k: r[k] for k in ("name", "encode", "written_bytes", "completes_with_written_tx", "fault") if k in r}
        print(json.dumps(brief))
    return 0


if __name__ == "__main__":
    sys.exit(main())
