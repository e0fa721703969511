"""Read a ptxas / NVRTC log for the one mistake it buries most often: a compile target without the instructions
the kernel uses (``wgmma`` or ``setmaxnreg`` compiled for sm_90 instead of sm_90a, TMA for sm_80).

ptxas says it once per use ("Instruction 'wgmma.fence' not supported on .target 'sm_90'", "Feature
'cp.async.bulk.prefetch' requires .target sm_90 or higher"); ``arch_advice`` turns the whole log into one
(rule, fix) pair naming every instruction and the target that has them.
"""
from __future__ import annotations

import re

from ..arch import Arch

_NOT_ON = re.compile(r"Instruction '([^']+)' not supported on \.target '(sm_\w+)'")
_NOWHERE = re.compile(r"Instruction '([^']+)' cannot be compiled for architecture '(sm_\w+)'")
_REQUIRES = re.compile(r"(?:Feature|Instruction) '([^']+)' requires \.target (sm_\w+)( or higher)?")
# Instruction families that exist on arch-specific ("a") targets only, and the first target that has them (PTX
# ISA, each instruction's "Target ISA notes"): for the advice only, never for deciding whether to compile.
_FIRST_ON = {"wgmma": "sm_90a", "setmaxnreg": "sm_90a"}


def _family(instruction: str) -> str:
    return instruction.split(".", 1)[0]


def _names(found: list[str]) -> str:
    unique = list(dict.fromkeys(found))
    shown = ", ".join(unique[:4])
    return shown + (f" and {len(unique) - 4} more" if len(unique) > 4 else "")


def arch_advice(log: str, target: Arch) -> tuple[str, str] | None:
    """(rule, fix) when the log says the target lacks instructions the source uses; None otherwise."""
    missing = [m.group(1) for m in _NOT_ON.finditer(log)]
    nowhere = sorted({m.group(1) for m in _NOWHERE.finditer(log)})
    if nowhere:
        homes = sorted({_FIRST_ON[_family(n)] for n in nowhere if _family(n) in _FIRST_ON})
        where = f" (they exist on {', '.join(homes)})" if homes else ""
        return (f"uses {_names(nowhere)}, which {target.sm} has in no variant{where}",
                f"compile for the architecture the kernel was written for{': arch=' + repr(homes[0]) if homes else ''}, "
                "or guard those instructions with __CUDA_ARCH__ checks")
    if missing:
        if target.major >= 9 and not target.accelerated:
            wanted = target.with_accelerated().sm
            return (f"uses the arch-specific instruction(s) {_names(missing)}, which exist only on the 'a' target "
                    f"{wanted}, not on {target.sm}", f"use arch={wanted!r}")
        homes = sorted({_FIRST_ON[_family(n)] for n in missing if _family(n) in _FIRST_ON})
        return (f"uses {_names(missing)}, which {target.sm} does not have",
                f"use arch={homes[0]!r}" if homes else "compile for a newer architecture (e.g. arch='sm_90a')")
    needs = [(m.group(1), m.group(2), bool(m.group(3))) for m in _REQUIRES.finditer(log)]
    if needs:
        wanted = max((n[1] for n in needs), key=lambda sm: Arch.parse(sm))
        return (f"uses {_names([n[0] for n in needs])}, which need(s) {wanted}"
                f"{' or newer' if all(n[2] for n in needs) else ''}; the target is {target.sm}",
                f"use arch={wanted!r}" + (" (or the GPU's own arch-specific target, e.g. 'sm_90a')"
                                          if wanted == "sm_90" else ""))
    return None
