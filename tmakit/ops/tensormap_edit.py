"""``edit_tensormaps``: build tensor maps on the GPU with tensormap.replace, and load a box through each.

The hardware side of ``tmakit.apply_tensormap_replace``: each edit's block copies its template (or 128 zero bytes)
into shared memory, runs the steps, publishes the map to global memory with tensormap.cp_fenceproxy and, given
coordinates, acquires it and loads a box through it (cuda_src/tensormap_replace.cu). The result holds the bytes the
GPU wrote, the model's bytes and the box image, so a user sees at once whether a device-built map is the one meant.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from .. import _driver
from ..backend import choose_backend
from ..device import device_limits
from ..device_array import DeviceArray
from ..errors import InvalidArgumentError, UnsupportedDeviceError
from ..tensormap import TensorMap
from ..tensormap.device_edit import (ReplaceStep, apply_tensormap_replace, same_fields, steps_as_records,
                                     tensormap_replace_steps)
from ..layout.tma_model import box_geometry, check_box_start
from ._kernels import kernel
from .load_tiles import POISON

_THREADS = 128
_MAX_EDITS = 65535  # one block a map, a grid's x extent
_CASE_WORDS = 12  # cuda_src/tensormap_replace.cu: kFirstStep, kSteps, kFromZero, kRank, kBoxBytes, kImageBytes,
#                   kImageOffset, kCoord0..4
_STEP = np.dtype([("field", "<u4"), ("ord", "<u4"), ("value", "<u8")])


@dataclass(frozen=True)
class TensorMapEdit:
    """One map to build on the device. ``target``: the TensorMap the steps are meant to produce (its box sizes the
    image); ``base``: the template the kernel starts from (None: 128 zero bytes); ``steps``: default
    ``tensormap_replace_steps(target, since=base)``; ``coords``: a box to load through the built map (numpy
    order), or None."""

    target: TensorMap
    base: TensorMap | None = None
    steps: tuple[ReplaceStep, ...] | None = None
    coords: Sequence[int] | None = None


@dataclass(frozen=True)
class TensorMapEditResult:
    """``descriptor``: the bytes the GPU wrote; ``model``: ``apply_tensormap_replace`` of the same steps;
    ``image``: the box loaded through the built map (uint8 shared-memory footprint, poisoned where TMA wrote
    nothing), or None."""

    descriptor: bytes
    model: bytes
    image: np.ndarray | None
    steps: tuple[ReplaceStep, ...]

    @property
    def matches_model(self) -> bool:
        return self.descriptor == self.model


def _check(i: int, e: Any) -> tuple[tuple[ReplaceStep, ...], bytes | None, Any, list[int] | None]:
    if not isinstance(e, TensorMapEdit):
        raise InvalidArgumentError(f"edits[{i}]", type(e).__name__, "must be a TensorMapEdit",
                                   "pass TensorMapEdit(target, base=..., steps=..., coords=...)")
    for name, tm in (("target", e.target), ("base", e.base)):
        if tm is None and name == "base":
            continue
        if not isinstance(tm, TensorMap) or tm.descriptor is None:
            raise InvalidArgumentError(f"edits[{i}].{name}", repr(tm)[:60], "must be an encoded TensorMap",
                                       "encode it on an sm_90 GPU (tmakit.describe_tensor / encode_tiled)")
    steps = tensormap_replace_steps(e.target, since=e.base) if e.steps is None else tuple(e.steps)
    for s in steps:
        if not isinstance(s, ReplaceStep):
            raise InvalidArgumentError(f"edits[{i}].steps", repr(s)[:60], "must hold ReplaceStep objects",
                                       "build them with tmakit.tensormap_replace_steps")
    base = None if e.base is None else e.base.descriptor
    coords = None
    if e.coords is not None:
        geo = box_geometry(e.target)
        coords = [int(c) for c in reversed(list(e.coords))]
        if len(coords) != e.target.rank:
            raise InvalidArgumentError(f"edits[{i}].coords", list(e.coords), f"must have {e.target.rank} entries "
                                       "(numpy order)", "pass one coordinate per dimension of the target")
        try:
            check_box_start(geo, coords)
        except ValueError as exc:
            raise InvalidArgumentError(f"edits[{i}].coords", list(e.coords), str(exc),
                                       "round the innermost coordinate") from None
        if not all(-2**31 <= c < 2**31 for c in coords):
            raise InvalidArgumentError(f"edits[{i}].coords", list(e.coords), "must fit in int32",
                                       "use coordinates in [-2**31, 2**31)")
    return steps, base, e.target, coords


def edit_tensormaps(edits: Sequence[TensorMapEdit]) -> list[TensorMapEditResult]:
    """Build each edit's map on the GPU (one block each, one launch, up to 65535 edits) and load its box; synchronous.

    Every target lives on one device, an sm_90 GPU (tensormap.replace is sm_90a). A box is loaded only through a
    map whose steps produce the target (``model == target.descriptor``): a map the steps leave invalid could
    fault the TMA, and a refused edit is better than a dead context.
    """
    edits = list(edits)
    if not 1 <= len(edits) <= _MAX_EDITS:
        raise InvalidArgumentError("edits", f"{len(edits)} edits", f"must be 1 to {_MAX_EDITS} (one block each)",
                                   "split the list into calls of at most that many")
    checked = [_check(i, e) for i, e in enumerate(edits)]
    devices = {e.target.device for e in edits}
    if len(devices) != 1 or None in devices:
        raise InvalidArgumentError("edits", f"targets on devices {sorted(map(str, devices))}",
                                   "must all be on one device", "edit each device's maps in its own call")
    device = int(devices.pop())
    choice = choose_backend("tma", device=device)
    if choice.name != "tma":
        raise UnsupportedDeviceError("tensormap.replace needs an sm_90 GPU", required="sm_90", actual=choice.arch)
    n = len(edits)
    bases = np.zeros((n, 128), np.uint8)
    cases = np.zeros((n, _CASE_WORDS), np.int64)
    records, models, offset, largest, align = [], [], 0, 16, 128
    for i, (steps, base, target, coords) in enumerate(checked):
        model = apply_tensormap_replace(base, steps)
        models.append(model)
        cases[i, 0:3] = (len(records), len(steps), base is None)
        records += steps_as_records(steps)
        if base is not None:
            bases[i] = np.frombuffer(base, np.uint8)
        if coords is not None:
            if not same_fields(model, target.descriptor):
                raise InvalidArgumentError(f"edits[{i}].coords", list(edits[i].coords), "cannot load through a map "
                                           "the steps do not make equal to the target (the model differs)",
                                           "fix the steps (tmakit.tensormap_replace_steps), or pass coords=None")
            geo = box_geometry(target)
            cases[i, 3:7] = (target.rank, geo.box_bytes, geo.smem_bytes, offset)
            cases[i, 7:7 + len(coords)] = coords
            offset += -(-geo.smem_bytes // 16) * 16
            largest, align = max(largest, geo.smem_bytes), max(align, int(target.smem_alignment))
    limit = device_limits(device).smem_per_block_optin
    if largest + align + 1024 > limit:
        raise InvalidArgumentError("edits", f"a box of {largest} bytes", f"does not fit the {limit} bytes of shared "
                                   "memory a block may have", "load a smaller box")
    steps_np = np.array(records or [(0, 0, 0)], _STEP)  # one unused step when there are none (no empty buffer)
    _driver.ensure_context(device)
    k = kernel("tensormap_replace.cu", "tmakit_tensormap_replace", choice, device)
    with DeviceArray.from_host(bases, device=device) as d_bases, \
            DeviceArray.from_host(steps_np.view(np.uint8), device=device) as d_steps, \
            DeviceArray.from_host(cases, device=device) as d_cases, \
            DeviceArray.zeros((n, 128), np.uint8, device=device) as d_maps, \
            DeviceArray.empty(max(16, offset), np.uint8, device=device) as d_out:
        d_out.fill(POISON)
        k(d_bases.ptr, d_steps.ptr, d_cases.ptr, np.int32(n), d_maps.ptr, np.uint32(align), np.uint32(POISON),
          d_out.ptr, grid=(n, 1, 1), block=(_THREADS, 1, 1), shared_mem=largest + align)
        _driver.call("cuCtxSynchronize")
        maps, out = d_maps.to_host(), d_out.to_host()
    results = []
    for i, (steps, _base, _target, coords) in enumerate(checked):
        image = None
        if coords is not None:
            o, size = int(cases[i, 6]), int(cases[i, 5])
            image = out[o:o + size].copy()
        results.append(TensorMapEditResult(bytes(maps[i]), models[i], image, steps))
    return results
