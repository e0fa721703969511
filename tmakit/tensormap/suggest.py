"""One consistent fix: the nearest valid tensor map to an invalid request, and the error that shows it.

``suggest(spec, arch)`` searches the options a caller chooses (box, then swizzle, then element strides, then the
OOB fill, then the interleave; never the tensor itself: dtype, address, dims, strides) for the valid parameter set
that changes the fewest of them, preferring the earlier ones, then the smallest change. Every candidate is proved
by the full rule checker (``rules.check_spec``, which agrees with the driver on the committed driver-truth corpus),
so a suggestion always passes every rule; where a GPU encodes the described array, the driver must accept it
too (``driver_verifier``). It returns the changed fields in driver order, or None when no change of
options makes the request valid (the tensor itself breaks a rule).

``check_tiled`` / ``check_im2col`` (the public checkers, driver order) return the rule checker's violations with
the same agreeing fixes. ``tensor_map_error`` builds the ``TensorMapError`` a describe call raises: violations indexed in the caller's order
(``order``), every per-rule fix rewritten to agree with the suggestion, and ``err.suggestion`` holding the
corrected arguments as a dict ready to pass back (``describe_tensor(x, **err.suggestion)``).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import replace
from typing import Any, Callable, Sequence

from .. import _driver
from ..arch import Arch
from ..dtypes import DataType
from ..errors import TensorMapError
from .encode import encode_im2col_raw, encode_tiled_raw
from .enums import Interleave, L2Promotion, OOBFill, Swizzle
from .order import ORDER_NOTE, to_caller_order
from . import rules
from .rules import IM2COL_CORNER_RANGE, MAX_BOX, MAX_BOX_BYTES, MAX_PIXELS, check_spec
from .spec import Im2colSpec, TiledSpec

# Options in the order the search prefers to change them.
TILED_OPTIONS = ("box", "swizzle", "element_strides", "oob_fill", "interleave")
IM2COL_OPTIONS = ("channels_per_pixel", "pixels_per_column", "swizzle", "element_strides", "oob_fill", "interleave",
                  "corners")
_HOPPER_SWIZZLES = (Swizzle.NONE, Swizzle.B32, Swizzle.B64, Swizzle.B128)
# Rules about the tensor alone that no option can repair (16-byte alignment holds for every option; 32-byte
# alignment comes from interleave 32B, which the search may drop): the search is skipped when one is broken.
_UNFIXABLE = ("address.align16", "dims.", "strides.align16", "strides.negative", "strides.max", "strides.length",
              "rank.range", "arch.no_tma", "arch.dtype_blackwell")


def _log_distance(new: Sequence[int], old: Sequence[int]) -> float:
    return sum(abs(math.log2(max(n, 1) / max(o, 1))) for n, o in zip(new, old))


def _near_multiples(value: int, step: int, lo: int, hi: int) -> list[int]:
    """Multiples of ``step`` in [lo, hi] nearest to ``value``: the one at or below and the one above."""
    out = []
    down = min(value, hi) // step * step
    up = -(-max(value, lo) // step) * step
    for v in (up, down, down - step, up + step):
        if lo <= v <= hi and v not in out:
            out.append(v)
    return out


def _inner_candidates(count: int, size: int, span: int, interleaved: bool, limit: int = 256) -> list[int]:
    """Values for the inner box count (box[0] / channels_per_pixel) that can pass the inner-box rules."""
    step = 16 // math.gcd(16, size)  # elements per 16 bytes
    hi = limit
    if span and not interleaved:
        hi = min(hi, span // size)
    vals = _near_multiples(count, step, step, hi)
    return vals or [step]


def _fit_smem(box: list[int], es: Sequence[int], size: int, limit: int) -> list[int]:
    """Halve the largest outer box entry until the box fits ``limit`` bytes as the driver counts it."""
    box = list(box)
    def nbytes() -> int:
        total = size
        for b, e in zip(box, es):
            total *= max(b // max(e, 1), 0)
        return total
    while nbytes() > limit:
        outer = [i for i in range(1, len(box)) if box[i] > 1] or [0]
        i = max(outer, key=lambda k: box[k])
        if box[i] <= 1:
            break
        box[i] = max(1, box[i] // 2)
    return box


def _tiled_boxes(spec: TiledSpec, swizzle: Swizzle, es: Sequence[int], interleave: Interleave) -> list[tuple]:
    size = spec.dtype.size
    old = spec.box
    outer = [min(max(b, 1), MAX_BOX) for b in old[1:]]
    if spec.dtype in (DataType.U4X16_ALIGN16B, DataType.U6X16_ALIGN16B):
        inner = [128]
    else:
        inner = _inner_candidates(old[0] if old else 1, size, swizzle.span, interleave is not Interleave.NONE)
        if old and 1 <= old[0] <= MAX_BOX and old[0] not in inner:
            inner.append(old[0])
    boxes = []
    for b0 in inner:
        box = tuple(_fit_smem([b0] + outer, es, size, MAX_BOX_BYTES))
        if box not in boxes:
            boxes.append(box)
    boxes.sort(key=lambda b: _log_distance(b, old))
    return boxes


def _es_candidates(es: Sequence[int]) -> list[tuple]:
    clamped = tuple(min(max(e, 1), 8) for e in es)
    out = [clamped] if clamped != tuple(es) else []
    ones = (1,) * len(es)
    if ones not in out and ones != tuple(es):
        out.append(ones)
    return out


def _swizzle_candidates(spec: Any, arch: Arch, inner_bytes: int) -> list[Swizzle]:
    """Hopper swizzles (Blackwell modes too on sm_100+), the one that holds a row with the least padding first."""
    modes = list(_HOPPER_SWIZZLES) + ([s for s in Swizzle if s.blackwell_only] if arch.is_blackwell_or_newer else [])
    modes = [m for m in modes if m is not spec.swizzle]
    return sorted(modes, key=lambda m: (m.blackwell_only, (m.span or 1 << 20) < inner_bytes,
                                        abs((m.span or 16) - inner_bytes)))


def _candidates_tiled(spec: TiledSpec, arch: Arch, changed: tuple[str, ...]):
    swizzles = (_swizzle_candidates(spec, arch, spec.box[0] * spec.dtype.size if spec.box else 0)
                if "swizzle" in changed else [spec.swizzle])
    es_list = _es_candidates(spec.element_strides) if "element_strides" in changed else [spec.element_strides]
    oobs = [OOBFill.NONE] if "oob_fill" in changed else [spec.oob_fill]
    ils = [Interleave.NONE] if "interleave" in changed else [spec.interleave]
    if ("oob_fill" in changed and spec.oob_fill is OOBFill.NONE) or (
            "interleave" in changed and spec.interleave is Interleave.NONE):
        return
    for sw, es, oob, il in itertools.product(swizzles, es_list, oobs, ils):
        boxes = _tiled_boxes(spec, sw, es, il) if "box" in changed else [spec.box]
        for box in boxes:
            if "box" in changed and box == spec.box:
                continue
            yield spec.replace(box=tuple(box), swizzle=sw, element_strides=tuple(es), oob_fill=oob, interleave=il)


def _candidates_im2col(spec: Im2colSpec, arch: Arch, changed: tuple[str, ...]):
    size = spec.dtype.size
    swizzles = (_swizzle_candidates(spec, arch, spec.channels_per_pixel * size) if "swizzle" in changed
                else [spec.swizzle])
    es_list = _es_candidates(spec.element_strides) if "element_strides" in changed else [spec.element_strides]
    oobs = [OOBFill.NONE] if "oob_fill" in changed else [spec.oob_fill]
    ils = [Interleave.NONE] if "interleave" in changed else [spec.interleave]
    if ("oob_fill" in changed and spec.oob_fill is OOBFill.NONE) or (
            "interleave" in changed and spec.interleave is Interleave.NONE):
        return
    for sw, es, oob, il in itertools.product(swizzles, es_list, oobs, ils):
        channels = ([c for c in _inner_candidates(spec.channels_per_pixel, size, sw.span, il is not Interleave.NONE)
                     if c != spec.channels_per_pixel] if "channels_per_pixel" in changed else [spec.channels_per_pixel])
        for ch in channels:
            if "pixels_per_column" in changed:
                cap = min(MAX_PIXELS, MAX_BOX_BYTES // max(ch * size, 1))
                pixels = [p for p in {min(max(spec.pixels_per_column, 1), cap), 1 << int(math.log2(max(cap, 1)))}
                          if p != spec.pixels_per_column]
            else:
                pixels = [spec.pixels_per_column]
            for px in sorted(pixels, key=lambda p: abs(p - spec.pixels_per_column)):
                corners = [(spec.lower_corner, spec.upper_corner)]
                if "corners" in changed:
                    lo, hi = IM2COL_CORNER_RANGE.get(spec.rank, (-16, 15))
                    clamp = tuple(min(max(c, lo), hi) for c in spec.lower_corner), tuple(
                        min(max(c, lo), hi) for c in spec.upper_corner)
                    zero = (0,) * len(spec.lower_corner)
                    corners = [c for c in (clamp, (zero, zero)) if c != corners[0]]
                for lower, upper in corners:
                    yield spec.replace(channels_per_pixel=ch, pixels_per_column=px, swizzle=sw,
                                       element_strides=tuple(es), oob_fill=oob, interleave=il,
                                       lower_corner=tuple(lower), upper_corner=tuple(upper))


# Rules about the tensor itself (its type, address, shape, strides): what the options' fixes set aside when the
# tensor breaks one (32-byte strides of a packed type, say, which no option repairs either).
_TENSOR = ("address.", "dims.", "strides.", "rank.", "arch.no_tma", "arch.dtype_blackwell", "dtype.")


def _unfixable(violation: Any) -> bool:
    return violation.rule.startswith(_UNFIXABLE)


def _tensor_rule(violation: Any) -> bool:
    return violation.rule.startswith(_UNFIXABLE) or violation.rule.startswith(_TENSOR)


def suggest(spec: TiledSpec | Im2colSpec, arch: Any, *, max_changed: int = 3,
            verify: Callable[[Any], bool] | None = None, options_only: bool = False) -> dict[str, Any] | None:
    """The nearest valid parameter set: ``{field: new value}`` in driver order (only the fields that change; the
    im2col corners as ``lower_corner``/``upper_corner``), or None when the request is valid or no change of
    options (at most ``max_changed`` of them) makes it so. ``verify`` (e.g. ``driver_verifier``) must also accept
    a candidate that passes every rule. ``options_only``: the nearest options that break no rule but the
    tensor's own (what the per-rule fixes of an invalid tensor agree on; never a suggestion to pass back)."""
    arch = Arch.parse(arch)
    violations = check_spec(spec, arch)
    tensor_broken = any(_unfixable(v) for v in violations)
    # a suggestion needs an intact tensor; options_only needs a broken tensor and an option to repair as well
    if not violations or tensor_broken != options_only or all(map(_tensor_rule if options_only else _unfixable,
                                                                  violations)):
        return None

    def passes(candidate: Any) -> bool:
        if options_only:
            return all(_tensor_rule(v) for v in check_spec(candidate, arch))
        return not check_spec(candidate, arch) and (verify is None or verify(candidate))
    tiled = isinstance(spec, TiledSpec)
    options = TILED_OPTIONS if tiled else IM2COL_OPTIONS
    make = _candidates_tiled if tiled else _candidates_im2col
    for n in range(1, max_changed + 1):
        for changed in itertools.combinations(options, n):  # combinations keep the preference order
            for candidate in make(spec, arch, changed):
                if passes(candidate):
                    return _diff(spec, candidate)
    return None


