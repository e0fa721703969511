"""``CompiledKernelCode``: a cubin (with the PTX it came from) or hand-written PTX, ready to load as a
``Module`` (``code.load(device)``). Its kernels' parameter lists come from the PTX (``kernel_signature``)."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..arch import Arch
from ..kernel_signature import ParamInfo, parse_ptx_entries
from .module import Module


@dataclass(frozen=True, eq=False)
class CompiledKernelCode:
    """Loadable kernel code: a cubin (with the PTX it came from) or hand-written PTX."""

    code: bytes
    kind: str  # "cubin" | "ptx"
    arch: Arch
    options: tuple[str, ...]
    cache_key: str
    log: str
    name: str
    ptx: str  # for a cubin: the PTX of the same compile (signatures); for PTX: the text itself
    from_cache: bool = False
    _entries: dict[str, list[ParamInfo]] = field(default_factory=dict, repr=False)

    def entry_names(self) -> list[str]:
        return list(self._signatures())

    def params(self, entry: str) -> list[ParamInfo] | None:
        """The entry's parameter list from the PTX, or None when the PTX has no such entry."""
        return self._signatures().get(entry)

    def _signatures(self) -> dict[str, list[ParamInfo]]:
        if not self._entries:
            self._entries.update(parse_ptx_entries(self.ptx))
        return self._entries

    def load(self, device: int = 0) -> Module:
        return Module(self, device)
