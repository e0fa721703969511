"""The seeded-bug suite's kernels: each reproduces one public thread's bug, beside its correct twin.

Each seed is one CUDA source compiled twice with NVRTC (``BUG=1`` and ``BUG=0``) and linted with the tensor maps
it is launched with; a few keep the kernel and change the map instead (the bug is in the pairing). The kernels
are written against raw PTX through small inline-asm helpers (``PRELUDE``), not tmakit's device headers, so they
stay what the threads describe whatever those headers become. tests/test_lint_seeded.py runs them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

_ACC = ", ".join(f"%{i}" for i in range(32))
_ACC_OUT = ", ".join(f'"+f"(d[{i}])' for i in range(32))

PRELUDE = r"""
typedef unsigned int u32;
typedef unsigned long long u64;
struct __align__(64) TMap { unsigned char bytes[128]; };
__device__ __forceinline__ u32 sa(const void* p) { return (u32)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void bar_init(u64* b, u32 n) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(sa(b)), "r"(n) : "memory"); }
__device__ __forceinline__ void fence_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
__device__ __forceinline__ void fence_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
__device__ __forceinline__ void expect(u64* b, u32 tx) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(sa(b)), "r"(tx) : "memory"); }
__device__ __forceinline__ void arrive(u64* b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(sa(b)) : "memory"); }
__device__ __forceinline__ bool try_wait(u64* b, u32 parity) {
  u32 ok;
  asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
               : "=r"(ok) : "r"(sa(b)), "r"(parity) : "memory");
  return ok != 0; }
__device__ __forceinline__ void wait(u64* b, u32 parity) { while (!try_wait(b, parity)) {} }
__device__ __forceinline__ void load2d(void* dst, const void* map, int x, int y, u64* b) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3}], [%4];" :: "r"(sa(dst)), "l"(map), "r"(x), "r"(y), "r"(sa(b)) : "memory"); }
__device__ __forceinline__ void store2d(const void* map, int x, int y, const void* src) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%1, %2}], [%3];"
               :: "l"(map), "r"(x), "r"(y), "r"(sa(src)) : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
  asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
"""

WGMMA = r"""
__device__ __forceinline__ u64 desc(const void* p, u32 lbo_field, u32 sbo_field, u32 swizzle_field) {
  return (u64)((sa(p) & 0x3FFFF) >> 4) | ((u64)lbo_field << 16) | ((u64)sbo_field << 32) | ((u64)swizzle_field << 62); }
__device__ __forceinline__ void mma_64x64x16(float* d, u64 da, u64 db) {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, 1, 0;\n"
               " wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {ACC}, %32, %33, p, 1, 1, 0, 0;\n}"
               : ACC_OUT : "l"(da), "l"(db));
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }
""".replace("{ACC}", "{" + _ACC + "}").replace("ACC_OUT", _ACC_OUT)


@dataclass(frozen=True)
class Seed:
    """One public thread's bug: ``source`` with BUG=1 is flagged by ``rule``; with BUG=0 it is clean."""

    id: str
    thread: str  # repository and issue/PR number
    rule: str
    what: str
    source: str
    entry: str
    maps: dict[str, dict[str, Any]]  # parameter -> describe_tensor keyword arguments
    bug_maps: dict[str, dict[str, Any]] | None = None  # the bug is in the pairing: same kernel, this map
    defines: dict[str, int] = field(default_factory=dict)  # for both builds
    bug_defines: dict[str, int] = field(default_factory=lambda: {"BUG": 1})
    twin_defines: dict[str, int] = field(default_factory=lambda: {"BUG": 0})
    cluster: tuple | None = None


BF16_128B = {"shape": (1024, 64), "dtype": "bf16", "box": (64, 64), "swizzle": "128B"}  # 8192-byte boxes
F32_PLAIN = {"shape": (64, 64), "dtype": "f32", "box": (16, 32), "swizzle": "none"}  # 2048-byte boxes

RING = PRELUDE + r"""
extern "C" __global__ void __launch_bounds__(256) ring(const __grid_constant__ TMap a, int k_tiles) {
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ u64 full, empty;
  if (threadIdx.x == 0) { bar_init(&full, FULL_COUNT); bar_init(&empty, EMPTY_COUNT); fence_init(); }
  __syncthreads();
  if (threadIdx.x < 128) {
    if (threadIdx.x == 0) {
#pragma unroll 1
      for (int k = 0; k < k_tiles; ++k) {
        wait(&empty, (k & 1) ^ 1);
        expect(&full, 8192);
        load2d(smem, &a, 0, k * 64, &full);
      }
    }
  } else {
#pragma unroll 1
    for (int k = 0; k < k_tiles; ++k) {
      wait(&full, k & 1);
      arrive(&empty);
    }
  }
}
"""

