"""TMA across the GPUs of one host, one process per GPU: a peer's map, an NVLink copy, an all-gather GEMM.

A map of a peer's tensor, a copy pulled over NVLink, and an all-gather GEMM (tmakit.ops.plan_all_gather_gemm)
beside NCCL all_gather + cuBLAS.

The processes, the NCCL group and the memory the ranks share are torch.distributed's: each rank allocates its shard
of A in torch's symmetric memory, and ``tmakit.ops.symmetric_views`` returns a view of every rank's shard mapped
into this process. Through them each rank (1) describes a peer's shard and loads a box of it by TMA, (2) pulls the
whole peer shard with ``tmakit.ops.copy`` (TMA bulk copies over NVLink), and (3) computes concat(shards) @ B with
the peers' shards pulled by TMA on a few SMs while part of its own shard's GEMM runs on the others, checked against
(--check) and timed beside (--bench) NCCL's all_gather_into_tensor followed by torch.matmul.

    torchrun --nproc-per-node 2 examples/multi_gpu.py --shape 4096,14336,8192 --check --bench
    python examples/multi_gpu.py --check          # the same, one process per GPU started here

(--shape is M,N,K with M the rows of A per rank; torchrun reads abbreviations of its own options, such as --m,
before the script's.)

Without two GPUs (or without torch) it explains what it would do and exits 0.
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics

import tmakit


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"wants a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"wants a positive integer, got {text!r}")
    return value


def shape(text: str) -> tuple[int, int, int]:
    try:
        m, n, k = (int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"wants M,N,K (three integers), got {text!r}") from None
    if min(m, n, k) < 1 or n % 8 or k % 8:
        raise argparse.ArgumentTypeError(f"wants M, N, K >= 1 with N and K multiples of 8 (rows of 16 bytes for the "
                                         f"TMA maps), got {text!r}")
    return m, n, k


def explain(args, world: int) -> None:
    print(f"{world} ranks, each holding {args.m} rows of A (K = {args.k}) and all of B ({args.n} x {args.k}), bf16:")
    a = tmakit.describe_tensor(shape=(args.m, args.k), dtype="bfloat16", box=(128, 64), swizzle="128B", encode=False)
    print(f"  a peer's shard as a map: shape {a.shape}, box {a.box_shape}, swizzle {a.swizzle.name} (the same map "
          "as a local one: the view is the peer's memory mapped here)")
    print(f"  copies: each peer's {args.m * args.k * 2 / 2**20:.0f} MiB shard pulled by TMA bulk copies on 16 SMs "
          "into the gathered A")
    print(f"  GEMMs: part of the own shard ({args.m} x {args.n} x {args.k}) on the other SMs meanwhile (as many rows as "
          f"a turn model finds worth it), then the rest of the gathered A on every SM; out is {world * args.m} x {args.n}")


def rank_main(rank: int, world: int, args) -> None:
    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    dev = f"cuda:{rank}"
    shard = symm_mem.empty((args.m, args.k), dtype=torch.bfloat16, device=dev)
    shard.normal_(generator=torch.Generator(device=dev).manual_seed(rank))
    b = torch.randn(args.n, args.k, device=dev, dtype=torch.bfloat16, generator=torch.Generator(device=dev).manual_seed(99))
    views = tmakit.ops.symmetric_views(shard)  # every rank's shard, mapped here
    symm_mem.rendezvous(shard, dist.group.WORLD.group_name).barrier(channel=0)  # every shard written
    peer = (rank + 1) % world
    say = print if rank == 0 else (lambda *a, **k: None)

    # (1) a map of the peer's shard and one box loaded through it, beside the bytes torch reads from there
    tm = tmakit.describe_tensor(views[peer], box=(64, 64), swizzle="none")
    got = tmakit.ops.load_tiles(tm, [[0, 0]], backend="tma").typed()[0]
    want = views[peer][:64, :64].cpu().view(torch.int16).numpy()
    same = bool((got.view("int16")[:min(64, args.m), :min(64, args.k)] == want).all())
    say(f"rank {rank}: box (64, 64) of rank {peer}'s shard loaded by TMA: {'equal' if same else 'WRONG'} to its bytes")

    # (2) the whole peer shard pulled by TMA bulk copies
    local = torch.empty_like(shard)
    tmakit.ops.copy(local, views[peer])
    torch.cuda.synchronize()
    copied = bool(torch.equal(local, views[peer]))
    say(f"rank {rank}: rank {peer}'s shard copied over NVLink: {'equal' if copied else 'WRONG'}")

    # (3) the all-gather GEMM beside NCCL + cuBLAS
    plan = tmakit.ops.plan_all_gather_gemm(views, b, rank=rank)
    gathered = torch.empty(world * args.m, args.k, device=dev, dtype=torch.bfloat16)

    def nccl():
        dist.all_gather_into_tensor(gathered, shard)
        return torch.matmul(gathered, b.t())

    out, ref = plan(), nccl()
    torch.cuda.synchronize()
    if args.check:
        err = float((out.float() - ref.float()).abs().max() / ref.float().abs().max())
        ok = err <= 2e-2 and torch.equal(plan.gathered, gathered) and same and copied
        flag = torch.tensor([int(ok)], device=dev)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        say(f"all-gather GEMM {world} x {args.m} x {args.n} x {args.k}: max error {err:.2e} of the output's range "
            f"({'ok' if flag.item() else 'WRONG'}, tolerance 2e-2, every rank)")
    if args.bench:
        times = {"tmakit": [], "nccl + cuBLAS": []}
        for _ in range(args.rounds):
            for name, fn in (("tmakit", plan), ("nccl + cuBLAS", nccl)):
                dist.barrier()
                torch.cuda.synchronize()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(5):
                    fn()
                end.record()
                end.synchronize()
                t = torch.tensor([start.elapsed_time(end) / 5], device=dev)
                dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the slowest rank's
                times[name].append(t.item())
        flops = 2.0 * world * args.m * args.n * args.k
        ms = {k: statistics.median(v) for k, v in times.items()}
        for name, t in ms.items():
            say(f"  {name:14s} {t:8.3f} ms  {flops / t / 1e9:6.0f} TFLOP/s")
        say(f"  tmakit: {ms['nccl + cuBLAS'] / ms['tmakit']:.2f}x NCCL + cuBLAS")
    dist.destroy_process_group()


def spawned(rank: int, world: int, port: int, args) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    rank_main(rank, world, args)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", type=shape, default=(2048, 8192, 8192),
                        help="M,N,K: rows of A per rank, columns of the output, columns of A (default 2048,8192,8192)")
    parser.add_argument("--check", action="store_true", help="check every rank's result against NCCL + cuBLAS")
    parser.add_argument("--bench", action="store_true", help="time it beside NCCL + cuBLAS")
    parser.add_argument("--rounds", type=positive, default=5, help="interleaved timing rounds (default 5)")
    args = parser.parse_args(argv)
    args.m, args.n, args.k = args.shape
    try:
        import torch
    except ImportError:
        torch = None
    gpus = torch.cuda.device_count() if torch is not None and torch.cuda.is_available() else 0
    if gpus < 2:
        explain(args, 2)
        why = "no CUDA GPU here" if gpus == 0 else "one GPU here"
        print(f"{why}{' and no torch' if torch is None else ''}: nothing run (this example needs two GPUs of one "
              "host and torch.distributed)")
        return 0
    if "RANK" in os.environ:  # under torchrun (one host: the rank is the GPU)
        rank_main(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)
        return 0
    explain(args, gpus)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    import torch.multiprocessing as mp

    mp.spawn(spawned, args=(gpus, port, args), nprocs=gpus, join=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