def driver_verifier(device: int, address: int) -> Callable[[Any], bool]:
    """A ``verify`` for ``suggest``: the driver encodes the candidate at ``address`` in ``device``'s context
    (the pattern describe's own encode uses) and must return CUDA_SUCCESS."""
    def verify(candidate: Any) -> bool:
        raw = encode_tiled_raw if isinstance(candidate, TiledSpec) else encode_im2col_raw
        with _driver.context_for(device):
            err, _ = raw(*candidate.replace(address=address).encode_args())
        return int(err) == 0
    return verify


def _diff(old: Any, new: Any) -> dict[str, Any]:
    names = ("box", "swizzle", "element_strides", "oob_fill", "interleave", "channels_per_pixel",
             "pixels_per_column", "lower_corner", "upper_corner")
    return {n: getattr(new, n) for n in names if hasattr(old, n) and getattr(old, n) != getattr(new, n)}


# ---- presentation: the caller's argument names and order -------------------------------------------------------
def _show(value: Any) -> Any:
    """Enum members as the short names the public API parses ('64B', 'zero'); everything else unchanged."""
    return value.short if isinstance(value, (Swizzle, Interleave, L2Promotion, OOBFill)) else value


def caller_arguments(spec: Any, changes: dict[str, Any], order: str) -> dict[str, Any]:
    """The corrected option arguments of the whole request (not only the changed ones), in the caller's order
    and argument names, ready to pass back to the call that raised."""
    fixed = spec.replace(**changes)
    flip = (lambda t: tuple(reversed(t))) if order == "numpy" else tuple
    out: dict[str, Any] = {}
    if isinstance(fixed, TiledSpec):
        out["box"] = flip(fixed.box)
    else:
        out.update(channels_per_pixel=fixed.channels_per_pixel, pixels_per_column=fixed.pixels_per_column,
                   lower_corner=flip(fixed.lower_corner), upper_corner=flip(fixed.upper_corner))
    out.update(swizzle=_show(fixed.swizzle), element_strides=flip(fixed.element_strides),
               oob_fill=_show(fixed.oob_fill), interleave=_show(fixed.interleave),
               l2_promotion=_show(fixed.l2_promotion))
    return out


