"""``decode_tensormap``: a raw 128-byte CUtensorMap (hex, bytes, a file, a pasted dump) back to the parameters
it was encoded with, checked against the encode rules.

Accepted input: 128 bytes; a path to a 128-byte file; hex text (256 digits with any separators, ``0x``
prefixes, an ``xxd`` dump, 16 64-bit or 32 32-bit words as printed by ``printf("%016llx")`` of
``CUtensorMap::opaque``); or the parameter dump CUTLASS prints when an encode fails ("format / dim /
gmem_address / globalDim / globalStrides / boxDim / elementStrides / interleave / swizzle / l2Promotion /
oobFill", NVIDIA/cutlass#947, NVIDIA/recsys-examples#86), which needs no layout. Raw bytes are decoded with
the layout learned from the driver (tmakit.doctor.tensormap_layout), which says which driver it was learned on.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InvalidArgumentError, UnsupportedDeviceError
from .tensormap_layout import TensorMapLayout

PACKAGED_LAYOUT = Path(__file__).with_name("tensormap_layout.json")
_XXD = re.compile(r"^\s*[0-9a-fA-F]{4,16}:\s((?:[0-9a-fA-F]{2,4}\s?){1,16})", re.M)
_CUTLASS_KEYS = ("format", "dim", "gmem_address", "globalDim", "globalStrides", "boxDim", "elementStrides",
                 "interleave", "swizzle", "l2Promotion", "oobFill")


@dataclass
class DecodedTensorMap:
    """The encode parameters of a CUtensorMap (driver order: innermost first; strides in bytes, dims 1..rank-1)."""

    mode: str  # "tiled" | "im2col"
    dtype: int | None
    address: int | None
    dims: list[int | None]
    strides: list[int | None]
    box: list[int | None]
    element_strides: list[int | None]
    interleave: int | None
    swizzle: int | None
    l2_promotion: int | None
    oob_fill: int | None
    source: str  # "raw bytes" | "CUTLASS parameter dump"
    extra: dict[str, Any] = field(default_factory=dict)  # im2col corners, channels, pixels
    unknown: list[str] = field(default_factory=list)  # fields the layout has not learned
    notes: list[str] = field(default_factory=list)
    violations: list[Any] = field(default_factory=list)  # the encode rules these parameters break

    def to_dict(self) -> dict:
        from ..tensormap.enums import Interleave, L2Promotion, OOBFill, Swizzle
        from ..dtypes import DataType

        def name(enum: Any, value: int | None) -> Any:
            try:
                return enum(value).short if value is not None else None
            except ValueError:
                return value

        return {"mode": self.mode, "dtype": name(DataType, self.dtype),
                "address": hex(self.address) if self.address is not None else None, "dims": self.dims,
                "strides": self.strides, "box": self.box, "element_strides": self.element_strides,
                "interleave": name(Interleave, self.interleave), "swizzle": name(Swizzle, self.swizzle),
                "l2_promotion": name(L2Promotion, self.l2_promotion), "oob_fill": name(OOBFill, self.oob_fill),
                **self.extra, "source": self.source, "unknown": self.unknown, "notes": self.notes,
                "violations": [v.as_dict() for v in self.violations]}


def parse_input(data: Any) -> tuple[bytes | None, dict | None]:
    """(128 raw bytes, None) or (None, CUTLASS dump parameters) from what a user pastes or points at."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        raw = bytes(data)
        if len(raw) == 128:
            return raw, None
        data = raw.decode(errors="replace")
    if isinstance(data, Path) or (isinstance(data, str) and "\n" not in data and _is_file(data)):
        blob = Path(data).read_bytes()
        if len(blob) == 128:
            return blob, None
        data = blob.decode(errors="replace")
    if not isinstance(data, str) or not data.strip():
        raise InvalidArgumentError("data", data if not isinstance(data, str) else data[:60], "is empty or not text",
                                   "pass 128 bytes, a file, hex digits or a CUTLASS parameter dump")
    if "globalDim" in data and "boxDim" in data:
        return None, _cutlass_dump(data)
    return _hex(data), None


