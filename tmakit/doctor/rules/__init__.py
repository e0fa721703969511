"""The lint rules, one module per family; each ``check(kernel)`` adds its findings to the kernel."""
from . import arrivals, copies, fences, phase, tx, wgmma

ALL = (tx, arrivals, phase, copies, fences, wgmma)
FAMILIES = {"tx": tx, "arrivals": arrivals, "phase": phase, "copy": copies, "smem": copies, "descriptor": copies,
            "proxy": fences}

__all__ = ["ALL", "FAMILIES"]
