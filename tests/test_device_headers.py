"""CPU tier: every device header, kernel and hand-written PTX file builds for sm_90a and sm_80.

Headers are compiled through NVRTC (tmakit.build.compile_cuda, the path the GPU uses) inside a small test
kernel that calls what the header offers; PTX is assembled with ptxas. No GPU is needed.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import requires_ptxas

ROOT = Path(__file__).resolve().parents[1]
HEADERS = sorted(p.name for p in (ROOT / "cuda_src" / "tmakit").glob("*.cuh"))
KERNELS = sorted(p.name for p in (ROOT / "cuda_src").glob("*.cu"))
PTX = sorted(p.name for p in (ROOT / "ptx").glob("*.ptx"))
ARCHS = ["sm_90a", "sm_80"]


def _nvrtc_available() -> bool:
    try:
        from tmakit.build import nvrtc_version

        nvrtc_version()
        return True
    except Exception:  # noqa: BLE001 - any failure means "no NVRTC here"
        return False


requires_nvrtc = pytest.mark.skipif(not _nvrtc_available(), reason="NVRTC (nvidia-cuda-nvrtc) is not importable")

# A use of each header: the body of `extern "C" __global__ void probe(const __grid_constant__
# tmakit::TensorMapDesc d, const tmakit::BoxParams p, unsigned char* out)`.
USES = {
    "types.cuh": "tmakit::Coords c{{1,2,3,4,5}}; __shared__ tmakit::uint8_t s[256]; out[0] = *tmakit::align_shared(s, 128) + c.c[0];",
    "config.cuh": "out[0] = TMAKIT_USE_TMA + TMAKIT_HAS_SM90;",
    "mbarrier.cuh": """__shared__ tmakit::uint64_t bar; __shared__ tmakit::Mbarrier obj;
      if (threadIdx.x == 0) { tmakit::mbarrier_init(&bar, blockDim.x); obj.init(2 * blockDim.x); tmakit::fence_mbarrier_init(); }
      __syncthreads();
      tmakit::cp_async_mbarrier_arrive(&bar); tmakit::mbarrier_arrive(&bar); tmakit::mbarrier_wait_parity(&bar, 0, 1000000);
      obj.arrive(); obj.cp_async_arrive_noinc(); obj.wait_parity(0);
#if TMAKIT_HAS_SM90
      if (threadIdx.x == 0) { tmakit::mbarrier_expect_tx(&bar, 16); tmakit::mbarrier_arrive_expect_tx(&bar, 16); obj.expect_tx(16);
                              obj.arrive_expect_tx(16); obj.arrive_cluster(0); }
#endif
      out[0] = tmakit::mbarrier_try_wait_parity(&bar, 1) + obj.try_wait_parity(1) + (obj.address() & 1u);
      __syncthreads(); if (threadIdx.x == 0) { tmakit::mbarrier_inval(&bar); obj.inval(); }""",
    "named_barrier.cuh": """const tmakit::NamedBarrier group(1 + threadIdx.x / 128, 128);
      group.sync(); if (threadIdx.x >= 128) group.arrive(); out[0] = (unsigned char)(group.id() + group.threads());""",
    "warp.cuh": "out[threadIdx.x] = tmakit::elect_one_sync();",
    "fence.cuh": "tmakit::fence_proxy_async_shared_cta();",
    "grid_dependency.cuh": "tmakit::griddepcontrol_launch_dependents(); tmakit::griddepcontrol_wait(); out[0] = 1;",
    "tensormap_replace.cuh": """__shared__ alignas(128) tmakit::TensorMapDesc edit;
#if TMAKIT_HAS_SM90
      const tmakit::TensorMapSmem m(&edit); tmakit::TensorMapDesc* g = reinterpret_cast<tmakit::TensorMapDesc*>(out);
      tmakit::tensormap_replace_global_address(m, out); tmakit::tensormap_replace_rank(m, 1u);
      tmakit::tensormap_replace_box_dim<1>(m, 64u); tmakit::tensormap_replace_global_dim<4>(m, 7u);
      tmakit::tensormap_replace_global_stride<0>(m, 4096ull); tmakit::tensormap_replace_element_stride<2>(m, 2u);
      tmakit::tensormap_replace_elemtype<10>(m); tmakit::tensormap_replace_interleave_layout<0>(m);
      tmakit::tensormap_replace_swizzle_mode<3>(m); tmakit::tensormap_replace_fill_mode<1>(m);
      tmakit::tensormap_replace_box_dim<0>(g, 32u); tmakit::tensormap_replace_swizzle_mode<0>(g);
      __syncwarp(); tmakit::tensormap_cp_fenceproxy(g, m); tmakit::fence_proxy_tensormap_release();
      tmakit::fence_proxy_tensormap_acquire(g);
