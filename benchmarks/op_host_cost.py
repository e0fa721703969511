"""Host time of the ops: a plan's rerun against torch's ``copy_``, a plan re-pointed at new buffers, and the
one-shot ``ops.copy`` / ``ops.transpose`` on a new geometry each call.

Kernels are small (a few hundred KB: the GPU keeps up), so what is timed is the caller's time per call:
- ``plan()`` (the same buffers) and torch ``dst.copy_(src)`` on the same buffers, interleaved in rounds; goal:
  ``plan()`` <= 1.1x torch's copy_;
- ``plan(dst2, src2)``, alternating between two pairs of buffers (tensor maps re-pointed, arguments replaced);
- the one-shot ``ops.copy`` / ``ops.transpose`` / ``ops.gemm`` / ``ops.attention`` on those alternating buffers (a
  geometry seen before: the plan cache re-points the plan of the first call); goal: <= 1.2x the same op's
  ``plan(new buffers)``; gemm (256^3 bf16) and attention (B1 H2 S128 D64 bf16) are small, so the host is timed;
- ``ops.copy`` / ``ops.transpose`` over --calls pairs of tensors that each have their own geometry (views four
  rows apart), every call describing, planning and launching; two passes over two sets of shapes, the
  second reported (the first also pays one-time costs); no goal (the one-shot ops keep their plans: a loop
  meets a new geometry once).
The outputs are checked after the timing. Writes benchmarks/results/op_host_cost.md and .json (device, date, commit).

    PYTHONPATH=. python benchmarks/op_host_cost.py [--calls 200] [--out DIR]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import interleaved_host_times_us, write_results  # noqa: E402

NAME = "op_host_cost"


def _pass_us(torch, call, items: list) -> float:
    """Host microseconds per ``call(dst, src)`` over one pass of ``items``, the stream idle at the start."""
    torch.cuda.synchronize()
    began = time.perf_counter()
    for dst, src in items:
        call(dst, src)
    return (time.perf_counter() - began) * 1e6 / len(items)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="new geometries per one-shot pass (default 200)")
    parser.add_argument("--iterations", type=int, default=200, help="calls per timed sample of a rerun (default 200)")
    parser.add_argument("--out", default=None, help="also copy the results file into this folder")
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("op_host_cost: torch is not installed; nothing measured")
        return 0
    if not torch.cuda.is_available():
        print("op_host_cost: no CUDA GPU; nothing measured")
        return 0
    from tmakit import ops

    shape = (512, 256)  # float32: 512 KiB, a pitch of 1 KiB (TMA-describable, sector-aligned)
    a, b = torch.randn(shape, device="cuda"), torch.randn(shape, device="cuda")
    out_copy = [torch.empty_like(a), torch.empty_like(b)]
    out_t = [torch.empty(shape[::-1], device="cuda"), torch.empty(shape[::-1], device="cuda")]
    stream = torch.cuda.current_stream()
    copy_plan = ops.plan_copy(out_copy[0], a, stream=stream)
    transpose_plan = ops.plan_transpose(out_t[0], a, stream=stream)
    flip = [0]

    def repoint(plan, outs):
        def run():
            flip[0] ^= 1
            plan(outs[flip[0]], (a, b)[flip[0]])
        return run

    def one_shot(op, outs):
        def run():
            flip[0] ^= 1
            op(outs[flip[0]], (a, b)[flip[0]], stream=stream)
        return run

    ga = [torch.randn(256, 256, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    gb = [torch.randn(256, 256, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    gc = [torch.empty(256, 256, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    qkv = [[torch.randn(1, 2, 128, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3)] for _ in range(2)]
    ao = [torch.empty(1, 2, 128, 64, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    gemm_plan = ops.plan_gemm(ga[0], gb[0], gc[0], stream=stream)
    attention_plan = ops.plan_attention(*qkv[0], ao[0], stream=stream)

    def alternate(call):
        def run():
            flip[0] ^= 1
            call(flip[0])
        return run

    timed = {"torch dst.copy_(src)": lambda: out_copy[0].copy_(a),
             "plan_copy: plan()": copy_plan,
             "plan_transpose: plan()": transpose_plan,
             "plan_copy: plan(dst2, src2)": repoint(copy_plan, out_copy),
             "plan_transpose: plan(dst2, src2)": repoint(transpose_plan, out_t),
             "ops.copy, a seen geometry": one_shot(ops.copy, out_copy),
             "ops.transpose, a seen geometry": one_shot(ops.transpose, out_t),
             "plan_gemm: plan(a2, b2, c2)": alternate(lambda i: gemm_plan(ga[i], gb[i], gc[i])),
             "ops.gemm, a seen geometry": alternate(lambda i: ops.gemm(ga[i], gb[i], gc[i], stream=stream)),
             "plan_attention: plan(q2, k2, v2, o2)": alternate(lambda i: attention_plan(*qkv[i], ao[i])),
             "ops.attention, a seen geometry": alternate(lambda i: ops.attention(*qkv[i], ao[i], stream=stream))}
    host = interleaved_host_times_us(timed, args.iterations, between=torch.cuda.synchronize)
    torch.cuda.synchronize()
    ok = torch.equal(out_copy[0], a) and torch.equal(out_copy[1], b)
    ok &= torch.equal(out_t[0], a.t()) and torch.equal(out_t[1], b.t())
    for i in range(2):  # the small gemm and attention, run last on buffers i by the timed calls
        want = ga[i].float() @ gb[i].float().T
        ok &= bool(((gc[i].float() - want).abs().max() / want.abs().max()) < 2e-2)
        ref = torch.nn.functional.scaled_dot_product_attention(*qkv[i]).float()
        ok &= bool(((ao[i].float() - ref).norm() / ref.norm()) < 2e-2)

    # one-shot calls, each on its own geometry: float32 views 8 rows apart (every pitch TMA-describable). Two
    # passes over two disjoint sets of geometries: the first also pays what a process pays once (module loads,
    # first calls); the second is the steady cost of a call on a geometry never seen before.
    one_shot = {"copy": ops.copy, "transpose": ops.transpose}
    new_geometry: dict[str, list[float]] = {op: [] for op in one_shot}
    rows = 512 + 8 * args.calls
    base = torch.randn(rows, 256, device="cuda")
    # pass 1: rows - 0, 8, 16, ... (one row class); pass 2: rows - 4, 12, 20, ...: never a shape seen before, and
    # a dst pitch of 16 mod 32 bytes, the transpose's costliest plan (two row classes, a prefix map: 4 maps)
    for first in (0, 4):
        sources = [base[first + 8 * i:] for i in range(args.calls)]
        pairs = {"copy": [(torch.empty_like(s), s) for s in sources],
                 "transpose": [(torch.empty(s.shape[::-1], device="cuda"), s) for s in sources]}
        for op, items in pairs.items():
            new_geometry[op].append(_pass_us(torch, one_shot[op], items))
            torch.cuda.synchronize()
            ok &= all(torch.equal(d, s.t() if op == "transpose" else s) for d, s in items)
    torch_copy_new = _pass_us(torch, lambda d, s: d.copy_(s), pairs["copy"])
    if not ok:
        print("op_host_cost: WRONG RESULTS; nothing written")
        return 1

    reference = host["torch dst.copy_(src)"]
    against = {"ops.copy, a seen geometry": "plan_copy: plan(dst2, src2)",
               "ops.transpose, a seen geometry": "plan_transpose: plan(dst2, src2)",
               "ops.gemm, a seen geometry": "plan_gemm: plan(a2, b2, c2)",
               "ops.attention, a seen geometry": "plan_attention: plan(q2, k2, v2, o2)"}
    rows_out = []
    for name, us in host.items():
        goal = "<= 1.1x torch copy_" if name.endswith("plan()") else ""
        goal += f" ({'met' if us / reference <= 1.1 else 'MISSED'})" if goal else ""
        if name in against:
            x = us / host[against[name]]
            goal = f"{x:.2f}x plan(new buffers), goal <= 1.2x ({'met' if x <= 1.2 else 'MISSED'})"
        rows_out.append({"call": name, "host us": round(us, 2), "vs torch copy_": round(us / reference, 2),
                         "goal": goal})
    for op, (cold, us) in new_geometry.items():
        rows_out.append({"call": f"ops.{op}, a new geometry each call (first pass: {cold:.0f} us)",
                         "host us": round(us, 1), "vs torch copy_": round(us / reference, 2),
                         "goal": ""})  # its goal (<= 100 us) was retired for the plan cache's
    rows_out.append({"call": "torch copy_, the same new-geometry pairs", "host us": round(torch_copy_new, 1),
                     "vs torch copy_": round(torch_copy_new / reference, 2), "goal": ""})
    notes = [f"reruns: median over 15 interleaved rounds of {args.iterations} calls on {shape[0]}x{shape[1]} float32 "
             "(512 KiB), the stream synchronised between rounds",
             f"new geometry: two passes over {args.calls} pairs each of float32 views of {rows}x256, 8 rows shorter each, "
             "no shape seen twice; the second pass is reported (the first, in brackets, also pays one-time costs; "
             "the second's transposes take the costliest plan: two row classes and a prefix map)",
             "every output checked against torch after the timing"]
    write_results(NAME, "Op host cost", rows_out, notes, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
