"""Model-vs-hardware counts for every TMA mode: random descriptors, fresh random data, poisoned images.

For each mode, N random valid descriptors (and 1-3 boxes each) run on the GPU and every byte is compared with
the CPU model in ``tmakit.layout``:

  tiled       load_tiles (TMA)                 vs tma_load_image
  interleave  load_tiles, 16B/32B interleave   vs tma_load_image
  im2col      ops.modes.load_im2col            vs im2col_load_image
  store       ops.modes.store_tiles (TMA)      vs tma_store (whole tensor compared, untouched bytes included)
  multicast   ops.modes.multicast_load, 2 and 4 CTAs, random masks: every CTA in the mask vs tma_load_image,
              every CTA outside it still poisoned
  reduce      ops.modes.reduce_add_tiles, u32/s32/u64/f32/f16/bf16 vs tma_reduce_add (exact; floats also
              counted within 1 ulp of a float64 reference)
  prefetch    ops.modes.prefetch_load          vs tma_load_image
  store_twin, prefetch_twin: the same on the one-source cp.async twin (backend "cp.async"; not in the default
              --modes, which are the TMA modes)

Each mode runs in its own process (a fault in one cannot poison the others' context). Writes
benchmarks/results/tma_modes_vs_model.json (device, date, commit, seed, counts, first failures);
--dump DIR also writes every mode's failures with the hardware and model bytes.

    python benchmarks/tma_modes_vs_model.py --descriptors 1000 [--modes im2col,store] [--seed 1] [--dump DIR]
    python benchmarks/tma_modes_vs_model.py --replay DIR   # recheck the model against a recorded run, no GPU
"""
from __future__ import annotations

import argparse
import collections
import hashlib
import importlib.util
import json
import math
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))

from tmakit import DataType, Swizzle, check_im2col, check_tiled  # noqa: E402

MODES = ("tiled", "interleave", "im2col", "store", "multicast", "reduce", "prefetch")
# The one-source cp.async twin on the same GPU, for the modes it expresses (not in the results file's default run).
TWIN_MODES = ("store_twin", "prefetch_twin")
BUFFER_BYTES = 32 << 20
TYPES = [DataType.UINT8, DataType.UINT16, DataType.FLOAT16, DataType.BFLOAT16, DataType.UINT32, DataType.INT32,
         DataType.FLOAT32, DataType.UINT64, DataType.FLOAT64, DataType.INT64, DataType.TFLOAT32,
         DataType.FLOAT32_FTZ]
STORE_TYPES = [t for t in TYPES if t is not DataType.TFLOAT32]  # a store of tf32 is not modelled (no rounding claim)
REDUCE_TYPES = [DataType.UINT32, DataType.INT32, DataType.UINT64, DataType.FLOAT32, DataType.FLOAT16,
                DataType.BFLOAT16]
MAX_FAILURES = 12