def suggestion_line(arguments: dict[str, Any], changes: Any, *, show_swizzle: bool = False) -> str:
    """``try: box=(64, 32), swizzle='64B'``: the changed arguments (and the swizzle when the caller's was "auto")."""
    keys = [k for k in arguments if k in changes or (k == "swizzle" and show_swizzle)]
    return "try: " + ", ".join(f"{k}={arguments[k]!r}" for k in keys)


def tensor_map_error(spec: TiledSpec | Im2colSpec, arch: Any, violations: Sequence[Any], *, order: str,
                     auto_swizzle: bool = False, header: str = "invalid tensor map",
                     driver_at: tuple[int, int] | None = None) -> TensorMapError:
    """The error a describe call raises: violations in the caller's ``order`` ("numpy" or "driver"), per-rule
    fixes that agree with the one suggestion, and ``suggestion`` (a dict of arguments, or None). ``driver_at``
    ((device, address) of the described array, where an sm_90+ GPU encodes) makes the driver prove the suggestion
    too; ``err.suggestion_proof`` says what proved it ("rules" or "rules and driver")."""
    verify = driver_verifier(*driver_at) if driver_at is not None and Arch.parse(arch).has_tma else None
    shown, suggestion, line = agreeing_fixes(spec, arch, violations, order=order, auto_swizzle=auto_swizzle,
                                             verify=verify)
    err = TensorMapError(shown, header=f"{header} ({ORDER_NOTE[order]})")
    err.suggestion, err.suggestion_line, err.order = suggestion, line or None, order
    err.suggestion_proof = None if suggestion is None else "rules and driver" if verify is not None else "rules"
    err.unfixable = None if suggestion is not None else why_unfixable(shown)
    if line or err.unfixable:
        err.args = (f"{err.args[0]}\n  {line or err.unfixable}",)
    return err