SKIP_COPY = PRELUDE + r"""
extern "C" __global__ void __launch_bounds__(128) skip_copy(const __grid_constant__ TMap a, const __grid_constant__ TMap b,
                                                            const int* skip, int k_tiles) {
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ u64 full;
  if (threadIdx.x == 0) { bar_init(&full, 1); fence_init(); }
  __syncthreads();
  if (threadIdx.x != 0) return;
#pragma unroll 1
  for (int k = 0; k < k_tiles; ++k) {
    const bool skip_b = skip[k] != 0;
#if BUG
    expect(&full, 16384);  // producer_acquire sets the bytes of both boxes...
    load2d(smem, &a, 0, k * 64, &full);
    if (!skip_b) load2d(smem + 8192, &b, 0, k * 64, &full);  // ...and the second copy may be skipped
#else
    if (!skip_b) {
      expect(&full, 16384);
      load2d(smem, &a, 0, k * 64, &full);
      load2d(smem + 8192, &b, 0, k * 64, &full);
    } else {
      expect(&full, 8192);
      load2d(smem, &a, 0, k * 64, &full);
    }
#endif
    wait(&full, k & 1);
  }
}
"""

WARP_ROLES = PRELUDE + r"""
extern "C" __global__ void __launch_bounds__(64) lanes(const __grid_constant__ TMap a, int k_tiles) {
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ u64 full, empty;
  const int lane = threadIdx.x % 32;
  if (threadIdx.x == 0) { bar_init(&full, 1); bar_init(&empty, 1); fence_init(); }
  __syncthreads();
  if (threadIdx.x < 32) {  // the load warp: every lane waits, the elected lane issues
#pragma unroll 1
    for (int k = 0; k < k_tiles; ++k) {
      wait(&empty, (k & 1) ^ 1);
#if !BUG
      __syncwarp();
#endif
      if (lane == 0) { expect(&full, 8192); load2d(smem, &a, 0, k * 64, &full); }
    }
  } else {
#pragma unroll 1
    for (int k = 0; k < k_tiles; ++k) {
      wait(&full, k & 1);
      __syncwarp();
      if (lane == 0) arrive(&empty);
    }
  }
}
"""

LEADER_WARP = PRELUDE + r"""
extern "C" __global__ void __launch_bounds__(96) leader(const __grid_constant__ TMap a, int k_tiles) {
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ u64 ready, empty;
  if (threadIdx.x == 0) { bar_init(&ready, 1); bar_init(&empty, 1); fence_init(); }
  __syncthreads();
  if (threadIdx.x == 0) {
#pragma unroll 1
    for (int k = 0; k < k_tiles; ++k) {
      wait(&empty, (k & 1) ^ 1);
      expect(&ready, 8192);
      load2d(smem, &a, 0, k * 64, &ready);
    }
  } else if (threadIdx.x >= 32) {  // a two-warp consumer partition; its leader warp signals
#pragma unroll 1
    for (int k = 0; k < k_tiles; ++k) {
      wait(&ready, k & 1);
#if !BUG
      asm volatile("bar.sync 1, 64;" ::: "memory");
#endif
      if (threadIdx.x == 32) arrive(&empty);
    }
  }
}
"""

STALE_INDEX = PRELUDE + r"""
extern "C" __global__ void __launch_bounds__(128) stale(const __grid_constant__ TMap a) {
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ u64 bars[2];
  if (threadIdx.x == 0) { bar_init(&bars[0], 1); bar_init(&bars[1], 1); fence_init(); }
  __syncthreads();
  if (threadIdx.x == 0) {
    expect(&bars[BUG ? 0 : 1], 8192);  // the expect index left from the previous kernel
    load2d(smem, &a, 0, 0, &bars[1]);
  }
  wait(&bars[1], 0);
}
"""

OFFSET_DST = PRELUDE + r"""
extern "C" __global__ void __launch_bounds__(128) offset_dst(const __grid_constant__ TMap a) {
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ u64 bar;
  if (threadIdx.x == 0) { bar_init(&bar, 1); fence_init(); }
  __syncthreads();
  if (threadIdx.x == 0) { expect(&bar, BYTES); load2d(smem + OFFSET, &a, 0, 0, &bar); }
  wait(&bar, 0);
}
"""