#endif""",
    "tma.cuh": """__shared__ alignas(1024) unsigned char s[4096]; __shared__ tmakit::uint64_t bar; __shared__ tmakit::Mbarrier obj;
      tmakit::Coords c{{0, 1, 2, 3, 4}};
#if TMAKIT_HAS_SM90
      tmakit::prefetch_tensormap(&d);
      tmakit::cp_async_bulk_tensor_g2s<1>(s, &d, c, &bar); tmakit::cp_async_bulk_tensor_g2s<5>(s, &d, c, obj);
      tmakit::cp_async_bulk_tensor_g2s(out[1], s, &d, c, &bar);
      tmakit::cp_async_bulk_tensor_g2s_multicast<2>(s, &d, c, obj, 3);
      tmakit::cp_async_bulk_tensor_s2g<3>(&d, c, s); tmakit::cp_async_bulk_tensor_s2g(out[2], &d, c, s);
      tmakit::cp_reduce_async_bulk_tensor_add<4>(&d, c, s); tmakit::cp_async_bulk_prefetch_tensor<2>(&d, c);
      tmakit::cp_async_bulk_commit_group(); tmakit::cp_async_bulk_wait_group_read<0>(); tmakit::cp_async_bulk_wait_group<1>();
#endif""",
    "tma_im2col.cuh": """__shared__ alignas(1024) unsigned char s[4096]; __shared__ tmakit::uint64_t bar;
      tmakit::Coords c{{0, 1, 2, 3, 4}}; tmakit::Im2colOffsets o{{1, 2, 3}};
#if TMAKIT_HAS_SM90
      tmakit::cp_async_bulk_tensor_g2s_im2col(out[1], s, &d, c, o, &bar);
#endif""",
    "bulk_copy.cuh": """__shared__ alignas(128) unsigned char s[256]; __shared__ tmakit::uint64_t bar;
#if TMAKIT_HAS_SM90
      tmakit::cp_async_bulk_g2s(s, out, 256, &bar); tmakit::cp_async_bulk_s2g(out, s, 256);
#endif""",
    "cp_async.cuh": """__shared__ alignas(16) unsigned char s[64];
      tmakit::cp_async_ca<4>(s, out); tmakit::cp_async_ca<8>(s + 8, out, 0); tmakit::cp_async_ca<16>(s + 16, out);
      tmakit::cp_async_cg_16(s + 32, out, 4); tmakit::cp_async_commit_group(); tmakit::cp_async_wait_group<1>();
      tmakit::cp_async_wait_group_dynamic(out[0]); tmakit::cp_async_wait_all(); out[1] = s[threadIdx.x];""",
    "cache_policy.cuh": """__shared__ alignas(16) unsigned char s[64];
      out[0] = (unsigned char)(tmakit::l2_cache_policy<tmakit::L2Eviction::kFirst>() ^ tmakit::l2_cache_policy<tmakit::L2Eviction::kLast>());
      tmakit::cp_async_cg_16_promoted<tmakit::L2Eviction::kLast>(s, out, out[1]); tmakit::cp_async_wait_all();
#if TMAKIT_HAS_SM90
      __shared__ tmakit::uint64_t bar; tmakit::Coords c{{0, 1, 2, 3, 4}};
      tmakit::cp_async_bulk_tensor_g2s<2, tmakit::L2Eviction::kFirst>(s, &d, c, &bar);
      tmakit::cp_async_bulk_tensor_g2s<tmakit::L2Eviction::kLast>(out[2], s, &d, c, &bar);
#endif""",
    "swizzle.cuh": "out[0] = tmakit::swizzle_offset(threadIdx.x * 16, out[1]) + tmakit::swizzle_alignment(3);",
    "mma_sync.cuh": """__shared__ alignas(1024) unsigned char s[4096]; tmakit::uint32_t a[4], b[4]; float c[4] = {0.f, 0.f, 0.f, 0.f};
      const int lane = threadIdx.x % 32; const tmakit::uint32_t base = tmakit::shared_addr(s);
      tmakit::ldmatrix_sync_aligned_m8n8_x4_shared_b16(a, tmakit::ldmatrix_x4_address(base, lane, 0, 0, 128, 3));
      tmakit::ldmatrix_sync_aligned_m8n8_x4_trans_shared_b16(b, tmakit::ldmatrix_x4_trans_address_b_mnmajor(base, lane, 0, 0, 128, 3));
      const tmakit::uint32_t b0[2] = {b[0], b[1]}; tmakit::mma_m16n8k16<true>(c, a, b0); tmakit::mma_m16n8k16<false>(c, a, b0);
      tmakit::mma_c_to_a_fragment<true>(a, c, c);
      out[tmakit::MmaM16N8K16Layout::c_row(lane, 0)] = (unsigned char)(c[0] + a[0]);""",
    "wgmma.cuh": """const tmakit::uint64_t da = tmakit::wgmma_make_desc(128, 16, 1024, 1), db = tmakit::wgmma_desc_rebase(da, 32);
      out[0] = (unsigned char)(tmakit::wgmma_d_row(threadIdx.x, 3) + tmakit::wgmma_d_col(threadIdx.x, 5) + tmakit::wgmma_swizzle_from_tma(3)
                               + tmakit::wgmma_k(tmakit::WgmmaType::kTf32));
#if TMAKIT_HAS_SM90
      using tmakit::WgmmaType;
      float acc[128] = {}; float e[32] = {}; float f[64] = {}; tmakit::int32_t g[96] = {}; const tmakit::uint32_t a[4] = {1u, 2u, 3u, 4u};
      tmakit::wgmma_fence(); tmakit::wgmma_mma_async_ss<256, WgmmaType::kBf16, WgmmaType::kBf16, false, true>(acc, da, db, out[1] != 0);
      tmakit::wgmma_mma_async_ss<128, WgmmaType::kE4m3, WgmmaType::kE5m2>(f, da, db, true);
      tmakit::wgmma_mma_async_ss<64, WgmmaType::kTf32, WgmmaType::kTf32>(e, da, db, true);
      tmakit::wgmma_mma_async_ss<192, WgmmaType::kU8, WgmmaType::kS8>(g, da, db, true);
      tmakit::wgmma_mma_async_rs<64, WgmmaType::kF16, true>(e, a, db); tmakit::wgmma_commit_group(); tmakit::wgmma_wait_group<0>();
      tmakit::wgmma_fence_operands(acc); tmakit::wgmma_fence_operands(g);
      out[threadIdx.x] = (unsigned char)(acc[7] + e[3] + f[1] + g[2]);
#endif""",
    "cluster.cuh": """out[0] = (unsigned char)(tmakit::cluster_nctarank() + tmakit::cluster_ctarank() + tmakit::cluster_id_x());
      tmakit::cluster_sync();
#if TMAKIT_HAS_SM90
      __shared__ tmakit::uint64_t bar;
      tmakit::mbarrier_arrive_cluster(tmakit::mapa_shared_cluster(tmakit::shared_addr(&bar), tmakit::cluster_ctarank()));
      tmakit::barrier_cluster_arrive(); tmakit::barrier_cluster_wait();
#endif""",
    "pipeline.cuh": """__shared__ alignas(1024) unsigned char s[4096];
      __shared__ tmakit::Pipeline<4, tmakit::CpAsyncBlockProducer, 32> block;
      __shared__ tmakit::Pipeline<2, tmakit::CpAsyncThreadProducer, 1> own;
      auto c = tmakit::make_consumer_start_state<4>(); auto pr = tmakit::make_producer_start_state<4>();
      block.producer_acquire(pr); tmakit::cp_async_cg_16(s + 16 * threadIdx.x, out); block.producer_commit(pr); pr.advance();
      block.consumer_wait<0>(c); block.consumer_release(c); c.advance();
      auto q = tmakit::make_producer_start_state<2>(); own.producer_commit(q); own.consumer_wait<1>(q);
      out[0] = (unsigned char)(c.index + c.phase + pr.phase + s[threadIdx.x] + (block.full_barrier(pr) == nullptr));
#if TMAKIT_HAS_SM90
      __shared__ tmakit::Pipeline<4, tmakit::TmaProducer, 32> ring; __shared__ tmakit::Pipeline<2, tmakit::TmaProducer, 128> wg;
      __shared__ tmakit::Pipeline<2, tmakit::TmaProducer, 1> one;
      if (threadIdx.x == 0) { one.init(1, 1); one.consumer_release(q); }
      if (threadIdx.x == 0) { ring.init(1, blockDim.x / 32); wg.init(1, 2); }
      __syncthreads();
      if (threadIdx.x == 0) { ring.producer_acquire(pr); tmakit::Mbarrier& full = ring.producer_expect(pr, 16);
                              tmakit::cp_async_bulk_tensor_g2s<2>(s, &d, tmakit::Coords{{0, 0, 0, 0, 0}}, full); }
      ring.consumer_wait(c); ring.consumer_release(c); wg.consumer_release_cluster(q, 2);
      tmakit::StorePipeline<2> store(s, 1024, tmakit::NamedBarrier(1, 128)); tmakit::uint8_t* buf = store.acquire();
      buf[threadIdx.x] = 1; store.publish();
      if (store.issuer()) tmakit::cp_async_bulk_tensor_s2g<2>(&d, tmakit::Coords{{0, 0, 0, 0, 0}}, buf);
      store.commit(); store.drain(); store.drain_reads();
#endif
      tmakit::StorePipeline<1, false> plain(s, 0, tmakit::NamedBarrier(0, blockDim.x)); plain.acquire(); plain.publish(); plain.commit(); plain.drain();""",
    "box_geometry.cuh": """tmakit::Coords c{{-3, 2, 0, 0, 0}};
      tmakit::BoxChunk ch = tmakit::box_chunk(p, c, threadIdx.x);
      out[0] = tmakit::box_image_bytes(p) + tmakit::box_row_pitch(p) + ch.image_offset + (unsigned)tmakit::oob_fill_bits(p);""",
    "box_load.cuh": """extern __shared__ __align__(16) unsigned char smem[]; __shared__ tmakit::Pipeline<1, tmakit::BoxProducer, 32> pipe;
      auto p = tmakit::make_producer_start_state<1>();
      if (threadIdx.x == 0) pipe.init(1, blockDim.x / 32);
      __syncthreads();
      tmakit::Coords c{{0, 0, 0, 0, 0}};
      tmakit::box_load(src, tmakit::align_shared(smem, 1024), c, 2, 4096, pipe.full_barrier(p)); pipe.producer_commit(p);
      pipe.consumer_wait(tmakit::make_consumer_start_state<1>());""",
    "box_store.cuh": """extern __shared__ __align__(16) unsigned char smem[];
      tmakit::Coords c{{0, 0, 0, 0, 0}};
      tmakit::BoxStores<1> stores = tmakit::make_box_stores<1>(tmakit::align_shared(smem, 1024), 4096);
      tmakit::uint8_t* buf = stores.acquire(); buf[threadIdx.x] = 1; stores.publish();
      tmakit::box_store_issue(src, buf, c, 2, 4096); stores.commit(); stores.drain();""",
    "box_pipeline.cuh": """extern __shared__ __align__(16) unsigned char smem[]; __shared__ tmakit::BoxPipeline<3> pipe;
      tmakit::for_each_box_pipelined<3>(src, 2, 4096, tmakit::align_shared(smem, 1024), 4096, pipe, blockIdx.x, gridDim.x, 10,
          [](tmakit::uint64_t b) { tmakit::Coords c{{(int)b * 8, 0, 0, 0, 0}}; return c; },
          [&](tmakit::uint64_t b, const tmakit::uint8_t* img) { out[b] = img[threadIdx.x]; });""",
}


