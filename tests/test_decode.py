"""``tmakit decode``: a raw CUtensorMap back to its encode parameters.

CPU: the learner recovers a bit layout from maps encoded by a stand-in encoder (an invented layout, so the
machinery is tested, not the driver) and decodes fresh maps of it exactly; every input form parses; the dump
CUTLASS printed in NVIDIA/cutlass#947 decodes and names the rule it breaks; the CLI. With the driver's record
(tests/data/tensormap_layout.jsonl, written on a GPU by benchmarks/tensormap_layout_probe.py) every recorded
map decodes back to its parameters. GPU: maps the live driver encodes decode exactly.
"""
from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from tmakit.cli import main
from tmakit.doctor.decode import decode_tensormap, packaged_layout, parse_input
from tmakit.doctor.tensormap_layout import Field, TensorMapLayout, learn, parameters_of, read_probe
from tmakit.errors import InvalidArgumentError, UnsupportedDeviceError
from tmakit.tensormap.corpus import base_im2col, base_tiled

PROBE = Path(__file__).resolve().parent / "data" / "tensormap_layout.jsonl"

# an invented layout for the stand-in encoder: (name, offset, width, encoding, signed)
_INVENTED = [("address", 0, 52, "units16", False), ("dtype", 56, 4, "value", False), ("rank", 60, 3, "minus1", False),
             ("interleave", 63, 2, "value", False), ("swizzle", 65, 3, "value", False),
             ("l2_promotion", 68, 2, "value", False), ("oob_fill", 70, 1, "value", False), ("mode", 71, 1, "value", False)]
_INVENTED += [(f"dims[{i}]", 128 + 32 * i, 32, "minus1", False) for i in range(5)]
_INVENTED += [(f"strides[{i}]", 320 + 40 * i, 36, "units16", False) for i in range(4)]
_INVENTED += [(f"box[{i}]", 512 + 8 * i, 8, "minus1", False) for i in range(5)]
_INVENTED += [(f"element_strides[{i}]", 560 + 3 * i, 3, "minus1", False) for i in range(5)]
_CORNER_BITS = {3: 16, 4: 8, 5: 5}  # the corners' width depends on the rank, as the driver's do
_INVENTED += [(f"{side}_corner[{i}]@{rank}", 600 + 96 * j + 2 * _CORNER_BITS[rank] * i + _CORNER_BITS[rank] * k,
               _CORNER_BITS[rank], "value", True)
              for j, rank in enumerate((3, 4, 5)) for i in range(rank - 2) for k, side in enumerate(("lower", "upper"))]
_INVENTED += [("channels_per_pixel", 900, 9, "minus1", False), ("pixels_per_column", 909, 11, "minus1", False)]
_ENCODE = {"value": lambda v: v, "minus1": lambda v: v - 1, "units16": lambda v: v >> 4}


def _stand_in_encode(record: dict) -> str:
    bits = 0
    for name, offset, width, encoding, _signed in _INVENTED:
        value = parameters_of(record).get(name)
        if value is None:
            continue
        bits |= (_ENCODE[encoding](value) & ((1 << width) - 1)) << offset
    return bits.to_bytes(128, "little").hex()


