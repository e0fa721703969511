"""Copy and transpose bandwidth at many shapes: tmakit.ops (each backend) beside torch and Triton, one run.

Each case moves one array far larger than the 50 MB L2 (--gib caps the largest; odd shapes are near it):
copies of a power-of-two and an odd byte count, and transposes of power-of-two and odd shapes for 1, 2, 4
and 8-byte elements, among them row pitches that are not multiples of 16 bytes on the source side, the
destination side or both (TMA can describe neither; tmakit then loads with TMA on the side it can describe
and moves 16-byte aligned pieces on the other). The figure is GB/s of bytes read + written, the median over
CUDA-event-timed samples after warm-up, each sample --batch calls back to back; each case's variants are
timed in interleaved rounds beside torch's ``dst.copy_(src)`` of the same bytes, and every ratio ("vs torch
copy", goal: copy >= 0.98x, transpose >= 0.85x) is taken within a round, then the median over rounds.
Each variant's output is checked against torch on a poisoned buffer before it is timed, so a fast wrong
kernel cannot report a number.

    PYTHONPATH=. python benchmarks/copy_bandwidth.py --out $OUT   # every case, 1 GiB at most, 3 rounds
    PYTHONPATH=. python benchmarks/copy_bandwidth.py --quick      # 128 MiB at most, fewer repetitions

The default run writes benchmarks/results/copy_bandwidth.md and .json (device, date, git commit, table);
any run writes the same files into --out. The tmakit variants are plans (``ops.plan_copy`` /
``ops.plan_transpose``), prepared before the timing; the copy also runs a few TMA tunings (chunk bytes,
ring stages, source eviction: plan arguments) beside the default.

Beside the named cases, a sweep of --sweep random transposes (default 40) drawn from --seed (printed and written
into the results): element size 1, 2, 4 or 8 bytes, rows and columns of any count (odd pitches included) with
16 MiB to --gib GiB in all; tmakit's transpose (auto) beside torch's copy of the same bytes, checked first; the
results give the sweep's minimum, geometric mean and worst five ratios.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import commit, time_ms  # noqa: E402
from _sweep import log_uniform, summary  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
NAME = "copy_bandwidth"

# (label, rows, cols, element bytes) of the transposes at --gib 1: power-of-two shapes, the issue's
# 10007x8192 fp16 (dst pitch 20014 bytes), its transpose (src pitch 20014), odd counts of every size with both
# pitches odd (2-byte elements twice: a wide and a near-square shape), and 1-byte elements with only the dst
# pitch odd.
TRANSPOSES = (
    (16384, 16384, 4), (32768, 16384, 2), (32768, 32768, 1), (8192, 16384, 8),
    (10007, 8192, 2), (8192, 10007, 2), (30011, 32749, 1), (16381, 30011, 2), (10007, 10009, 2), (12347, 20011, 4),
    (9001, 12343, 8), (16384, 16381, 4), (30011, 32768, 1),
)
# copy tunings timed beside the defaults: (backend, chunk_bytes, stages, source_eviction, grid): grid None is
# the default (a block per chunk; the cp.async path moves 8 KiB chunks), an int that many blocks per SM walking
# the chunks (the resident grids, the defaults before: 2 per SM on the TMA path, 7 on the cp.async path).
COPY_TUNINGS = (("tma", 32768, 3, "normal", 2), ("tma", 16384, 4, "normal", None), ("tma", 65536, 2, "normal", None),
                ("tma", 32768, 3, "first", None), ("cp.async", 8192, 4, "normal", 7))


def _time_ms(torch, fn: Callable[[], object], warmup: int, reps: int, batch: int = 1) -> float:
    """The median over `reps` samples of the GPU time per call, each sample `batch` calls between two events."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    return statistics.median(time_ms(fn, torch, batch) for _ in range(reps))


