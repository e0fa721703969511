"""Copies between two GPUs of one host: tmakit.ops.plan_copy (dst's GPU pulls src over the peer path with TMA bulk
copies; "push": src's GPU writes dst) beside torch's dst.copy_(src) in the same run, both directions, 16 MiB to
4 GiB, and transposes across the GPUs (tmakit.ops.plan_transpose, pushed and pulled) of the same bytes against
that copy; GPUs 0 and 1, and on a host of more, GPU 0 and the last. Writes benchmarks/results/copy_peer.json and .md
(copy_peer_h200 on H200s; copy_peer_4gpus[_h200] on four).

Each row: medians of interleaved rounds of host-timed calls, each followed by a synchronisation of the GPUs (the
copies are milliseconds long, so the host's part is small); GB/s = bytes / time; every copy is checked first.

    python benchmarks/copy_peer.py [--rounds N] [--out DIR] [--name NAME]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._common import multi_gpu_name, torch_with_gpu, write_results  # noqa: E402

SIZES_MIB = (16, 256, 1024, 4096)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="interleaved timing rounds (median)")
    parser.add_argument("--out", default=None, help="also copy the results files here")
    parser.add_argument("--name", default=None, help="results file stem (default: per card and GPU count)")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    torch = torch_with_gpu("benchmarks/copy_peer.py", "torch's copy between GPUs")
    if torch is None:
        return 0
    if torch.cuda.device_count() < 2:
        print("copy_peer: needs two GPUs; nothing measured")
        return 0
    from tmakit.ops import plan_copy, plan_transpose

    gpus = torch.cuda.device_count()
    args.name = args.name or multi_gpu_name("copy_peer", gpus)
    last = gpus - 1
    pairs = [(0, 1), (1, 0)] + ([(0, last), (last, 0)] if gpus > 2 else [])

    def sync():
        for d in range(gpus):
            torch.cuda.synchronize(d)

    def seconds(fn, reps):
        sync()
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        sync()
        return (time.perf_counter() - t0) / reps

    from rich.progress import Progress

    rows = []
    progress = Progress(transient=True)
    progress.start()
    task = progress.add_task("copies and transposes between GPUs", total=len(SIZES_MIB) * len(pairs))
    for mib in SIZES_MIB:
        n = mib << 20
        for dst_dev, src_dev in pairs:
            src = torch.randint(0, 256, (n,), dtype=torch.uint8, device=f"cuda:{src_dev}")
            dst = torch.empty(n, dtype=torch.uint8, device=f"cuda:{dst_dev}")
            plan, push = plan_copy(dst, src), plan_copy(dst, src, across="push")
            push()
            sync()
            ok_push = bool(torch.equal(dst[::4097].cpu(), src[::4097].cpu()))
            dst.zero_()
            plan()
            sync()
            ok = bool(torch.equal(dst.cpu(), src.cpu())) if mib <= 1024 else bool(torch.equal(dst[::4097].cpu(), src[::4097].cpu()))
            peer = lambda: dst.copy_(src)  # noqa: E731
            # a transpose of the same bytes: 4-byte elements (int32: random bits hold no NaN), 1031 rows
            tsrc = src.view(torch.int32)[:(n // 4 // 1031) * 1031].view(1031, -1)
            tdst = torch.empty(tsrc.shape[::-1], dtype=torch.int32, device=f"cuda:{dst_dev}")
            tplan, tpush = plan_transpose(tdst, tsrc, across="pull"), plan_transpose(tdst, tsrc, across="push")
            ok_t = True
            for fn in (tpush, tplan):
                tdst.zero_()
                fn()
                sync()
                ok_t = ok_t and bool(torch.equal(tdst[::97].cpu(), tsrc.t()[::97].cpu()))
            reps = max(1, min(20, (2 << 30) // n))
            ours, pushed, theirs, transposed, tpushed = [], [], [], [], []
            for fn in (plan, push, peer, tplan, tpush):
                seconds(fn, 1)
            for _ in range(args.rounds):
                ours.append(seconds(plan, reps))
                pushed.append(seconds(push, reps))
                theirs.append(seconds(peer, reps))
                transposed.append(seconds(tplan, reps))
                tpushed.append(seconds(tpush, reps))
            t, tq, tp = statistics.median(ours), statistics.median(pushed), statistics.median(theirs)
            scale = n / tsrc.numel() / 4  # the transpose's time per byte of the copy's size
            tt, ttq = statistics.median(transposed) * scale, statistics.median(tpushed) * scale
            row = {"bytes": n, "direction": f"GPU {src_dev} -> GPU {dst_dev}", "GB/s": round(n / t / 1e9, 1),
                   "push GB/s": round(n / tq / 1e9, 1), "torch GB/s": round(n / tp / 1e9, 1),
                   "x torch": round(tp / t, 3), "push x torch": round(tp / tq, 3),
                   "transpose GB/s": round(n / tt / 1e9, 1), "transpose x torch copy": round(tp / tt, 3),
                   "push transpose GB/s": round(n / ttq / 1e9, 1), "push transpose x torch copy": round(tp / ttq, 3),
                   "ok": ok and ok_push and ok_t}
            progress.console.print(row)
            rows.append(row)
            progress.advance(task)
            del src, dst, plan, push, tsrc, tdst, tplan, tpush
            torch.cuda.empty_cache()
    progress.stop()
    notes = ["tmakit: plan_copy on dst's GPU, TMA bulk copies pulling src over NVLink (peer access enabled); push: "
             "plan_copy(across='push') on src's GPU, writing dst over NVLink; torch: dst.copy_(src); transpose: "
             "plan_transpose of the same bytes as 1031 x (n / 4124) int32 on dst's GPU, src read over NVLink (push: "
             "on src's GPU, dst written over NVLink), against torch's copy", "medians of interleaved rounds, host-timed with every GPU synchronised after each "
             "batch of calls", "ok: dst equals src (every byte up to 1 GiB, every 4097th above); the transpose's every 97th row"]
    write_results(args.name, "Copies between GPUs: tmakit vs torch", rows, notes, args.out)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