def why_unfixable(violations: Sequence[Any]) -> str:
    """Why no change of box or options makes a request valid: the architecture has no TMA, or the tensor's own
    parameters (named) break a rule."""
    no_tma = [v for v in violations if v.rule == "arch.no_tma"]
    if no_tma:
        return (f"{no_tma[0].value} has no TMA (tensor maps need sm_90 or newer): no box or option makes a tensor map "
                "for it; describe for sm_90 or newer (arch='sm_90', --arch sm_90), or use the cp.async backend, which needs no tensor map")
    named = sorted({v.parameter.split("[")[0] for v in violations if _tensor_rule(v)})
    return (f"no change of box or options makes this valid: the tensor itself "
            f"({', '.join(named) if named else 'shape, strides, dtype'}) breaks a rule")


def agreeing_fixes(spec: TiledSpec | Im2colSpec, arch: Any, violations: Sequence[Any], *, order: str,
                   auto_swizzle: bool = False, verify: Callable[[Any], bool] | None = None
                   ) -> tuple[list[Any], dict[str, Any] | None, str]:
    """``(violations, suggestion, line)``: ``violations`` in the caller's ``order`` with every fix rewritten to
    agree with the one suggestion (or, where the tensor itself breaks a rule, the options' fixes with the nearest
    options that repair the rest), the suggestion as caller arguments (None without one) and its one line."""
    changes = suggest(spec, arch, verify=verify)
    shown = to_caller_order(violations, spec, order)
    suggestion, line = None, ""
    if changes:
        suggestion = caller_arguments(spec, changes, order)
        shown_keys = set(changes) | ({"lower_corner", "upper_corner"} & set(changes) and {"lower_corner", "upper_corner"})
        # "auto" picks the swizzle from the inner box: when that changes, show the swizzle that goes with it
        inner_changed = bool({"box", "channels_per_pixel"} & set(changes))
        line = suggestion_line(suggestion, shown_keys, show_swizzle=auto_swizzle and inner_changed)
        shown = [_agree(v, line) for v in shown]
    else:  # the tensor breaks a rule: the fixes of the options' violations still agree on one set of options
        options = suggest(spec, arch, options_only=True)
        if options:
            partial = suggestion_line(caller_arguments(spec, options, order), set(options))
            shown = [v if _tensor_rule(v) else replace(v, fix=f"use {partial[5:]} (with the tensor's own violations "
                                                         "fixed, that one change repairs the rest)") for v in shown]
        elif len({v.fix for v in shown if not _tensor_rule(v)}) > 1:  # no options repair them on this tensor
            shown = [v if _tensor_rule(v) else replace(v, fix="fix the tensor's own violations first: on this tensor "
                                                         "no change of options repairs the rest") for v in shown]
    return shown, suggestion, line


