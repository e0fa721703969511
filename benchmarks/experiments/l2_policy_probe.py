"""Experiment: what the L2 eviction priority of the transpose's source loads changes, and how close plain copies
come to torch's, each as a ratio to torch's ``dst.copy_(src)`` timed in the same round (rounds interleaved).

Variants:
- copy (unless --skip-copies): tmakit.ops.copy (TMA bulk ring) and a grid-stride 16-byte register copy
  (plain or .cs loads and stores, 4 or 8 blocks of 256 threads per SM).
- transpose: tmakit.ops.transpose with the source loads' L2Eviction (--policies: 0 normal, 1 evict_first,
  2 evict_last; TMAKIT_TRANSPOSE_SOURCE_EVICTION; TMA loads only) with and without source_lead (--leads) on
  --backends, at --shapes (rows x cols of 4-byte elements,
  viewed as --dtypes; RxC@D@S puts dst D and src S bytes past a 256-byte boundary).
- --aftermath-mib: after each policy's transpose, a copy of that many MiB repeated (does a policy leave lines
  behind that crowd out the next kernel's?).

    PYTHONPATH=. python benchmarks/experiments/l2_policy_probe.py [--rounds 3] [--gib 2] [--policies 0,2]

Measured on the H100 (2026-11-23; benchmarks/results/l2_policy_h100.jsonl, device_runs.md 74-79; runs 74-78
with an earlier build that also put the policy on the TMA copy's loads and the transpose's stores):
- copies: tmakit.ops.copy 0.91-0.92x, the register copy 0.92-0.93x; evict_first on the copy's loads or stores
  within the spread. No plain copy reaches torch's (a driver copy kernel).
- transpose, source evict_first: 0.04-0.06 lower at a source pitch of 64 mod 128 (16336x32848), neutral at
  aligned pitches; evict_last: 0.01-0.04 higher at 64 mod 128 (1-byte 16384x32848 0.825 -> 0.841, the
  aligned pitch's 0.851 nearly reached), neutral at aligned pitches; evict_last on half the lines: about the
  same. Policies on the stores: within the spread.
- the alignment of the source rows matters most: a src base 32 or 64 bytes past a line (every 128-byte tile
  row then straddles two lines) gave 0.70x and 0.74-0.79x against 0.79-0.85x aligned (1 and 4-byte elements).
- a dst base that puts each 256-byte (1-byte elements) run across three lines instead of two: 0.81-0.82x
  against 0.86x (evict_last).
"""
from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from copy_bandwidth import _time_ms  # noqa: E402

