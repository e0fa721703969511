"""The ``tmakit`` command: info, describe, swizzle, corpus-check, lint, decode (the last two: tmakit/doctor/commands.py).

Every error exits 2 with one message: on stderr in text mode, on stdout as JSON under ``--json``
(``{"valid": false, "error": {...}}``); indices in numpy order (outermost first), and an invalid tensor map shows
the one nearest valid request ("try: ..."). A reader that closes the pipe early (``tmakit describe ... | head -2``)
never changes the exit code: the rest of the output is dropped quietly and the command exits with its own code
(0 when it succeeded, 2 for an invalid request), every time.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
from typing import Any, Iterator, Sequence

from rich.console import Console

from .errors import InvalidArgumentError, TensorMapError, TmakitError

MAX_ROWS = 256  # swizzle pictures repeat every 8 rows; more rows only cost time
MAX_CORPUS = 100_000


class _UsageError(Exception):
    """An argparse usage error, raised instead of printed so --json can answer in JSON."""

    def __init__(self, message: str, usage: str):
        super().__init__(message)
        self.usage = usage


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # noqa: D102 - argparse's hook
        raise _UsageError(message, self.format_usage())


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(t) for t in text.replace("x", ",").split(",") if t.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers (e.g. 4096,4096)")


def _ranged(lo: int, hi: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{value} is out of range: use {lo}..{hi}")
        return value
    return parse


def _dtype_notes(dtype: Any) -> list[str]:
    from .dtypes import DataType

    note = DataType.alias_note(dtype)
    return [note] if note else []


def cmd_info(args: argparse.Namespace, console: Console) -> int:
    from .info import collect_info

    info = collect_info()
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    from rich.table import Table

    table = Table(title="tmakit info", show_header=False)
    for key, value in info.items():
        if key not in ("devices", "gpu_status"):
            table.add_row(key, str(value))
    console.print(table)
    if not info["devices"]:  # one sentence: the status may already say what tmakit can do without a GPU
        status = info["gpu_status"] or "no GPU"
        status = status[0].upper() + status[1:]
        if "without" not in status:
            status += ". tmakit still validates tensor maps, simulates TMA layouts and compiles kernels here"
        console.print(f"[yellow]{status}[/]", highlight=False)
    for dev in info["devices"]:
        console.print(f"[bold]GPU {dev['ordinal']}[/]: {dev['name']}, {dev['arch']}, TMA: {dev['tma']}, "
                      f"cp.async: {dev['cp_async']}, {dev['memory_gib']} GiB, shared memory per block (opt-in) "
                      f"{dev['smem_optin']} B")
    return 0


def cmd_describe(args: argparse.Namespace, console: Console) -> int:
    from .layout.render import swizzle_grid
    from .tensormap import describe_tensor
    from .tensormap.render import render_violations

    notes = _dtype_notes(args.dtype)
    try:
        tmap = describe_tensor(shape=args.shape, dtype=args.dtype, box=args.box, strides=args.strides,
                               swizzle=args.swizzle, oob_fill=args.oob_fill, l2_promotion=args.l2_promotion,
                               interleave=args.interleave, element_strides=args.element_strides, arch=args.arch)
    except TensorMapError as err:
        console = Console(stderr=True)  # text mode: the error report goes to stderr
        if args.json:
            print(json.dumps({"valid": False, "order": err.order or "numpy",
                              "violations": [v.as_dict() for v in err.violations],
                              "suggestion": _jsonable(err.suggestion), "try": err.suggestion_line,
                              "unfixable": err.unfixable, "notes": notes}, indent=2))
        else:
            for note in notes:
                console.print(f"[yellow]note:[/] {note}", highlight=False)
            console.print(render_violations(err.violations))
            console.print(f"indices in {_order_note(err.order)}")
            if err.suggestion_line:
                console.print(f"[green]{err.suggestion_line}[/]", highlight=False)
            elif err.unfixable:
                console.print(f"[yellow]{err.unfixable}[/]", highlight=False)
        return 2
    if args.json:
        print(json.dumps({"valid": True, "tensor_map": tmap.to_dict(), "notes": notes}, indent=2))
        return 0
    for note in notes:
        console.print(f"[yellow]note:[/] {note}", highlight=False)
    console.print(tmap)
    if tmap.swizzle.span and not tmap.swizzle.blackwell_only:
        console.print(swizzle_grid(tmap.swizzle, tmap.dtype))
    return 0


def _order_note(order: str | None) -> str:
    from .tensormap.order import ORDER_NOTE

    return ORDER_NOTE.get(order or "numpy", ORDER_NOTE["numpy"])


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def cmd_swizzle(args: argparse.Namespace, console: Console) -> int:
    from .layout.render import swizzle_grid
    from .layout.swizzle import swizzle_pattern
    from .tensormap.enums import Swizzle

    sw = Swizzle.parse(args.mode, "mode")
    if sw.blackwell_only or sw is Swizzle.NONE:
        raise InvalidArgumentError("mode", args.mode, "has no Hopper swizzle pattern to show (Blackwell modes are "
                                   "validated but not modelled)", "use 32B, 64B or 128B")
    notes = _dtype_notes(args.dtype)
    if args.json:
        from .dtypes import dtype_from_any

        dtype_from_any(args.dtype, "dtype")
        print(json.dumps({"swizzle": sw.short, "span": sw.span, "alignment": sw.alignment, "notes": notes,
                          "chunk_positions": swizzle_pattern(sw, args.rows).tolist()}))
        return 0
    grid = swizzle_grid(sw, args.dtype, args.rows)
    for note in notes:
        console.print(f"[yellow]note:[/] {note}", highlight=False)
    console.print(grid)
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
    from . import __version__

    ap = _Parser(prog="tmakit", description="Build, check and explain TMA tensor maps")
    ap.add_argument("--version", action="version", version=f"tmakit {__version__}")
    sub = ap.add_subparsers(dest="command", required=True, parser_class=_Parser)
    p = sub.add_parser("info", help="driver, GPU, capability, TMA support, library versions")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("describe", help="check and explain a tiled tensor map (numpy order: outermost first)")
    p.add_argument("--shape", type=_ints, required=True, help="e.g. 4096,4096")
    p.add_argument("--dtype", required=True, help="bf16, f16, f32, f64, u8, i32, ...; fp8 names (fp8, e4m3, fp8_e5m2, "
                   "float8_e4m3fn, ...) and i8 are moved as u8")
    p.add_argument("--box", type=_ints, required=True, help="e.g. 64,64")
    p.add_argument("--strides", type=_ints, default=None, help="byte strides (numpy order); default contiguous")
    p.add_argument("--swizzle", default="auto", help="auto, none, 32B, 64B, 128B")
    p.add_argument("--oob-fill", default="zero", help="zero or nan")
    p.add_argument("--l2-promotion", default="none", help="none, 64B, 128B, 256B")
    p.add_argument("--interleave", default="none", help="none, 16B, 32B")
    p.add_argument("--element-strides", type=_ints, default=None)
    p.add_argument("--arch", default=None, help="sm_90 (default), sm_90a, sm_80, sm_100, ...")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("swizzle", help="show a swizzle pattern")
    p.add_argument("mode", help="32B, 64B or 128B")
    p.add_argument("--dtype", default="u8")
    p.add_argument("--rows", type=_ranged(1, MAX_ROWS), default=8, help=f"1..{MAX_ROWS} (the pattern repeats every 8)")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("corpus-check", help="(GPU) compare the rule checker with this driver on random parameters")
    p.add_argument("--n", type=_ranged(1, MAX_CORPUS), default=2000, help=f"cases per mode, 1..{MAX_CORPUS}")
    p.add_argument("--seed", type=_ranged(0, 2**63 - 1), default=12345)
    p.add_argument("--device", type=_ranged(0, 1023), default=0)
    p.add_argument("--json", action="store_true")
    from .doctor.commands import add_parsers

    add_parsers(sub)
    return ap


def _error_doc(err: BaseException) -> dict:
    doc: dict[str, Any] = {"type": type(err).__name__, "message": str(err)}
    if isinstance(err, InvalidArgumentError):
        doc.update(parameter=err.parameter, value=repr(err.value), rule=err.rule, fix=err.fix)
    return {"valid": False, "error": doc}


class _ClosedPipeSafe(io.TextIOBase):
    """stdout that stops writing, quietly, once the reader has closed the pipe: the command runs to its end and
    exits with its own code whether the reader left before or after the output was written."""

    def __init__(self, stream: Any):
        self.stream, self.closed_by_reader = stream, False

    def _drop(self) -> None:
        self.closed_by_reader = True
        try:  # the interpreter's exit-time flush of the real stdout must not meet the closed pipe either
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.stream.fileno())
            os.close(devnull)
        except (OSError, ValueError):
            pass

    def write(self, text: str) -> int:
        if not self.closed_by_reader:
            try:
                self.stream.write(text)
            except BrokenPipeError:
                self._drop()
        return len(text)

    def flush(self) -> None:
        if not self.closed_by_reader:
            try:
                self.stream.flush()
            except BrokenPipeError:
                self._drop()

    def isatty(self) -> bool:
        return self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.stream, "encoding", "utf-8")


@contextlib.contextmanager
def _stdout_safe_from_closed_pipes() -> Iterator[None]:
    real = sys.stdout
    sys.stdout = safe = _ClosedPipeSafe(real)
    try:
        yield
        safe.flush()
    finally:
        sys.stdout = real


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    with _stdout_safe_from_closed_pipes():
        return _run(argv)


def _run(argv: list[str]) -> int:
    as_json = "--json" in argv
    console = Console()
    try:
        args = build_parser().parse_args(argv)
    except _UsageError as err:
        if as_json:
            print(json.dumps({"valid": False, "error": {"type": "UsageError", "message": str(err)}}, indent=2))
        else:
            sys.stderr.write(f"{err.usage}tmakit: error: {err}\n")
        return 2
    from .doctor.commands import cmd_decode, cmd_lint

    handlers = {"info": cmd_info, "describe": cmd_describe, "swizzle": cmd_swizzle, "corpus-check": cmd_corpus_check,
                "lint": cmd_lint, "decode": cmd_decode}
    try:
        return handlers[args.command](args, console)
    except TmakitError as err:
        if as_json:
            print(json.dumps(_error_doc(err), indent=2))
        else:
            Console(stderr=True).print(f"[red]error:[/] {err}", highlight=False)
        return 2


if __name__ == "__main__":
    sys.exit(main())
