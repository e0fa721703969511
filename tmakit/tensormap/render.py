"""Rich renderings of tensor maps and rule violations."""
from __future__ import annotations

from typing import Any, Sequence

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text


def render_tensor_map(tmap: Any) -> Panel:
    table = Table(title=None, show_edge=False, header_style="bold")
    for col in ("dim (driver)", "numpy axis", "size", "stride (B)", "box", "traversal", "loads"):
        table.add_column(col, justify="right")
    geo = tmap.geometry if tmap.mode == "tiled" else None
    strides = (tmap.dtype.size,) + tuple(tmap.strides)
    for i in range(tmap.rank):
        box = str(tmap.box[i]) if tmap.mode == "tiled" else "-"
        loads = str(geo.counts[i]) if geo is not None else "-"
        table.add_row(str(i), str(tmap.rank - 1 - i), str(tmap.dims[i]), str(strides[i]), box,
                      str(tmap.element_strides[i]), loads)
    summary = Text()
    summary.append(f"{tmap.mode} tensor map, {tmap.dtype.short} ({tmap.dtype.size} B), shape {tmap.shape}, "
                   f"box {tmap.box_shape}\n", style="bold")
    summary.append(f"swizzle {tmap.swizzle.short}")
    if tmap.swizzle_reason:
        summary.append(f" ({tmap.swizzle_reason})", style="dim")
    summary.append(f", interleave {tmap.interleave.short}, L2 promotion {tmap.l2_promotion.short}, "
                   f"OOB fill {tmap.oob_fill.short}\n")
    summary.append(f"box bytes (expect_tx) {tmap.box_bytes}, shared memory {tmap.smem_bytes} B aligned to "
                   f"{tmap.smem_alignment} B", style="cyan")
    if geo is not None and geo.row_pitch != geo.row_bytes:
        summary.append(f"\nrows of {geo.row_bytes} B are padded to the {geo.row_pitch}-byte swizzle span", style="yellow")
    state = (f"\nencoded for {tmap.arch.sm} on device {tmap.device}: descriptor {tmap.descriptor[:16].hex()}..."
             if tmap.encoded else f"\nnot encoded: {tmap.not_encoded_reason}")
    summary.append(state, style="green" if tmap.encoded else "yellow")
    return Panel(Group(summary, table), title="tmakit TensorMap", expand=False)


def render_violations(violations: Sequence[Any]) -> Table:
    table = Table(title=f"{len(violations)} violation(s)", show_lines=True, header_style="bold red")
    for col in ("parameter", "value", "rule", "fix"):
        table.add_column(col, overflow="fold")
    for v in violations:
        rule = Text(v.message)
        rule.append(f"\n{v.rule}{' [observed]' if v.observed else ''}: {v.reference}", style="dim")
        table.add_row(v.parameter, str(v.value), rule, Text(v.fix, style="green"))
    return table