PARAMS_STRUCT = PRELUDE + r"""
#if BUG
struct Params { int m; unsigned char map[128]; };  // the descriptor member has no alignas(64)
#else
struct Params { int m; TMap map; };
#endif
extern "C" __global__ void __launch_bounds__(128) params(const __grid_constant__ Params p) {
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ u64 bar;
  if (threadIdx.x == 0) { bar_init(&bar, 1); fence_init(); }
  __syncthreads();
  if (threadIdx.x == 0) { expect(&bar, 8192); load2d(smem, &p.map, 0, p.m, &bar); }
  wait(&bar, 0);
}
"""

WGMMA_STAGE = PRELUDE + WGMMA + r"""
extern "C" __global__ void __launch_bounds__(128) mma(const __grid_constant__ TMap a, const __grid_constant__ TMap b,
                                                      float* out) {
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ u64 bar;
  if (threadIdx.x == 0) { bar_init(&bar, 1); fence_init(); }
  __syncthreads();
  if (threadIdx.x == 0) {
    expect(&bar, 16384);
    load2d(smem, &a, 0, 0, &bar);
    load2d(smem + 8192, &b, 0, 0, &bar);
  }
  wait(&bar, 0);
  float d[32] = {};
  mma_64x64x16(d, desc(smem, LBO_FIELD, SBO_FIELD, SWIZZLE_FIELD), desc(smem + 8192, LBO_FIELD, SBO_FIELD, SWIZZLE_FIELD));
  for (int i = 0; i < 32; ++i) out[threadIdx.x * 32 + i] = d[i];
}
"""

STORE_FENCE = PRELUDE + r"""
extern "C" __global__ void __launch_bounds__(128) store_tile(const __grid_constant__ TMap out, float v) {
  extern __shared__ __align__(1024) unsigned char smem[];
  float* tile = reinterpret_cast<float*>(smem);
  tile[threadIdx.x] = v * threadIdx.x;  // generic-proxy writes
#if !BUG
  fence_async();
#endif
  __syncthreads();
  if (threadIdx.x == 0) store2d(&out, 0, 0, smem);
}
"""

INIT_FENCE = PRELUDE + r"""
extern "C" __global__ void __launch_bounds__(128) init_fence(const __grid_constant__ TMap a) {
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ u64 bar;
  if (threadIdx.x == 0) {
    bar_init(&bar, 1);
#if !BUG
    fence_init();
#endif
  }
  __syncthreads();
  if (threadIdx.x == 0) { expect(&bar, 8192); load2d(smem, &a, 0, 0, &bar); }
  wait(&bar, 0);
}
"""

READ_THEN_LOAD = PRELUDE + r"""
extern "C" __global__ void __launch_bounds__(32) reuse(const __grid_constant__ TMap a, float* out) {
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ u64 bars[2];
  if (threadIdx.x != 0) return;
  bar_init(&bars[0], 1); bar_init(&bars[1], 1); fence_init();
  expect(&bars[0], 8192); load2d(smem, &a, 0, 0, &bars[0]); wait(&bars[0], 0);
  const float head = reinterpret_cast<const float*>(smem)[0];  // a generic-proxy read of the buffer...
#if !BUG
  fence_async();
#endif
  expect(&bars[1], 8192); load2d(smem, &a, 0, 64, &bars[1]);  // ...then TMA overwrites it
  wait(&bars[1], 0);
  out[0] = head + reinterpret_cast<const float*>(smem)[1];
}
"""

DEVICE_TENSORMAP = PRELUDE + r"""
extern "C" __global__ void __launch_bounds__(32) retarget(TMap* map, unsigned long long new_base) {
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ u64 bar;
  if (threadIdx.x != 0) return;
  bar_init(&bar, 1); fence_init();
  asm volatile("tensormap.replace.tile.global_address.global.b1024.b64 [%0], %1;" :: "l"(map), "l"(new_base) : "memory");
#if !BUG
  asm volatile("fence.proxy.tensormap::generic.release.gpu;" ::: "memory");
  asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;" :: "l"(map) : "memory");
#endif
  expect(&bar, 8192); load2d(smem, map, 0, 0, &bar); wait(&bar, 0);
}
"""