def _triton_kernels(torch):
    """The Triton peers (tma_copy, tma_transpose, pointer_transpose), each f(dst, src), or None without Triton.
    The TMA kernels build tensor descriptors on the device (16-byte strides only); the pointer transpose loads
    and stores masked 64x64 tiles at any pitch."""
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.jit
    def tma_copy(src_ptr, dst_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
        src = tl.make_tensor_descriptor(src_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
        dst = tl.make_tensor_descriptor(dst_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
        pid = tl.program_id(0)
        m, n = (pid // tl.cdiv(N, BN)) * BM, (pid % tl.cdiv(N, BN)) * BN
        dst.store([m, n], src.load([m, n]))

    @triton.jit
    def tma_transpose(src_ptr, dst_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
        src = tl.make_tensor_descriptor(src_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
        dst = tl.make_tensor_descriptor(dst_ptr, shape=[N, M], strides=[M, 1], block_shape=[BN, BM])
        pid = tl.program_id(0)
        m, n = (pid % tl.cdiv(M, BM)) * BM, (pid // tl.cdiv(M, BM)) * BN
        dst.store([n, m], tl.trans(src.load([m, n])))

    @triton.jit
    def pointer_transpose(src_ptr, dst_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
        pid = tl.program_id(0)
        m0, n0 = (pid % tl.cdiv(M, BM)) * BM, (pid // tl.cdiv(M, BM)) * BN
        rm, rn = m0 + tl.arange(0, BM), n0 + tl.arange(0, BN)
        x = tl.load(src_ptr + rm[:, None].to(tl.int64) * N + rn[None, :], mask=(rm[:, None] < M) & (rn[None, :] < N))
        tl.store(dst_ptr + rn[:, None].to(tl.int64) * M + rm[None, :], tl.trans(x),
                 mask=(rn[:, None] < N) & (rm[None, :] < M))

    triton.set_allocator(lambda size, alignment, stream: torch.empty(size, dtype=torch.int8, device="cuda"))

    def launch(kernel, dst, src, bm, bn, warps):
        m, n = src.shape
        kernel[(triton.cdiv(m, bm) * triton.cdiv(n, bn),)](src, dst, m, n, BM=bm, BN=bn, num_warps=warps)

    return (lambda dst, src: launch(tma_copy, dst, src, 64, 128, 4),
            lambda dst, src: launch(tma_transpose, dst, src, 128, 64, 4),
            lambda dst, src: launch(pointer_transpose, dst, src, 64, 64, 4))


def _at_least_one(text: str) -> int:
    """argparse type: an int >= 1 (a count of calls or rounds)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is below 1: a sample needs at least one call (use 1 to time single calls)")
    return value


def _planned(make: Callable[[], Callable[[], object]]) -> Callable[[], object]:
    """The plan ``make()`` returns (prepared outside the timing), or a callable raising what preparing raised."""
    try:
        return make()
    except Exception as exc:  # noqa: BLE001 - a backend this GPU lacks is reported, not fatal
        def refuse(exc: Exception = exc) -> object:
            raise exc
        return refuse


def sweep_transposes(seed: int, count: int, gib: float) -> list[tuple[int, int, int]]:
    """``count`` random (rows, cols, element bytes) of 16 MiB to ``gib`` GiB, from ``seed``."""
    rng = random.Random(seed)
    shapes = []
    lo, hi = 16 * 2**20, max(16 * 2**20, int(gib * 2**30))
    for _ in range(count):
        esize = rng.choice((1, 2, 4, 8))
        elements = log_uniform(rng, lo, hi) // esize
        # the aspect ratio log-uniform in [1/256, 256], both sides at least 1
        rows = max(1, min(elements, int(round(math.sqrt(elements) * math.exp(rng.uniform(-1, 1) * math.log(16))))))
        shapes.append((rows, max(1, elements // rows), esize))
    return shapes


def _scaled(rows: int, cols: int, esize: int, gib: float) -> tuple[int, int]:
    """The shape scaled (both sides by the same factor, odd counts kept odd) to at most `gib` GiB."""
    factor = min(1.0, (gib * 2**30 / (rows * cols * esize)) ** 0.5)
    if factor == 1.0:
        return rows, cols
    return max(1, int(rows * factor)) | (rows & 1), max(1, int(cols * factor)) | (cols & 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="also write the results into this folder")
    parser.add_argument("--name", default=NAME, help=f"results file stem (default {NAME}; e.g. {NAME}_h200)")
    parser.add_argument("--quick", action="store_true", help="128 MiB at most, fewer repetitions")
    parser.add_argument("--gib", type=float, default=1.0, help="the largest array in GiB (default 1)")
    parser.add_argument("--rounds", type=_at_least_one, default=3, help="interleaved rounds per case (default 3)")
    parser.add_argument("--batch", type=_at_least_one, default=1,
                        help="calls back to back per timed sample: 1 (default) times single calls, each with the "
                             "host time before its kernel starts; more hides the host time, as in a stream of calls")
    parser.add_argument("--sweep", type=int, default=40, help="random transposes beside the named cases (default 40)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sweep (default 0)")
    parser.add_argument("--only", default="",
                        help="comma-separated pieces of case labels to run (e.g. 'copy,10007x'); default every case")
    args = parser.parse_args()
    if args.sweep < 0:
        parser.error("--sweep must be at least 0")
    only = [piece for piece in args.only.split(",") if piece]
    try:
        import torch
    except ImportError:
        print("copy_bandwidth: torch is not installed; nothing measured")
        return 0
    if not torch.cuda.is_available():
        print("copy_bandwidth: no CUDA GPU; nothing measured")
        return 0
    from tmakit import ops

    gib = 0.125 if args.quick else args.gib
    warmup, reps = (2, 4) if args.quick else (3, 10)
    stream = torch.cuda.current_stream()
    triton = _triton_kernels(torch) or (None, None, None)
    dtypes = {1: torch.uint8, 2: torch.float16, 4: torch.float32, 8: torch.int64}
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}

    def bits(t):  # compare bit patterns (random bytes make NaNs, which never equal themselves)
        return t.view(ints[t.element_size()])

    def cases():  # (label, nbytes, variants, want, out), one at a time (each holds three arrays)
        n_pow2 = int(gib * 2**30)
        for nbytes in (n_pow2, n_pow2 - 4097):
            src = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device="cuda")
            dst, base = torch.empty_like(src), torch.empty_like(src)
            variants = {"torch dst.copy_(src)": lambda d=base, s=src: d.copy_(s)}
            if triton[0] is not None and nbytes % 16 == 0:
                variants["triton TMA copy"] = lambda d=dst, s=src: triton[0](d.view(-1, 4096), s.view(-1, 4096))
            for backend in ("tma", "cp.async"):
                variants[f"tmakit copy ({backend})"] = _planned(
                    lambda b=backend, d=dst, s=src: ops.plan_copy(d, s, backend=b, stream=stream))
            sms = torch.cuda.get_device_properties(src.device).multi_processor_count
            for backend, chunk, stages, eviction, how in COPY_TUNINGS if nbytes == n_pow2 else ():
                grid = None if how is None else how * sms
                name = (f"{chunk // 1024} KiB x {stages}, evict {eviction}, " if backend == "tma" else "") + (
                    f"{how} blocks/SM walking the chunks" if type(how) is int else "a block per chunk")
                variants[f"tmakit copy ({backend}, {name})"] = _planned(
                    lambda b=backend, c=chunk, st=stages, e=eviction, g=grid, d=dst, s=src: ops.plan_copy(
                        d, s, backend=b, stream=stream, blocks=g, **(dict(chunk_bytes=c, stages=st, source_eviction=e)
                                                                     if b == "tma" else {})))
            yield (f"copy {nbytes} B", nbytes, variants, src, dst)
        for rows, cols, esize in TRANSPOSES:
            rows, cols = _scaled(rows, cols, esize, gib)
            nbytes = rows * cols * esize
            src = torch.randint(0, 256, (rows * cols * esize,), dtype=torch.uint8, device="cuda").view(dtypes[esize])
            src = src.view(rows, cols)
            dst = torch.empty(cols, rows, dtype=src.dtype, device="cuda")
            flat, base = src.view(-1), torch.empty(rows * cols, dtype=src.dtype, device="cuda")
            variants = {"torch dst.copy_(src) (same bytes)": lambda d=base, s=flat: d.copy_(s),
                        "torch dst.copy_(src.t())": lambda d=dst, s=src: d.copy_(s.t())}
            if triton[1] is not None and (rows * esize) % 16 == 0 and (cols * esize) % 16 == 0:
                variants["triton TMA transpose 128x64"] = lambda d=dst, s=src: triton[1](d, s)
            if triton[2] is not None:
                variants["triton transpose 64x64 (pointers)"] = lambda d=dst, s=src: triton[2](d, s)
            for backend in ("auto", "cp.async"):
                variants[f"tmakit transpose ({backend})"] = _planned(
                    lambda b=backend, d=dst, s=src: ops.plan_transpose(d, s, backend=b, stream=stream))
            yield (f"transpose {rows}x{cols} {esize} B", nbytes, variants, src.t(), dst)
        for rows, cols, esize in sweep:
            nbytes = rows * cols * esize
            src = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device="cuda").view(dtypes[esize])
            src = src.view(rows, cols)
            dst = torch.empty(cols, rows, dtype=src.dtype, device="cuda")
            flat, base = src.view(-1), torch.empty(rows * cols, dtype=src.dtype, device="cuda")
            variants = {"torch dst.copy_(src) (same bytes)": lambda d=base, s=flat: d.copy_(s),
                        "tmakit transpose (auto)": _planned(lambda d=dst, s=src: ops.plan_transpose(d, s, stream=stream))}
            yield (f"sweep transpose {rows}x{cols} {esize} B", nbytes, variants, src.t(), dst)

    sweep = sweep_transposes(args.seed, 0 if args.quick else args.sweep, gib)
    print(f"sweep: {len(sweep)} transposes from seed {args.seed}", flush=True)
    rows_out = []
    for label, nbytes, variants, want, out in cases():
        if only and not any(piece in label for piece in only):
            continue
        notes, paths = {}, {}
        for name, fn in variants.items():
            if name.startswith("torch dst.copy_(src)"):
                notes[name] = ""
                continue
            out.view(torch.uint8).fill_(0xA5)  # poison
            try:
                result = fn()
                torch.cuda.synchronize()
                notes[name] = "" if torch.equal(bits(out), bits(want)) else "WRONG RESULT (not timed)"
                if hasattr(result, "backend"):
                    paths[name] = result.backend.name + (f", {result.dst_stores} stores" if getattr(result, "dst_stores", "")
                                                         else f", {result.path}" if hasattr(result, "path") else "")
            except Exception as exc:  # noqa: BLE001 - one failing variant must not hide the others
                notes[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
        timed = [n for n in variants if not notes[n]]
        times: dict[str, list[float]] = {n: [] for n in timed}
        for _ in range(args.rounds):
            for name in timed:
                times[name].append(_time_ms(torch, variants[name], warmup, reps, args.batch))
        copy_name = next(iter(variants))
        for name in variants:
            if name in times:
                ms = statistics.median(times[name])
                ratios = [c / t for c, t in zip(times[copy_name], times[name])]
                vs_copy = statistics.median(ratios)
            else:
                ms, vs_copy, ratios = float("nan"), float("nan"), []
            row = {"case": label, "variant": name, "path": paths.get(name, ""), "ms": ms,
                   "GB/s": 2 * nbytes / (ms * 1e6) if ms == ms else float("nan"), "vs torch copy": vs_copy,
                   "vs torch copy per round": [round(r, 3) for r in ratios], "note": notes[name]}
            rows_out.append(row)
            print(f"{label:32s} {name:48s} {row['path']:22s} {ms:8.3f} ms {row['GB/s']:7.0f} GB/s {vs_copy:5.3f}x "
                  f"{row['vs torch copy per round']} {row['note']}", flush=True)
        del variants, want, out
        torch.cuda.empty_cache()

    meta = {"benchmark": NAME, "device": torch.cuda.get_device_name(),
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "git_commit": commit(),
            "largest_array_gib": gib, "warmup": warmup, "repetitions": reps, "rounds": args.rounds, "batch": args.batch,
            "statistic": "per round: median over samples of CUDA-event time / batch; reported: medians over rounds, "
                         "ratios to torch's copy of the same bytes taken within a round",
            "results": rows_out}
    swept = [(r["case"][len("sweep transpose "):], r["vs torch copy"]) for r in rows_out
             if r["case"].startswith("sweep") and r["variant"] == "tmakit transpose (auto)"]
    meta["sweep"] = summary(args.seed, [(c, v if v == v else 0.0) for c, v in swept])  # NaN: wrong or refused
    print(f"sweep: {meta['sweep']}")
    lines = ["# Copy / transpose bandwidth", "", f"- device: {meta['device']}", f"- date: {meta['date']}",
             f"- git commit: {meta['git_commit']}",
             f"- arrays of at most {gib:g} GiB; GB/s counts bytes read + written; median of {reps} samples of "
             f"{args.batch} call(s) after {warmup} warm-up, in each of {args.rounds} interleaved rounds; 'vs torch "
             "copy': torch's dst.copy_(src) of the same bytes timed in the same round (goals: copy >= 0.98x, "
             "transpose >= 0.85x); path: the backend that ran and how dst was written",
             f"- sweep: {meta['sweep']['count']} random transposes from seed {args.seed}, 16 MiB to {gib:g} GiB: min "
             f"{meta['sweep']['min']}, geomean {meta['sweep']['geomean']} x torch copy; worst {meta['sweep']['worst']}",
             "",
             "| case | variant | path | ms | GB/s | vs torch copy | each round | note |",
             "|---|---|---|---:|---:|---:|---|---|"]
    for r in rows_out:
        each = " ".join(f"{v:.2f}" for v in r["vs torch copy per round"])
        lines.append(f"| {r['case']} | {r['variant']} | {r['path']} | {r['ms']:.3f} | {r['GB/s']:.0f} | "
                     f"{r['vs torch copy']:.3f}x | {each} | {r['note']} |")
    default_run = not (args.quick or args.batch != 1 or args.gib != 1.0 or args.rounds != 3 or only
                       or args.sweep != 40 or args.seed != 0)
    targets = ([RESULTS] if default_run else []) + ([args.out] if args.out else [])
    for folder in targets:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{args.name}.md").write_text("\n".join(lines) + "\n")
        (folder / f"{args.name}.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"wrote {args.name}.md/.json to {[str(t) for t in targets] or 'nowhere (no --out)'}")
    worst = {}
    for r in rows_out:
        if r["variant"] in ("tmakit copy (tma)", "tmakit transpose (auto)") and r["vs torch copy"] == r["vs torch copy"]:
            kind = "copy" if r["case"].startswith("copy") else "sweep" if r["case"].startswith("sweep") else "transpose"
            worst[kind] = min(worst.get(kind, 9.0), r["vs torch copy"])
    print("worst ratio to torch copy of tmakit copy (tma) / transpose (auto):", worst)
    wrong = [r for r in rows_out if r["note"].startswith("WRONG")]
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