def _is_file(text: str) -> bool:
    try:
        return len(text) < 1024 and Path(text).is_file()
    except OSError:  # a name too long for the file system: hex digits, not a path
        return False


def _hex(text: str) -> bytes:
    rows = _XXD.findall(text)
    if rows:
        digits = "".join(r.replace(" ", "") for r in rows)
    else:
        tokens = re.findall(r"(?:0[xX])?([0-9a-fA-F]+)", text)
        if len(tokens) == 16 and all(len(t) <= 16 for t in tokens):  # 64-bit words (CUtensorMap::opaque)
            return b"".join(int(t, 16).to_bytes(8, "little") for t in tokens)
        if len(tokens) == 32 and all(len(t) <= 8 for t in tokens):  # 32-bit words
            return b"".join(int(t, 16).to_bytes(4, "little") for t in tokens)
        if len(tokens) == 128 and all(len(t) <= 2 for t in tokens):  # bytes
            return bytes(int(t, 16) for t in tokens)
        digits = "".join(tokens)
    if len(digits) != 256:
        raise InvalidArgumentError("data", text[:60] + ("..." if len(text) > 60 else ""),
                                   f"holds {len(digits) // 2} bytes of hex, not a 128-byte CUtensorMap",
                                   "paste all 128 bytes (256 hex digits, 16 64-bit words or an xxd dump)")
    return bytes.fromhex(digits)


def _cutlass_dump(text: str) -> dict:
    found: dict[str, Any] = {}
    for key in _CUTLASS_KEYS:
        m = re.search(rf"^\s*{key}\s+(\([^)]*\)|\S+)", text, re.M)
        if m is None:
            continue
        value = m.group(1)
        found[key] = [int(x, 0) for x in value.strip("()").split(",") if x.strip()] if value.startswith("(") \
            else int(value, 0)
    missing = [k for k in _CUTLASS_KEYS if k not in found]
    if missing:
        raise InvalidArgumentError("data", text[:60], f"looks like a CUTLASS tensor-map dump but lacks {missing}",
                                   "paste one whole dump (format ... oobFill)")
    return found


def packaged_layout() -> TensorMapLayout | None:
    return TensorMapLayout.load(PACKAGED_LAYOUT) if PACKAGED_LAYOUT.is_file() else None


def decode_tensormap(data: Any, *, layout: TensorMapLayout | str | Path | None = None,
                     arch: Any = "sm_90") -> DecodedTensorMap:
    """The encode parameters of a CUtensorMap (see the module docstring for the inputs), with the encode rules
    it breaks (``violations``) and notes (the driver the layout was learned on, fields it has not learned)."""
    raw, dump = parse_input(data)
    if dump is not None:
        decoded = _from_dump(dump)
    else:
        lay = _layout(layout)
        decoded = _from_raw(raw, lay)
        _driver_note(decoded, lay)
    _check(decoded, arch)
    return decoded


def _layout(layout: Any) -> TensorMapLayout:
    if isinstance(layout, TensorMapLayout):
        return layout
    if layout is not None:
        return TensorMapLayout.load(layout)
    found = packaged_layout()
    if found is None:
        raise UnsupportedDeviceError(
            "this tmakit has no CUtensorMap layout learned from a driver yet (NVIDIA documents the 128 bytes as "
            "opaque): record one on a GPU with `python benchmarks/tensormap_layout_probe.py --out maps.jsonl`, then "
            "`tmakit decode --learn maps.jsonl --out layout.json` and pass --layout layout.json (a CUTLASS "
            "parameter dump decodes without one)")
    return found


