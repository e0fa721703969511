"""CPU tier: the device library and every kernel compile under nvcc, not only under NVRTC.

nvcc sees what NVRTC never does: the standard headers (<cstdint>'s int64_t beside tmakit's), and a host pass that
must see every __global__ function the device pass sees. So `nvcc -c` (device and host passes) builds, for sm_90a
and for sm_80, a user translation unit that includes <cstdint> and every header under cuda_src/tmakit, says `using
namespace tmakit;` and declares its own barrier as a std::uint64_t, and every kernel under cuda_src/.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
INCLUDE = ROOT / "cuda_src"
HEADERS = sorted(p.name for p in (INCLUDE / "tmakit").glob("*.cuh"))
KERNELS = sorted(p.name for p in INCLUDE.glob("*.cu"))
GENCODE = {"sm_90a": "-gencode=arch=compute_90a,code=sm_90a", "sm_80": "-gencode=arch=compute_80,code=sm_80"}

requires_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on the PATH")

USER_TU = "#include <cstdint>\n" + "".join(f'#include "tmakit/{h}"\n' for h in HEADERS) + r"""
using namespace tmakit;  // next to <cstdint>: tmakit's fixed-width integers are the standard ones

extern "C" __global__ void user_kernel(const __grid_constant__ TensorMapDesc map, std::int64_t n, std::uint8_t* out) {
  __shared__ alignas(1024) std::uint8_t stage[8192];
  __shared__ std::uint64_t bar;  // a raw barrier, declared the standard way
  __shared__ unsigned long long word;  // or as the 64-bit word it is
  if (threadIdx.x == 0) {
    mbarrier_init(&bar, 1);
    mbarrier_init(&word, blockDim.x);
    fence_mbarrier_init();
  }
  __syncthreads();
#if TMAKIT_HAS_SM90
  if (threadIdx.x == 0) {
    mbarrier_arrive_expect_tx(&bar, 8192);
    cp_async_bulk_tensor_g2s<2>(stage, &map, Coords{{0, 0, 0, 0, 0}}, &bar);
  }
  mbarrier_wait_parity(&bar, 0);
#else
  cp_async_cg_16(stage + 16 * threadIdx.x, out);
  cp_async_wait_all();
  __syncthreads();
#endif
  mbarrier_arrive(&word);
  mbarrier_wait_parity(&word, 0);
  int64_t i = threadIdx.x;  // unqualified
  if (i < n) out[i] = stage[i] + static_cast<std::uint8_t>(swizzle_offset(static_cast<uint32_t>(i), 3));
}
"""


def _nvcc(source: Path, arch: str, tmp_path: Path, defines: tuple[str, ...] = ()) -> str:
    proc = subprocess.run(["nvcc", "-c", "-std=c++17", f"-I{INCLUDE}", GENCODE[arch], *defines, str(source), "-o",
                           str(tmp_path / "out.o")], capture_output=True, text=True, timeout=600)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"nvcc -c {source.name} for {arch} failed:\n{log}"
    return log


@requires_nvcc
@pytest.mark.parametrize("arch", sorted(GENCODE))
def test_user_translation_unit_with_every_header(arch, tmp_path):
    source = tmp_path / "user.cu"
    source.write_text(USER_TU)
    log = _nvcc(source, arch, tmp_path)
    assert "warning" not in log, log


@requires_nvcc
@pytest.mark.parametrize("arch", sorted(GENCODE))
@pytest.mark.parametrize("kernel", KERNELS)
def test_every_kernel_compiles_under_nvcc(kernel, arch, tmp_path):
    log = _nvcc(INCLUDE / kernel, arch, tmp_path)
    assert "warning" not in log, log


# The builds of one kernel source the ops compile beside its defaults (grouped, fp8, reduce-add, split-K and
# narrow-width GEMM, variable-length and paged attention): each is a different program for nvcc's passes.
BUILDS = [("gemm.cu", ("-DTMAKIT_GEMM_GROUPED=1", "-DTMAKIT_GEMM_CLUSTER=1")),
          ("gemm.cu", ("-DTMAKIT_GEMM_STORE_ADD=1",)),
          ("gemm.cu", ("-DTMAKIT_GEMM_BN=192",)), ("gemm.cu", ("-DTMAKIT_GEMM_BN=144",)),
          ("gemm.cu", ("-DTMAKIT_GEMM_MULTICAST_A=1",)),
          ("gemm.cu", ("-DTMAKIT_GEMM_SWAP_AB=1",)), ("gemm.cu", ("-DTMAKIT_GEMM_SWAP_AB=1", "-DTMAKIT_GEMM_BN=144")),
          ("gemm.cu", ("-DTMAKIT_GEMM_SPLIT_K=1", "-DTMAKIT_GEMM_OUT_F32=1")),
          ("gemm.cu", ("-DTMAKIT_GEMM_FP8=1", "-DTMAKIT_GEMM_BN=128", "-DTMAKIT_GEMM_CLUSTER=1")),
          ("attention.cu", ("-DTMAKIT_ATTN_VARLEN=1",)), ("attention.cu", ("-DTMAKIT_ATTN_PAGED=1",))]


@requires_nvcc
@pytest.mark.parametrize("arch", sorted(GENCODE))
@pytest.mark.parametrize("kernel, defines", BUILDS, ids=[f"{k}{''.join(d)}" for k, d in BUILDS])
def test_every_build_of_a_kernel_compiles_under_nvcc(kernel, defines, arch, tmp_path):
    log = _nvcc(INCLUDE / kernel, arch, tmp_path, defines)
    assert "warning" not in log, log


@requires_nvcc
@pytest.mark.parametrize("arch", sorted(GENCODE))
@pytest.mark.parametrize("options", [dict(block_m=64, block_n=256), dict(block_n=176, cluster=2, b_kmajor=False),
                                     dict(block_n=208, cluster=2, swap_nmajor=True)],
                         ids=["bm64", "narrow_nmajor_cluster", "swapped_nmajor"])
def test_gemm_builds_with_their_own_descriptors_compile_under_nvcc(options, arch, tmp_path):
    """BM 64 (both warpgroups on the same rows), N-major B and swapped operands with an N-major B (MN-major A
    stages) need their own stage descriptors, whose lists nvcc's -D would split at the commas: a translation unit
    defines them and includes the kernel."""
    from dataclasses import replace

    from tmakit.backend import Backend
    from tmakit.ops.gemm import default_config

    swap = options.pop("swap_nmajor", False)
    cfg = default_config(Backend.TMA, **options)
    if swap:
        cfg = replace(cfg, swap_ab=True, a_kmajor=False)
    source = tmp_path / "gemm_descriptors.cu"
    source.write_text("".join(f"#define {k} {v}\n" for k, v in cfg.defines.items()) + '#include "gemm.cu"\n')
    log = _nvcc(source, arch, tmp_path)
    assert "warning" not in log, log


def _file_scope_using(path: Path) -> list[str]:
    """`using namespace` directives at file scope (the library's own `namespace tmakit { }` counts as file scope,
    any other namespace, function or class as inside)."""
    depth, bad = 0, []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        code = re.sub(r"//.*", "", line)
        if depth == 0 and re.match(r"\s*using\s+namespace\b", code):
            bad.append(f"{path.name}:{number}: {line.strip()}")
        if re.match(r"\s*namespace\s+tmakit\s*\{", code) or re.match(r"\s*}\s*//\s*namespace tmakit", line):
            continue
        depth += code.count("{") - code.count("}")
    return bad


@pytest.mark.parametrize("header", HEADERS)
def test_headers_bring_no_namespace_into_the_includer(header):
    """No `using namespace` at file scope in anything a user includes."""
    assert _file_scope_using(INCLUDE / "tmakit" / header) == []


def test_kernels_keep_using_directives_out_of_file_scope():
    """Kernels (compiled alone, but read as examples) say `using namespace tmakit;` inside a function or their own
    namespace only: a file-scope directive next to <cstdint> made int64_t ambiguous under nvcc."""
    assert [line for kernel in KERNELS for line in _file_scope_using(INCLUDE / kernel)] == []