REGISTER_COPY = r"""
typedef unsigned long long uint64_t;
template <int Streaming, int U>
__device__ __forceinline__ void register_copy(uint4* dst, const uint4* src, uint64_t n) {
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x;
  for (; i + (U - 1) * stride < n; i += U * stride) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = Streaming ? __ldcs(src + i + u * stride) : src[i + u * stride];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (Streaming) __stcs(dst + i + u * stride, v[u]);
      else dst[i + u * stride] = v[u];
    }
  }
  for (; i < n; i += stride) dst[i] = src[i];
}
extern "C" __global__ void copy_plain(uint4* dst, const uint4* src, uint64_t n) { register_copy<0, 4>(dst, src, n); }
extern "C" __global__ void copy_streaming(uint4* dst, const uint4* src, uint64_t n) { register_copy<1, 4>(dst, src, n); }
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--policies", default="normal,last",
                        help="L2Eviction names or values of the transpose's source loads")
    parser.add_argument("--backends", default="tma")
    parser.add_argument("--shapes", default="16384x32768,16336x32848",
                        help="transpose shapes (4-byte elements), each optionally @dst offset@src offset in bytes")
    parser.add_argument("--dtypes", default="uint8,int32")
    parser.add_argument("--leads", default="on", help="on,off: tile columns moved back to whole source lines or not")
    parser.add_argument("--skip-copies", action="store_true")
    parser.add_argument("--aftermath-mib", type=int, default=0)
    args = parser.parse_args()
    import torch

    import tmakit
    from tmakit.build import load_module

    tr = importlib.import_module("tmakit.ops.transpose")  # the module; tmakit.ops.transpose is the function
    source_lead = tr.source_lead
    policies = [tr.L2Eviction.parse(int(p) if p.isdigit() else p, "--policies") for p in args.policies.split(",")]
    backends = args.backends.split(",")
    shapes = [(*(int(x) for x in s.split("@")[0].split("x")), *(int(x) for x in (s.split("@") + ["0", "0"])[1:3]))
              for s in args.shapes.split(",")]
    n = max([int(args.gib * (1 << 30))] + [r * c * 4 for r, c, _, _ in shapes]) // 16 * 16
    src_bytes = torch.randint(0, 255, (n + 256,), dtype=torch.uint8, device="cuda")
    dst_bytes = torch.empty(n + 256, dtype=torch.uint8, device="cuda")  # 256-byte aligned (caching allocator)
    src, dst = src_bytes[:n], dst_bytes[:n]
    module = load_module(REGISTER_COPY)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    ratios: dict[str, list[float]] = {}

    def record(name: str, copy_ms: float, fn, check) -> None:  # type: ignore[no-untyped-def]
        fn()
        torch.cuda.synchronize()
        ms = _time_ms(torch, fn, 3, 15) if check() else float("nan")
        ratios.setdefault(name, []).append(round(copy_ms / ms, 3))

    def views(rows: int, cols: int, dst_offset: int, src_offset: int, dtype):  # type: ignore[no-untyped-def]
        s_x = src_bytes[src_offset: src_offset + rows * cols * 4].view(torch.float32).view(rows, cols).view(dtype)
        d_x = dst_bytes[dst_offset: dst_offset + rows * cols * 4].view(dtype).view(s_x.shape[1], s_x.shape[0])
        return s_x, d_x

    for _ in range(args.rounds):
        copy_ms = _time_ms(torch, lambda: dst.copy_(src), 3, 15)
        if not args.skip_copies:
            dst.fill_(0xA5)
            record("copy tmakit.ops.copy tma", copy_ms, lambda: tmakit.ops.copy(dst, src, backend="tma"),
                   lambda: torch.equal(dst, src))
            for entry in ("copy_plain", "copy_streaming"):
                for blocks_per_sm in (4, 8):
                    k = module.kernel(entry)
                    dst.fill_(0xA5)
                    record(f"copy register {entry} {blocks_per_sm}/SM", copy_ms,
                           lambda: k(dst, src, n // 16, grid=(sms * blocks_per_sm, 1, 1), block=(256, 1, 1)),
                           lambda: torch.equal(dst, src))
        for rows, cols, dst_offset, src_offset in shapes:
            for dtype in (getattr(torch, name) for name in args.dtypes.split(",")):
                s_x, d_x = views(rows, cols, dst_offset, src_offset, dtype)
                for backend in backends:
                    for policy in policies:
                        for lead in args.leads.split(","):
                            tr._SOURCE_EVICTION = policy
                            tr.source_lead = source_lead if lead == "on" else (lambda *_: 0)
                            d_x.view(torch.uint8).fill_(0xA5)
                            record(f"transpose {rows}x{cols}@{dst_offset}@{src_offset} {s_x.element_size()}B {backend} "
                                   f"eviction={policy.name.lower()} lead={lead}", copy_ms,
                                   lambda: tr.transpose(d_x, s_x, backend=backend), lambda: torch.equal(d_x, s_x.t()))
    tr.source_lead = source_lead
    if args.aftermath_mib:
        victim_src = torch.randint(0, 255, (args.aftermath_mib << 20,), dtype=torch.uint8, device="cuda")
        victim_dst = torch.empty_like(victim_src)
        s_x, d_x = views(*shapes[0], torch.uint8)
        for _ in range(args.rounds):
            for policy in policies:
                tr._SOURCE_EVICTION = policy
                tr.transpose(d_x, s_x, backend=backends[0])
                torch.cuda.synchronize()
                times = [_time_ms(torch, lambda: victim_dst.copy_(victim_src), 0, 1) for _ in range(30)]
                name = f"aftermath: {args.aftermath_mib} MiB copy after eviction={policy.name.lower()}, ms"
                ratios.setdefault(f"{name} (first 5)", []).append(round(statistics.median(times[:5]), 4))
                ratios.setdefault(f"{name} (last 20)", []).append(round(statistics.median(times[10:]), 4))
    for name, values in ratios.items():
        print(json.dumps({"variant": name, "value": statistics.median(values), "rounds": values}))
    print(json.dumps({"device": torch.cuda.get_device_name()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
