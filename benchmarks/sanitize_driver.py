"""Run every tmakit kernel once per backend on small inputs and check the results; for compute-sanitizer.

benchmarks/sanitize.sh runs this under memcheck, racecheck and synccheck. Sizes are small (the tools slow
kernels down 10-100x) but cover ragged edges, out-of-bounds boxes and swizzle: the ops (load_tiles, copy,
transpose, ptx_tile_copy), GEMM, attention and the TMA modes. Exit status 1 on a wrong
result, 0 when every check passed (or, with a message, when there is no GPU).
"""
from __future__ import annotations

import gc
import sys
import types
from pathlib import Path

import numpy as np


def main() -> int:
    from tmakit import _driver, ops
    from tmakit.device_array import DeviceArray
    from tmakit.layout import tma_model
    from tmakit.tensormap import describe_tensor

    if not _driver.gpu_available():
        print("sanitize_driver: no GPU; nothing run")
        return 0
    arch = _driver.device_arch(0)
    backends = (["tma"] if arch.has_tma else []) + ["cp.async"]
    rng = np.random.default_rng(7)
    failures = []

    def check(name: str, ok: bool) -> None:
        print(f"{'ok  ' if ok else 'FAIL'} {name}", flush=True)
        if not ok:
            failures.append(name)

    for backend in backends:
        # load_tiles: swizzled, padded-row, OOB (zero and NaN) boxes
        for dtype, shape, box, opts in ((np.float32, (40, 64), (8, 32), dict(swizzle="128B", oob_fill="nan")),
                                        (np.float16, (24, 64), (8, 16), dict(swizzle="128B")),
                                        (np.uint8, (17, 48), (4, 32), dict(swizzle="32B"))):
            host = rng.integers(0, 256, size=int(np.prod(shape)) * np.dtype(dtype).itemsize, dtype=np.uint8).view(dtype).reshape(shape)
            step = 16 // np.dtype(dtype).itemsize
            coords = np.array([[0, 0], [-3, -step], [shape[0] - 2, shape[1] - step], [shape[0] + 5, 0]])
            with DeviceArray.from_host(host) as dev:
                tm = describe_tensor(dev, box=box, **opts)
                got = ops.load_tiles(tm, coords, backend=backend).images
                mem = host.view(np.uint8).ravel()
                want = np.stack([tma_model.tma_load_image(tm, mem, list(c[::-1]), poison=0xA5) for c in coords])
                check(f"load_tiles {backend} {np.dtype(dtype).name} {opts}", np.array_equal(got, want))
        # interleaved (16-byte slices, dim 0 counted in slices; driver order dims [4, 6, 5, 3]) inside a larger
        # buffer, because whole slices are read past a dense tensor's last W position
        from tmakit import encode_tiled

        host = rng.integers(0, 256, size=16 * 6 * 5 * 3 + 4096, dtype=np.uint8)
        with DeviceArray.from_host(host) as dev:
            tm = encode_tiled("f32", dev.ptr, [4, 6, 5, 3], [16, 96, 480], [4, 3, 2, 2], [1, 1, 1, 1],
                              interleave="16B", oob_fill="nan", device=0, owner=dev)
            coords = np.array([[1, 1, 1, 0], [2, 4, 4, 3], [0, 0, -1, 0], [3, 1, 5, 2]])
            got = ops.load_tiles(tm, coords, backend=backend).images
            want = np.stack([tma_model.tma_load_image(tm, host, list(c[::-1]), poison=0xA5) for c in coords])
            check(f"load_tiles {backend} interleave 16B", np.array_equal(got, want))
        # copy, transpose, pipeline, hand-written PTX
        # (132, 260) float32 and (272, 96) uint8: dst pitch 16 mod 32, so the odd rows are shifted (prefix loads)
        # (515, 263) and (263, 515): pitches that are not multiples of 16 bytes on one side or both (on sm_90,
        # backend "auto" reads them with TMA as super-rows and stores sector-aligned runs)
        for shape, dtype in (((37, 1333), np.uint8), ((65, 33), np.float64), ((132, 260), np.float32),
                             ((272, 96), np.uint8), ((515, 263), np.uint8), ((515, 263), np.uint16),
                             ((263, 515), np.float32), ((1001, 37), np.float64)):
            host = rng.integers(0, 256, size=int(np.prod(shape)) * np.dtype(dtype).itemsize, dtype=np.uint8).view(dtype).reshape(shape)
            with DeviceArray.from_host(host) as src, DeviceArray.empty(shape, dtype) as dst, \
                    DeviceArray.empty(shape[::-1], dtype) as dst_t:
                ops.copy(dst, src, backend=backend)
                _driver.call("cuCtxSynchronize")
                check(f"copy {backend} {shape} {np.dtype(dtype).name}", dst.to_host().tobytes() == host.tobytes())
                pitch_ok = (shape[1] * np.dtype(dtype).itemsize) % 16 == 0
                # an explicit "tma" needs 16-byte pitches on both sides; "auto" takes TMA where it can describe
                aligned = pitch_ok and (shape[0] * np.dtype(dtype).itemsize) % 16 == 0
                chosen = backend if backend == "cp.async" or aligned else "auto"
                dst_t.fill(0xA5)
                result = ops.transpose(dst_t, src, backend=chosen)
                _driver.call("cuCtxSynchronize")
                check(f"transpose {chosen} ({result.backend.name}, {result.dst_stores} stores) {shape} "
                      f"{np.dtype(dtype).name}", dst_t.to_host().tobytes() == np.ascontiguousarray(host.T).tobytes())
                if pitch_ok:
                    dst.fill(0)
                    ops.ptx_tile_copy(dst, src, backend=backend)
                    _driver.call("cuCtxSynchronize")
                    check(f"ptx_tile_copy {backend} {shape} {np.dtype(dtype).name}", dst.to_host().tobytes() == host.tobytes())
        # a dst 16 bytes into a sector: every row shifted, and 512 rows (two whole tile rows) need a third
        shape = (512, 48)
        host = rng.integers(0, 1 << 16, size=shape, dtype=np.uint16)
        n = shape[0] * shape[1]
        with DeviceArray.from_host(host) as src, DeviceArray.zeros(n + 16, np.uint16) as buffer:
            ops.transpose(buffer[8:8 + n].reshape(shape[::-1]), src, backend=backend)
            _driver.call("cuCtxSynchronize")
            got = buffer.to_host()
            check(f"transpose {backend} {shape} uint16 at dst offset 16",
                  got[8:8 + n].tobytes() == np.ascontiguousarray(host.T).tobytes() and not got[:8].any()
                  and not got[8 + n:].any())
        # a source 32 bytes into a 128-byte line with a pitch of whole lines: tile columns moved back (lead)
        shape = (272, 256)
        host = rng.integers(0, 256, size=shape, dtype=np.uint8)
        n = shape[0] * shape[1]
        with DeviceArray.zeros(n + 32, np.uint8) as src_buffer, DeviceArray.empty(shape[::-1], np.uint8) as dst_t:
            src = src_buffer[32:32 + n].reshape(shape)
            src.copy_from_host(host)
            result = ops.transpose(dst_t, src, backend=backend)
            _driver.call("cuCtxSynchronize")
            check(f"transpose {backend} {shape} uint8 at src offset 32 (lead {result.lead})",
                  result.lead == 32 and dst_t.to_host().tobytes() == np.ascontiguousarray(host.T).tobytes())
        # 200 blocks walking the 561 tiles of 128 rows (the stage and the image buffer reused tile after tile),
        # shifted odd rows included (a dst pitch of 16 mod 32)
        shape = (4112, 2064)
        host = rng.integers(0, 256, size=shape, dtype=np.uint8)
        with DeviceArray.from_host(host) as src, DeviceArray.empty(shape[::-1], np.uint8) as dst_t:
            ops.transpose(dst_t, src, backend=backend, tile_plan=ops.TilePlan.of(128), max_blocks=200)
            _driver.call("cuCtxSynchronize")
            check(f"transpose {backend} {shape} uint8, 200 blocks for 561 tiles",
                  dst_t.to_host().tobytes() == np.ascontiguousarray(host.T).tobytes())
    _tensor_cores(ops, backends, check)
    if arch.has_tma:
        _tma_modes(check)
    return 1 if failures else 0