def _probe_source(header: str) -> str:
    # box_* headers take the one-source parameter (descriptor or BoxParams by build); the rest both kinds.
    param = "TMAKIT_BOX_SOURCE src" if header in ("box_load.cuh", "box_store.cuh", "box_pipeline.cuh") else "const __grid_constant__ tmakit::BoxParams p"
    return (f'#include "tmakit/{header}"\n#include "tmakit/box_load.cuh"\n'
            f'extern "C" __global__ void probe(const __grid_constant__ tmakit::TensorMapDesc d, {param}, '
            f"unsigned char* out) {{\n{USES[header]}\n}}\n")


def test_every_header_has_a_use():
    assert set(HEADERS) == set(USES), "add a use of the new header to USES"


@requires_nvrtc
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("header", HEADERS)
def test_header_compiles(header, arch):
    from tmakit.build import compile_cuda

    code = compile_cuda(_probe_source(header), arch=arch, name=f"probe_{header}.cu")
    assert code.entry_names() == ["probe"]


@requires_nvrtc
@pytest.mark.parametrize("arch", ARCHS)
def test_cache_policy_reaches_the_loads(arch):
    """An L2Eviction other than kNormal makes a createpolicy and puts .L2::cache_hint on TMA and cp.async loads."""
    from tmakit.build import compile_cuda

    ptx = compile_cuda(_probe_source("cache_policy.cuh"), arch=arch, name="probe_cache_policy.cu").ptx
    assert "createpolicy.fractional.L2::evict_first.b64" in ptx and "createpolicy.fractional.L2::evict_last.b64" in ptx
    assert re.search(r"cp\.async\.cg\.shared\.global\.L2::cache_hint(\.L2::\d+B)? \[", ptx)
    tensor_hinted = re.findall(r"cp\.async\.bulk\.tensor\.\dd\.shared::cluster\.global\.tile\.mbarrier::complete_tx::bytes\.L2::cache_hint", ptx)
    assert len(tensor_hinted) == (6 if arch == "sm_90a" else 0)  # rank 2, and the runtime-rank switch's 5


