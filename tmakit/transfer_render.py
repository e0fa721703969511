"""Pictures of a ``TransferReport`` (a text timeline, a coloured rich one, a PNG) and the pipeline's progress
bar. Only presentation: the pipeline itself is ``transfer.py``."""
from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, TextColumn, TimeRemainingColumn
from rich.progress import Progress as RichProgress
from rich.text import Text

from .errors import InvalidArgumentError

_STAGES = ("h2d", "kernel", "d2h")


def timeline_rows(report: Any, width: int = 100) -> list[tuple[int, str]]:
    """One text row per stream: H = host->device, K = kernel, D = device->host, '.' = idle."""
    if width < 10:
        raise InvalidArgumentError("width", width, "is too narrow for a timeline", "use width >= 10")
    scale = width / report.total_ms if report.total_ms > 0 else 0.0
    rows: dict[int, list[str]] = {s: ["."] * width for s in sorted({c.stream for c in report.chunks})}
    for c in report.chunks:
        for stage, mark in zip(_STAGES, "HKD"):
            lo, hi = getattr(c, stage)
            if hi <= lo:
                continue
            a = min(width - 1, int(lo * scale))
            b = max(a + 1, min(width, int(round(hi * scale))))
            for x in range(a, b):
                rows[c.stream][x] = mark
    return [(s, "".join(cells)) for s, cells in rows.items()]

def timeline_text(report: Any, width: int = 100) -> str:
    label = f"0 ms{'':{max(0, width - 14)}}{report.total_ms:8.2f} ms"
    body = [f"stream {s:2d} |{row}|" for s, row in timeline_rows(report, width)]
    return "\n".join([f"{'':10}{label}", *body, f"{'':10}H = host->device  K = kernel  D = device->host  . = idle"])

def print_timeline(report: Any, width: int | None = None, console: Any = None) -> None:
    """Print the summary and a coloured timeline with rich."""
    console = console or Console()
    width = width or max(20, min(120, console.width - 14))
    colours = {"H": "bold blue", "K": "bold green", "D": "bold magenta", ".": "dim"}
    console.print(report.summary())
    for s, row in timeline_rows(report, width):
        text = Text(f"stream {s:2d} |")
        for ch in row:
            text.append(ch, style=colours[ch])
        text.append("|")
        console.print(text)
    console.print(Text("H = host->device  K = kernel  D = device->host", style="dim"))

def save_timeline_png(report: Any, path: str) -> str:
    """Draw the stream timeline as a PNG (needs matplotlib: pip install 'tmakit[plot]')."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError("save_timeline_png needs matplotlib; install it with: pip install 'tmakit[plot]'") from exc
    streams = sorted({c.stream for c in report.chunks})
    fig, ax = plt.subplots(figsize=(12, 1 + 0.6 * len(streams)))
    colours = {"h2d": "tab:blue", "kernel": "tab:green", "d2h": "tab:purple"}
    for stage, colour in colours.items():
        for s in streams:
            spans = [getattr(c, stage) for c in report.chunks if c.stream == s]
            ax.broken_barh([(lo, hi - lo) for lo, hi in spans], (s - 0.4, 0.8), color=colour,
                           label=stage if s == streams[0] else None)
    ax.set_yticks(streams, [f"stream {s}" for s in streams])
    ax.set_xlabel("ms")
    ax.set_title(f"end-to-end {report.total_ms:.1f} ms, {report.vs_ideal:.2f}x the slowest stage")
    ax.legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


class Progress:
    """A rich progress bar counting finished chunks (or nothing)."""

    def __init__(self, enabled: bool, n_chunks: int):
        self.enabled, self.n_chunks, self.finished = enabled, n_chunks, 0
        self._bar: Any = None

    def __enter__(self) -> "Progress":
        if self.enabled:
            self._bar = RichProgress(TextColumn("transfer"), BarColumn(), TextColumn("{task.completed}/{task.total} chunks"),
                                 TimeRemainingColumn(), transient=True)
            self._bar.__enter__()
            self._task = self._bar.add_task("transfer", total=self.n_chunks)
        return self

    def poll(self, chunks: list, wait: bool = False) -> None:
        """Advance over chunks that have finished, in order (without waiting unless ``wait``)."""
        if self._bar is None:
            return
        while self.finished < len(chunks):
            last = chunks[self.finished].events[3]
            if wait:
                last.sync()
            elif not last.query():
                break
            self.finished += 1
            if self._bar is not None:
                self._bar.advance(self._task)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)
