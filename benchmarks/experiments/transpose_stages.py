"""Experiment: the transpose's tile height and ring depth per backend, against torch's copy in the same run.

Each variant replaces ``tmakit.ops.transpose._PLANS`` (source rows per tile, ring stages; the host compiles
TMAKIT_TRANSPOSE_TILE_ROWS / TMAKIT_TRANSPOSE_STAGES and sizes shared memory from them) and transposes
2 GiB as 1/2/4/8-byte elements; every result is checked against torch before it is timed. Rounds are
interleaved (the variant order repeated), so drift of the machine hits every variant alike; prints one
JSON line per variant and size: the median ratio to torch's copy over the rounds, and each round's value.

    PYTHONPATH=. python benchmarks/experiments/transpose_stages.py [--gib 2] [--rounds 3] [--cols 32768]
        [--rows R] [--dtypes uint8,int16] [--variants tma:256:2:4096:none:off,...]

What earlier versions of this script measured on the H100 (2026-11-23, ratios to torch's copy; run-to-run
spread about +-0.03), and what the kernel kept:
- registers: one 16x16-byte micro-block per thread took 122 registers (2 blocks/SM) and left 6 of 8 warps
  idle for 1-byte elements; slicing micro-blocks so every size has 256 items per 128 rows: 40-56 registers.
- cp.async stores: straight from registers (8 rows x 64 B per warp) 0.43-0.82; per-image box_store 0.42-0.76;
  whole dst rows of the tile from the staged images 0.74-0.83 (kept).
- tile order grouped by 4 tile rows: +0.01-0.03 for 1-byte elements, neutral otherwise (kept).
- two image buffers without the ring's barrier on the cp.async path, the cp.async .L2::128B hint, streaming
  stores: within the spread; .L2::256B: -0.10. The transpose without its turn (timing only) ran as fast as
  with it: the bound is the memory pattern, not the PRMT work.
- 256-row tiles (dst runs of 256*E bytes): 1-byte cp.async 0.78 -> 0.83, TMA 0.81 -> 0.85 (kept).

Later (2026-11-23, fifth session; --variants, --rows, --cols):
- tile groups sized by dst run bytes (TMAKIT_TRANSPOSE_RUN_BYTES; 16384x32768): 1024 B 0.79-0.85, 2048-8192
  B 0.82-0.86, 16384 B 0.80-0.85; 4096 kept (16/E tile rows per group for 256-row tiles).
- other shapes (rows x cols of 4-byte elements) changed the picture; the default shape had hidden it:
  * 16256x33024 (pitches multiples of 128 B, rows not a whole number of 256-row tiles): TMA 0.80-0.85,
    cp.async 0.69-0.75. 16128x33280 (whole tiles): cp.async 0.80-0.85. The bottom edge tiles took the
    general per-chunk walk; the plain 2-D path now covers boxes clipped in dim 1: cp.async 0.77-0.79.
  * a source pitch of 64 mod 128 B (x32848): TMA with 128B L2 promotion 0.73, without 0.79-0.80; cp.async
    .L2::128B 0.63-0.65, none or 64B 0.70-0.74. Promotion is now off.
  * a 1-byte dst pitch of 16 mod 32 B (16336 rows): 0.56-0.61 on both paths, every other size 0.73-0.83.
    Every run of 256 bytes written to an odd dst row then starts and ends inside a 32-byte sector.
- tile plans (tma 256x2, 128x2/3/4; cp.async 128x2, 256x2) at 16384x32768 and 16128x33280: all within
  0.79-0.86 with a round-to-round spread of +-0.03; none better than the kept 256x2.

Sixth session (2026-11-23; the sixth field, sector-aligned runs on/off; --dtypes; device_runs.md 59-60,
benchmarks/results/transpose_sectors_h100.jsonl). Rows 16336/16328/16332/16330 give a dst pitch of 16 mod 32
bytes for 1/2/4/8-byte elements:
- on / off, TMA: 1B 0.71-0.73 / 0.57-0.58, 2B 0.73-0.76 / 0.66, 4B 0.78-0.79 / 0.75, 8B 0.80-0.82 / 0.79-0.80;
  cp.async: 1B 0.69-0.74 / 0.58-0.60, 2B 0.70-0.71 / 0.68, 4B 0.74 / 0.75, 8B 0.75 / 0.74-0.77. Kept on.
- 288 threads when a tile turns its prefix (so warp 0 never turns a third item): TMA +0.00-0.02, cp.async
  -0.05 to +0.01. Not kept: the extra turn round is not what the shifted tiles lose.

Seventh session (2026-11-23; --dst-offset; device_runs.md 64-68, benchmarks/results/transpose_session7_h100.jsonl):
- 3 or 4 TMA ring stages (one block per SM either way): no gain over 2; cp.async with 3 stages (one block
  per SM instead of two) 0.45-0.70. Kept 2.
- one shifted class (a dst base 16 bytes into a sector, --dst-offset 16): TMA 0.76-0.79, about the two-class
  figures; the shifted layout itself costs little at a 128-aligned source pitch (16368x32768 1B: 0.79-0.81 vs
  0.80-0.82 aligned in the same rounds).
- shifted runs without their prefix (timing only; a compile-time switch since removed): TMA 1B 0.774 vs
  0.774, 2B 0.797 vs 0.808. The prefix load and its turn are not what shifted tiles lose.
- dst run bytes 1024/2048/4096 per tile group for 1/2-byte elements at 16336x32848: within the spread.
- the cp.async path issued 2.5-4x the instructions of TMA (issue slots 48-58% busy); a chunk walk at constant
  steps over interior boxes took it from 727M to 440M instructions for 4-byte elements (ncu, 16128x33280).

Ninth session (2026-11-23; device_runs.md 87-88, benchmarks/results/transpose_session9_h100.jsonl), 1-byte
elements, dst pitches not multiples of 128:
- 1-byte runs on 128-byte lines (a build of f30890a, since reverted: dst rows in 2/4/8 classes by where they
  start in a line, each class's runs moved back 0..7 chunks, a prefix of up to 112 source rows, 16 TMA stores
  of 16-row images per tile), against sector-aligned runs in the same build: TMA 0.719 vs 0.768 (16336x32848),
  0.748 vs 0.793 (16336x32768), 0.739 vs 0.775 (16352), 0.739 vs 0.755 (16320), 0.839 vs 0.848 aligned. The
  three-line runs cost less than the small stores and the long prefix. Not kept. (The cp.async path kept
  sectors there: the prefix would have cost it its second block per SM.)
- the prefix's items in the tile's lane order (one more round, spread over every warp, conflict free) instead
  of 8P items on warp 0 (8-way store conflicts, and warp 0 issues the ring's TMA loads and stores), old and
  new builds alternated old/new/old/new at 16336x32848: TMA 1B 0.717/0.703 -> 0.776/0.730, 2B 0.781/0.766 ->
  0.814/0.797, 4B 0.794/0.781 -> 0.828/0.810; cp.async 1B 0.663/0.638 -> 0.678/0.656, 4B 0.769/0.731 ->
  0.793/0.779. Kept.
- the cp.async path's dst stores plain instead of streaming (st.global.cs; a compile-time switch since removed;
  run 91, a slow machine): 1B 0.614 vs 0.623 (16336x32848), 0.660 vs 0.662 (16336x32768), 0.749 vs 0.772
  (aligned); 4B within 0.03 either way. Partly written lines are not lost to the streaming eviction. Kept .cs.

Tenth session (2026-11-23; device_runs.md 92-99, benchmarks/results/transpose_session10_h100.jsonl; a Triton
TMA transpose as the peer in the same rounds):
- 512 or 1024 threads per block: no gain with TMA; cp.async 512 -0.02 to -0.05. Not kept.
- dst runs of whole columns (1 MiB) against 4096-byte groups, persistent ring: +0.04 for 2/4/8-byte elements
  at 16336x32848 in one run, within the spread in the next. One image buffer on TMA (two blocks per SM): the
  same as two.
- Triton's one-program-per-tile transpose (128x64 elements, 4 warps) read 0.91-0.93x for 4/8-byte elements
  where the persistent ring read 0.86x; with the ring's tile shape (256 rows x 128 bytes) still 0.88x. The
  difference was the grid: one block per tile, the ring's code with one stage, three blocks per SM, against
  the ring in the same rounds: 16336x32848 TMA 1B 0.73 -> 0.85, 2/4/8B 0.77-0.80 -> 0.82-0.87; cp.async 1B
  0.64 -> 0.78, others 0.71-0.75 -> 0.81-0.84; 16384x32768 TMA 0.82 -> 0.86-0.88. Kept (256 rows, one stage,
  one image buffer, whole columns up to 64 KiB runs); 128-row tiles one per block: TMA about the same,
  cp.async 1B 0.75. The persistent ring stays a plan option (persistent=True), tested.
"""
from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from copy_bandwidth import _fastest_config, _time_ms, _triton_kernels  # noqa: E402