def _from_raw(raw: bytes, layout: TensorMapLayout) -> DecodedTensorMap:
    bits = int.from_bytes(raw, "little")
    unknown: list[str] = []

    def get(name: str) -> int | None:
        f = layout.field(name)
        if f is None:
            unknown.append(name)
            return None
        return f.read(bits)

    mode_field = layout.field("mode")
    mode = "tiled" if mode_field is None or mode_field.read(bits) == 0 else "im2col"
    rank = get("rank")
    n = rank if rank is not None and 1 <= rank <= 5 else 5
    decoded = DecodedTensorMap(
        mode, get("dtype"), get("address"), [get(f"dims[{i}]") for i in range(n)],
        [get(f"strides[{i}]") for i in range(n - 1)],
        [get(f"box[{i}]") for i in range(n)] if mode == "tiled" else [],
        [get(f"element_strides[{i}]") for i in range(n)], get("interleave"), get("swizzle"), get("l2_promotion"),
        get("oob_fill"), "raw bytes")
    if mode == "im2col":
        decoded.extra = {"lower_corner": [get(f"lower_corner[{i}]@{n}") for i in range(n - 2)],
                         "upper_corner": [get(f"upper_corner[{i}]@{n}") for i in range(n - 2)],
                         "channels_per_pixel": get("channels_per_pixel"),
                         "pixels_per_column": get("pixels_per_column")}
    decoded.unknown = sorted(set(unknown))
    if rank is None:
        decoded.notes.append("the rank is not learned: all five ranks are shown")
    return decoded


def _from_dump(d: dict) -> DecodedTensorMap:
    rank = d["dim"]
    strides = d["globalStrides"]  # CUTLASS prints the element size first, then the byte strides
    return DecodedTensorMap("tiled", d["format"], d["gmem_address"], d["globalDim"][:rank], strides[1:rank],
                            d["boxDim"][:rank], d["elementStrides"][:rank], d["interleave"], d["swizzle"],
                            d["l2Promotion"], d["oobFill"], "CUTLASS parameter dump")


def _driver_note(decoded: DecodedTensorMap, layout: TensorMapLayout) -> None:
    from .. import _driver

    learned = f"layout learned on driver {layout.driver_version}" + (f" ({layout.device})" if layout.device else "")
    try:
        here = "%d.%d" % _driver.driver_version() if _driver.gpu_available() else None
    except Exception:  # noqa: BLE001 - the note is informative; a broken driver must not stop the decode
        here = None
    if here is None:
        decoded.notes.append(f"{learned}; no driver here to compare with")
    elif here != layout.driver_version:
        decoded.notes.append(f"{learned}, but this machine runs driver {here}: the layout may have changed; "
                             "re-verify with benchmarks/tensormap_layout_probe.py")
    else:
        decoded.notes.append(learned)


def _check(decoded: DecodedTensorMap, arch: Any) -> None:
    from ..tensormap.rules import check_im2col, check_tiled

    values = [decoded.dtype, decoded.address, decoded.interleave, decoded.swizzle, decoded.l2_promotion,
              decoded.oob_fill, *decoded.dims, *decoded.strides, *decoded.box, *decoded.element_strides]
    if any(v is None for v in values):
        decoded.notes.append("not checked against the encode rules: some fields are unknown")
        return
    common = dict(interleave=decoded.interleave, swizzle=decoded.swizzle, l2_promotion=decoded.l2_promotion,
                  oob_fill=decoded.oob_fill, arch=arch)
    try:
        if decoded.mode == "tiled":
            decoded.violations = check_tiled(decoded.dtype, decoded.address, decoded.dims, decoded.strides,
                                             decoded.box, decoded.element_strides, **common)
        else:
            e = decoded.extra
            decoded.violations = check_im2col(decoded.dtype, decoded.address, decoded.dims, decoded.strides,
                                              e["lower_corner"], e["upper_corner"], e["channels_per_pixel"],
                                              e["pixels_per_column"], decoded.element_strides, **common)
    except InvalidArgumentError as exc:  # e.g. an enum value no driver defines: the bytes are not a map
        decoded.notes.append(f"not a valid set of encode parameters: {exc}")
        return
    if not decoded.violations and decoded.source != "raw bytes":
        decoded.notes.append(f"these parameters pass every encode rule on {arch}: a refusal is not about these "
                             "parameters (look at the device, the driver version, or the context the encode ran in)")
