"""Tensor maps built on the device (tensormap.replace): the CPU model against driver encodes, and the hardware.

CPU: ``apply_tensormap_replace`` rebuilds every recorded driver encode of tests/data/tensormap_layout.jsonl from
128 zero bytes, and turns one recorded map into another with only the steps that differ.
GPU: >= 1,000 random edits per run (half over the full parameter ranges: dims up to 2^32, strides up to 2^40,
every type, swizzle, interleave and element stride; half over a real buffer with a box loaded through the built
map): the bytes the GPU wrote equal the model and a driver encode of the target, and every box equals
``tma_load_image`` of the target. TMAKIT_REPLACE_REPORT=path writes every case (parameters, steps, the three
descriptors) as JSON lines.
"""
from __future__ import annotations

import json
import os
import random
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from tmakit import (DataType, InvalidArgumentError, Interleave, OOBFill, ReplaceStep, Swizzle,
                    apply_tensormap_replace, check_tiled, tensormap_replace_steps)
from tmakit.tensormap.device_edit import DERIVED_BITS, PTX_ELEMTYPE, same_fields

DATA = Path(__file__).parent / "data" / "tensormap_layout.jsonl"
N_EDITS = int(os.environ.get("TMAKIT_REPLACE_EDITS", "1200"))


def _recorded_maps() -> list[tuple[SimpleNamespace, bytes]]:
    out = []
    for line in DATA.read_text().splitlines():
        r = json.loads(line)
        if r.get("header") or r.get("kind", "tiled") != "tiled":
            continue
        tm = SimpleNamespace(mode="tiled", dtype=DataType(r["dtype"]), address=r["address"], rank=len(r["dims"]),
                             dims=r["dims"], strides=r["strides"], box=r["box"], element_strides=r["element_strides"],
                             interleave=Interleave(r["interleave"]), swizzle=Swizzle(r["swizzle"]),
                             oob_fill=OOBFill(r["oob_fill"]), l2_promotion=r["l2_promotion"])
        out.append((tm, bytes.fromhex(r["descriptor"])))
    return out


def test_model_rebuilds_every_recorded_driver_encode_from_zeros():
    maps = [(tm, d) for tm, d in _recorded_maps() if tm.l2_promotion == 0]  # L2 promotion is not replaceable
    assert len(maps) > 500
    derived = sum(1 << b for b in DERIVED_BITS)
    models = [(apply_tensormap_replace(None, tensormap_replace_steps(tm)), d) for tm, d in maps]
    assert [d for m, d in models if not same_fields(m, d)] == []
    # no replace writes the driver's derived fields (they stay 0 from zeros); the driver's are never all 0
    assert all(int.from_bytes(m, "little") & derived == 0 for m, _ in models)
    assert all(int.from_bytes(d, "little") & derived for _, d in models)
    assert {tm.swizzle for tm, _ in maps} == set(Swizzle) - {s for s in Swizzle if s.value > 3}
    assert {tm.interleave for tm, _ in maps} == set(Interleave)


def test_model_turns_one_recorded_map_into_another_with_the_differing_steps():
    rng = random.Random(3)
    maps = _recorded_maps()
    by_l2: dict[int, list] = {}
    for tm, d in maps:
        by_l2.setdefault(tm.l2_promotion, []).append((tm, d))
    pairs = 0
    for group in by_l2.values():
        for _ in range(200):
            (a, da), (b, db) = rng.sample(group, 2)
            tf32 = (DataType.TFLOAT32, DataType.TFLOAT32_FTZ)
            if a.dtype in tf32 and b.dtype not in tf32:
                with pytest.raises(InvalidArgumentError) as err:
                    tensormap_replace_steps(b, since=a)
                assert err.value.parameter == "since" and "tf32" in err.value.rule
                continue
            steps = tensormap_replace_steps(b, since=a)
            assert same_fields(apply_tensormap_replace(da, steps), db)
            assert len(steps) <= 25  # 2 + 4 fields x 5 dimensions (4 strides) + 4 enumerations
            pairs += 1
    assert pairs >= 600
    same = maps[0][0]
    assert tensormap_replace_steps(same, since=same) == ()