# backend:source rows per tile:ring stages:dst run bytes per tile group:L2 promotion[:sector-aligned runs on/off
# [:threads per block[:image buffers[:p (a persistent grid, through the ring) | np (one block per tile)]]]],
# defaults on:256:1:np (runs up to 96 defaulted to a persistent grid with two image buffers on TMA).
# "triton": the Triton TMA transpose of copy_bandwidth.py as a peer, its fastest config per size, or
# triton:BM:BN bytes:warps (a [BM rows, BN bytes] source box for every size).
VARIANTS = ",".join(f"{backend}:256:1:65536:none:{sectors}" for backend in ("tma", "cp.async") for sectors in ("on", "off"))
_OPTIONAL_DEFAULTS = ("on", "256", "1", "np")  # sectors, threads, image buffers, persistent


def parse_variant(text: str) -> tuple:
    """(backend, tile rows, stages, run bytes, l2, sectors, threads, image buffers, persistent) of one
    --variants entry. A Triton variant keeps its BM, BN bytes and warps (0 each: its fastest config) in the
    tile rows, stages and run bytes slots, as the JSON lines record them."""
    fields = text.split(":")
    if fields[0] == "triton":
        bm, bn_bytes, warps = (int(x) for x in (fields[1:] + ["0", "0", "0"])[:3])
        return ("triton", bm, bn_bytes, warps, "", "", 0, 0, "")
    backend, rows, stages, run_bytes, l2, *rest = fields
    sectors, threads, buffers, persistent = rest + list(_OPTIONAL_DEFAULTS[len(rest):])
    return (backend, int(rows), int(stages), int(run_bytes), l2, sectors, int(threads), int(buffers), persistent)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cols", type=int, default=32768, help="source columns (of 4-byte elements)")
    parser.add_argument("--rows", type=int, default=0, help="source rows (default: --gib's worth, a multiple of 16)")
    parser.add_argument("--dtypes", default="uint8,int16,float32,int64", help="the views of the float32 data to transpose")
    parser.add_argument("--dst-offset", type=int, default=0, help="bytes between a 256-byte boundary and dst's first row")
    parser.add_argument("--variants", default=VARIANTS,
                        help="comma-separated backend:rows:stages:run_bytes:l2[:on|off[:threads[:buffers[:p|np]]]], "
                             "or triton[:BM:BN bytes:warps]")
    args = parser.parse_args()
    try:
        variants = [parse_variant(v) for v in args.variants.split(",")]
    except ValueError as exc:
        parser.error(f"--variants {args.variants!r}: {exc}; each entry is backend:rows:stages:run_bytes:l2"
                     "[:on|off[:threads[:buffers[:p|np]]]] with whole numbers, or triton[:BM:BN bytes:warps]")
    import torch

    from tmakit.backend import Backend
    from tmakit.tensormap.enums import L2Promotion

    tr = importlib.import_module("tmakit.ops.transpose")  # the module; tmakit.ops.transpose is the function
    cols = args.cols
    rows = args.rows or int(args.gib * (1 << 30)) // (4 * cols) // 16 * 16  # dst pitches stay 16-byte multiples
    src = torch.randn(rows, cols, device="cuda")
    dst = torch.empty_like(src)
    dst_bytes = torch.empty(rows * cols * 4 + 256, dtype=torch.uint8, device="cuda")  # 256-byte aligned (caching allocator)
    dst_t = dst_bytes[args.dst_offset:args.dst_offset + rows * cols * 4].view(torch.float32).view(cols, rows)
    ratios: dict[tuple, list[float]] = {}
    triton_transpose, configs = (_triton_kernels(torch) or (None, None))[1], {}
    for _ in range(args.rounds):
        for variant in variants:
            backend, tile_rows, stages, run_bytes, l2, sectors, threads, buffers, persistent = variant
            if backend != "triton":
                tr._PLANS[Backend(backend)] = (tr.TilePlan.of(tile_rows, stages, run_bytes, threads, buffers,
                                                              persistent != "np"),)
                tr._L2_PROMOTION = L2Promotion.parse(l2)
                tr._ALIGN_SECTORS = sectors != "off"
            copy_ms = _time_ms(torch, lambda: dst.copy_(src), 2, 9)
            for dtype in (getattr(torch, name) for name in args.dtypes.split(",")):
                s_x = src.view(dtype)
                d_x = dst_t.view(-1).view(dtype).view(s_x.shape[1], s_x.shape[0])
                d_x.view(torch.uint8).fill_(0xA5)
                if backend == "triton":
                    esize = s_x.element_size()
                    if not tile_rows and dtype not in configs:  # timed once per size, not once per round
                        configs[dtype] = _fastest_config(torch, triton_transpose, d_x, s_x)
                    config = (tile_rows, stages // esize, run_bytes) if tile_rows else configs[dtype]
                    fn = lambda: triton_transpose(d_x, s_x, config)  # noqa: E731
                else:
                    fn = lambda: tr.transpose(d_x, s_x, backend=backend)  # noqa: E731
                fn()
                torch.cuda.synchronize()
                ms = _time_ms(torch, fn, 3, 15) if torch.equal(d_x, s_x.t()) else float("nan")
                ratios.setdefault((*variant, s_x.element_size()), []).append(round(copy_ms / ms, 3))
    for (backend, tile_rows, stages, run_bytes, l2, sectors, threads, buffers, persistent, esize), values in ratios.items():
        print(json.dumps({"backend": backend, "tile_rows": tile_rows, "stages": stages, "run_bytes": run_bytes,
                          "l2": l2, "sectors": sectors, "threads": threads, "image_buffers": buffers,
                          "persistent": persistent, "esize": esize, "shape": [rows, cols],
                          "dst_offset": args.dst_offset, "vs_copy": statistics.median(values),
                          "rounds": values}))
    print(json.dumps({"device": torch.cuda.get_device_name()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
