"""Tensor-parallel GEMMs on every GPU of the host, one process per GPU (torch.multiprocessing, NCCL):
all-gather + GEMM (tmakit.ops.plan_all_gather_gemm) against NCCL all_gather_into_tensor followed by cuBLAS and
against torch.ops.symm_mem.fused_all_gather_matmul; GEMM + reduce-scatter (tmakit.ops.plan_gemm_reduce_scatter)
against cuBLAS followed by NCCL reduce_scatter_tensor. Writes benchmarks/results/collective_gemm.json and .md
(collective_gemm_h200 on H200s; collective_gemm_4gpus[_h200] on four).

Shapes are per rank: all-gather (M rows of A per rank, N, K), reduce-scatter (M rows of the output per rank, N,
K per rank). Each timed output is checked first against the NCCL + cuBLAS result. Times: medians of interleaved
rounds; each round, every rank times a batch of calls between CUDA events after a barrier, and the slowest rank's
time counts (a collective is done when its last rank is). bf16; B stored (N, K).

    python benchmarks/collective_gemm.py [--rounds N] [--sweep N] [--seed S] [--out DIR] [--name NAME]
"""
from __future__ import annotations

import os
import random
import socket
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._common import multi_gpu_name, torch_with_gpu, write_results  # noqa: E402
from benchmarks._sweep import checked_arguments, log_uniform, summary, sweep_arguments  # noqa: E402

GATHER = [(1024, 14336, 8192), (4096, 14336, 8192), (8192, 8192, 8192), (2048, 4096, 4096), (1024, 16384, 16384)]
SCATTER = [(1024, 8192, 7168), (4096, 8192, 7168), (2048, 4096, 8192), (8192, 8192, 4096), (1024, 16384, 16384)]
TOLERANCE = 2e-2  # max |ours - NCCL + cuBLAS| / max |NCCL + cuBLAS| (bf16 outputs; the reduce adds in bf16)


def _draw(seed: int, count: int) -> list[tuple[int, int, int]]:
    rng = random.Random(seed)
    return [(log_uniform(rng, 1024, 8192, 128), log_uniform(rng, 4096, 16384, 256), log_uniform(rng, 4096, 16384, 256))
            for _ in range(count)]


def _label(shape) -> str:
    return "x".join(str(v) for v in shape)