def _records(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        case = (base_im2col if i % 5 == 4 else base_tiled)(rng)
        case.pop("address_offset")
        case["address"] = rng.randrange(1, 1 << 48) * 16
        case["descriptor"] = _stand_in_encode(case)
        out.append(case)
    return out


def _same(decoded, record: dict, unlearned: frozenset = frozenset(), beyond: frozenset = frozenset()) -> None:
    """``unlearned``: fields the layout could not place (they decode as unknown, None); ``beyond``: fields whose
    value lies past what the layout's sample held (not compared)."""
    def known(key: str) -> list:
        return [None if f"{key}[{i}]" in unlearned | beyond else v for i, v in enumerate(record[key])]

    strides = [None if f"strides[{i}]" in beyond else v for i, v in enumerate(decoded.strides)]
    assert decoded.mode == record["kind"] and decoded.dtype == record["dtype"] and decoded.address == record["address"]
    assert decoded.dims == known("dims") and strides == known("strides")
    assert decoded.element_strides == record["element_strides"]
    assert (decoded.interleave, decoded.swizzle, decoded.l2_promotion, decoded.oob_fill) == (
        record["interleave"], record["swizzle"], record["l2_promotion"], record["oob_fill"])
    if record["kind"] == "tiled":
        assert decoded.box == record["box"]
    else:
        assert decoded.extra == {k: record[k] for k in ("lower_corner", "upper_corner", "channels_per_pixel",
                                                         "pixels_per_column")}


def test_the_learner_recovers_an_invented_layout_and_decodes_fresh_maps_exactly():
    layout = learn(_records(1500, 1), driver_version="stand-in", device="none")
    assert {f.name for f in layout.fields} == {name for name, *_ in _INVENTED} and layout.unlearned == ()
    numbers = {f.name: f for f in layout.fields if f.encoding != "table"}
    for name, offset, width, encoding, signed in _INVENTED:  # numbers sit where they were put (a value in
        if name in numbers:                                   # 16-byte units may read as the value 4 bits lower)
            f = numbers[name]
            assert f.offset in (offset, offset - 4) and f.signed == signed, (name, f)
    again = TensorMapLayout.from_json(layout.to_json())
    for record in _records(300, 2):
        _same(decode_tensormap(bytes.fromhex(record["descriptor"]), layout=again), record)


def test_raw_bytes_need_a_learned_layout(monkeypatch, tmp_path):
    import tmakit.doctor.decode as decode

    monkeypatch.setattr(decode, "PACKAGED_LAYOUT", tmp_path / "none.json")
    with pytest.raises(UnsupportedDeviceError, match="no CUtensorMap layout learned.*tensormap_layout_probe"):
        decode_tensormap(bytes(128))


def test_every_input_form_gives_the_same_128_bytes(tmp_path):
    blob = bytes(range(128))
    words64 = ", ".join(f"0x{int.from_bytes(blob[i:i + 8], 'little'):016x}" for i in range(0, 128, 8))
    words32 = " ".join(f"{int.from_bytes(blob[i:i + 4], 'little'):08x}" for i in range(0, 128, 4))
    xxd = "\n".join(f"{i:08x}: " + " ".join(blob[j:j + 2].hex() for j in range(i, i + 16, 2)) + "  ................"
                    for i in range(0, 128, 16))
    path = tmp_path / "map.bin"
    path.write_bytes(blob)
    forms = [blob, blob.hex(), " ".join(f"{b:02x}" for b in blob), "{" + words64 + "}", words32, xxd, str(path), path]
    for form in forms:
        assert parse_input(form) == (blob, None), form if isinstance(form, (str, bytes)) else "path"


@pytest.mark.parametrize("bad", ["", "12 34", "zz", "0x" + "00" * 127])
def test_wrong_input_names_what_is_missing(bad):
    with pytest.raises(InvalidArgumentError, match="data="):
        parse_input(bad)


CUTLASS_947 = """TMA Desc Addr:   0x7ffd7d2800c0
format         6
dim            3
gmem_address   0
globalDim      (1024,1024,1,1,1)
globalStrides  (2,2048,2097152,0,0)
boxDim         (64,128,1,1,1)
elementStrides (1,1,1,1,1)
interleave     0
swizzle        3
l2Promotion    0
oobFill        0
Error: Failed to initialize the TMA descriptor 1"""


def test_the_cutlass_947_dump_decodes_and_is_checked_against_the_rules():
    decoded = decode_tensormap(CUTLASS_947)
    assert decoded.source == "CUTLASS parameter dump"
    assert (decoded.dtype, decoded.address, decoded.dims, decoded.strides, decoded.box) == (
        6, 0, [1024, 1024, 1], [2048, 2097152], [64, 128, 1])
    assert decoded.to_dict()["dtype"] == "f16" and decoded.to_dict()["swizzle"] == "128B"
    # these parameters pass every encode rule on sm_90, and the decode says where to look instead
    assert decoded.violations == [] and any("not about these parameters" in n for n in decoded.notes)
    on_ampere = decode_tensormap(CUTLASS_947, arch="sm_80")  # the same dump on a GPU without TMA
    assert on_ampere.violations and "sm_90" in str(on_ampere.violations[0])
    broken = decode_tensormap(CUTLASS_947.replace("(2,2048,2097152,0,0)", "(2,2050,2097152,0,0)"))
    assert {v.parameter for v in broken.violations} >= {"strides[0]"}, [str(v) for v in broken.violations]


def test_cli_decode_and_learn(tmp_path, capsys):
    records = _records(800, 3)
    probe = tmp_path / "probe.jsonl"
    probe.write_text("\n".join([json.dumps({"header": True, "driver_version": "stand-in"})]
                               + [json.dumps(r) for r in records]))
    out = tmp_path / "layout.json"
    assert main(["decode", "--learn", str(probe), "--out", str(out)]) == 0
    assert TensorMapLayout.load(out).driver_version == "stand-in"
    capsys.readouterr()
    good = next(r for r in records if r["kind"] == "tiled")
    assert main(["decode", good["descriptor"], "--layout", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["dims"] == good["dims"] and doc["address"] == hex(good["address"])
    assert any("stand-in" in n for n in doc["notes"])
    assert main(["decode", CUTLASS_947.replace("2048,2097152", "2050,2097152"), "--json"]) == 1  # breaks a rule
    assert json.loads(capsys.readouterr().out)["violations"]
    assert main(["decode"]) == 2 and "is required" in capsys.readouterr().err


def test_field_reads_signed_values():
    f = Field("lower_corner[0]", 8, 5, "value", True)
    assert f.read(0b11111 << 8) == -1 and f.read(0b01111 << 8) == 15


@pytest.mark.skipif(not PROBE.is_file(), reason="tests/data/tensormap_layout.jsonl is recorded on a GPU by "
                    "benchmarks/tensormap_layout_probe.py and is not in this checkout yet")
def test_the_drivers_record_decodes_exactly_with_the_layout_tmakit_ships():
    header, records = read_probe(PROBE)
    assert len(records) >= 2000
    shipped = packaged_layout()
    assert shipped is not None and shipped.driver_version == header["driver_version"]
    assert shipped.unlearned == () and shipped.samples == len(records)
    for record in records:
        _same(decode_tensormap(bytes.fromhex(record["descriptor"]), layout=shipped), record)
    # and what it says is learned, not fitted: a layout learned from two thirds decodes the other third
    shuffled = random.Random(7).sample(records, len(records))
    cut = 2 * len(records) // 3
    layout = learn(shuffled[:cut], header["driver_version"])
    assert layout.unlearned == (), layout.unlearned
    for record in shuffled[cut:]:
        _same(decode_tensormap(bytes.fromhex(record["descriptor"]), layout=layout), record)


def test_the_shipped_layout_is_the_one_the_drivers_record_gives():
    if not PROBE.is_file():
        pytest.skip("tests/data/tensormap_layout.jsonl is not in this checkout")
    header, records = read_probe(PROBE)
    assert learn(records, header["driver_version"], header.get("device", "")) == packaged_layout()


@pytest.mark.requires_sm90
def test_maps_the_live_driver_encodes_decode_exactly():
    """Learn from maps this driver encodes now, decode 300 others: the layout holds on this driver."""
    from tmakit import _driver
    from tmakit.tensormap.encode import descriptor_bytes, encode_im2col_raw, encode_tiled_raw

    _driver.ensure_context(0)
    base = int(_driver.call("cuMemAlloc", 1 << 24))
    seed = int(os.environ.get("TMAKIT_HW_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    records = []
    try:
        while len(records) < 1500:
            case = (base_im2col if len(records) % 5 == 4 else base_tiled)(rng)
            case.pop("address_offset")
            granule = 32 if case["interleave"] == 2 or case["dtype"] in (14, 15) else 16
            case["address"] = (base + 1023) // 1024 * 1024 + rng.randrange(0, (1 << 23) // granule) * granule
            common = (case["interleave"], case["swizzle"], case["l2_promotion"], case["oob_fill"])
            if case["kind"] == "tiled":
                err, tmap = encode_tiled_raw(case["dtype"], case["address"], case["dims"], case["strides"],
                                             case["box"], case["element_strides"], *common)
            else:
                err, tmap = encode_im2col_raw(case["dtype"], case["address"], case["dims"], case["strides"],
                                              case["lower_corner"], case["upper_corner"], case["channels_per_pixel"],
                                              case["pixels_per_column"], case["element_strides"], *common)
            if int(err) == 0:
                case["descriptor"] = descriptor_bytes(tmap).hex()
                records.append(case)
    finally:
        _driver.call("cuMemFree", base)
    version = "%d.%d" % _driver.driver_version()
    layout = learn(records[:1200], version)
    # A stride's top bits vary in few random maps: where they match more than one place in this sample the field
    # stays unlearned and decodes as unknown (never as a wrong number); at most one such field a sample.
    unlearned = frozenset(layout.unlearned)
    assert len(unlearned) <= 1 and all(name.startswith("strides[") for name in unlearned), unlearned
    # A sample also bounds what it can teach: a stride above every one it held may have bits where this sample
    # never saw one (the driver keeps a stride's top bits apart from its low 32). Those are compared only
    # where the sample reached them.
    reach: dict[str, int] = {}
    for record in records[:1200]:
        for name, value in parameters_of(record).items():
            reach[name] = max(reach.get(name, 0), abs(value))
    for record in records[1200:]:
        beyond = frozenset(f"strides[{i}]" for i, v in enumerate(record["strides"])
                           if v > reach.get(f"strides[{i}]", 0))
        try:
            _same(decode_tensormap(bytes.fromhex(record["descriptor"]), layout=layout), record, unlearned, beyond)
        except AssertionError as e:
            raise AssertionError(f"TMAKIT_HW_SEED={seed}: {e}") from e