def test_steps_are_ptx_values_and_bad_steps_are_refused():
    tm = SimpleNamespace(mode="tiled", dtype=DataType.BFLOAT16, address=0x7F0000001000, rank=2, dims=(4096, 1000),
                         strides=(8192,), box=(64, 128), element_strides=(1, 1), interleave=Interleave.NONE,
                         swizzle=Swizzle.B128, oob_fill=OOBFill.NONE, l2_promotion=0)
    steps = {(s.field, s.ord): s.value for s in tensormap_replace_steps(tm)}
    assert steps[("rank", 0)] == 1 and steps[("elemtype", 0)] == 10 and steps[("swizzle_mode", 0)] == 3
    assert steps[("global_dim", 1)] == 1000 and steps[("global_stride", 0)] == 8192 and steps[("box_dim", 0)] == 64
    assert ReplaceStep("box_dim", 64, 1).ptx == "tensormap.replace.tile.box_dim.shared::cta.b1024.b32 [map], 1, 0x40;"
    for kwargs, name in ((dict(field="stride", value=1), "field"), (dict(field="rank", value=5), "value"),
                         (dict(field="rank", value=1, ord=2), "ord"), (dict(field="box_dim", value=1, ord=5), "ord"),
                         (dict(field="swizzle_mode", value=4), "value"), (dict(field="box_dim", value=-1), "value"),
                         (dict(field="box_dim", value=0), "value"), (dict(field="box_dim", value=300), "value"),
                         (dict(field="element_stride", value=9), "value"), (dict(field="global_dim", value=0), "value"),
                         (dict(field="global_stride", value=8), "value"),
                         (dict(field="global_stride", value=1 << 40), "value"),
                         (dict(field="global_stride", value=16, ord=4), "ord")):
        with pytest.raises(InvalidArgumentError) as err:
            ReplaceStep(**kwargs)
        assert err.value.parameter == name
    with pytest.raises(InvalidArgumentError):
        apply_tensormap_replace(bytes(64), [])
    with pytest.raises(InvalidArgumentError):
        apply_tensormap_replace(None, [("rank", 1)])
    other = SimpleNamespace(**{**vars(tm), "l2_promotion": 2})
    with pytest.raises(InvalidArgumentError) as err:
        tensormap_replace_steps(tm, since=other)
    assert err.value.parameter == "since"
    with pytest.raises(InvalidArgumentError) as err:
        tensormap_replace_steps(SimpleNamespace(**{**vars(tm), "mode": "im2col"}))
    assert err.value.parameter == "target"


def test_edit_tensormaps_refuses_bad_edits_before_the_gpu():
    from tmakit import encode_tiled
    from tmakit.ops import TensorMapEdit, edit_tensormaps

    unencoded = encode_tiled("float32", 1 << 20, (64, 64), (256,), (32, 8), encode=False)
    for edits, name in (([], "edits"), ([object()], "edits[0]"), ([TensorMapEdit(unencoded)], "edits[0].target")):
        with pytest.raises(InvalidArgumentError) as err:
            edit_tensormaps(edits)
        assert err.value.parameter == name


RECORD = Path(__file__).parent / "data" / "tensormap_replace_h100.jsonl"


def test_model_equals_what_the_h100_wrote():
    """Replays the hardware's own record (the GPU test below with TMAKIT_REPLACE_SEED=1 TMAKIT_REPLACE_REPORT=...):
    the model gives the bytes the GPU wrote for every edit, the sticky tf32 bit and the stale derived fields
    included."""
    rows = [json.loads(line) for line in RECORD.read_text().splitlines()]
    header, rows = rows[0], rows[1:]
    assert header["header"] and len(rows) >= 1000
    stale = 0
    for r in rows:
        steps = [ReplaceStep(f, v, o) for f, o, v in r["steps"]]
        base = None if r["base"] is None else bytes.fromhex(r["base"])
        assert apply_tensormap_replace(base, steps).hex() == r["device"]
        assert same_fields(bytes.fromhex(r["device"]), bytes.fromhex(r["driver"]))
        stale += r["device"] != r["driver"]
    assert stale > 100  # the derived fields: a replace never writes them