PER_ITERATION = PRELUDE + r"""
extern "C" __global__ void __launch_bounds__(128) per_iteration(const __grid_constant__ TMap a) {
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ u64 bars[4];
  if (threadIdx.x == 0) { for (int s = 0; s < 4; ++s) bar_init(&bars[s], 1); fence_init(); }
  __syncthreads();
#pragma unroll 1
  for (int s = 0; s < 4; ++s) {  // a fresh barrier per iteration: each completes once
    if (threadIdx.x == 0) { expect(&bars[s], 8192); load2d(smem + s * 8192, &a, 0, s * 64, &bars[s]); }
    wait(&bars[s], PARITY);
  }
}
"""

ONE_BARRIER = PRELUDE + r"""
extern "C" __global__ void __launch_bounds__(128) one_barrier(const __grid_constant__ TMap a, int k_tiles) {
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ u64 bar;
  if (threadIdx.x == 0) { bar_init(&bar, 1); fence_init(); }
  __syncthreads();
#pragma unroll 1
  for (int k = 0; k < k_tiles; ++k) {  // one barrier, a phase every iteration
    if (threadIdx.x == 0) { expect(&bar, 8192); load2d(smem, &a, 0, k * 64, &bar); }
    wait(&bar, PARITY);
    __syncthreads();
  }
}
"""

WARP_ARRIVE = PRELUDE + r"""
extern "C" __global__ void __launch_bounds__(32) warp_arrive(const __grid_constant__ TMap a) {
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ u64 bar;
  if (threadIdx.x == 0) { bar_init(&bar, 1); fence_init(); }
  __syncwarp();
#if BUG
  expect(&bar, 8192 / 32);  // every lane arrives (with its share of the bytes) on a count-1 barrier
#else
  if (threadIdx.x == 0) expect(&bar, 8192);
#endif
  if (threadIdx.x == 0) load2d(smem, &a, 0, 0, &bar);
  wait(&bar, 0);
}
"""

# A two-stage ring's setup and producer (thread 0), for kernels whose consumers (threads 32..127) differ.
RING_PRODUCER = r"""
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ u64 full[2], empty[2];
  if (threadIdx.x == 0) {
    for (int s = 0; s < 2; ++s) { bar_init(&full[s], 1); bar_init(&empty[s], 96); }
    fence_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
#pragma unroll 1
    for (int k = 0; k < k_tiles; ++k) {
      const int s = k & 1;
      wait(&empty[s], ((k >> 1) & 1) ^ 1);
      expect(&full[s], 8192);
      load2d(smem + s * 8192, &a, 0, k * 64, &full[s]);
    }
  }"""

STAGE_RING = PRELUDE + r"""
extern "C" __global__ void __launch_bounds__(128) stage_ring(const __grid_constant__ TMap a, const int* skip, int k_tiles) {
""" + RING_PRODUCER + r""" else if (threadIdx.x >= 32) {
#pragma unroll 1
    for (int k = 0; k < k_tiles; ++k) {
      const int s = k & 1;
      wait(&full[s], (k >> 1) & 1);
#if RELEASE == 1
      if (skip[k]) continue;  // a consumer path that skips the release
      arrive(&empty[s]);
#elif RELEASE == 2
      arrive(&empty[s]);
#endif
    }
  }
}
"""

NO_INIT = PRELUDE + r"""
extern "C" __global__ void __launch_bounds__(128) no_init(const __grid_constant__ TMap a) {
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ u64 bar;
#if !BUG
  if (threadIdx.x == 0) { bar_init(&bar, 1); fence_init(); }
  __syncthreads();
#endif
  if (threadIdx.x == 0) { expect(&bar, 8192); load2d(smem, &a, 0, 0, &bar); }
  wait(&bar, 0);
}
"""

NO_EXPECT = PRELUDE + r"""
extern "C" __global__ void __launch_bounds__(128) no_expect(const __grid_constant__ TMap a) {
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ u64 bar;
  if (threadIdx.x == 0) { bar_init(&bar, 1); fence_init(); }
  __syncthreads();
  if (threadIdx.x == 0) {
#if BUG
    arrive(&bar);  // the expect_tx was never inserted
#else
    expect(&bar, 8192);
#endif
    load2d(smem, &a, 0, 0, &bar);
  }
  wait(&bar, 0);
}
"""

RANK_MISMATCH = PRELUDE + r"""
extern "C" __global__ void __launch_bounds__(128) rank_mismatch(const __grid_constant__ TMap a) {
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ u64 bar;
  if (threadIdx.x == 0) { bar_init(&bar, 1); fence_init(); }
  __syncthreads();
  if (threadIdx.x == 0) { expect(&bar, 8192); load2d(smem, &a, 0, 0, &bar); }  // a 2-D copy
  wait(&bar, 0);
}
"""

