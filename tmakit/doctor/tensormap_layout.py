"""Where the driver puts each encode parameter in a CUtensorMap's 1024 bits, learned from maps it encoded.

NVIDIA documents the 128 bytes as opaque, and no public description of the bit layout was found (the PTX ISA's
``tensormap.replace`` names the fields, not their positions). So the layout is learned from the driver itself:
benchmarks/tensormap_layout_probe.py records (parameters, 128 bytes, driver version) for thousands of random
valid maps, and ``learn`` finds, for every parameter, the one bit range that holds it in every record, under
the encodings a descriptor could plausibly use (the value, the value - 1, the value in 16- or 32-byte units;
two's complement for the signed im2col corners). A field found at more than one place, or at none, stays
unlearned and decodes as unknown. A layout is tagged with the driver version it was learned on.

``learn`` is numpy matrix work over the bit matrix (a few seconds for 2,500 records); decoding is a few shifts.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from ..errors import InvalidArgumentError

BITS = 1024
TRANSFORMS = {"value": lambda v: v, "minus1": lambda v: v - 1, "units16": lambda v: v >> 4,
              "units32": lambda v: v >> 5}
INVERSE = {"value": lambda f: f, "minus1": lambda f: f + 1, "units16": lambda f: f << 4, "units32": lambda f: f << 5}
_SCALARS = ("dtype", "interleave", "swizzle", "l2_promotion", "oob_fill")


@dataclass(frozen=True)
class Field:
    """One parameter's bits. Numbers: ``width`` bits from bit ``offset`` (little-endian over the 128 bytes) under
    ``encoding``, with bits from ``high_offset`` above the first 32 when the driver splits the value. Enumerations
    (``encoding="table"``): the bits at ``columns`` read as a code, ``table`` maps codes to values."""

    name: str  # "address", "dims[2]", "box[0]", "lower_corner[1]@4" (im2col corners depend on the rank), ...
    offset: int
    width: int
    encoding: str  # a key of TRANSFORMS, or "table"
    signed: bool = False
    high_offset: int = -1
    high_width: int = 0
    columns: tuple[int, ...] = ()
    table: tuple[tuple[int, int], ...] = ()  # (code, value)

    def read(self, bits: int) -> int | None:
        if self.encoding == "table":
            code = sum(((bits >> c) & 1) << i for i, c in enumerate(self.columns))
            return dict(self.table).get(code)
        raw = (bits >> self.offset) & ((1 << self.width) - 1)
        if self.high_offset >= 0:
            raw |= ((bits >> self.high_offset) & ((1 << self.high_width) - 1)) << self.width
        width = self.width + (self.high_width if self.high_offset >= 0 else 0)
        if self.signed and raw >> (width - 1):
            raw -= 1 << width
        return INVERSE[self.encoding](raw)


@dataclass(frozen=True)
class TensorMapLayout:
    """The learned fields, and where they were learned."""

    fields: tuple[Field, ...]
    driver_version: str
    device: str
    samples: int
    unlearned: tuple[str, ...] = ()

    def field(self, name: str) -> Field | None:
        return next((f for f in self.fields if f.name == name), None)

    def to_json(self) -> str:
        doc = {"driver_version": self.driver_version, "device": self.device, "samples": self.samples,
               "unlearned": list(self.unlearned), "fields": [asdict(f) for f in self.fields]}
        return json.dumps(doc, indent=1)

    @classmethod
    def from_json(cls, text: str) -> "TensorMapLayout":
        try:
            doc = json.loads(text)
            fields = tuple(Field(**{**f, "columns": tuple(f.get("columns", ())),
                                    "table": tuple(tuple(x) for x in f.get("table", ()))}) for f in doc["fields"])
            return cls(fields, str(doc["driver_version"]), str(doc.get("device", "")), int(doc["samples"]),
                       tuple(doc.get("unlearned", ())))
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidArgumentError("layout", text[:80], f"is not a tensor-map layout ({exc})",
                                       "write one with tmakit decode --learn CORPUS --out FILE") from None

    @classmethod
    def load(cls, path: str | Path) -> "TensorMapLayout":
        return cls.from_json(Path(path).read_text())


def parameters_of(record: dict) -> dict[str, int]:
    """{field name: value} of one probe record (driver order), unused ranks left out."""
    out = {name: int(record[name]) for name in _SCALARS}
    out["mode"] = 0 if record.get("kind", "tiled") == "tiled" else 1
    out["address"] = int(record["address"])
    dims = record["dims"]
    out["rank"] = len(dims)
    for i, d in enumerate(dims):
        out[f"dims[{i}]"] = int(d)
    for i, s in enumerate(record["strides"]):
        out[f"strides[{i}]"] = int(s)
    for i, e in enumerate(record["element_strides"]):
        out[f"element_strides[{i}]"] = int(e)
    if out["mode"] == 0:
        for i, b in enumerate(record["box"]):
            out[f"box[{i}]"] = int(b)
    else:  # the corners' width depends on the rank (16, 8, 5 bits for rank 3, 4, 5)
        for key in ("lower_corner", "upper_corner"):
            for i, c in enumerate(record[key]):
                out[f"{key}[{i}]@{len(dims)}"] = int(c)
        out["channels_per_pixel"] = int(record["channels_per_pixel"])
        out["pixels_per_column"] = int(record["pixels_per_column"])
    return out


def _bit_matrix(descriptors: list[bytes]) -> np.ndarray:
    raw = np.frombuffer(b"".join(descriptors), dtype=np.uint8).reshape(len(descriptors), 128)
    return np.unpackbits(raw, axis=1, bitorder="little").astype(np.float32)  # (n, 1024), bit i of byte j at 8j+i


def _value_bits(values: np.ndarray, width: int) -> np.ndarray:
    shifts = np.arange(width, dtype=np.int64)
    return ((values[:, None] >> shifts[None, :]) & 1).astype(np.float32)


def _offsets(bits: np.ndarray, values: np.ndarray, width: int) -> list[int]:
    """Bit offsets where ``width`` bits equal ``values`` in every row."""
    v = _value_bits(values, width)
    mismatch = bits.T @ (1.0 - v) + (1.0 - bits).T @ v  # (1024, width): rows where column c differs from bit j
    ok = mismatch < 0.5
    rows = np.arange(BITS - width + 1)[:, None] + np.arange(width)[None, :]
    return np.nonzero(ok[rows, np.arange(width)[None, :]].all(axis=1))[0].tolist()


def learn(records: Iterable[dict], driver_version: str = "", device: str = "") -> TensorMapLayout:
    """The layout that explains every record (dicts with the parameters and ``descriptor``, 256 hex digits)."""
    records = list(records)
    if len(records) < 64:
        raise InvalidArgumentError("records", len(records), "are too few to learn a layout from",
                                   "record >= 2,000 maps with benchmarks/tensormap_layout_probe.py")
    params = [parameters_of(r) for r in records]
    descriptors = [bytes.fromhex(r["descriptor"]) for r in records]
    names = sorted({n for p in params for n in p})
    fields, unlearned = [], []
    for name in names:
        rows = [i for i, p in enumerate(params) if name in p]
        bits = _bit_matrix([descriptors[i] for i in rows])
        raw = np.array([params[i][name] for i in rows], dtype=np.int64)
        found = _learn_one(name, bits, raw)
        if found is None:
            unlearned.append(name)
        else:
            fields.append(found)
    fields = _widen(fields, descriptors)
    return TensorMapLayout(tuple(sorted(fields, key=lambda f: f.offset)), driver_version, device, len(records),
                           tuple(unlearned))


ENUMS = ("dtype", "interleave", "swizzle", "l2_promotion", "oob_fill")  # "mode" (0/1) is found as a number


def _learn_one(name: str, bits: np.ndarray, raw: np.ndarray) -> Field | None:
    if name in ENUMS:
        return _learn_table(name, bits, raw)
    signed = "corner" in name
    if signed:
        for width in range(33, 1, -1):  # the widest range that sign-extends consistently
            if width < int(np.abs(raw).max()).bit_length() + 1:
                break
            hits = _offsets(bits, raw & ((1 << width) - 1), width)
            if len(hits) == 1:
                return Field(name, hits[0], width, "value", True)
        return None
    candidates = []
    for encoding, fn in TRANSFORMS.items():
        values = fn(raw)
        if (values < 0).any() or not (INVERSE[encoding](values) == raw).all():
            continue  # an encoding must keep every bit of every value
        if len(set(values.tolist())) < 2:  # a constant tells nothing about where it lives
            continue
        width = max(1, int(values.max()).bit_length())
        if width > 64:
            continue
        hits = _offsets(bits, values, width)
        if len(hits) == 1:
            candidates.append(Field(name, hits[0], width, encoding))
        elif not hits and width > 32:  # split: the low 32 bits in one place, the rest in another
            low = _offsets(bits, values & 0xFFFFFFFF, 32)
            high = _offsets(bits, values >> 32, width - 32)
            if len(low) == 1 and len(high) == 1:
                candidates.append(Field(name, low[0], 32, encoding, high_offset=high[0], high_width=width - 32))
    order = list(TRANSFORMS)
    return min(candidates, key=lambda f: order.index(f.encoding)) if candidates else None


def _learn_table(name: str, bits: np.ndarray, raw: np.ndarray) -> Field | None:
    """An enumeration: the bit columns the value determines (constant for each value, not constant overall),
    read as a code; the field is learned when the code tells every value apart."""
    values = sorted(set(raw.tolist()))
    if len(values) < 2:
        return None
    determined = np.ones(BITS, dtype=bool)
    firsts = {}
    for v in values:
        rows = bits[raw == v]
        determined &= (rows == rows[0]).all(axis=0)
        firsts[v] = rows[0]
    varying = ~(bits == bits[0]).all(axis=0)
    columns = tuple(int(c) for c in np.nonzero(determined & varying)[0])
    if not columns or len(columns) > 16:
        return None
    table = {}
    for v in values:
        code = sum(int(firsts[v][c]) << i for i, c in enumerate(columns))
        if code in table:
            return None  # two values share a code: not told apart by these bits
        table[code] = v
    return Field(name, columns[0], len(columns), "table", columns=columns, table=tuple(sorted(table.items())))


def _widen(fields: list[Field], descriptors: list[bytes]) -> list[Field]:
    """Widen each field up to the next field's first bit while those bits are 0 in every record (their bits
    beyond the largest value seen)."""
    ints = [int.from_bytes(d, "little") for d in descriptors]
    union = 0
    for v in ints:
        union |= v
    starts = sorted(f.offset for f in fields) + [BITS]
    out = []
    for f in fields:
        if f.signed or f.encoding == "table" or f.high_offset >= 0:
            out.append(f)
            continue
        limit = next(s for s in starts if s > f.offset)
        width = f.width
        while f.offset + width < limit and not (union >> (f.offset + width)) & 1:
            width += 1
        out.append(Field(f.name, f.offset, min(width, 64), f.encoding, f.signed))
    return out


def read_probe(path: str | Path) -> tuple[dict, list[dict]]:
    """(header, records) of a probe file (JSON lines: a header, then one map per line)."""
    header, records = {}, []
    for line in Path(path).read_text().splitlines():
        if not line.strip():
            continue
        doc = json.loads(line)
        if doc.get("header"):
            header = doc
        elif "descriptor" in doc:
            records.append(doc)
    return header, records