# ---- the GPU ---------------------------------------------------------------------------------------------------

TYPES = list(PTX_ELEMTYPE)


def _log_int(rng: random.Random, lo: int, hi: int) -> int:
    import math
    return max(lo, min(hi, int(math.exp(rng.uniform(math.log(lo), math.log(hi))))))


def _wide_params(rng: random.Random) -> dict:
    """A valid map over the whole of each range (no memory behind it: nothing is loaded through it)."""
    while True:
        dtype = rng.choice(TYPES)
        rank = rng.randint(1, 5)
        interleave = Interleave.NONE if rank < 3 or rng.random() < 0.8 else rng.choice([Interleave.B16, Interleave.B32])
        swizzle = rng.choice([Swizzle.NONE, Swizzle.B32, Swizzle.B64, Swizzle.B128])
        if interleave is Interleave.B32:
            swizzle = Swizzle.B32
        span = swizzle.span or 256 * dtype.size
        inner_max = max(1, min(256, span // dtype.size)) if interleave is Interleave.NONE else max(1, 256)
        box = [rng.randint(1, inner_max)] + [rng.randint(1, 256) for _ in range(rank - 1)]
        es = [rng.randint(1, 8) for _ in range(rank)]
        dims = [_log_int(rng, 1, (1 << 32) - 1) for _ in range(rank)]
        strides = [16 * _log_int(rng, 1, (1 << 36) - 1) for _ in range(rank - 1)]
        align = 32 if interleave is Interleave.B32 else 16
        address = align * rng.randrange(1, 1 << 44)
        oob = OOBFill.NAN_REQUEST_ZERO_FMA if dtype.is_float and rng.random() < 0.4 else OOBFill.NONE
        p = dict(dtype=dtype, address=address, dims=dims, strides=strides, box=box, es=es, interleave=interleave,
                 swizzle=swizzle, oob=oob)
        if not check_tiled(dtype, address, dims, strides, box, es, interleave=interleave, swizzle=swizzle, oob_fill=oob):
            return p


def _mutate(rng: random.Random, p: dict) -> dict:
    """``p`` with one to three fields changed, still valid."""
    for _ in range(200):
        q = {k: (list(v) if isinstance(v, list) else v) for k, v in p.items()}
        for _ in range(rng.randint(1, 3)):
            what = rng.choice(["address", "dims", "strides", "box", "es", "swizzle", "oob", "dtype"])
            if what == "address":
                q["address"] = 32 * rng.randrange(1, 1 << 43)
            elif what in ("dims", "box", "es") or (what == "strides" and q["strides"]):
                i = rng.randrange(len(q[what]))
                q[what][i] = {"dims": lambda: _log_int(rng, 1, (1 << 32) - 1), "box": lambda: rng.randint(1, 256),
                              "es": lambda: rng.randint(1, 8),
                              "strides": lambda: 16 * _log_int(rng, 1, (1 << 36) - 1)}[what]()
            elif what == "swizzle":
                q["swizzle"] = rng.choice([Swizzle.NONE, Swizzle.B32, Swizzle.B64, Swizzle.B128])
            elif what == "oob":
                q["oob"] = OOBFill(1 - int(q["oob"])) if q["dtype"].is_float else q["oob"]
            elif what == "dtype":
                q["dtype"] = rng.choice([t for t in TYPES if t.size == p["dtype"].size])
        if not check_tiled(q["dtype"], q["address"], q["dims"], q["strides"], q["box"], q["es"],
                           interleave=q["interleave"], swizzle=q["swizzle"], oob_fill=q["oob"]):
            return q
    return p


def _no_tf32_trap(base: dict | None, target: dict) -> dict | None:
    """No tf32 template for a target of another type: no replace can clear the rounding bit (refused)."""
    tf32 = (DataType.TFLOAT32, DataType.TFLOAT32_FTZ)
    return None if base is not None and base["dtype"] in tf32 and target["dtype"] not in tf32 else base


def _encode(p: dict, owner=None):
    from tmakit import encode_tiled
    return encode_tiled(p["dtype"], p["address"], p["dims"], p["strides"], p["box"], p["es"],
                        interleave=p["interleave"], swizzle=p["swizzle"], oob_fill=p["oob"], device=0, owner=owner)


@pytest.mark.requires_sm90
def test_device_built_maps_equal_driver_encodes_and_load_like_the_model():
    from test_tma_hardware import BUFFER_BYTES, random_case

    from tmakit import DeviceArray, tma_load_image
    from tmakit.ops import TensorMapEdit, edit_tensormaps
    from tmakit.ops.load_tiles import POISON

    seed = int(os.environ.get("TMAKIT_REPLACE_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    host = np.random.default_rng(seed).integers(0, 256, BUFFER_BYTES, dtype=np.uint8)
    report = os.environ.get("TMAKIT_REPLACE_REPORT")
    rows, kinds = [], {"zero": 0, "partial": 0, "other": 0, "loads": 0}
    with DeviceArray.from_host(host) as buf:
        edits, params = [], []
        for n in range(N_EDITS):
            if n % 2 == 0:  # the full ranges, no load
                target = _wide_params(rng)
                how = rng.choice(["zero", "partial", "other"])
                base = None if how == "zero" else (_mutate(rng, target) if how == "partial" else _wide_params(rng))
                base = _no_tf32_trap(base, target)
                kinds[how] += 1
                edits.append(TensorMapEdit(_encode(target), base=None if base is None else _encode(base)))
                params.append((target, base, None))
            else:  # a real buffer: load a box through the built map
                case = random_case(rng)
                case["oob"] = OOBFill(case["oob"])
                target = dict(dtype=case["dtype"], address=buf.ptr + case["offset"], dims=case["dims"],
                              strides=case["strides"], box=case["box"], es=case["es"],
                              interleave=case["interleave"], swizzle=case["swizzle"], oob=case["oob"])
                base = _no_tf32_trap(None if rng.random() < 0.3 else _mutate(rng, target), target)
                coords = case["coords"][rng.randrange(len(case["coords"]))]
                edits.append(TensorMapEdit(_encode(target, buf), base=None if base is None else _encode(base),
                                           coords=list(reversed(coords))))
                params.append((target, base, (coords, case["offset"])))
                kinds["loads"] += 1
        # First every map without a load, then the boxes through those the GPU built right: a wrong map could
        # fault the TMA and take the context (and the report) with it.
        built = edit_tensormaps([TensorMapEdit(e.target, base=e.base) for e in edits])
        right = [same_fields(r.descriptor, e.target.descriptor) for e, r in zip(edits, built)]
        loaded = iter(edit_tensormaps([e for e, ok in zip(edits, right) if ok and e.coords is not None] or
                                      [TensorMapEdit(edits[0].target, base=edits[0].base)]))
    failures = []
    for e, r, ok, (target, base, load) in zip(edits, built, right, params):
        ok_model = r.descriptor == r.model
        ok_image = None
        if load is not None and ok:
            coords, offset = load
            want = tma_load_image(e.target, host[offset:], coords, poison=POISON)
            ok_image = bool(np.array_equal(next(loaded).image, want))
        row = {"driver_fields": ok, "model": ok_model, "image": ok_image,
               "base": None if e.base is None else e.base.descriptor.hex(),
               "steps": [(s.field, s.ord, s.value) for s in r.steps], "device": r.descriptor.hex(),
               "driver": e.target.descriptor.hex()}
        rows.append(row)
        if not (ok and ok_model and ok_image is not False) and len(failures) < 8:
            failures.append(row)
    if report:
        with open(report, "w") as fh:
            fh.write(json.dumps({"header": True, "seed": seed, **kinds}) + "\n")
            fh.writelines(json.dumps(r) + "\n" for r in rows)
    assert len(rows) >= min(N_EDITS, 1000)
    assert all(v > 0 for v in kinds.values())
    assert sum(r["image"] is True for r in rows) == kinds["loads"]
    # the fields past the driver's: only its derived ones differ, and only where the template's differ
    assert any(r["device"] != r["driver"] for r in rows)
    assert failures == [], f"TMAKIT_REPLACE_SEED={seed}: " + json.dumps(failures)[:3000]
