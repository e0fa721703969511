"""Random near-valid tensor-map parameter sets, mutated at boundary values.

Used twice: on a GPU to record the driver's verdict for each set (the driver-truth corpus in
``tests/data/``), and in tests that replay the corpus through the rule checker. Cases are plain dicts in
driver order so they can be stored as JSON lines.
"""
from __future__ import annotations

import math
import random
from typing import Any, Callable

from ..dtypes import DataType
from .encode import encode_im2col_raw, encode_tiled_raw
from .rules import Violation, check_im2col, check_tiled

ADDRESS_BASE = 1 << 40  # replay address: aligned far beyond any rule's granularity
_SPANS = {0: 0, 1: 32, 2: 64, 3: 128, 4: 128, 5: 128, 6: 128}


def _log_uniform(rng: random.Random, lo: int, hi: int) -> int:
    return int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))


def _dense_strides(rng: random.Random, dims: list[int], esize: int, granule: int) -> list[int]:
    strides, prev = [], None
    for i in range(1, len(dims)):
        base = dims[0] * esize if prev is None else prev * dims[i - 1]
        pad = rng.choice([0, 0, 0, 1, 2, 4]) * granule
        stride = -(-base // granule) * granule + pad
        strides.append(stride)
        prev = stride
    return strides


def _pick_dtype(rng: random.Random) -> int:
    if rng.random() < 0.06:
        return rng.choice([13, 14, 15])
    return rng.randrange(0, 13)


def _element_size(dtype: int) -> int:
    return DataType(dtype).size


def base_tiled(rng: random.Random) -> dict[str, Any]:
    dtype = _pick_dtype(rng)
    esize = _element_size(dtype)
    interleave = rng.choices([0, 1, 2], [0.76, 0.12, 0.12])[0]
    rank = rng.randint(3, 5) if interleave else rng.randint(1, 5)
    if interleave == 2:
        swizzle = rng.choices([1, 0, 2, 3], [0.85, 0.05, 0.05, 0.05])[0]
    else:
        swizzle = rng.choices([0, 1, 2, 3, 4, 5, 6], [0.3, 0.17, 0.17, 0.28, 0.03, 0.03, 0.02])[0]
    span = _SPANS[swizzle]
    if interleave == 0:
        limit = min(256 * esize, span or 256 * esize)
        inner_bytes = 16 * rng.randint(1, max(1, limit // 16))
        box0 = max(1, inner_bytes // esize)
    else:
        box0 = rng.choice([1, 2, 4, 8, 16, 32, 64, 128, 256, max(1, (16 if interleave == 1 else 32) // esize)])
    dims = [_log_uniform(rng, 1, 1 << rng.choice([8, 12, 16, 20])) for _ in range(rank)]
    dims[0] = max(dims[0], 1)
    granule = 32 if (interleave == 2 or dtype in (14, 15)) else 16
    strides = _dense_strides(rng, dims, esize, granule)
    while strides and strides[-1] >= 1 << 40:
        dims = [max(1, d // 4) for d in dims]
        strides = _dense_strides(rng, dims, esize, granule)
    box = [box0] + [rng.choice([1, 2, 8, 16, 32, 64, 128, 256, _log_uniform(rng, 1, 256)]) for _ in range(rank - 1)]
    es = [1] * rank if rng.random() < 0.6 else [rng.randint(1, 8) for _ in range(rank)]
    is_float = DataType(dtype).is_float
    return {
        "kind": "tiled", "dtype": dtype, "address_offset": 0, "dims": dims, "strides": strides, "box": box,
        "element_strides": es, "interleave": interleave, "swizzle": swizzle, "l2_promotion": rng.randrange(4),
        "oob_fill": 1 if (is_float and rng.random() < 0.3) else 0,
    }


def base_im2col(rng: random.Random) -> dict[str, Any]:
    dtype = _pick_dtype(rng)
    esize = _element_size(dtype)
    interleave = rng.choices([0, 1, 2], [0.8, 0.1, 0.1])[0]
    rank = rng.randint(3, 5)
    swizzle = 1 if interleave == 2 else rng.choices([0, 1, 2, 3], [0.3, 0.2, 0.2, 0.3])[0]
    span = _SPANS[swizzle]
    dims = [_log_uniform(rng, 1, 1024) for _ in range(rank)]
    granule = 32 if (interleave == 2 or dtype in (14, 15)) else 16
    strides = _dense_strides(rng, dims, esize, granule)
    corner_range = {3: 32768, 4: 128, 5: 16}[rank]
    lower = [rng.randint(-min(corner_range, 4), min(corner_range - 1, 2)) for _ in range(rank - 2)]
    upper = [rng.randint(-min(corner_range, 4), min(corner_range - 1, 2)) for _ in range(rank - 2)]
    for i in range(rank - 2):  # keep the box non-empty in the base case
        spatial = dims[i + 1]
        while spatial + upper[i] - lower[i] <= 0:
            lower[i] -= 1 if lower[i] > -corner_range else 0
            upper[i] += 1
    limit = min(256 * esize, span or 256 * esize)
    channels = max(1, (16 * rng.randint(1, max(1, limit // 16))) // esize) if interleave == 0 else rng.choice([1, 8, 16, 32])
    channels = min(channels, 256)
    es = [1] * rank if rng.random() < 0.6 else [rng.randint(1, 8) for _ in range(rank)]
    return {
        "kind": "im2col", "dtype": dtype, "address_offset": 0, "dims": dims, "strides": strides,
        "lower_corner": lower, "upper_corner": upper, "channels_per_pixel": channels,
        "pixels_per_column": rng.choice([1, 16, 32, 64, 128, 256, 512, 1024, _log_uniform(rng, 1, 1024)]),
        "element_strides": es, "interleave": interleave, "swizzle": swizzle, "l2_promotion": rng.randrange(4),
        "oob_fill": 1 if (DataType(dtype).is_float and rng.random() < 0.3) else 0,
    }


# --- mutations at boundary values -------------------------------------------------------------------


def _m_rank(rng, c):
    new = rng.choice([0, 6]) if rng.random() < 0.5 else rng.randint(1, 5)
    for key, fill in (("dims", 16), ("box", 1), ("element_strides", 1)):
        if key in c:
            c[key] = (c[key] + [fill] * 6)[:new]
    if "strides" in c:
        c["strides"] = (c["strides"] + [c["strides"][-1] * 16 if c["strides"] else 4096] * 6)[: max(new - 1, 0)]
    for key in ("lower_corner", "upper_corner"):
        if key in c:
            c[key] = (c[key] + [0] * 6)[: max(new - 2, 0)]
    return "rank"


def _m_address(rng, c):
    c["address_offset"] = rng.choice([1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, "null"])
    return "address"


def _m_dims(rng, c):
    if not c["dims"]:
        return "dims-empty"
    i = rng.randrange(len(c["dims"]))
    c["dims"][i] = rng.choice([0, 1, 2, 3, 127, 128, 129, (1 << 32) - 1, 1 << 32, (1 << 32) + 1, 1 << 33])
    return f"dims[{i}]"


def _m_strides(rng, c):
    if not c["strides"]:
        return "strides-empty"
    i = rng.randrange(len(c["strides"]))
    s = c["strides"][i]
    prev = c["strides"][i - 1] if i else c["dims"][0] * _element_size(c["dtype"])
    c["strides"][i] = max(0, rng.choice([
        0, 8, 16, 32, s - 16, s + 8, s + 16, s - 1, s + 32, (1 << 40) - 16, 1 << 40, (1 << 40) + 16,
        prev, max(prev - 16, 16), 16 * max(1, prev // 32), (1 << 39), (1 << 36),
    ]))
    return f"strides[{i}]"


def _m_box(rng, c):
    i = rng.randrange(len(c["box"])) if c["box"] else 0
    if not c["box"]:
        return "box-empty"
    esize = _element_size(c["dtype"])
    span = _SPANS[c["swizzle"]]
    choices = [0, 1, 2, 255, 256, 257, 512, c["dims"][i] if c["dims"] else 1, c["box"][i] + 1]
    if i == 0:
        choices += [max(1, (span - 16) // esize), max(1, span // esize), (span + 16) // esize, max(1, 8 // esize),
                    max(1, 16 // esize), max(1, 32 // esize), max(1, 48 // esize)]
    c["box"][i] = rng.choice(choices)
    return f"box[{i}]"


def _m_element_strides(rng, c):
    if not c["element_strides"]:
        return "es-empty"
    i = rng.choice([0, rng.randrange(len(c["element_strides"]))])
    c["element_strides"][i] = rng.choice([0, 1, 2, 3, 7, 8, 9, 16])
    return f"element_strides[{i}]"


def _m_enum(key, n):
    def mutate(rng, c):
        c[key] = rng.randrange(n)
        return key
    return mutate


def _m_dtype(rng, c):
    c["dtype"] = rng.randrange(16)
    return "dtype"


def _m_corner(rng, c):
    key = rng.choice(["lower_corner", "upper_corner"])
    if not c[key]:
        return "corner-empty"
    i = rng.randrange(len(c[key]))
    rank = len(c["dims"])
    lim = {3: 32768, 4: 128, 5: 16}.get(rank, 16)
    c[key][i] = rng.choice([-lim - 1, -lim, -lim + 1, lim - 2, lim - 1, lim, 0, -1, 1])
    return f"{key}[{i}]"


def _m_empty_box(rng, c):
    if not c["lower_corner"]:
        return "corner-empty"
    i = rng.randrange(len(c["lower_corner"]))
    spatial = c["dims"][i + 1]
    rank = len(c["dims"])
    lim = {3: 32768, 4: 128, 5: 16}.get(rank, 16)
    target = rng.choice([-2, -1, 0, 1, 2])  # extent = spatial + upper - lower
    upper = max(-lim, min(lim - 1, c["lower_corner"][i] + target - spatial))
    c["upper_corner"][i] = upper
    return f"extent[{i}]"


def _m_channels(rng, c):
    c["channels_per_pixel"] = rng.choice([0, 1, 2, 4, 8, 16, 32, 64, 128, 255, 256, 257, 512])
    return "channels_per_pixel"


def _m_pixels(rng, c):
    c["pixels_per_column"] = rng.choice([0, 1, 2, 255, 256, 1023, 1024, 1025, 2048])
    return "pixels_per_column"


_COMMON: list[Callable] = [_m_rank, _m_address, _m_dims, _m_strides, _m_element_strides, _m_enum("interleave", 3),
                           _m_enum("swizzle", 7), _m_enum("l2_promotion", 4), _m_enum("oob_fill", 2), _m_dtype]
TILED_MUTATIONS = _COMMON + [_m_box, _m_box, _m_box]
IM2COL_MUTATIONS = _COMMON + [_m_corner, _m_corner, _m_empty_box, _m_channels, _m_pixels]


def generate(kind: str, n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` cases of ``kind`` ("tiled" or "im2col"): ~20% unmutated, the rest with 1-2 boundary mutations."""
    rng = random.Random(seed)
    base = base_tiled if kind == "tiled" else base_im2col
    mutations = TILED_MUTATIONS if kind == "tiled" else IM2COL_MUTATIONS
    cases = []
    for index in range(n):
        case = base(rng)
        applied = [rng.choice(mutations)(rng, case) for _ in range(rng.choices([0, 1, 2], [0.2, 0.55, 0.25])[0])]
        case["mutations"] = applied
        case["id"] = f"{kind}-{seed}-{index}"
        cases.append(case)
    return cases


def case_address(case: dict[str, Any], base: int = ADDRESS_BASE) -> int:
    off = case["address_offset"]
    return 0 if off == "null" else base + int(off)


def driver_verdict(case: dict[str, Any], base_address: int) -> str:
    """Encode ``case`` with the driver (a context must be current); the CUresult's name, or "PYTHON:<error>"
    when cuda-bindings refuses a value before calling the driver (e.g. a list longer than rank 5)."""
    try:
        return _driver_verdict(case, base_address, encode_tiled_raw, encode_im2col_raw)
    except (OverflowError, ValueError, TypeError) as exc:
        return f"PYTHON:{type(exc).__name__}"


def _driver_verdict(case: dict[str, Any], base_address: int, encode_tiled_raw: Any, encode_im2col_raw: Any) -> str:
    address = case_address(case, base_address)
    common = (case["interleave"], case["swizzle"], case["l2_promotion"], case["oob_fill"])
    if case["kind"] == "tiled":
        err, _ = encode_tiled_raw(case["dtype"], address, case["dims"], case["strides"], case["box"],
                                  case["element_strides"], *common)
    else:
        err, _ = encode_im2col_raw(case["dtype"], address, case["dims"], case["strides"], case["lower_corner"],
                                   case["upper_corner"], case["channels_per_pixel"], case["pixels_per_column"],
                                   case["element_strides"], *common)
    return err.name


def replay_case(case: dict, arch: Any = "sm_90") -> list[Violation]:
    """Run a corpus case through the checker."""
    common = dict(interleave=case["interleave"], swizzle=case["swizzle"], l2_promotion=case["l2_promotion"],
                  oob_fill=case["oob_fill"], arch=arch)
    if case["kind"] == "tiled":
        return check_tiled(case["dtype"], case_address(case), case["dims"], case["strides"], case["box"],
                           case["element_strides"], **common)
    return check_im2col(case["dtype"], case_address(case), case["dims"], case["strides"], case["lower_corner"],
                        case["upper_corner"], case["channels_per_pixel"], case["pixels_per_column"],
                        case["element_strides"], **common)