BF16_3D = {"shape": (4, 1024, 64), "dtype": "bf16", "box": (1, 64, 64), "swizzle": "128B"}
F32_16B = {"shape": (1024, 32), "dtype": "f32", "box": (64, 32), "swizzle": "none"}

SEEDS: list[Seed] = [
    Seed("cutlass2404_consumer_count", "NVIDIA/cutlass#2404", "arrivals.too_many",
         "a whole consumer warpgroup arrives on an empty barrier initialised for one arrival", RING, "ring",
         {"a": BF16_128B}, defines={"FULL_COUNT": 1}, bug_defines={"EMPTY_COUNT": 1},
         twin_defines={"EMPTY_COUNT": 128}),
    Seed("cutlass2404_producer_count", "NVIDIA/cutlass#2404", "arrivals.too_few",
         "the full barrier counts a 32-thread producer group, but one thread arrives (with expect_tx)", RING, "ring",
         {"a": BF16_128B}, defines={"EMPTY_COUNT": 128}, bug_defines={"FULL_COUNT": 32},
         twin_defines={"FULL_COUNT": 1}),
    Seed("cutlass2641_skipped_copy", "NVIDIA/cutlass#2641", "tx.conditional",
         "producer_acquire expects both boxes, the second copy is skipped at run time", SKIP_COPY, "skip_copy",
         {"a": BF16_128B, "b": BF16_128B}),
    Seed("cutlass3654_lane_waits", "NVIDIA/cutlass#3654", "phase.lagging_waiter",
         "every lane of the load warp waits on the empty barrier, the elected lane issues the TMA with no "
         "__syncwarp between", WARP_ROLES, "lanes", {"a": BF16_128B}),
    Seed("triton10035_leader_warp", "triton-lang/triton#10035", "phase.lagging_waiter",
         "a two-warp consumer waits, its leader warp releases the buffer before the other warp has left the wait",
         LEADER_WARP, "leader", {"a": BF16_128B}),
    Seed("tilelang1828_stale_expect_index", "tile-ai/tilelang#1828", "tx.too_many",
         "expect_tx on a stale barrier index while the copy completes on another", STALE_INDEX, "stale",
         {"a": BF16_128B}),
    Seed("tilelang2379_swizzle_base", "tile-ai/tilelang#2379", "smem.alignment",
         "a 128B-swizzled box placed at base + 128 (the swizzle needs 1024)", OFFSET_DST, "offset_dst",
         {"a": BF16_128B}, defines={"BYTES": 8192}, bug_defines={"OFFSET": 128}, twin_defines={"OFFSET": 1024}),
    Seed("fuser4096_unswizzled_base", "NVIDIA/Fuser#4096", "smem.alignment",
         "an unswizzled TMA destination only 64-byte aligned (TMA needs 128)", OFFSET_DST, "offset_dst",
         {"a": F32_16B}, defines={"BYTES": 8192}, bug_defines={"OFFSET": 64}, twin_defines={"OFFSET": 128}),
    Seed("cutlass2905_params_struct", "NVIDIA/cutlass#2905", "descriptor.param_alignment",
         "a TMA descriptor inside a params struct without alignas(64)", PARAMS_STRUCT, "params", {"p": BF16_128B}),
    Seed("matmultutorial14_swizzle_off", "KnowingNothing/MatmulTutorial#14", "descriptor.wgmma_swizzle",
         "swizzle off in the map, 128B in the wgmma descriptor", WGMMA_STAGE, "mma",
         {"a": BF16_128B, "b": BF16_128B},
         bug_maps={"a": {**BF16_128B, "swizzle": "none"}, "b": {**BF16_128B, "swizzle": "none"}},
         defines={"LBO_FIELD": 1, "SBO_FIELD": 64, "SWIZZLE_FIELD": 1}, bug_defines={}, twin_defines={}),
    Seed("matmultutorial10_sbo", "KnowingNothing/MatmulTutorial#10", "descriptor.wgmma",
         "SBO of 8 rows of 64 bytes for a 128B-swizzled stage (8 rows of 128 bytes: 1024)", WGMMA_STAGE, "mma",
         {"a": BF16_128B, "b": BF16_128B}, defines={"LBO_FIELD": 1, "SWIZZLE_FIELD": 1},
         bug_defines={"SBO_FIELD": 32}, twin_defines={"SBO_FIELD": 64}),
    Seed("tilelang813_lbo_sbo_bytes", "tile-ai/tilelang#813", "descriptor.wgmma",
         "LBO/SBO written in bytes where the descriptor holds 16-byte units", WGMMA_STAGE, "mma",
         {"a": BF16_128B, "b": BF16_128B}, defines={"SWIZZLE_FIELD": 1},
         bug_defines={"LBO_FIELD": 16, "SBO_FIELD": 1024}, twin_defines={"LBO_FIELD": 1, "SBO_FIELD": 64}),
    Seed("flashkda24_store_fence", "MoonshotAI/FlashKDA#24", "proxy.generic_to_async",
         "generic stores to a tile, __syncthreads, TMA store: no fence.proxy.async", STORE_FENCE, "store_tile",
         {"out": F32_PLAIN}),
    Seed("flashkda24_mbarrier_init_fence", "MoonshotAI/FlashKDA#24", "proxy.mbarrier_init",
         "mbarrier.init then TMA complete_tx on it with no fence.mbarrier_init", INIT_FENCE, "init_fence",
         {"a": BF16_128B}),
    Seed("deepep642_read_then_tma_load", "deepseek-ai/DeepEP#642", "proxy.generic_to_async",
         "a generic read of a buffer, then a TMA load into it with no fence.proxy.async", READ_THEN_LOAD, "reuse",
         {"a": BF16_128B}),
    Seed("triton7293_device_tensormap", "triton-lang/triton#7293", "proxy.tensormap",
         "a tensor map updated on the device and used with no tensormap proxy fence", DEVICE_TENSORMAP, "retarget",
         {"map": BF16_128B}),
    Seed("tilelang2927_loop_parity_per_barrier", "tile-ai/tilelang#2927", "phase.parity_sequence",
         "a fresh barrier per iteration waited on with the loop's parity", PER_ITERATION, "per_iteration",
         {"a": BF16_128B}, bug_defines={"PARITY": "(s & 1)"}, twin_defines={"PARITY": 0}),
    Seed("tilelang3087_ring_parity_one_barrier", "tile-ai/tilelang#3087", "phase.parity_sequence",
         "a ring's parity (k / 2) & 1 on one barrier that completes every iteration", ONE_BARRIER, "one_barrier",
         {"a": BF16_128B}, bug_defines={"PARITY": "((k >> 1) & 1)"}, twin_defines={"PARITY": "(k & 1)"}),
    Seed("flashattention1317_fixed_phase", "Dao-AILab/flash-attention#1317", "phase.invariant_parity",
         "a barrier reused every iteration waited on with a fixed phase", ONE_BARRIER, "one_barrier",
         {"a": BF16_128B}, bug_defines={"PARITY": 0}, twin_defines={"PARITY": "(k & 1)"}),
    Seed("deepep293_warp_arrives", "deepseek-ai/DeepEP#293", "arrivals.too_many",
         "every lane of a warp arrives on a barrier initialised for one arrival", WARP_ARRIVE, "warp_arrive",
         {"a": BF16_128B}),
    Seed("cutlass1438_never_released", "NVIDIA/cutlass#1438", "arrivals.never_released",
         "consumers never release the stage: the producer's acquire hangs after one pass over the ring",
         STAGE_RING, "stage_ring", {"a": BF16_128B}, bug_defines={"RELEASE": 0}, twin_defines={"RELEASE": 2}),
    Seed("cutlass1438_release_skipped", "NVIDIA/cutlass#1438", "arrivals.skipped_release",
         "a consumer path that continues without consumer_release", STAGE_RING, "stage_ring", {"a": BF16_128B},
         bug_defines={"RELEASE": 1}, twin_defines={"RELEASE": 2}),
    Seed("cutlass2364_arrive_without_init", "NVIDIA/cutlass#2364", "arrivals.uninitialized",
         "arrive.expect_tx on a barrier nobody initialised (an arrive taken for an init)", NO_INIT, "no_init",
         {"a": BF16_128B}),
    Seed("tilelang241_missing_expect_tx", "tile-ai/tilelang#241", "tx.too_few",
         "a plain arrive where the TMA's expect_tx belongs: the phase completes before the bytes land", NO_EXPECT,
         "no_expect", {"a": BF16_128B}),
    Seed("cutlass2728_copy_vs_descriptor_rank", "NVIDIA/cutlass#2728", "copy.rank",
         "a 2-D TMA copy issued on a descriptor of another rank (a shape mismatch: illegal instruction)",
         RANK_MISMATCH, "rank_mismatch", {"a": BF16_128B}, bug_maps={"a": BF16_3D}, bug_defines={},
         twin_defines={}),
]