def _agree(violation: Any, line: str) -> Any:
    """``violation`` with its fix rewritten to the one suggestion, so that every fix agrees."""
    return replace(violation, fix=f"use {line[5:]}: that one change repairs every violation")


def check_tiled(dtype: Any, address: int, dims: Sequence[int], strides: Sequence[int], box: Sequence[int],
                element_strides: Sequence[int], *, interleave: Any = "none", swizzle: Any = "none",
                l2_promotion: Any = "none", oob_fill: Any = "none", arch: Any = "sm_90") -> list[Any]:
    """Every violation of cuTensorMapEncodeTiled's rules, in driver order (index 0 = innermost); an empty list
    means the driver will accept it. The fixes agree with one another: each names the one nearest valid
    parameter set (``suggest``), as ``describe_tensor``'s error does."""
    violations = rules.check_tiled(dtype, address, dims, strides, box, element_strides, interleave=interleave,
                                   swizzle=swizzle, l2_promotion=l2_promotion, oob_fill=oob_fill, arch=arch)
    if not violations:
        return violations
    dt, addr, il, sw, l2, oob, ar = rules._parse_all(dtype, address, interleave, swizzle, l2_promotion, oob_fill, arch)
    spec = TiledSpec(dt, addr, *(tuple(rules._int_list(n, v)) for n, v in (("dims", dims), ("strides", strides),
                     ("box", box), ("element_strides", element_strides))), il, sw, l2, oob)
    return agreeing_fixes(spec, ar, violations, order="driver")[0]


def check_im2col(dtype: Any, address: int, dims: Sequence[int], strides: Sequence[int], lower_corner: Sequence[int],
                 upper_corner: Sequence[int], channels_per_pixel: int, pixels_per_column: int,
                 element_strides: Sequence[int], *, interleave: Any = "none", swizzle: Any = "none",
                 l2_promotion: Any = "none", oob_fill: Any = "none", arch: Any = "sm_90") -> list[Any]:
    """Every violation of cuTensorMapEncodeIm2col's rules, in driver order; an empty list means the driver will
    accept it. The fixes agree with the one nearest valid parameter set, as ``describe_im2col``'s error does."""
    violations = rules.check_im2col(dtype, address, dims, strides, lower_corner, upper_corner, channels_per_pixel,
                                    pixels_per_column, element_strides, interleave=interleave, swizzle=swizzle,
                                    l2_promotion=l2_promotion, oob_fill=oob_fill, arch=arch)
    if not violations:
        return violations
    dt, addr, il, sw, l2, oob, ar = rules._parse_all(dtype, address, interleave, swizzle, l2_promotion, oob_fill, arch)
    lists = (tuple(rules._int_list(n, v)) for n, v in (("dims", dims), ("strides", strides),
                                                       ("lower_corner", lower_corner), ("upper_corner", upper_corner)))
    spec = Im2colSpec(dt, addr, *lists, rules._int_list("channels_per_pixel", [channels_per_pixel])[0],
                      rules._int_list("pixels_per_column", [pixels_per_column])[0],
                      tuple(rules._int_list("element_strides", element_strides)), il, sw, l2, oob)
    return agreeing_fixes(spec, ar, violations, order="driver")[0]