def _rank_main(rank: int, world: int, port: int, args, queue) -> None:
    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    from tmakit.ops import plan_all_gather_gemm, plan_gemm_reduce_scatter, symmetric_views

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    group = dist.group.WORLD.group_name
    dev = f"cuda:{rank}"

    def timed(fn, reps: int) -> float:
        dist.barrier()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        slowest = torch.tensor([start.elapsed_time(end) / reps], device=dev)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        return float(slowest.item())

    def medians(fns: dict, reps: int) -> dict:
        for fn in fns.values():
            timed(fn, 1)
        samples = {k: [] for k in fns}
        for _ in range(args.rounds):
            for k, fn in fns.items():
                samples[k].append(timed(fn, reps))
        return {k: statistics.median(v) for k, v in samples.items()}

    def rel_err(got, want) -> float:
        return float((got.float() - want.float()).abs().max() / want.float().abs().max().clamp_min(1e-6))

    rows = []
    gen = torch.Generator(device=dev).manual_seed(1234 + rank)
    todo = [(s, "named", "all-gather") for s in GATHER] + [(s, "sweep", "all-gather") for s in _draw(args.seed, args.sweep)]
    todo += [(s, "named", "reduce-scatter") for s in SCATTER] + [(s, "sweep", "reduce-scatter")
                                                                 for s in _draw(args.seed + 1, args.sweep)]
    from rich.progress import Progress

    progress = Progress(transient=True, disable=rank != 0)  # rank 0 shows the run's progress
    progress.start()
    task = progress.add_task(f"{world} GPUs: all-gather and reduce-scatter GEMMs", total=len(todo))
    for (m, n, k), which, op in todo:
        flops = 2.0 * world * m * n * k
        reps = max(1, min(10, int(2e13 / flops)))
        if op == "all-gather":
            shard = symm_mem.empty((m, k), dtype=torch.bfloat16, device=dev)
            shard.normal_(generator=gen)
            b = torch.randn(n, k, device=dev, dtype=torch.bfloat16, generator=gen)
            views = symmetric_views(shard)
            symm_mem.rendezvous(shard, group).barrier(channel=0)
            plan = plan_all_gather_gemm(views, b, rank=rank)
            gathered = torch.empty(world * m, k, device=dev, dtype=torch.bfloat16)
            ref = torch.empty(world * m, n, device=dev, dtype=torch.bfloat16)

            def nccl():
                dist.all_gather_into_tensor(gathered, shard)
                torch.matmul(gathered, b.t(), out=ref)

            def fused():
                return torch.ops.symm_mem.fused_all_gather_matmul(shard, [b.t()], 0, group)

            nccl()
            plan()
            fns = {"tmakit": plan, "nccl": nccl, "cublas": lambda: torch.matmul(gathered, b.t(), out=ref)}
            err, fused_err = rel_err(plan.out, ref), None
            try:
                fused_err = rel_err(fused()[1][0], ref)
                fns["fused"] = fused
            except Exception as e:  # noqa: BLE001 - the peer may be missing from this torch build
                fused_err = f"n/a ({type(e).__name__})"
            ok = err <= TOLERANCE and bool(torch.equal(plan.gathered, gathered))
            t = medians(fns, reps)
            del shard, views, plan
        else:
            a = torch.randn(world * m, k, device=dev, dtype=torch.bfloat16, generator=gen)
            b = torch.randn(n, k, device=dev, dtype=torch.bfloat16, generator=gen)
            chunk = symm_mem.empty((m, n), dtype=torch.bfloat16, device=dev)
            handle = symm_mem.rendezvous(chunk, group)
            plan = plan_gemm_reduce_scatter(a, b, symmetric_views(chunk), rank=rank)
            partial = torch.empty(world * m, n, device=dev, dtype=torch.bfloat16)
            ref = torch.empty(m, n, device=dev, dtype=torch.bfloat16)

            def ours():
                chunk.zero_()
                handle.barrier(channel=0)  # every chunk zeroed before any rank adds
                plan()
                handle.barrier(channel=0)  # every rank's adds done before the chunk is read

            def nccl():
                torch.matmul(a, b.t(), out=partial)
                dist.reduce_scatter_tensor(ref, partial)

            def fused():
                return torch.ops.symm_mem.fused_matmul_reduce_scatter(a, b.t(), "sum", 0, group)

            ours()
            nccl()
            torch.cuda.synchronize()
            err = rel_err(chunk, ref)
            ok = err <= TOLERANCE
            fns = {"tmakit": ours, "nccl": nccl, "cublas": lambda: torch.matmul(a, b.t(), out=partial)}
            try:
                fused_err = rel_err(fused(), ref)
                fns["fused"] = fused
            except Exception as e:  # noqa: BLE001 - the peer may be missing from this torch build
                fused_err = f"n/a ({type(e).__name__})"
            t = medians(fns, reps)
            del chunk, plan, handle
        row = {"op": op, "set": which, "shape": _label((m, n, k)), "TFLOP/s": round(flops / t["tmakit"] / 1e9, 1),
               "x nccl+cuBLAS": round(t["nccl"] / t["tmakit"], 3),
               "x fused": round(t["fused"] / t["tmakit"], 3) if "fused" in t else None,
               "bound": round(t["nccl"] / t["cublas"], 3),
               "ms": round(t["tmakit"], 3), "nccl ms": round(t["nccl"], 3), "cuBLAS ms": round(t["cublas"], 3),
               "fused ms": round(t["fused"], 3) if "fused" in t else None,
               "rel err": err, "fused rel err": fused_err, "ok": ok}
        ok_all = torch.tensor([int(row["ok"])], device=dev)
        dist.all_reduce(ok_all, op=dist.ReduceOp.MIN)
        row["ok"] = bool(ok_all.item())
        if rank == 0:
            progress.console.print({key: row[key] for key in ("op", "set", "shape", "TFLOP/s", "x nccl+cuBLAS",
                                                              "x fused", "ok")})
            rows.append(row)
        progress.advance(task)
        torch.cuda.empty_cache()
    progress.stop()
    if rank == 0:
        queue.put(rows)
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    parser = sweep_arguments(__doc__.splitlines()[0], "collective_gemm", sweep=8, rounds=5)
    args = checked_arguments(parser, argv)
    torch = torch_with_gpu("benchmarks/collective_gemm.py", "NCCL, cuBLAS and torch symmetric memory")
    if torch is None:
        return 0
    world = torch.cuda.device_count()
    if world < 2:
        print("collective_gemm: needs two or more GPUs; nothing measured")
        return 0
    if args.name == "collective_gemm":  # one results file per card and GPU count
        args.name = multi_gpu_name("collective_gemm", world)
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.spawn(_rank_main, args=(world, port, args, queue), nprocs=world, join=True)
    rows = queue.get()
    extra = {"world": world}
    for op, peer in (("all-gather", "x nccl+cuBLAS"), ("reduce-scatter", "x nccl+cuBLAS")):
        swept = [(r["shape"], r[peer]) for r in rows if r["op"] == op and r["set"] == "sweep"]
        extra[f"sweep {op}"] = summary(args.seed if op == "all-gather" else args.seed + 1, swept)
    for op, seed in (("all-gather", args.seed), ("reduce-scatter", args.seed + 1)):
        fused = [(r["shape"], r["x fused"]) for r in rows if r["op"] == op and r["set"] == "sweep" and r["x fused"]]
        extra[f"sweep {op} fused"] = summary(seed, fused)
    notes = [f"{world} GPUs, one process each (NCCL; NVLink multicast off); shapes per rank: all-gather M x N x K "
             "(A's rows per rank), reduce-scatter M x N x K (output rows per rank, K per rank)",
             "tmakit all-gather: plan_all_gather_gemm on torch symmetric-memory views of the shards (TMA copies pull "
             "the peers' shards on 16 SMs while part of the own shard's GEMM, as choose_overlap picks, runs on the "
             "rest; then one GEMM of the rest of the gathered A, two side by side on a middle rank); peers: NCCL "
             "all_gather_into_tensor + torch.matmul, torch.ops.symm_mem.fused_all_gather_matmul",
             "tmakit reduce-scatter: zero the own chunk, symmetric-memory barrier, plan_gemm_reduce_scatter (TMA "
             "reduce-add stores into every owner's chunk), barrier; peers: torch.matmul + NCCL reduce_scatter_tensor, "
             "torch.ops.symm_mem.fused_matmul_reduce_scatter",
             "bound: NCCL + cuBLAS time over cuBLAS's GEMM alone, the most any overlap of the collective with a "
             "GEMM as fast as cuBLAS's can gain over NCCL + cuBLAS",
             "TFLOP/s: 2 world M N K / time of the slowest rank; medians of interleaved rounds",
             f"ok: tmakit's output within {TOLERANCE} (max abs error over max abs) of the NCCL + cuBLAS result on "
             "every rank, and (all-gather) the gathered A equal to NCCL's"]
    write_results(args.name, "Tensor-parallel GEMMs across GPUs: tmakit vs NCCL + cuBLAS", rows, notes, args.out,
                  extra=extra)
    for key in ("sweep all-gather", "sweep reduce-scatter", "sweep all-gather fused", "sweep reduce-scatter fused"):
        print(key, extra[key])
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
