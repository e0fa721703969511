"""Pictures of the swizzle: which 16-byte chunk lands where, as a coloured rich grid."""
from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from ..dtypes import dtype_from_any
from ..tensormap.enums import Swizzle
from ._args import as_int
from .swizzle import swizzle_pattern

MAX_GRID_ROWS = 256

_COLOURS = ["red", "green", "yellow", "blue", "magenta", "cyan", "bright_red", "bright_green"]


def swizzle_grid(swizzle: Swizzle | str, dtype: Any = "u8", rows: int = 8) -> Table:
    """A table with one line per 128-byte shared-memory line and one cell per 16-byte chunk.

    Each cell names the logical chunk stored there and the element range it holds, coloured by logical
    chunk, so columns of one colour show how the swizzle scatters a column of the tile across banks.
    """
    sw = Swizzle.parse(swizzle, "swizzle")
    dt = dtype_from_any(dtype, "dtype")
    rows = as_int("rows", rows, 1, MAX_GRID_ROWS, f"draw 1..{MAX_GRID_ROWS} rows (the pattern repeats every 8)")
    span = sw.span or 128
    pattern = swizzle_pattern(sw, rows)
    per_chunk = max(1, 16 // dt.size)
    table = Table(title=f"swizzle {sw.short}: {span}-byte rows, {dt.short} ({per_chunk} elements per 16-byte chunk)",
                  header_style="bold")
    table.add_column("row", justify="right")
    for pos in range(span // 16):
        table.add_column(f"banks {pos * 4}-{pos * 4 + 3}", justify="center")
    for r in range(rows):
        cells = [""] * (span // 16)
        for logical in range(span // 16):
            pos = int(pattern[r, logical])
            first = logical * per_chunk
            cells[pos] = Text(f"c{logical} [{first}:{first + per_chunk}]", style=_COLOURS[logical % len(_COLOURS)])
        table.add_row(str(r), *cells)
    return table