def _hw_cases():
    """The tiled and interleaved generators of tests/test_tma_hardware.py (one definition of a random box)."""
    spec = importlib.util.spec_from_file_location("_tma_hw_cases", ROOT / "tests" / "test_tma_hardware.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _strides(rng: random.Random, dims, size: int, unit: int = 16) -> tuple[list[int], int]:
    strides, acc = [], dims[0] * size
    for d in dims[1:]:
        acc = -(-acc // unit) * unit + unit * rng.choice([0, 0, 1, 3])
        strides.append(acc)
        acc *= d
    return strides, (acc if len(dims) > 1 else dims[0] * size)


def random_tiled(rng: random.Random, types=TYPES, *, max_extent: int = 4 << 20, store: bool = False) -> dict:
    """A random valid tiled map (driver order). ``store``: starts are >= 0 (a store may not start before the
    tensor) and element strides are 1 in dim 0 like every tiled box."""
    while True:
        dtype = rng.choice(types)
        size = dtype.size
        rank = rng.randint(1, 5)
        swizzle = rng.choice([Swizzle.NONE, Swizzle.B32, Swizzle.B64, Swizzle.B128])
        span = swizzle.span or 256 * size
        inner = 16 * rng.randint(1, max(1, min(span, 256 * size, 512) // 16))
        box = [max(1, inner // size)] + [rng.choice([1, 2, 3, 4, 5, 8]) for _ in range(rank - 1)]
        es = [1] + [rng.choice([1, 1, 1, 2, 3]) for _ in range(rank - 1)]
        dims = [rng.randint(1, box[0] * 3)] + [rng.randint(1, 3 * b * e) for b, e in zip(box[1:], es[1:])]
        strides, extent = _strides(rng, dims, size)
        oob = 1 if (dtype.is_float and not store and rng.random() < 0.4) else 0
        image = max(box[0] * size, swizzle.span) * math.prod(-(-b // e) for b, e in zip(box[1:], es[1:]))
        if image > 100 << 10 or extent > max_extent or check_tiled(dtype, 1 << 40, dims, strides, box, es,
                                                                     swizzle=swizzle, oob_fill=oob):
            continue
        unit = max(1, 16 // size)
        coords = []
        for _ in range(3):
            c = []
            for i, (d, b, e) in enumerate(zip(dims, box, es)):
                reach = b * e
                if store:
                    v = rng.randint(0, d + 2) if rng.random() < 0.5 else rng.randint(0, max(0, d - reach))
                else:
                    v = rng.randint(-reach, d) if rng.random() < 0.6 else rng.randint(0, max(0, d - reach))
                c.append((v // unit) * unit if i == 0 else v)
            if store and c[0] >= dims[0]:
                c[0] = 0
            coords.append(c)
        return dict(dtype=dtype, dims=dims, strides=strides, box=box, es=es, swizzle=swizzle, oob=oob,
                    extent=extent, coords=coords)


def random_im2col(rng: random.Random) -> dict:
    """A random valid im2col map (driver order: C, W[, H[, D]], N) and three (coords, offsets) pairs."""
    while True:
        dtype = rng.choice(TYPES)
        size = dtype.size
        rank = rng.randint(3, 5)
        spatial = rank - 2
        swizzle = rng.choice([Swizzle.NONE, Swizzle.B32, Swizzle.B64, Swizzle.B128])
        unit = max(1, 16 // size)
        limit_bytes = min(swizzle.span or 256 * size, 256 * size)
        cpp = unit * rng.randint(1, max(1, limit_bytes // (unit * size)))
        channels = rng.randint(1, 2 * cpp)
        spatial_dims = [rng.randint(1, 40 if spatial == 1 else 12) for _ in range(spatial)]
        n_images = rng.randint(1, 4)
        dims = [channels] + spatial_dims + [n_images]
        lo_lim = {3: 8, 4: 4, 5: 3}[rank]
        lower = [rng.randint(-lo_lim, 2) for _ in range(spatial)]
        upper = [rng.randint(-lo_lim, 2) for _ in range(spatial)]
        es = [1] + [rng.choice([1, 1, 2, 3]) for _ in range(spatial)] + [1]
        if rng.random() < 0.15:
            es[0] = rng.randint(1, 3)
        if rng.random() < 0.15:
            es[-1] = rng.randint(1, 3)
        ppc = rng.randint(1, 48)
        strides, extent = _strides(rng, dims, size)
        oob = 1 if (dtype.is_float and rng.random() < 0.4) else 0
        pitch = max(cpp * size, swizzle.span) if swizzle is not Swizzle.NONE else cpp * size
        if extent > 4 << 20 or ppc * pitch > 100 << 10:
            continue
        if any(d + u - l < 1 for d, u, l in zip(spatial_dims, upper, lower)):
            continue
        if check_im2col(dtype, 1 << 40, dims, strides, lower, upper, cpp, ppc, es, swizzle=swizzle, oob_fill=oob):
            continue
        off_limit = {3: 1 << 16, 4: 1 << 8, 5: 1 << 5}[rank]
        boxes = []
        for _ in range(3):
            c = (rng.randint(-cpp, channels) // unit) * unit
            pos = []
            for s in range(spatial):
                count = (spatial_dims[s] - 1 + upper[s] - lower[s]) // es[s + 1] + 1
                pos.append(lower[s] + es[s + 1] * rng.randrange(count))
            n = rng.randint(0, n_images) if rng.random() < 0.2 else rng.randint(0, n_images - 1)
            offsets = [rng.randrange(min(off_limit, 4)) for _ in range(spatial)]
            boxes.append(([c] + pos + [n], offsets))
        return dict(dtype=dtype, dims=dims, strides=strides, lower=lower, upper=upper, cpp=cpp, ppc=ppc, es=es,
                    swizzle=swizzle, oob=oob, extent=extent, boxes=boxes)


def _jsonable(case: dict) -> dict:
    out = {}
    for k, v in case.items():
        if isinstance(v, (DataType, Swizzle)) or hasattr(v, "short"):
            out[k] = getattr(v, "short", str(v))
        elif isinstance(v, (list, tuple, int, float, str)) or v is None:
            out[k] = v
        else:
            out[k] = str(v)
    return out


def digest(image: np.ndarray) -> str:
    return hashlib.sha1(np.ascontiguousarray(image).view(np.uint8).tobytes()).hexdigest()[:20]


class Tally:
    """Counts, first failures, and a digest of every hardware image. ``replay`` (the digests of an earlier
    hardware run) makes a run compare the model with those digests instead of the GPU: the CPU model can be
    rechecked against every image the hardware wrote, without a GPU (``--replay``)."""

    def __init__(self, mode: str, seed: int, replay: list[str] | None = None):
        self.mode, self.seed = mode, seed
        self.stats = collections.Counter()
        self.failures: list[dict] = []
        self.digests: list[str] = []
        self.model_digests: list[str] = []  # replay only: what the model wrote, in the same order
        self.replay = list(replay) if replay is not None else None

    @property
    def live(self) -> bool:
        return self.replay is None

    def compare(self, n: int, case: dict, hardware: np.ndarray | None, model: np.ndarray, **extra) -> None:
        """Compare one hardware image (live) or the next recorded digest (replay) with the model's image."""
        if self.live:
            self.digests.append(digest(hardware))
            self.record(n, case, np.array_equal(hardware, model), hardware, model, **extra)
        else:
            recorded = self.replay[len(self.digests)]
            self.digests.append(recorded)
            self.model_digests.append(digest(model))
            self.record(n, case, self.model_digests[-1].startswith(recorded), None, model, **extra)

    def record(self, n: int, case: dict, ok: bool, hardware: np.ndarray | None = None, model: np.ndarray | None = None,
               **extra) -> None:
        self.stats["compared"] += 1
        self.stats["equal"] += bool(ok)
        if not ok and len(self.failures) < MAX_FAILURES:
            f = {"case": n, "spec": _jsonable(case), **extra}
            if hardware is not None and model is not None:
                diff = np.flatnonzero(hardware != model)
                f.update(differing_bytes=int(diff.size), first_diff=int(diff[0]) if diff.size else None,
                         hardware=hardware[:1 << 17].tobytes().hex(), model=model[:1 << 17].tobytes().hex())
            self.failures.append(f)

    def result(self) -> dict:
        return {"mode": self.mode, "seed": self.seed, "stats": dict(self.stats), "failures": self.failures,
                "digests": self.digests}


class _NoBuffer:
    """Stands in for the device buffer in a replay (no GPU): a fixed, well-aligned fake address."""
    ptr = 1 << 40

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _buffer(tally: Tally, host: np.ndarray):
    from tmakit import DeviceArray

    return DeviceArray.from_host(host) if tally.live else _NoBuffer()


def _encode_tiled(tally: Tally, *args, **kwargs):
    from tmakit import encode_tiled

    if not tally.live:
        kwargs.update(device=None, owner=None, arch="sm_90")
    return encode_tiled(*args, **kwargs)


def run_tiled(tally: Tally, n_desc: int, interleave: bool) -> None:
    from tmakit.layout import tma_load_image
    from tmakit.ops.load_tiles import POISON

    hw = _hw_cases()
    rng = random.Random(tally.seed)
    host = np.random.default_rng(tally.seed).integers(0, 256, BUFFER_BYTES, dtype=np.uint8)
    with _buffer(tally, host) as buf:
        for n in range(n_desc):
            case = hw.random_interleaved_case(rng) if interleave else hw.random_case(rng)
            tm = _encode_tiled(tally, case["dtype"], buf.ptr + case["offset"], case["dims"], case["strides"],
                               case["box"], case["es"], swizzle=case["swizzle"], oob_fill=case["oob"],
                               interleave=case["interleave"], device=0, owner=buf)
            images = None
            if tally.live:
                from tmakit.ops import load_tiles

                images = load_tiles(tm, [list(reversed(c)) for c in case["coords"]], backend="tma").images
            for i, c in enumerate(case["coords"]):
                model = tma_load_image(tm, host[case["offset"]:], c, poison=POISON)
                tally.compare(n, case, None if images is None else images[i], model, coords=c)
            tally.stats["descriptors"] += 1
            tally.stats[f"interleave_{case['interleave'].short}"] += 1
            tally.stats[f"swizzle_{case['swizzle'].short}"] += 1


def run_im2col(tally: Tally, n_desc: int) -> None:
    from tmakit.layout.im2col import im2col_load_image
    from tmakit import encode_im2col
    from tmakit.ops.modes import POISON, load_im2col

    rng = random.Random(tally.seed)
    host = np.random.default_rng(tally.seed).integers(0, 256, BUFFER_BYTES, dtype=np.uint8)
    with _buffer(tally, host) as buf:
        for n in range(n_desc):
            case = random_im2col(rng)
            offset = 256 * rng.randrange((BUFFER_BYTES - case["extent"]) // 256)
            case["offset"] = offset
            tm = encode_im2col(case["dtype"], buf.ptr + offset, case["dims"], case["strides"], case["lower"],
                               case["upper"], case["cpp"], case["ppc"], case["es"], swizzle=case["swizzle"],
                               oob_fill=case["oob"], device=0, owner=buf if tally.live else None)
            coords = [b[0] for b in case["boxes"]]
            offsets = [b[1] for b in case["boxes"]]
            images = load_im2col(tm, coords, offsets) if tally.live else None
            for i in range(len(coords)):
                model = im2col_load_image(tm, host[offset:], coords[i], offsets[i], poison=POISON)
                tally.compare(n, case, None if images is None else images[i], model, coords=coords[i],
                              offsets=offsets[i])
            tally.stats["descriptors"] += 1
            tally.stats[f"rank{len(case['dims'])}"] += 1
            tally.stats[f"swizzle_{case['swizzle'].short}"] += 1
            tally.stats[f"oob_{'nan' if case['oob'] else 'zero'}"] += 1
            tally.stats["element_strides>1"] += any(e > 1 for e in case["es"][1:-1])
            tally.stats["corners_nonzero"] += any(case["lower"]) or any(case["upper"])


def _typed_random(nprng: np.random.Generator, dtype: DataType, nbytes: int) -> np.ndarray:
    """``nbytes`` of random elements: any bits for integers, finite normal values for floats (uint8 view)."""
    count = nbytes // dtype.size
    if dtype in (DataType.FLOAT32, DataType.FLOAT16):
        t = np.float32 if dtype is DataType.FLOAT32 else np.float16
        return (nprng.standard_normal(count) * 8).astype(t).view(np.uint8)
    if dtype is DataType.BFLOAT16:
        bits = (nprng.standard_normal(count) * 8).astype(np.float32).view(np.uint32) >> 16
        return bits.astype(np.uint16).view(np.uint8)
    return nprng.integers(0, 256, nbytes, dtype=np.uint8)


def _within_one_ulp(dtype: DataType, got: np.ndarray, want: np.ndarray) -> bool:
    if dtype is DataType.BFLOAT16:
        widen = lambda b: (b.view(np.uint16).astype(np.uint32) << 16).view(np.float32)  # noqa: E731
        g, w = widen(got), widen(want)
        ulp = np.spacing(np.abs(w)).astype(np.float64) * 65536
    else:
        t = np.float32 if dtype is DataType.FLOAT32 else np.float16
        g, w = got.view(t), want.view(t)
        ulp = np.spacing(np.abs(w)).astype(np.float64)
    return bool(np.all(np.abs(g.astype(np.float64) - w.astype(np.float64)) <= ulp))


def run_store(tally: Tally, n_desc: int, reduce: bool, backend: str = "tma") -> None:
    from tmakit.layout import box_geometry, tma_store
    from tmakit.layout.tma_reduce import tma_reduce_add
    from tmakit.ops.modes import reduce_add_tiles, store_tiles

    rng = random.Random(tally.seed)
    nprng = np.random.default_rng(tally.seed)
    for n in range(n_desc):
        case = random_tiled(rng, REDUCE_TYPES if reduce else STORE_TYPES, max_extent=1 << 20, store=True)
        dtype = case["dtype"]
        extent = -(-case["extent"] // 16) * 16
        before = _typed_random(nprng, dtype, extent) if reduce else nprng.integers(0, 256, extent, dtype=np.uint8)
        coords = case["coords"][0]
        with _buffer(tally, before) as buf:
            tm = _encode_tiled(tally, dtype, buf.ptr, case["dims"], case["strides"], case["box"], case["es"],
                               swizzle=case["swizzle"], device=0, owner=buf)
            geo = box_geometry(tm)
            image = _typed_random(nprng, dtype, geo.smem_bytes) if reduce else \
                nprng.integers(0, 256, geo.smem_bytes, dtype=np.uint8)
            after = None
            if tally.live:
                if reduce:
                    reduce_add_tiles(tm, [coords], image[None, :])
                else:
                    store_tiles(tm, [coords], image[None, :], backend=backend)
                after = buf.to_host()
        expect = before.copy()
        (tma_reduce_add if reduce else tma_store)(tm, expect, coords, image)
        if reduce and after is not None and dtype.is_float and not np.array_equal(after, expect):
            tally.stats["float_mismatch_within_1ulp"] += _within_one_ulp(dtype, after, expect)
        tally.compare(n, case, after, expect, coords=coords)
        tally.stats["descriptors"] += 1
        tally.stats[f"dtype_{dtype.short}"] += 1
        tally.stats[f"swizzle_{case['swizzle'].short}"] += 1
        tally.stats["partial_box"] += any(c + b * e > d for c, b, e, d in zip(coords, case["box"], case["es"], case["dims"]))
        tally.stats["element_strides>1"] += any(e > 1 for e in case["es"])


def run_multicast(tally: Tally, n_desc: int) -> None:
    from tmakit.layout import tma_load_image
    from tmakit.ops.modes import POISON, multicast_load

    rng = random.Random(tally.seed)
    host = np.random.default_rng(tally.seed).integers(0, 256, BUFFER_BYTES, dtype=np.uint8)
    with _buffer(tally, host) as buf:
        for n in range(n_desc):
            case = random_tiled(rng)
            offset = 256 * rng.randrange((BUFFER_BYTES - case["extent"]) // 256)
            case["offset"] = offset
            tm = _encode_tiled(tally, case["dtype"], buf.ptr + offset, case["dims"], case["strides"], case["box"],
                               case["es"], swizzle=case["swizzle"], oob_fill=case["oob"], device=0, owner=buf)
            k = rng.choice([2, 4])
            masks = [rng.randrange(1, 1 << k) if rng.random() < 0.6 else (1 << k) - 1 for _ in case["coords"]]
            images = multicast_load(tm, case["coords"], masks, cluster_size=k) if tally.live else None
            for i, c in enumerate(case["coords"]):
                model = tma_load_image(tm, host[offset:], c, poison=POISON)
                for r in range(k):
                    want = model if (masks[i] >> r) & 1 else np.full_like(model, POISON)
                    tally.compare(n, case, None if images is None else images[i, r], want, coords=c, mask=masks[i],
                                  cta=r, cluster=k)
                    tally.stats["cta_images_received"] += (masks[i] >> r) & 1
            tally.stats["descriptors"] += 1
            tally.stats[f"cluster_{k}"] += 1


def run_prefetch(tally: Tally, n_desc: int, backend: str = "tma") -> None:
    from tmakit.layout import tma_load_image
    from tmakit.ops.modes import POISON, prefetch_load

    rng = random.Random(tally.seed)
    host = np.random.default_rng(tally.seed).integers(0, 256, BUFFER_BYTES, dtype=np.uint8)
    with _buffer(tally, host) as buf:
        for n in range(n_desc):
            case = random_tiled(rng, TYPES if backend == "tma" else STORE_TYPES)  # the twin copies tf32 bits
            offset = 256 * rng.randrange((BUFFER_BYTES - case["extent"]) // 256)
            case["offset"] = offset
            tm = _encode_tiled(tally, case["dtype"], buf.ptr + offset, case["dims"], case["strides"], case["box"],
                               case["es"], swizzle=case["swizzle"], oob_fill=case["oob"], device=0, owner=buf)
            images = prefetch_load(tm, case["coords"], backend=backend) if tally.live else None
            for i, c in enumerate(case["coords"]):
                model = tma_load_image(tm, host[offset:], c, poison=POISON)
                tally.compare(n, case, None if images is None else images[i], model, coords=c)
            tally.stats["descriptors"] += 1


def run_mode(mode: str, n_desc: int, seed: int, replay: list[str] | None = None) -> dict:
    """One mode's counts; ``replay``: the digests of an earlier hardware run of the same mode, count and seed."""
    t0 = time.perf_counter()
    tally = Tally(mode, seed, replay)
    if mode in ("tiled", "interleave"):
        run_tiled(tally, n_desc, mode == "interleave")
    elif mode == "im2col":
        run_im2col(tally, n_desc)
    elif mode in ("store", "reduce"):
        run_store(tally, n_desc, mode == "reduce")
    elif mode == "store_twin":
        run_store(tally, n_desc, False, "cp.async")
    elif mode == "multicast":
        run_multicast(tally, n_desc)
    elif mode in ("prefetch", "prefetch_twin"):
        run_prefetch(tally, n_desc, "tma" if mode == "prefetch" else "cp.async")
    else:
        raise SystemExit(f"unknown mode {mode!r}; choose from {', '.join(MODES + TWIN_MODES)}")
    out = tally.result()
    if replay is not None:
        out["model_digests"] = tally.model_digests
    out["seconds"] = round(time.perf_counter() - t0, 2)
    out["source"] = "hardware" if replay is None else "replay of recorded hardware digests"
    return out


def _child(mode: str, n_desc: int, seed: int, timeout: float) -> dict:
    """Run one mode in a fresh process; a fault or a hang there is reported, not inherited."""
    cmd = [sys.executable, __file__, "--child", mode, "--descriptors", str(n_desc), "--seed", str(seed)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"mode": mode, "seed": seed, "error": f"timed out after {timeout} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"mode": mode, "seed": seed, "error": (proc.stderr or proc.stdout)[-3000:]}
    return json.loads(lines[-1])


def load_recorded(path: str) -> dict:
    """The recorded run: a --dump folder (one JSON per mode) or one --save-digests file."""
    p = Path(path)
    if p.is_dir():
        return {f.stem: json.loads(f.read_text()) for f in sorted(p.glob("*.json"))}
    data = json.loads(p.read_text())
    return {m: {**r, "run": data["run"]} for m, r in data["modes"].items()}


def save_digests(recorded: dict, path: str) -> None:
    """Keep what a replay needs (seed, counts at the run, 12-digit digests) in one compact file."""
    run = next(iter(recorded.values()))["run"]
    modes = {m: {"mode": m, "seed": r["seed"], "stats": r["stats"], "digests": [d[:12] for d in r["digests"]]}
             for m, r in recorded.items() if "digests" in r}
    Path(path).write_text(json.dumps({"run": run, "modes": modes}, separators=(",", ":")) + "\n")


def _report(results: dict, descriptors: int, meta: dict) -> dict:
    modes = {}
    for m, r in results.items():
        entry = {k: v for k, v in r.items() if k not in ("failures", "digests", "model_digests")}
        entry["failures"] = [{k: v for k, v in f.items() if k not in ("hardware", "model")}
                             for f in r.get("failures", [])[:3]]
        modes[m] = entry
    summary = {}
    for m, r in results.items():
        st = r.get("stats", {})
        line = {"descriptors": st.get("descriptors", 0), "compared": st.get("compared", 0),
                "model_equal_to_hardware": st.get("equal", 0)}
        if "hardware_run" in r:
            line["equal_at_the_run"] = r["hardware_run"]["equal"]
        if "error" in r:
            line["error"] = r["error"][-300:]
        summary[m] = line
    return {**meta, "descriptors_per_mode": descriptors, "summary": summary, "modes": modes}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--descriptors", type=int, default=1000)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--timeout", type=float, default=150.0, help="seconds per mode")
    ap.add_argument("--dump", default=None, help="folder for each mode's full result (digests, failures with bytes)")
    ap.add_argument("--replay", default=None, help="a --dump folder of a hardware run: recheck the CPU model against "
                                                   "every image it recorded (no GPU needed)")
    ap.add_argument("--save-digests", default=None, help="with --replay: write the run's digests (12 hex digits each) "
                                                       "to this one file, for tests/test_tma_modes.py")
    ap.add_argument("--output", default=str(Path(__file__).parent / "results" / "tma_modes_vs_model.json"))
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.descriptors < 1:
        ap.error("--descriptors must be >= 1")
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    if args.child:
        print(json.dumps(run_mode(args.child, args.descriptors, seed)))
        return 0
    import datetime

    from _common import commit, device_name

    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    results = {}
    if args.replay:
        recorded_modes = load_recorded(args.replay)
        meta = None
        for mode in modes:
            recorded = recorded_modes.get(mode)
            if recorded is None or "digests" not in recorded:
                results[mode] = recorded or {"mode": mode, "error": "not in the recorded run"}
                continue
            meta = meta or recorded["run"]
            res = run_mode(mode, recorded["run"]["descriptors_per_mode"], recorded["seed"], recorded["digests"])
            res.pop("model_digests", None)
            res["hardware_run"] = {"equal": recorded["stats"]["equal"], "compared": recorded["stats"]["compared"]}
            results[mode] = res
            print(f"{mode:10s} replayed {res['stats']['compared']:6d} images: model equal to hardware for "
                  f"{res['stats']['equal']:6d} (at the run: {recorded['stats']['equal']})", flush=True)
        meta = dict(meta or {})
        meta.update(model_commit=commit(), source="the hardware images' digests of the run named here, compared with "
                    "the CPU model of model_commit (benchmarks/tma_modes_vs_model.py --replay)")
        descriptors = meta.get("descriptors_per_mode", args.descriptors)
        if args.save_digests:
            save_digests(recorded_modes, args.save_digests)
    else:
        meta = {"device": device_name(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "commit": commit(), "descriptors_per_mode": args.descriptors}
        for i, mode in enumerate(modes):
            res = _child(mode, args.descriptors, seed + i, args.timeout)
            res["run"] = meta
            results[mode] = res
            if args.dump:
                Path(args.dump).mkdir(parents=True, exist_ok=True)
                Path(args.dump, f"{mode}.json").write_text(json.dumps(res))
            st = res.get("stats", {})
            print(f"{mode:10s} descriptors={st.get('descriptors', 0):5d} compared={st.get('compared', 0):6d} "
                  f"equal={st.get('equal', 0):6d} {('ERROR ' + res['error'][-600:]) if 'error' in res else ''}", flush=True)
        descriptors = args.descriptors
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(_report(results, descriptors, meta), indent=1) + "\n")
    ok = all("error" not in r and r["stats"].get("equal") == r["stats"].get("compared") for r in results.values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
