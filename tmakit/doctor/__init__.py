"""The kernel doctor: ``lint`` checks a TMA kernel's PTX against the tensor maps it is launched with
(tx bytes, copies vs maps, shared-memory alignment, proxy fences, arrivals, phases, descriptors); the hang
doctor (``Kernel.bind(..., checked=True)``) bounds every mbarrier wait and names the barrier a hang waits on;
``decode_tensormap`` reads a raw CUtensorMap back into its encode parameters. docs/DEBUGGING.md has each rule
with the public thread it comes from."""
from .check import lint_ptx
from .decode import DecodedTensorMap, decode_tensormap
from .hang import check_hangs
from .lint import lint
from .report import Finding, LintReport

__all__ = ["DecodedTensorMap", "Finding", "LintReport", "check_hangs", "decode_tensormap", "lint", "lint_ptx"]
