"""Copy and transpose bandwidth: tmakit.ops (each backend) against torch and Triton TMA kernels, one run.

Every variant moves the same multi-GiB buffers (far beyond the 50 MB L2); the figure is GB/s of bytes read +
written, the median over CUDA-event-timed samples after warm-up, each sample one call (--batch 1, the default:
the GPU waits for each caller's host time, reported per call) or --batch calls back to back (the host time
hidden, as in a stream of calls), and each is also given as a ratio to torch's ``dst.copy_(src)`` timed in the
same round (goal: >= 0.8x); rounds over all variants are interleaved
and the medians over rounds reported, with each round's ratio. Each variant's output is checked against torch
before it is timed, so a fast wrong kernel cannot report a number.

    PYTHONPATH=. python benchmarks/copy_bandwidth.py --out $OUT          # 2 GiB buffers, 3 rounds
    PYTHONPATH=. python benchmarks/copy_bandwidth.py --quick             # 256 MiB, fewer repetitions
    PYTHONPATH=. python benchmarks/copy_bandwidth.py --shape 16336,32848 # any float32 shape (rows, cols)

The default run writes benchmarks/results/copy_bandwidth.md (device, date, git commit, table); any run writes
the same file into --out. Other shapes matter: rows that are not a whole number of transpose tiles, or row
pitches that are not multiples of 128 bytes, change the memory pattern (docs/PERFORMANCE.md gives figures).
The tmakit variants are plans (``ops.plan_copy`` / ``ops.plan_transpose``), prepared before the timing.
"""
from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import commit  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
NAME = "copy_bandwidth"


def _time_ms(torch, fn: Callable[[], None], warmup: int, reps: int, batch: int = 1, host_us: list | None = None) -> float:
    """The median over `reps` samples of the GPU time per call, each sample `batch` calls back to back between
    two events. With batch 1 a sample also holds the caller's host time before its kernel starts (the GPU
    waits for it); with more, the host enqueues the next call while the GPU runs the last, as in a stream of
    calls. `host_us` (if given) gets the median host time per call, in microseconds."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times, host = [], []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        began = time.perf_counter()
        for _ in range(batch):
            fn()
        host.append((time.perf_counter() - began) * 1e6 / batch)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / batch)
    if host_us is not None:
        host_us.append(statistics.median(host))
    return statistics.median(times)


# (BM, BN, num_warps) tried for the Triton transpose; the fastest on each view is timed (its name in the row)
_TRITON_TRANSPOSE_CONFIGS = ((64, 64, 4), (128, 64, 4), (128, 128, 8))


def _triton_kernels(torch):
    """The Triton peers, (copy(dst, src), transpose(dst, src, config)), or None when Triton is missing. Both
    are TMA tile kernels with tensor descriptors built on the device, one program per tile: the copy moves
    [64, 128] boxes; the transpose loads a [BM, BN] box and stores tl.trans of it as [BN, BM], consecutive
    programs walking down a column of source tiles so that those in flight write long runs of dst rows."""
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

    # device-side descriptors need scratch memory from an allocator
    triton.set_allocator(lambda size, alignment, stream: torch.empty(size, dtype=torch.int8, device="cuda"))

    def launch(kernel, dst, src, bm, bn, warps):
        m, n = src.shape
        kernel[(triton.cdiv(m, bm) * triton.cdiv(n, bn),)](src, dst, m, n, BM=bm, BN=bn, num_warps=warps)

    return (lambda dst, src: launch(tma_copy, dst, src, 64, 128, 4),
            lambda dst, src, config: launch(tma_transpose, dst, src, *config))


def _at_least_one(text: str) -> int:
    """argparse type: an int >= 1 (a count of calls or rounds)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is below 1: a sample needs at least one call (use 1 to time single calls)")
    return value


