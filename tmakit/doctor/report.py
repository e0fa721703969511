"""Findings and the lint report.

A ``Finding`` is a ``Violation`` (rule id, parameter, value, message, fix, reference: the PTX ISA or CUDA guide
section) with a severity and the PTX and source lines it concerns. ``LintReport`` holds them, renders them with
rich, and gives the ``--json`` document ``{"findings": [{"rule", "severity", "message", "fix", "ptx_line",
"source_line"}, ...]}``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..tensormap.rules import Violation

SEVERITIES = ("error", "warning", "note")


@dataclass(frozen=True)
class Finding(Violation):
    """One finding: ``error`` (the kernel is wrong), ``warning`` (it works only by luck) or ``note`` (something
    the doctor could not derive, said as such)."""

    severity: str = "error"
    ptx_line: int | None = None
    source_line: str | None = None  # "file.cu:42" (needs line info: .cu files are compiled with -lineinfo)
    barrier: str | None = None  # the barrier it concerns ("bars+8"), for the hang doctor's cross-reference

    def as_json(self) -> dict:
        return {"rule": self.rule, "severity": self.severity, "message": self.message, "fix": self.fix,
                "ptx_line": self.ptx_line, "source_line": self.source_line}

    def __str__(self) -> str:
        where = f"PTX line {self.ptx_line}" if self.ptx_line else "kernel"
        if self.source_line:
            where += f" ({self.source_line})"
        return f"{self.severity} [{self.rule}] {where}: {self.message}. Fix: {self.fix} ({self.reference})"


@dataclass
class LintReport:
    """What ``tmakit.lint`` found in one kernel."""

    kernel: str
    source: str
    findings: list[Finding] = field(default_factory=list)
    arch: str = ""

    def by_severity(self, severity: str) -> list[Finding]:
        return [f for f in self.findings if f.severity == severity]

    @property
    def errors(self) -> list[Finding]:
        return self.by_severity("error")

    @property
    def warnings(self) -> list[Finding]:
        return self.by_severity("warning")

    @property
    def notes(self) -> list[Finding]:
        return self.by_severity("note")

    @property
    def clean(self) -> bool:
        """No error and no warning (notes say what could not be checked; they do not fail a kernel)."""
        return not self.errors and not self.warnings

    def rules(self, severity: str | None = None) -> set[str]:
        return {f.rule for f in self.findings if severity is None or f.severity == severity}

    def for_barrier(self, name: str) -> list[Finding]:
        return [f for f in self.findings if f.barrier == name]

    def to_json(self) -> dict[str, Any]:
        return {"findings": [f.as_json() for f in self.findings]}

    def __str__(self) -> str:
        head = f"{self.kernel} ({self.source}): {len(self.errors)} error(s), {len(self.warnings)} warning(s), " \
               f"{len(self.notes)} note(s)"
        return "\n".join([head] + [f"  {f}" for f in self.findings])

    def __rich__(self) -> Any:
        from rich.table import Table

        colour = {"error": "red", "warning": "yellow", "note": "cyan"}
        table = Table(title=f"tmakit lint: {self.kernel} ({self.source})", show_lines=True)
        for col in ("severity", "rule", "where", "what", "fix"):
            table.add_column(col, overflow="fold")
        for f in self.findings:
            where = f"PTX {f.ptx_line}" if f.ptx_line else "-"
            if f.source_line:
                where += f"\n{f.source_line}"
            table.add_row(f"[{colour[f.severity]}]{f.severity}[/]", f.rule, where, f"{f.message}\n[dim]{f.reference}[/]",
                          f.fix)
        if not self.findings:
            table.add_row("[green]clean[/]", "-", "-", "no findings", "-")
        return table
