"""The ``tmakit`` command: info, describe, swizzle, corpus-check."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

from rich.console import Console

from .errors import TensorMapError, TmakitError


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(t) for t in text.replace("x", ",").split(",") if t.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers (e.g. 4096,4096)")


def cmd_info(args: argparse.Namespace, console: Console) -> int:
    from . import _driver
    from .info import collect_info

    info = collect_info()
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    from rich.table import Table

    table = Table(title="tmakit info", show_header=False)
    for key, value in info.items():
        if key != "devices":
            table.add_row(key, str(value))
    console.print(table)
    if not info["devices"]:
        console.print(f"[yellow]No GPU: {info['gpu_status']}[/]. tmakit still validates tensor maps, simulates "
                      "TMA layouts and compiles kernels here.")
    for dev in info["devices"]:
        console.print(f"[bold]GPU {dev['ordinal']}[/]: {dev['name']}, {dev['arch']}, TMA: {dev['tma']}, "
                      f"cp.async: {dev['cp_async']}, {dev['memory_gib']} GiB, shared memory per block (opt-in) "
                      f"{dev['smem_optin']} B")
    del _driver
    return 0


def cmd_describe(args: argparse.Namespace, console: Console) -> int:
    from .layout.render import swizzle_grid
    from .tensormap import describe_tensor
    from .tensormap.render import render_violations

    try:
        tmap = describe_tensor(shape=args.shape, dtype=args.dtype, box=args.box, strides=args.strides,
                               swizzle=args.swizzle, oob_fill=args.oob_fill, l2_promotion=args.l2_promotion,
                               interleave=args.interleave, element_strides=args.element_strides, arch=args.arch)
    except TensorMapError as err:
        if args.json:
            print(json.dumps({"valid": False, "violations": [v.as_dict() for v in err.violations]}, indent=2))
        else:
            console.print(render_violations(err.violations))
        return 2
    if args.json:
        print(json.dumps({"valid": True, "tensor_map": tmap.to_dict()}, indent=2))
        return 0
    console.print(tmap)
    if tmap.swizzle.span and not tmap.swizzle.blackwell_only:
        console.print(swizzle_grid(tmap.swizzle, tmap.dtype))
    return 0


def cmd_swizzle(args: argparse.Namespace, console: Console) -> int:
    from .layout.render import swizzle_grid
    from .layout.swizzle import swizzle_pattern
    from .tensormap.enums import Swizzle

    sw = Swizzle.parse(args.mode, "mode")
    if sw.blackwell_only or sw is Swizzle.NONE:
        from .errors import InvalidArgumentError

        raise InvalidArgumentError("mode", args.mode, "has no Hopper swizzle pattern to show (Blackwell modes are "
                                   "validated but not modelled)", "use 32B, 64B or 128B")
    if args.json:
        print(json.dumps({"swizzle": sw.short, "span": sw.span, "alignment": sw.alignment,
                          "chunk_positions": swizzle_pattern(sw, args.rows).tolist()}))
        return 0
    console.print(swizzle_grid(sw, args.dtype, args.rows))
    return 0


def cmd_corpus_check(args: argparse.Namespace, console: Console) -> int:
    from .tensormap.corpus import driver_verdict, generate, replay_case
    from . import _driver

    _driver.ensure_context(args.device)
    base_alloc = _driver.call("cuMemAlloc", 1 << 20)
    base = (int(base_alloc) + 1023) // 1024 * 1024
    disagreements = []
    total = 0
    for kind, n in (("tiled", args.n), ("im2col", args.n)):
        for case in generate(kind, n, args.seed):
            verdict = driver_verdict(case, base)
            if verdict.startswith("PYTHON:"):
                continue  # cuda-bindings refused the value; the driver never saw it
            ours = replay_case(case, arch=_driver.device_arch(args.device))
            total += 1
            if (verdict == "CUDA_SUCCESS") != (not ours):
                disagreements.append({"case": case, "driver": verdict, "tmakit": [v.rule for v in ours]})
    _driver.call("cuMemFree", base_alloc)
    result = {"seed": args.seed, "cases": total, "disagreements": len(disagreements), "examples": disagreements[:5]}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        console.print(f"{total} random tensor-map parameter sets (seed {args.seed}): "
                      f"{total - len(disagreements)} verdicts agree with the driver, {len(disagreements)} differ")
    return 0 if not disagreements else 1


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="tmakit", description="Build, check and explain TMA tensor maps")
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("info", help="driver, GPU, capability, TMA support, library versions")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("describe", help="check and explain a tiled tensor map (numpy order: outermost first)")
    p.add_argument("--shape", type=_ints, required=True, help="e.g. 4096,4096")
    p.add_argument("--dtype", required=True, help="bf16, f16, f32, u8, fp8, i32, f64, ...")
    p.add_argument("--box", type=_ints, required=True, help="e.g. 64,64")
    p.add_argument("--strides", type=_ints, default=None, help="byte strides (numpy order); default contiguous")
    p.add_argument("--swizzle", default="auto", help="auto, none, 32B, 64B, 128B")
    p.add_argument("--oob-fill", default="zero", help="zero or nan")
    p.add_argument("--l2-promotion", default="none", help="none, 64B, 128B, 256B")
    p.add_argument("--interleave", default="none", help="none, 16B, 32B")
    p.add_argument("--element-strides", type=_ints, default=None)
    p.add_argument("--arch", default=None, help="sm_90 (default), sm_80, sm_100, ...")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("swizzle", help="show a swizzle pattern")
    p.add_argument("mode", help="32B, 64B or 128B")
    p.add_argument("--dtype", default="u8")
    p.add_argument("--rows", type=int, default=8)
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("corpus-check", help="(GPU) compare the rule checker with this driver on random parameters")
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--seed", type=int, default=12345)
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--json", action="store_true")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    console = Console()
    handlers = {"info": cmd_info, "describe": cmd_describe, "swizzle": cmd_swizzle, "corpus-check": cmd_corpus_check}
    try:
        return handlers[args.command](args, console)
    except TmakitError as err:
        console.print(f"[red]error:[/] {err}", highlight=False)
        return 2


if __name__ == "__main__":
    sys.exit(main())
