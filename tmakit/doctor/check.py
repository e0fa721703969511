"""``lint_ptx``: every rule over one kernel of a PTX text, with its tensor maps bound to parameters.

The part of the lint that needs no compiler (the hang doctor runs it on the PTX of the kernel that hung)."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..errors import InvalidArgumentError
from .analysis import Kernel
from .ptx import Function, parse_module
from .report import SEVERITIES, LintReport
from .rules import ALL


def _cluster(cluster: Any) -> tuple[int, int, int] | None:
    if cluster is None:
        return None
    dims = (cluster,) if isinstance(cluster, int) and not isinstance(cluster, bool) else tuple(cluster) \
        if isinstance(cluster, (tuple, list)) else None
    if not dims or len(dims) > 3 or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in dims):
        raise InvalidArgumentError("cluster", cluster, "must be 1-3 positive ints (the launch's cluster shape)",
                                   "cluster=(2, 1, 1)")
    if dims and dims[0] * (dims[1] if len(dims) > 1 else 1) * (dims[2] if len(dims) > 2 else 1) > 16:
        raise InvalidArgumentError("cluster", cluster, "has more than 16 CTAs (the largest Hopper cluster)",
                                   "cluster=(2, 1, 1)")
    return (dims + (1, 1))[:3]  # type: ignore[return-value]


def bind_maps(func: Function, maps: Mapping[Any, Any] | None, c_params: Sequence[str] = ()) -> tuple[dict, dict]:
    """({PTX parameter name: TensorMap}, {PTX name: C name}) for ``maps`` keyed by C name, PTX name or index."""
    from ..tensormap.tensor_map import TensorMap

    params = func.params
    c_names = {p.name: c for p, c in zip(params, c_params) if c}
    bound: dict[str, Any] = {}
    if maps is None:
        return bound, c_names
    if not isinstance(maps, Mapping):
        raise InvalidArgumentError("maps", maps, "must be a mapping of parameter name (or index) -> TensorMap",
                                   "maps={'a': tmakit.describe_tensor(...)}")
    by_c = {c: p for p, c in zip(params, c_params) if c}
    for key, tmap in maps.items():
        if isinstance(key, int) and not isinstance(key, bool):
            if not 0 <= key < len(params):
                raise InvalidArgumentError("maps", key, f"is not a parameter index of {func.name} (0..{len(params) - 1})",
                                           "key maps by parameter name or index")
            param = params[key]
        else:
            param = by_c.get(key) or next((p for p in params if p.name == key), None)
            if param is None:
                known = [c for c in c_params if c] or [p.name for p in params]
                raise InvalidArgumentError("maps", key, f"is not a parameter of {func.name}", f"use one of {known}")
        if not isinstance(tmap, TensorMap):
            raise InvalidArgumentError(f"maps[{key!r}]", type(tmap).__name__, "must be a TensorMap",
                                       "tmakit.describe_tensor(shape=..., dtype=..., box=...)")
        bound[param.name] = tmap
    return bound, c_names


def lint_ptx(ptx: str, *, entry: str | None = None, maps: Mapping[Any, Any] | None = None, arch: str = "sm_90a",
             cluster: Any = None, c_params: Sequence[str] = (), source: str = "ptx") -> LintReport:
    """Lint one kernel of PTX text."""
    module = parse_module(ptx)
    func = module.entry(entry)
    bound, c_names = bind_maps(func, maps, c_params)
    kernel = Kernel(module, func, maps=bound, cluster=_cluster(cluster), arch=str(arch))
    kernel.c_names = c_names
    for rule in ALL:
        rule.check(kernel)
    order = {s: i for i, s in enumerate(SEVERITIES)}
    findings = sorted(kernel.findings, key=lambda f: (order[f.severity], f.ptx_line or 0, f.rule))
    return LintReport(func.name, source, findings, str(arch))