def _tma_modes(check) -> None:
    """The TMA modes' kernels (tma_modes.cu, tile_store.cu, tma_prefetch.cu; tests/test_tma_modes_hardware.py
    runs them at 1000 descriptors) on a few random descriptors each, against the CPU models. Interleaved loads
    are left out: their harness probes one case per process."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import tma_modes_vs_model as harness

    for mode in ("tiled", "im2col", "store", "multicast", "reduce", "prefetch", "store_twin", "prefetch_twin"):
        stats = harness.run_mode(mode, 6, 7)["stats"]
        check(f"tma mode {mode}: {stats['equal']} of {stats['compared']} equal to the model",
              stats["compared"] > 0 and stats["equal"] == stats["compared"])


def _tensor_cores(ops, backends, check) -> None:
    """GEMM and attention at ragged shapes, on both backends, against float32 products (torch as the fixture).
    The references are computed on the CPU and torch's cached blocks are released at the end, so that memcheck's
    leak report holds only what tmakit itself left allocated (cuBLAS and torch's pinned cache stay unused)."""
    try:
        import torch
    except ImportError:
        print("sanitize_driver: no torch; GEMM and attention not run")
        return
    _tensor_core_cases(torch, ops, backends, check)
    torch.cuda.synchronize()
    ops.clear_plan_cache()  # the one-shot GEMMs' plans keep their last buffers alive
    held = torch.cuda.memory_allocated()
    gc.collect()
    _release_finished_frames()
    print(f"torch memory still allocated after the cases: {held} bytes; after a cycle collection and releasing "
          f"finished frames: {torch.cuda.memory_allocated()} bytes", flush=True)
    torch.cuda.empty_cache()


def _release_finished_frames() -> None:
    """Drop the locals of every finished Python frame. compute-sanitizer keeps the frame of each kernel launch
    alive (its host backtraces reach into Python), and with it the frame's locals: the torch tensors of the
    cases, whose 2 MiB block of torch's caching allocator memcheck's leak check then reports, though nothing
    else refers to them. Without the sanitizer nothing holds those frames once their calls return."""
    for obj in gc.get_objects():
        if isinstance(obj, types.FrameType):
            try:
                obj.clear()
            except RuntimeError:  # a frame still executing: this one and its callers
                pass


def _tensor_core_cases(torch, ops, backends, check) -> None:
    gen = torch.Generator().manual_seed(11)  # on the CPU: a CUDA generator keeps device state of its own
    for backend in backends:
        # on tma also clusters that share A (pairs along N, each loading half of A's tile rows by multicast): an odd
        # count of tile columns, so the last pair's second tile lies past N
        shared_a = {"block_n": 128, "multicast": "a"}
        cases = [(130, 200, 72, "k", {}), (64, 136, 104, "n", {}), (17, 24, 520, "k", {})]
        if backend == "tma":
            cases += [(300, 520, 200, "k", shared_a), (260, 520, 136, "n", shared_a)]
        for m, n, k, b_major, options in cases:
            a = torch.randn(m, k, generator=gen).to("cuda", torch.bfloat16)
            b = torch.randn(*((n, k) if b_major == "k" else (k, n)), generator=gen).to("cuda", torch.bfloat16)
            if b_major == "n" and n * 2 % 16:
                continue  # an N-major b needs 16-byte rows
            c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32)
            ops.gemm(a, b, c, b_major=b_major, backend=backend, **options)
            torch.cuda.synchronize()
            a32, b32 = a.float().cpu(), b.float().cpu()
            ref = a32 @ (b32.T if b_major == "k" else b32)
            err = ((c.cpu() - ref).abs().max() / ref.abs().max().clamp(min=1.0)).item()
            check(f"gemm {backend} {m}x{n}x{k} b_major={b_major}{' multicast=a' if options else ''}", err <= 1e-3)
        if backend == "tma":
            # a 16-bit C read (beta) on the builds of an odd slab count (BN 192, BM 64 at BN 128) and a narrow width
            # (its part slab read from registers), on 2 SMs: each CTA takes many tiles, so the C read-ahead's
            # buffers and barriers rotate across tiles; then beta 0 at BN 256, whose last two slabs a tile are
            # stored under the next tile's first k-block; N 522 in rows padded to 528 (the last tile column's last
            # slabs stored from registers) in clusters of 2; the same on swapped operands
            for m, n, k, options in ((300, 520, 136, {"block_n": 192, "cluster": 1}),
                                     (200, 296, 72, {"block_m": 64, "block_n": 128, "cluster": 1}),
                                     (260, 280, 136, {"block_n": 144, "cluster": 1}),
                                     (300, 522, 136, {"block_n": 192, "cluster": 2}),
                                     (300, 520, 136, {"block_n": 256, "cluster": 1}),
                                     (300, 522, 136, {"block_n": 256, "cluster": 2}),
                                     # swapped operands (C^T's tiles, each slab stored transposed): beta 0 at BN
                                     # 256 (deferred slabs), a C read on a narrow width, N 522 (the rows of the
                                     # last warpgroup stored from registers) in clusters of 2
                                     (520, 300, 136, {"block_n": 256, "cluster": 1, "swap_ab": True}),
                                     (280, 260, 136, {"block_n": 144, "cluster": 1, "swap_ab": True}),
                                     (300, 522, 136, {"block_n": 192, "cluster": 2, "swap_ab": True}),
                                     # and N-major B swapped (MN-major A stages), a C read
                                     (300, 520, 136, {"block_n": 208, "cluster": 2, "swap_ab": True, "b_major": "n"})):
                a = torch.randn(m, k, generator=gen).to("cuda", torch.bfloat16)
                nmajor = options.get("b_major") == "n"
                b = torch.randn(*((k, n) if nmajor else (n, k)), generator=gen).to("cuda", torch.bfloat16)
                c0 = torch.randn(m, n, generator=gen).to("cuda", torch.bfloat16)
                c = torch.empty(m, -(-n // 8) * 8, device="cuda", dtype=torch.bfloat16)[:, :n]
                c.copy_(c0)
                beta = 0.0 if options["block_n"] == 256 else 0.5
                ops.gemm(a, b, c, beta=beta, backend=backend, sms=2, **options)
                torch.cuda.synchronize()
                ref = a.float().cpu() @ (b.float().cpu() if nmajor else b.float().cpu().T) + beta * c0.float().cpu()
                err = ((c.float().cpu() - ref).abs().max() / ref.abs().max().clamp(min=1.0)).item()
                check(f"gemm {backend} {m}x{n}x{k} beta={beta} bf16 out {options}", err <= 1e-2)
        # (700 rows, D=64, causal: three consumer warpgroups, the first of which passes over a key block its rows
        # mask whole)
        for sq, sk, d, causal in ((130, 130, 64, True), (700, 700, 64, True), (17, 200, 128, False)):
            q = torch.randn(1, 2, sq, d, generator=gen).to("cuda", torch.bfloat16)
            kk = torch.randn(1, 2, sk, d, generator=gen).to("cuda", torch.bfloat16)
            v = torch.randn(1, 2, sk, d, generator=gen).to("cuda", torch.bfloat16)
            out = torch.full_like(q, float("nan"))
            # a plan, not the one-shot op: the sanitizer keeps the frames of a module load alive (with each frame's
            # function), and the one-shot's planning closure would keep these tensors with them
            ops.plan_attention(q, kk, v, out, causal=causal, backend=backend)()
            torch.cuda.synchronize()
            s = (q.float().cpu() @ kk.float().cpu().transpose(-1, -2)) / d ** 0.5
            if causal:
                s = s.masked_fill(torch.ones(sq, sk, dtype=torch.bool).triu(1), float("-inf"))
            ref = torch.softmax(s, dim=-1) @ v.float().cpu()
            err = (out.float().cpu() - ref).abs().max().item()
            check(f"attention {backend} q{sq} k{sk} d{d} causal={causal}", err < 0.06)


if __name__ == "__main__":
    sys.exit(main())
