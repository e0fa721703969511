"""The ``tmakit lint`` and ``tmakit decode`` commands (tmakit/cli.py parses, these run).

lint: exit 0 when the kernel is clean (notes allowed), 1 with an error or a warning, 2 on a usage error.
decode: exit 0 when decoded and valid, 1 when the parameters break an encode rule, 2 on a usage error.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from rich.console import Console

from ..errors import InvalidArgumentError


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("lint", help="check a TMA kernel (.cu or .ptx) against the tensor maps it is launched with")
    p.add_argument("file", help="a .cu (compiled with NVRTC and line info) or a .ptx")
    p.add_argument("--entry", default=None, help="the kernel's name (needed when the file has several)")
    p.add_argument("--map", action="append", default=[], metavar='PARAM="describe_tensor kwargs"',
                   help="bind a map to a parameter (C name or index), e.g. a=\"shape=(4096, 4096), dtype='bf16', "
                        "box=(64, 64), swizzle='128B'\"")
    p.add_argument("--cluster", default=None, help="the launch's cluster shape, e.g. 2,1,1")
    p.add_argument("--arch", default="sm_90a")
    p.add_argument("--define", "-D", action="append", default=[], metavar="NAME=VALUE", help="a macro for a .cu")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("decode", help="a raw 128-byte CUtensorMap (hex, a file, '-' for stdin, or a CUTLASS "
                                      "parameter dump) back to its encode parameters")
    p.add_argument("input", nargs="?", default=None, help="hex digits, a file, or - (stdin)")
    p.add_argument("--layout", default=None, help="a layout learned with --learn (default: the one tmakit ships)")
    p.add_argument("--learn", default=None, metavar="PROBE.jsonl",
                   help="learn the layout from benchmarks/tensormap_layout_probe.py's output")
    p.add_argument("--out", default=None, help="with --learn: where to write the layout (JSON)")
    p.add_argument("--arch", default="sm_90")
    p.add_argument("--json", action="store_true")


def _ints(text: str, name: str) -> tuple[int, ...]:
    try:
        return tuple(int(t) for t in text.replace("x", ",").split(",") if t.strip())
    except ValueError:
        raise InvalidArgumentError(name, text, "is not a comma-separated list of integers", f"{name} 2,1,1") from None


def cmd_lint(args: argparse.Namespace, console: Console) -> int:
    from .lint import describe_map, lint, parse_map_argument

    maps = {}
    for text in args.map:
        name, kwargs = parse_map_argument(text)
        try:
            maps[int(name) if name.isdigit() else name] = describe_map(kwargs, arch=args.arch.rstrip("a"))
        except TypeError as exc:
            raise InvalidArgumentError("--map", text, f"has an argument describe_tensor does not take ({exc})",
                                       "use describe_tensor's keywords: shape, dtype, box, strides, swizzle, ...")
    defines = {}
    for text in args.define:
        key, _, value = text.partition("=")
        defines[key] = value or "1"
    cluster = _ints(args.cluster, "--cluster") if args.cluster else None
    report = lint(args.file, entry=args.entry, maps=maps or None, arch=args.arch, cluster=cluster,
                  defines=defines or None)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        console.print(report)
    return 0 if report.clean else 1


def cmd_decode(args: argparse.Namespace, console: Console) -> int:
    from .decode import decode_tensormap
    from .tensormap_layout import learn, read_probe

    if args.learn:
        header, records = read_probe(args.learn)
        layout = learn(records, header.get("driver_version", ""), header.get("device", ""))
        text = layout.to_json()
        if args.out:
            with open(args.out, "w") as fh:
                fh.write(text + "\n")
        if args.json or not args.out:
            print(text)
        else:
            console.print(f"learned {len(layout.fields)} fields from {layout.samples} maps (driver "
                          f"{layout.driver_version}); unlearned: {', '.join(layout.unlearned) or 'none'} -> {args.out}")
        return 0
    if args.input is None:
        raise InvalidArgumentError("input", None, "is required (hex digits, a file, or - for stdin)",
                                   "tmakit decode maps.bin, or paste: tmakit decode 'a1b2...'")
    data = sys.stdin.read() if args.input == "-" else args.input
    decoded = decode_tensormap(data, layout=args.layout, arch=args.arch)
    doc = decoded.to_dict()
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        from rich.table import Table

        table = Table(title=f"CUtensorMap ({decoded.source}; driver order: innermost first)", show_header=False)
        for key, value in doc.items():
            if key not in ("violations", "notes", "unknown", "source"):
                table.add_row(key, str(value))
        console.print(table)
        for note in decoded.notes:
            console.print(f"[yellow]note:[/] {note}", highlight=False)
        if decoded.unknown:
            console.print(f"[yellow]unknown (not learned):[/] {', '.join(decoded.unknown)}", highlight=False)
        for v in decoded.violations:
            console.print(f"[red]breaks:[/] {v}", highlight=False)
    return 1 if decoded.violations else 0