@requires_nvrtc
@pytest.mark.parametrize("eviction, hinted", [(0, False), (2, True)])
def test_transpose_source_eviction_reaches_the_tma_loads(eviction, hinted):
    """TMAKIT_TRANSPOSE_SOURCE_EVICTION (plan_transpose's source_eviction) puts the policy on the source loads of the
    TMA build, not on its stores, and nowhere in the forced cp.async build."""
    from tmakit.build import compile_cuda

    for forced in (False, True):
        defines = {"TMAKIT_TRANSPOSE_SOURCE_EVICTION": eviction, **({"TMAKIT_FORCE_CP_ASYNC": 1} if forced else {})}
        ptx = compile_cuda("transpose.cu", arch="sm_90a", defines=defines).ptx
        if forced:  # box_load_part hints only TMA loads (a hinted cp.async hit an illegal instruction on the H100)
            assert "createpolicy" not in ptx and "cache_hint" not in ptx
            continue
        assert ("createpolicy.fractional.L2::evict_last" in ptx) == hinted
        loads = re.findall(r"cp\.async\.bulk\.tensor\.2d\.shared\S*", ptx)
        assert loads and all(("cache_hint" in op) == hinted for op in loads), set(loads)
        assert "cache_hint" not in "".join(re.findall(r"cp\.async\.bulk\.tensor\.\dd\.global\S*", ptx))  # stores


@requires_nvrtc
@pytest.mark.parametrize("forced", [False, True], ids=["default", "forced_cp_async"])
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("kernel", KERNELS)
def test_kernel_compiles_and_box_param_matches_backend(kernel, arch, forced):
    from tmakit.build import compile_cuda

    code = compile_cuda(kernel, arch=arch, defines={"TMAKIT_FORCE_CP_ASYNC": 1} if forced else None)
    names = code.entry_names()
    assert names and all(n.startswith("tmakit_") for n in names)
    src = (ROOT / "cuda_src" / kernel).read_text()
    if "TMAKIT_BOX_SOURCE" in src:
        first = code.params(names[0])[0]
        expected = 128 if (arch == "sm_90a" and not forced) else 160  # descriptor vs BoxParams
        assert first.size == expected, f"{kernel} {arch} forced={forced}: box parameter is {first.size} bytes"


def _mma_probe() -> str:
    from test_mma_sync import SOURCE  # the probe the GPU test runs

    return SOURCE


def _offset_probe() -> str:
    from test_mma_sync import OFFSET_SOURCE  # the GPU test's check of ldmatrix_x4_swizzle128_offset

    return OFFSET_SOURCE


_BULK = "cp.async.bulk.tensor.{n}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
# The one table of "this build emits these instructions (and not those)": (source, arch, defines, PTX that must
# appear, PTX that must not, SASS that must appear where cuobjdump is on the PATH). Each kernel also compiles for
# both engines in test_kernel_compiles_and_box_param_matches_backend.
INSTRUCTIONS = {
    "tile_load_sm80": ("tile_load.cu", "sm_80", None, ["cp.async.cg.shared.global"], ["cp.async.bulk.tensor"], []),
    "tile_load_sm90a": ("tile_load.cu", "sm_90a", None, ["cp.async.bulk.tensor"], [], []),
    "tma_modes": ("tma_modes.cu", "sm_90a", None,
                  [f"cp.async.bulk.tensor.{n}d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes" for n in (3, 4, 5)]
                  + [_BULK.format(n=n) + ".multicast::cluster" for n in range(1, 6)]
                  + [f"cp.reduce.async.bulk.tensor.{n}d.global.shared::cta.add.tile.bulk_group" for n in range(1, 6)]
                  + ["barrier.cluster.arrive.release.aligned", "%cluster_ctarank"], [], []),
    "tma_prefetch": ("tma_prefetch.cu", "sm_90a", None,
                     [f"cp.async.bulk.prefetch.tensor.{n}d.L2.global.tile" for n in range(1, 6)], [], []),
    "tma_prefetch_forced_cp_async": ("tma_prefetch.cu", "sm_90a", {"TMAKIT_FORCE_CP_ASYNC": 1},
                                     ["cp.async.cg.shared.global"], ["prefetch.tensor"], []),  # the twin only loads
    "wgmma_probe": ("wgmma_probe.cu", "sm_90a", None,
                    [f"wgmma.mma_async.sync.aligned.m64n128k{k}.{d}.{a}.{b}" for k, d, a, b in (
                        (16, "f32", "bf16", "bf16"), (16, "f32", "f16", "f16"), (8, "f32", "tf32", "tf32"),
                        (32, "f32", "e4m3", "e4m3"), (32, "f32", "e4m3", "e5m2"), (32, "f32", "e5m2", "e4m3"),
                        (32, "f32", "e5m2", "e5m2"), (32, "s32", "s8", "s8"), (32, "s32", "s8", "u8"),
                        (32, "s32", "u8", "s8"), (32, "s32", "u8", "u8"))], [], ["HGMMA", "QGMMA", "IGMMA"]),
    "mma_probe_sm80": (_mma_probe, "sm_80", None, ["mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
                       "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"], [],
                       ["HMMA.16816.F32.BF16", "LDSM.16.MT88.4", "LDSM.16.M88.4"]),
    "mma_probe_sm90a": (_mma_probe, "sm_90a", None, ["mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
                        "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"], [],
                        ["HMMA.16816.F32.BF16", "LDSM.16.MT88.4", "LDSM.16.M88.4"]),
    "offset_probe_sm80": (_offset_probe, "sm_80", None, ["st.global.u32"], ["ldmatrix"], []),
}