def _fastest_config(torch, run, dst, src):
    """The Triton transpose config that runs fastest on this view (a short timing each), or None if none runs."""
    best = None
    for config in _TRITON_TRANSPOSE_CONFIGS:
        try:
            ms = _time_ms(torch, lambda: run(dst, src, config), 1, 3)
        except Exception as exc:  # noqa: BLE001 - a config Triton cannot build is skipped, with the reason
            print(f"triton transpose {config}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            continue
        if best is None or ms < best[0]:
            best = (ms, config)
    return None if best is None else best[1]


def _planned(make: Callable[[], Callable[[], object]]) -> Callable[[], object]:
    """The plan ``make()`` returns (prepared once, outside the timing), or a callable that raises what preparing
    it raised (the variant is then reported with that note, not timed)."""
    try:
        return make()
    except Exception as exc:  # noqa: BLE001 - a backend this GPU lacks is reported, not fatal
        def refuse(exc: Exception = exc) -> object:
            raise exc
        return refuse


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="also copy the results into this folder")
    parser.add_argument("--quick", action="store_true", help="256 MiB buffers and fewer repetitions")
    parser.add_argument("--gib", type=float, default=2.0, help="buffer size in GiB (default 2)")
    parser.add_argument("--shape", default=None,
                        help="rows,cols of float32 (default: --gib's worth of rows of 32768); rows a multiple of 16 "
                             "keeps every byte view TMA-describable")
    parser.add_argument("--rounds", type=int, default=3,
                        help="interleaved rounds over all variants; each ratio is taken against the torch copy of "
                             "its own round and the median over rounds is reported (default 3)")
    parser.add_argument("--batch", type=_at_least_one, default=1,
                        help="calls back to back per timed sample: 1 (default) times single calls, each with the "
                             "host time before its kernel starts; more hides the host time, as in a stream of calls")
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("copy_bandwidth: torch is not installed; nothing measured")
        return 0
    if not torch.cuda.is_available():
        print("copy_bandwidth: no CUDA GPU; nothing measured")
        return 0
    from tmakit import ops

    nbytes = (256 << 20) if args.quick else int(args.gib * (1 << 30))
    warmup, reps = (2, 5) if args.quick else (3, 15)
    if args.shape:
        rows, cols = (int(v) for v in args.shape.split(","))
    else:
        cols = 32768  # float32 elements per row: rows of 128 KiB
        rows = nbytes // (4 * cols)
    nbytes = rows * cols * 4
    result_name = NAME if not args.shape else f"{NAME}_{rows}x{cols}"
    src = torch.randn(rows, cols, device="cuda")
    dst = torch.empty_like(src)
    dst_t = torch.empty(cols, rows, device="cuda")
    stream = torch.cuda.current_stream()
    triton_copy, triton_transpose = _triton_kernels(torch) or (None, None)

    copies: dict[str, Callable[[], None]] = {"torch dst.copy_(src)": lambda: dst.copy_(src)}
    if triton_copy is not None:
        copies["triton TMA copy"] = lambda: triton_copy(dst, src)
    for backend in ("tma", "cp.async"):
        copies[f"tmakit plan_copy ({backend})"] = _planned(lambda b=backend: ops.plan_copy(dst, src, backend=b, stream=stream))
    cases = [("copy", copies, src, dst)]
    # transpose of the same bytes viewed as 4-, 2-, 1- and 8-byte elements (one kernel, one path per size)
    for dtype in (torch.float32, torch.int16, torch.uint8, torch.int64):
        esize = torch.empty((), dtype=dtype).element_size()
        s_x = src.view(dtype)
        d_x = dst_t.view(-1).view(dtype).view(s_x.shape[1], s_x.shape[0])
        variants: dict[str, Callable[[], None]] = {"torch dst.copy_(src.t())": lambda s_x=s_x, d_x=d_x: d_x.copy_(s_x.t())}
        if triton_transpose is not None:
            config = _fastest_config(torch, triton_transpose, d_x, s_x)
            if config is not None:
                name = "triton TMA transpose {}x{}/{}w".format(*config)
                variants[name] = lambda s_x=s_x, d_x=d_x, c=config: triton_transpose(d_x, s_x, c)
        for backend in ("tma", "cp.async"):
            variants[f"tmakit plan_transpose ({backend})"] = _planned(
                lambda b=backend, s_x=s_x, d_x=d_x: ops.plan_transpose(d_x, s_x, backend=b, stream=stream))
        cases.append((f"transpose {esize}B" if esize != 4 else "transpose", variants, s_x.t(), d_x))

    # Correctness first (poisoned output, compared with torch), then interleaved timing rounds: the machine's
    # speed drifts by a few percent between minutes, so every ratio compares timings of the same round.
    notes: dict[tuple[str, str], str] = {}
    for op, variants, want, out in cases:
        for name, fn in variants.items():
            out.view(torch.uint8).fill_(0xA5)  # poison
            try:
                fn()
                torch.cuda.synchronize()
                notes[op, name] = "" if torch.equal(out, want) else "WRONG RESULT (not timed)"
            except Exception as exc:  # noqa: BLE001 - one failing variant must not hide the others
                notes[op, name] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    times: dict[tuple[str, str], list[float]] = {key: [] for key, note in notes.items() if not note}
    host: dict[tuple[str, str], list[float]] = {key: [] for key in times}
    for _ in range(args.rounds):
        for op, variants, _want, _out in cases:
            for name, fn in variants.items():
                if (op, name) in times:
                    times[op, name].append(_time_ms(torch, fn, warmup, reps, args.batch, host[op, name]))
    copy_key = ("copy", "torch dst.copy_(src)")
    rows_out = []
    for op, variants, _want, _out in cases:
        baseline_key = (op, next(iter(variants)))
        for name in variants:
            key = (op, name)
            if key not in times:
                ms, vs_copy, vs_same, host_us, note = float("nan"), float("nan"), float("nan"), float("nan"), notes[key]
            else:
                ms, host_us = statistics.median(times[key]), statistics.median(host[key])
                vs_copy = statistics.median(c / t for c, t in zip(times[copy_key], times[key]))
                vs_same = statistics.median(b / t for b, t in zip(times[baseline_key], times[key]))
                note = ""
            gbps = 2 * nbytes / (ms * 1e6) if ms == ms else float("nan")
            per_round = [round(times[copy_key][r] / t, 3) for r, t in enumerate(times.get(key, []))]
            rows_out.append({"op": op, "variant": name, "ms": ms, "GB/s": gbps, "vs torch copy": vs_copy,
                             "vs torch (same op)": vs_same, "vs torch copy per round": per_round,
                             "host us per call": host_us, "note": note})
            print(f"{op:12s} {name:34s} {ms:9.3f} ms {gbps:8.1f} GB/s {vs_copy:5.2f}x {per_round} host {host_us:6.1f} us "
                  f"{note}", flush=True)

    meta = {"benchmark": result_name, "device": torch.cuda.get_device_name(), "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "git_commit": commit(), "bytes_per_buffer": nbytes, "shape": [rows, cols], "dtype": "float32",
            "warmup": warmup, "repetitions": reps, "rounds": args.rounds, "batch": args.batch,
            "statistic": "per round: median over samples of CUDA-event time / batch (batch calls back to back per "
                         "sample); reported: medians over rounds, ratios taken within a round; host us: the "
                         "caller's time per call to enqueue it",
            "results": rows_out}
    lines = [f"# Copy / transpose bandwidth", "", f"- device: {meta['device']}", f"- date: {meta['date']}",
             f"- git commit: {meta['git_commit']}", f"- buffers: {nbytes / 2**30:.2f} GiB float32 {rows}x{cols} "
             f"(GB/s counts bytes read + written; median of {reps} samples of {args.batch} calls back to back "
             f"after {warmup} warm-up, in each of {args.rounds} interleaved rounds; ratios are taken within a round, "
             "then the median over rounds; host us: the caller's time to enqueue one call)", "",
             "| op | variant | ms | GB/s | vs torch copy | vs torch (same op) | vs torch copy, each round | host us | note |",
             "|---|---|---:|---:|---:|---:|---|---:|---|"]
    for r in rows_out:
        each = " ".join(f"{v:.2f}" for v in r["vs torch copy per round"])
        lines.append(f"| {r['op']} | {r['variant']} | {r['ms']:.3f} | {r['GB/s']:.1f} | {r['vs torch copy']:.2f}x | "
                     f"{r['vs torch (same op)']:.2f}x | {each} | {r['host us per call']:.1f} | {r['note']} |")
    default_run = not (args.quick or args.shape or args.batch != 1 or args.gib != 2.0 or args.rounds != 3)
    targets = ([RESULTS] if default_run else []) + ([args.out] if args.out else [])
    for folder in targets:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{result_name}.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {result_name}.md to {[str(t) for t in targets] or 'nowhere (no --out)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