@requires_nvrtc
@pytest.mark.parametrize("case", list(INSTRUCTIONS))
def test_builds_emit_the_documented_instructions(case, tmp_path):
    import shutil
    import subprocess

    from tmakit.build import compile_cuda

    source, arch, defines, present, absent, sass = INSTRUCTIONS[case]
    code = compile_cuda(source() if callable(source) else source, arch=arch, defines=defines, name=f"{case}.cu")
    assert [p for p in present if p not in code.ptx] == [], f"{case}: missing from the PTX"
    assert [a for a in absent if a in code.ptx] == [], f"{case}: in the PTX, but must not be"
    if sass and shutil.which("cuobjdump"):
        cubin = tmp_path / f"{case}.cubin"
        cubin.write_bytes(code.code)
        dump = subprocess.run(["cuobjdump", "--dump-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
        assert [x for x in sass if x not in dump] == [], f"{case}: missing from the SASS"


_WIDTHS = list(range(16, 257, 16))
_WIDTH_SOURCE = """#include "tmakit/wgmma.cuh"
template <int N>
__device__ void one(float* out, tmakit::uint64_t da, tmakit::uint64_t db, const tmakit::uint32_t (&a)[4]) {
  using tmakit::WgmmaType;
  float acc[N / 2] = {}, e[N / 2] = {}, f[N / 2] = {}, h[N / 2] = {};
  tmakit::int32_t g[N / 2] = {};
  tmakit::wgmma_fence();
  tmakit::wgmma_mma_async_ss<N, WgmmaType::kBf16, WgmmaType::kBf16, false, true>(acc, da, db, out[0] != 0.f);
  tmakit::wgmma_mma_async_ss<N, WgmmaType::kE4m3, WgmmaType::kE5m2>(e, da, db, true);
  tmakit::wgmma_mma_async_ss<N, WgmmaType::kTf32, WgmmaType::kTf32>(f, da, db, true);
  tmakit::wgmma_mma_async_ss<N, WgmmaType::kU8, WgmmaType::kS8>(g, da, db, true);
  tmakit::wgmma_mma_async_rs<N, WgmmaType::kF16, true>(h, a, db);
  tmakit::wgmma_commit_group();
  tmakit::wgmma_wait_group<0>();
  tmakit::wgmma_fence_operands(acc), tmakit::wgmma_fence_operands(e), tmakit::wgmma_fence_operands(f);
  tmakit::wgmma_fence_operands(g), tmakit::wgmma_fence_operands(h);
  for (int i = 0; i < N / 2; ++i) out[threadIdx.x * 128 + i] += acc[i] + e[i] + f[i] + h[i] + g[i];
}
extern "C" __global__ void widths(float* out, tmakit::uint64_t da, tmakit::uint64_t db) {
#if TMAKIT_HAS_SM90
  const tmakit::uint32_t a[4] = {1u, 2u, 3u, 4u};
  WIDTH_CALLS
#endif
}
"""


@requires_nvrtc
def test_every_wgmma_width_assembles_with_its_operands_in_place():
    """wgmma.cuh offers m64nN for every multiple of 16 from 16 to 256, each with its own operand list and operand
    numbers (macros per register count). Built for sm_90a (NVRTC, then ptxas: a descriptor or predicate numbered
    onto an accumulator would not assemble), each of the five forms appears once per N with N / 2 distinct
    accumulators and its immediates where the ISA puts them: bf16 with B MN-major ends "p, 1, 1, 0, 1", the register-A f16 form
    "p, 1, 1, 1", tf32 and fp8 "p, 1, 1", s8/u8 "p"."""
    from tmakit.build import compile_cuda

    calls = " ".join(f"one<{n}>(out, da, db, a);" for n in _WIDTHS)
    code = compile_cuda(_WIDTH_SOURCE.replace("WIDTH_CALLS", calls), arch="sm_90a", name="wgmma_widths.cu")
    found = {}
    pattern = (r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k(\d+)\.(\w+)\.(\w+)\.(\w+)\s+\{([^}]*)\},"
               r"\s*([^;]*);")
    for m in re.finditer(pattern, code.ptx):
        n, types = int(m.group(1)), (m.group(3), m.group(4), m.group(5))
        accumulators = [r.strip() for r in m.group(6).split(",")]
        assert len(accumulators) == n // 2 and len(set(accumulators)) == n // 2, (n, types, accumulators)
        rest = m.group(7)
        form = "rs" if rest.lstrip().startswith("{") else "ss"
        found[(n, types, form)] = [t.strip() for t in rest.split("}")[-1].split(",") if t.strip()]
    want = {("f32", "bf16", "bf16"): ("ss", ["p", "1", "1", "0", "1"]),
            ("f32", "e4m3", "e5m2"): ("ss", ["p", "1", "1"]), ("f32", "tf32", "tf32"): ("ss", ["p", "1", "1"]),
            ("s32", "u8", "s8"): ("ss", ["p"]), ("f32", "f16", "f16"): ("rs", ["p", "1", "1", "1"])}
    for n in _WIDTHS:
        for types, (form, ending) in want.items():
            tail = found.get((n, types, form))
            assert tail is not None, f"m64n{n} {types} ({form}) missing from the PTX"
            assert tail[-len(ending):] == ending, (n, types, tail)
            # the descriptors (B's, and A's for shared A) are 64-bit registers just before the scale-d predicate
            descs = tail[:-len(ending)]
            assert len(descs) == (1 if form == "rs" else 2) and all(d.startswith("%rd") for d in descs), (n, tail)


@pytest.mark.parametrize("name", PTX)
def test_ptx_version_loadable_by_cuda13_driver(name):
    text = (ROOT / "ptx" / name).read_text()
    m = re.search(r"^\s*\.version\s+(\d+)\.(\d+)", text, re.M)
    assert m, f"{name} has no .version"
    assert (int(m.group(1)), int(m.group(2))) <= (9, 0), f"{name}: .version {m.group(1)}.{m.group(2)} > 9.0"
    target = re.search(r"^\s*\.target\s+(\S+)", text, re.M).group(1)
    assert target in ("sm_90a", "sm_80")


@requires_ptxas
@pytest.mark.parametrize("name", PTX)
def test_ptx_assembles_for_its_target(name):
    from tmakit.build import assemble_ptx
    from tmakit.kernel_signature import ptx_targets

    (target,) = ptx_targets((ROOT / "ptx" / name).read_text())[:1]
    assert assemble_ptx(name, arch=target)[:4] == b"\x7fELF"


@requires_nvrtc
def test_box_params_struct_size_matches_the_packer():
    """The C struct (types.cuh) is as long as what the Python packer writes: compiled, not restated."""
    from tmakit.build import compile_cuda
    from tmakit.errors import LaunchError
    from tmakit.ops._boxparams import pack_box_params

    packed = pack_box_params(0x1000, (10, 20), (4, 40), (8, 4), 4, 7, swizzle=3)
    compile_cuda(f'#include "tmakit/types.cuh"\nstatic_assert(sizeof(tmakit::BoxParams) == {len(packed.data)}, '
                 '"packer and struct differ");\nextern "C" __global__ void tmakit_size_probe() {}\n', arch="sm_80",
                 name="box_params_size.cu")
    assert packed.__kernel_param__(len(packed.data)) == packed.data
    with pytest.raises(LaunchError, match="compiled for the TMA path"):
        packed.__kernel_param__(128)


# --- The cp.async path's geometry, run on the CPU against tmakit.layout ---------------------------------
# box_geometry.cuh / swizzle.cuh are host+device code. The harness executes the cp.async plan (chunk_kind,
# element addresses, fill bits, swizzle) with memcpy, so every address decision the device makes is checked
# byte for byte against tma_load_image on random boxes, without a GPU.

HARNESS = r"""
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include "tmakit/box_geometry.cuh"
#include "tmakit/swizzle.cuh"
using namespace tmakit;
int main(int argc, char** argv) {
  FILE* in = fopen(argv[1], "rb");
  FILE* out = fopen(argv[2], "wb");
  unsigned plain_boxes = 0, clipped_boxes = 0, clipped_dim0 = 0, fast_walks = 0;
  BoxParams p;
  while (fread(&p, sizeof p, 1, in) == 1) {
    Coords at;
    unsigned long long mem_bytes;
    unsigned int image_bytes;
    if (fread(&at, sizeof at, 1, in) != 1 || fread(&mem_bytes, 8, 1, in) != 1 || fread(&image_bytes, 4, 1, in) != 1) return 2;
    std::vector<unsigned char> raw(mem_bytes + 32);
    unsigned char* mem = raw.data() + ((16 - ((unsigned long long)raw.data() & 15)) & 15);
    if (fread(mem, 1, mem_bytes, in) != mem_bytes) return 3;
    p.address += (unsigned long long)mem;  // the file holds the tensor's offset in the buffer
    std::vector<unsigned char> image(image_bytes, 0xA5);
    const unsigned long long fill = oob_fill_bits(p);
    // The plain 2-D shortcut must agree with the general walk chunk by chunk (whole copies inside, wholly
    // out-of-bounds chunks outside), and the image it makes is the one compared with the model.
    const Plain2dBox plain_box(p, at);
    // The extent given apart from BoxParams.box (a wider box stored from several images) is the box of a
    // BoxParams with that extent: every field agrees.
    BoxParams wider = p;
    wider.box[0] = 2 * p.box[0];
    const Plain2dBox given(p, at, wider.box[0], p.box[1]), made(wider, at);
    if (given.plain != made.plain || given.per_row != made.per_row || given.pitch != made.pitch ||
        given.rows_begin != made.rows_begin || given.rows_end != made.rows_end || given.origin != made.origin ||
        given.chunks_begin != made.chunks_begin || given.chunks_end != made.chunks_end)
      return 5;
    // The block's strided walk (plain_box_walk: constant steps where the box is wholly inside and a step is
    // whole rows of whole swizzle periods, else ChunkCursor) visits chunk k = first, first + step, ... with
    // the offset, address and bounds of row k / per_row, chunk k % per_row, and ends with the box.
    if (plain_box.plain) {
      if (plain_box.rows != p.box[1]) return 6;
      const unsigned per_row = plain_box.per_row, total = plain_box.rows * per_row;
      for (unsigned step : {1u, 3u, 7u, 32u, 96u, 256u}) {
        for (unsigned first = 0; first < step && first < 40u; ++first) {
          unsigned k = first;
          bool bad = false;
          plain_box_walk(plain_box, p.swizzle, first, step, [&](unsigned offset, unsigned long long address, bool inside) {
            const unsigned row = k / per_row, chunk = k % per_row;
            bad |= k >= total || offset != swizzle_offset(plain_box.image_offset(row, chunk), p.swizzle) ||
                   inside != plain_box.inside(row, chunk) || (inside && address != plain_box.address(row, chunk));
            k += step;
          });
          if (bad || k < total) return 6;
          fast_walks += plain_box.all_inside() && step % per_row == 0 &&
                        (step / per_row * plain_box.pitch) % swizzle_period(p.swizzle) == 0;
        }
      }
    }
    unsigned inside_chunks = 0;
    for (unsigned k = 0; k < box_image_bytes(p) / 16u; ++k) {
      const BoxChunk ch = box_chunk(p, at, k);
      unsigned char* dst = image.data() + swizzle_offset(ch.image_offset, p.swizzle);
      if (plain_box.plain) {
        const unsigned row = k / plain_box.per_row, chunk = k % plain_box.per_row;
        const bool inside = plain_box.inside(row, chunk);
        if (plain_box.image_offset(row, chunk) != ch.image_offset) return 4;
        if (inside && (chunk_kind(p, ch) != kChunkCopy16 || plain_box.address(row, chunk) != element_address(p, ch, 0)))
          return 4;
        for (unsigned e = 0; !inside && e < chunk_elements(p); ++e)
          if (element_in_bounds(p, ch, e)) return 4;
        inside_chunks += inside;
        const unsigned long long fill8 = oob_fill_8_bytes(p);
        if (inside) memcpy(dst, (const void*)plain_box.address(row, chunk), 16);
        else for (int half = 0; half < 2; ++half) memcpy(dst + 8 * half, &fill8, 8);
        continue;
      }
      switch (chunk_kind(p, ch)) {
        case kChunkCopy16: memcpy(dst, (const void*)element_address(p, ch, 0), 16); break;
        case kChunkZero16: memset(dst, 0, 16); break;
        default:
          for (unsigned e = 0; e < chunk_elements(p); ++e) {
            if (element_in_bounds(p, ch, e)) memcpy(dst + e * p.elem_size, (const void*)element_address(p, ch, e), p.elem_size);
            else memcpy(dst + e * p.elem_size, &fill, p.elem_size);
          }
      }
    }
    plain_boxes += plain_box.plain && inside_chunks == box_image_bytes(p) / 16u;
    clipped_boxes += plain_box.plain && inside_chunks < box_image_bytes(p) / 16u;
    clipped_dim0 += plain_box.plain && (at.c[0] < 0 || (unsigned long long)at.c[0] + p.box[0] > p.dims[0]);
    fwrite(image.data(), 1, image_bytes, out);
  }
  fclose(out);
  printf("plain 2-D boxes: %u clipped: %u in dim 0: %u constant-step walks: %u\n", plain_boxes, clipped_boxes, clipped_dim0,
         fast_walks);
  return 0;
}
"""


def _random_case(rng, plain: bool = False, clipped: bool = False):
    """A random box; `plain` makes it one Plain2dBox takes (rank 2, aligned, unit strides), inside the tensor;
    `clipped` moves such a box partly or wholly past either end of either dimension, in whole chunks along
    dim 0 (the edge tiles of copy and transpose)."""
    import numpy as np

    from tmakit.dtypes import DataType

    esize = int(rng.choice([1, 2, 4, 8]))
    options = {1: [DataType.UINT8], 2: [DataType.FLOAT16, DataType.BFLOAT16, DataType.UINT16],
               4: [DataType.FLOAT32, DataType.INT32], 8: [DataType.FLOAT64, DataType.UINT64]}[esize]
    dtype = options[int(rng.integers(0, len(options)))]
    if rng.random() < 0.3 and not plain:
        return _random_interleaved_case(rng, esize, dtype)
    rank = 2 if plain else int(rng.integers(1, 6))
    swizzle = int(rng.integers(0, 4))
    span = {0: 256 * esize, 1: 32, 2: 64, 3: 128}[swizzle]
    row_bytes = int(rng.choice([r for r in (16, 32, 48, 64, 96, 128, 256) if r <= span and r // esize <= 256]))
    box = [row_bytes // esize] + [int(rng.integers(1, 7)) for _ in range(rank - 1)]
    es = [1] * rank if plain else [int(rng.integers(1, 4))] + [int(rng.integers(1, 4)) for _ in range(rank - 1)]
    dims = [int(rng.integers(1, 3 * box[0] + 2))] + [int(rng.integers(1, 12)) for _ in range(rank - 1)]
    if plain:
        dims = [d + b for d, b in zip(dims, box)]
        if clipped and rng.random() < 0.7:  # dim 0 clipped in whole chunks needs rows of whole chunks (else
            dims[0] = -(-dims[0] // max(1, 16 // esize)) * max(1, 16 // esize)  # the box is not plain)
    aligned = plain or bool(rng.integers(0, 2))  # TMA-describable strides, or any pitch (the cp.async-only case)
    strides, acc = [esize], dims[0] * esize
    for d in dims[1:]:
        acc = -(-acc // 16) * 16 + 16 * int(rng.integers(0, 2)) if aligned else acc + esize * int(rng.integers(0, 3))
        strides.append(acc)
        acc *= d
    total = acc if rank > 1 else dims[0] * esize
    base = 0 if aligned else esize * int(rng.integers(0, 4))
    coords = [int(rng.integers(-b * e - 1, d + 2)) for b, e, d in zip(box, es, dims)]
    step = max(1, 16 // esize)  # TMA faults unless the dim-0 start is 16-byte aligned (tma_model.check_box_start)
    coords[0] = coords[0] // step * step
    if plain:
        coords = [int(rng.integers(0, (dims[0] - box[0]) // step + 1)) * step, int(rng.integers(0, dims[1] - box[1] + 1))]
        if clipped:
            dim = int(rng.integers(0, 2))
            if dim == 0:  # in whole chunks: the tensor's row must end on one too (dims[0] a multiple of step)
                coords[0] = int(rng.integers(-box[0] // step - 1, dims[0] // step + 2)) * step
            else:
                coords[1] = int(rng.integers(-box[1] - 1, dims[1] + 2))
    oob_nan = int(dtype.is_float and rng.integers(0, 2))
    memory = rng.integers(0, 256, size=base + total, dtype=np.uint8)
    return dict(rank=rank, esize=esize, dtype=dtype, swizzle=swizzle, box=box, es=es, dims=dims, strides=strides,
                base=base, coords=coords, oob_nan=oob_nan, memory=memory, interleave=0)


def _random_interleaved_case(rng, esize, dtype):
    """An interleaved (16B/32B slice) box: dim 0 counted in slices, rank 3-5 (tma_model's docstring)."""
    import numpy as np

    rank = int(rng.integers(3, 6))
    interleave = int(rng.integers(1, 3))
    slice_bytes = 16 * interleave
    swizzle = 1 if interleave == 2 else int(rng.integers(0, 4))
    box = [max(1, 16 // esize) * int(rng.integers(1, 5))] + [int(rng.integers(1, 5)) for _ in range(rank - 1)]
    es = [int(rng.integers(1, 4)) for _ in range(rank)]
    dims = [int(rng.integers(1, 12)) for _ in range(rank)]
    strides, acc = [esize], dims[0] * slice_bytes
    for d in dims[1:]:
        acc = -(-acc // slice_bytes) * slice_bytes + slice_bytes * int(rng.integers(0, 2))
        strides.append(acc)
        acc *= d
    coords = [int(rng.integers(-b * e - 1, d + 2)) for b, e, d in zip(box, es, dims)]
    oob_nan = int(dtype.is_float and rng.integers(0, 2))
    memory = rng.integers(0, 256, size=acc, dtype=np.uint8)
    return dict(rank=rank, esize=esize, dtype=dtype, swizzle=swizzle, box=box, es=es, dims=dims, strides=strides,
                base=0, coords=coords, oob_nan=oob_nan, memory=memory, interleave=interleave)


@pytest.mark.skipif(not (__import__("shutil").which("nvcc")), reason="nvcc (host compiler driver) is not on the PATH")
def test_cp_async_plan_matches_layout_model(tmp_path):
    import struct
    import subprocess
    from types import SimpleNamespace

    import numpy as np

    from tmakit.layout.tma_model import box_geometry, tma_load_image
    from tmakit.tensormap.enums import Interleave, OOBFill, Swizzle

    src = tmp_path / "harness.cu"
    src.write_text(HARNESS)
    exe = tmp_path / "harness"
    proc = subprocess.run(["nvcc", "-std=c++17", f"-I{ROOT / 'cuda_src'}", str(src), "-o", str(exe)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rng = np.random.default_rng(1234)
    cases, blob, expected = [], bytearray(), []
    for n in range(800):
        c = _random_case(rng, plain=n >= 600, clipped=n >= 650)
        spec = SimpleNamespace(dtype=c["dtype"], box=c["box"], element_strides=c["es"], swizzle=Swizzle(c["swizzle"]),
                               interleave=Interleave(c["interleave"]), dims=c["dims"], strides=c["strides"][1:],
                               oob_fill=OOBFill(c["oob_nan"]))
        geo = box_geometry(spec)
        pad = lambda v, f: list(v) + [f] * (5 - len(v))  # noqa: E731
        blob += struct.pack("<Q5Q5Q5I5I6I2I", c["base"], *pad(c["dims"], 1), *pad(c["strides"], 0), *pad(c["box"], 1),
                            *pad(c["es"], 1), c["rank"], c["esize"], c["swizzle"], c["interleave"], c["oob_nan"], int(c["dtype"]),
                            0, 0)
        blob += struct.pack("<5i", *pad(c["coords"], 0)) + struct.pack("<QI", len(c["memory"]), geo.smem_bytes)
        blob += c["memory"].tobytes()
        expected.append(tma_load_image(spec, c["memory"][c["base"]:], c["coords"], poison=0xA5))
        cases.append(c)
    (tmp_path / "in.bin").write_bytes(bytes(blob))
    run = subprocess.run([str(exe), str(tmp_path / "in.bin"), str(tmp_path / "out.bin")], capture_output=True, timeout=120)
    # 4: the plain 2-D shortcut disagreed with the general walk; 5: an extent given apart from box[] did not
    # describe the box of that extent; 6: the strided chunk walk (plain_box_walk) missed or misplaced a chunk
    assert run.returncode == 0, (run.returncode, run.stderr)
    plain, clipped, clipped_dim0, fast_walks = (int(w) for w in run.stdout.decode().split() if w.isdigit())
    # the forced cases took the shortcut (a forced clip can still land inside: box[1] == 1, say), and the
    # walk's constant-step path ran
    assert plain >= 60 and clipped >= 60 and clipped_dim0 >= 20 and fast_walks >= 100, run.stdout
    got, offset = (tmp_path / "out.bin").read_bytes(), 0
    for c, want in zip(cases, expected):
        image = np.frombuffer(got[offset:offset + want.size], dtype=np.uint8)
        offset += want.size
        bad = np.flatnonzero(image != want)
        assert bad.size == 0, (f"case {dict((k, v) for k, v in c.items() if k != 'memory')}: {bad.size} bytes differ, "
                               f"first at {bad[0]}: got {image[bad[0]]:#x} want {want[bad[0]]:#x}")
    assert offset == len(got)
