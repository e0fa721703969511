"""The instructions the rules reason about, as events: barrier init/arrive/expect_tx/wait, TMA and bulk copies,
proxy fences, generic shared-memory accesses, wgmma, thread synchronisation and tensor-map writes.

Operand layouts follow the PTX ISA sections named in ``SECTIONS`` (cp.async.bulk.tensor, mbarrier, fence,
wgmma.mma_async, tensormap.replace).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .ptx import Inst, address_operand
from .values import Expr, Values, const, lin_add

SECTIONS = {
    "mbarrier": "PTX ISA 9.7.13.15 Parallel Synchronization and Communication Instructions: mbarrier",
    "contents": "PTX ISA 9.7.13.15.1 Contents of the mbarrier object",
    "phase": "PTX ISA 9.7.13.15.16 mbarrier.test_wait/mbarrier.try_wait (phaseParity)",
    "tx": "PTX ISA 9.7.13.15.2 mbarrier tx-count; 9.7.9.25.4 cp.async.bulk.tensor (complete_tx)",
    "copy": "PTX ISA 9.7.9.25.4 Data Movement: cp.async.bulk.tensor",
    "bulk": "PTX ISA 9.7.9.25.4.1 cp.async.bulk",
    "swizzle": "PTX ISA 5.5.7 Tensor Swizzling Modes (shared-memory alignment)",
    "proxy": "PTX ISA 8.6 Proxies / 9.7.13.4 membar/fence (fence.proxy.async)",
    "mbarrier_init": "PTX ISA 9.7.13.4 membar/fence (fence.mbarrier_init)",
    "tensormap_fence": "PTX ISA 9.7.13.4 membar/fence (fence.proxy.tensormap::generic); CUDA Programming Guide "
                       "'Encoding a Tensor Map on Device'",
    "param": "CUDA Programming Guide 'Using TMA to transfer multi-dimensional arrays' (const __grid_constant__ "
             "CUtensorMap, 64-byte aligned); PTX ISA 5.5.8 Tensor-map",
    "wgmma": "PTX ISA 9.7.15.5.1 Matrix Descriptor Format",
    "arrive": "PTX ISA 9.7.13.15.11 mbarrier.arrive (expected arrival count)",
}


@dataclass(eq=False)
class Event:
    kind: str
    inst: Inst
    barrier: Expr | None = None  # the barrier's shared address (a cluster peer's: see ``peer``)
    peer: Expr | None = None  # the rank of the CTA whose barrier it is, for mapa'd addresses
    amount: Expr | None = None  # init count, arrive count, tx bytes, bulk size
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def index(self) -> int:
        return self.inst.index


def _split_peer(e: Expr | None) -> tuple[Expr | None, Expr | None]:
    if e is not None and e[0] == "mapa":
        return e[1], e[2]
    if e is not None and e[0] == "lin":  # mapa(x) + c
        for t, k in e[1]:
            if t[0] == "mapa" and k == 1:
                rest = lin_add(e, t, -1)
                return lin_add(t[1], rest), t[2]
    return e, None


def _coords(text: str) -> list[str]:
    inner = text.strip()
    if "{" not in inner:
        return []
    body = inner[inner.index("{") + 1:inner.rindex("}")]
    return [c.strip() for c in body.split(",") if c.strip()]


def _tmap_operand(text: str) -> str:
    inner = text.strip().lstrip("[").rstrip("]")
    return inner.split(",", 1)[0].strip()


def extract(inst: Inst, values: Values) -> list[Event]:
    """The events of one instruction (usually none or one)."""
    op, at = inst.opcode, inst.index
    parts = op.split(".")
    head = parts[0]
    if head in ("st", "ld", "ldu", "red", "atom", "stmatrix", "ldmatrix"):  # thousands of these: no operand split
        return _generic_access(inst, values, parts)
    ops = inst.operands
    addr = lambda k: values.address(ops[k], at)  # noqa: E731
    val = lambda k: values.operand(ops[k], at)  # noqa: E731
    if head == "mbarrier" and len(parts) > 1:
        kind = parts[1]
        if kind == "init" and len(ops) >= 2:
            return [Event("init", inst, *_split_peer(addr(0)), amount=val(1))]
        if kind in ("arrive", "arrive_drop") and len(ops) >= 2:
            bar, peer = _split_peer(addr(1))
            if "expect_tx" in parts:
                return [Event("expect_tx", inst, bar, peer, val(2) if len(ops) > 2 else None, {"arrives": True}),
                        Event("arrive", inst, bar, peer, const(1), {"expect": True})]
            count = val(2) if len(ops) > 2 else const(1)
            return [Event("arrive", inst, bar, peer, count, {"no_complete": "noComplete" in parts})]
        if kind == "expect_tx" and len(ops) >= 2:
            return [Event("expect_tx", inst, *_split_peer(addr(0)), amount=val(1), info={"arrives": False})]
        if kind == "complete_tx" and len(ops) >= 2:
            return [Event("complete_tx", inst, *_split_peer(addr(0)), amount=val(1))]
        if kind in ("try_wait", "test_wait") and len(ops) >= 3:
            parity = "parity" in parts
            return [Event("wait", inst, *_split_peer(addr(1)), info={
                "parity": val(2) if parity else None, "by_parity": parity, "pred": ops[0], "test": kind == "test_wait"})]
        if kind == "inval" and ops:
            return [Event("inval", inst, *_split_peer(addr(0)))]
        return []
    if op.startswith("cp.async.mbarrier.arrive") and ops:
        return [Event("arrive", inst, *_split_peer(addr(0)), amount=const(1 if "noinc" in parts else 0),
                      info={"cp_async": True})]
    if op.startswith("cp.async.bulk.tensor") or op.startswith("cp.reduce.async.bulk.tensor"):
        return _tensor_copy(inst, values, parts)
    if op.startswith("cp.async.bulk.prefetch.tensor"):
        return [Event("prefetch", inst, info={"tmap": values.operand(_tmap_operand(ops[0]), at),
                                              "dims": _dims(parts), "coords": _coords(ops[0]),
                                              "mode": _mode(parts)})]
    if op.startswith("cp.async.bulk.") and "tensor" not in parts and "commit_group" not in parts \
            and "wait_group" not in parts and "prefetch" not in parts:
        if "mbarrier::complete_tx::bytes" in parts and len(ops) >= 4:
            bar, peer = _split_peer(addr(3))
            return [Event("bulk_load", inst, bar, peer, amount=val(2), info={
                "dst": addr(0), "mask": val(4) if "multicast::cluster" in parts and len(ops) > 4 else None,
                "multicast": "multicast::cluster" in parts})]
        if "bulk_group" in parts and len(ops) >= 3:
            return [Event("bulk_store", inst, amount=val(2), info={"src": addr(1)})]
        return []
    if head == "fence":
        if "mbarrier_init" in parts:
            return [Event("fence_init", inst)]
        if any(p.startswith("proxy") for p in parts) and "async" in parts:
            return [Event("fence_async", inst)]
        if any(p.startswith("tensormap::generic") for p in parts):
            return [Event("fence_tensormap", inst, info={"acquire": "acquire" in parts,
                                                         "addr": addr(0) if ops else None})]
        return []
    if head == "tensormap":
        if parts[1] == "replace" and ops:
            return [Event("tensormap_write", inst, info={"addr": addr(0)})]
        if parts[1] == "cp_fenceproxy" and ops:
            return [Event("tensormap_write", inst, info={"addr": addr(0), "released": True})]
        return []
    if op.startswith("wgmma.mma_async"):
        return [_wgmma(inst, values, parts)]
    if head in ("bar", "barrier"):
        if "warp" in parts:
            return [Event("sync", inst, info={"scope": "warp"})]
        if "cluster" in parts:
            return [Event("sync", inst, info={"scope": "cluster" if "wait" in parts else "cluster_arrive"})]
        if "sync" in parts or "red" in parts or len(parts) == 1 or parts[1] in ("aligned",):
            count = val(1) if len(ops) > 1 else None
            return [Event("sync", inst, info={"scope": "cta", "id": val(0) if ops else const(0), "count": count})]
        return []
    if op.startswith("wgmma.wait_group"):
        return [Event("sync", inst, info={"scope": "warpgroup_mma"})]
    return []


def _generic_access(inst: Inst, values: Values, parts: list[str]) -> list[Event]:
    space = _space(parts)
    if space in ("global", "local", "param", "const"):
        return []  # not shared memory
    rest = inst.rest
    first = rest.find("[")
    if first < 0:
        return []
    text = rest[first:rest.index("]", first) + 1]
    head = parts[0]
    if head in ("st", "stmatrix") or (head in ("red", "atom") and first == 0):
        return [Event("generic_write", inst, info=_LazyAddress(values, text, inst.index, space))]
    if head in ("atom", "red"):
        return [Event("generic_write", inst, info=_LazyAddress(values, text, inst.index, space))]
    return [Event("generic_read", inst, info=_LazyAddress(values, text, inst.index, space))]


def _space(parts: list[str]) -> str:
    for p in parts:
        if p.startswith("shared"):
            return "shared"
        if p in ("global", "local", "param", "const"):
            return p
    return "generic"


def _dims(parts: list[str]) -> int | None:
    for p in parts:
        if len(p) == 2 and p[1] == "d" and p[0].isdigit():
            return int(p[0])
    return None


def _mode(parts: list[str]) -> str:
    for p in parts:
        if p.startswith("im2col"):
            return p
    return "tile"


def _tensor_copy(inst: Inst, values: Values, parts: list[str]) -> list[Event]:
    ops, at = inst.operands, inst.index
    dims, mode = _dims(parts), _mode(parts)
    at_dims = next((i for i, p in enumerate(parts) if len(p) == 2 and p[1] == "d" and p[0].isdigit()), len(parts))
    store = at_dims + 1 < len(parts) and parts[at_dims + 1].startswith("global")
    if store or inst.opcode.startswith("cp.reduce"):
        if len(ops) < 2:
            return []
        return [Event("tensor_store", inst, info={
            "tmap": values.operand(_tmap_operand(ops[0]), at), "tmap_text": _tmap_operand(ops[0]),
            "coords": _coords(ops[0]), "dims": dims, "mode": mode, "src": values.address(ops[1], at),
            "reduce": inst.opcode.startswith("cp.reduce")})]
    if len(ops) < 3:
        return []
    rest = ops[3:]
    if mode.startswith("im2col") and rest and rest[0].startswith("{"):
        rest = rest[1:]
    multicast = "multicast::cluster" in parts
    mask = values.operand(rest[0], at) if multicast and rest else None
    bar, peer = _split_peer(values.address(ops[2], at))
    dst = values.address(ops[0], at)
    return [Event("tensor_load", inst, bar, peer, info={
        "tmap": values.operand(_tmap_operand(ops[1]), at), "tmap_text": _tmap_operand(ops[1]),
        "coords": _coords(ops[1]), "dims": dims, "mode": mode, "dst": dst, "multicast": multicast,
        "mask": mask})]


def _wgmma(inst: Inst, values: Values, parts: list[str]) -> Event:
    ops, at = inst.operands, inst.index
    shape = next((p for p in parts if p.startswith("m64n")), "")
    n = int(shape[4:shape.index("k")]) if "k" in shape else 0
    a_desc = None if ops[1].startswith("{") else values.operand(ops[1], at)
    b_desc = values.operand(ops[2], at) if len(ops) > 2 else None
    imms = [values.operand(o, at) for o in ops[3:]]
    c = lambda e: e[1] if e[0] == "c" else 0  # noqa: E731
    if a_desc is not None and len(imms) >= 5:  # d, a-desc, b-desc, scale-d, imm-scale-a/b, imm-trans-a/b
        trans = [c(imms[3]), c(imms[4])]
    elif a_desc is None and len(imms) >= 4:  # A from registers: only imm-trans-b
        trans = [0, c(imms[3])]
    else:
        trans = [0, 0]
    return Event("wgmma", inst, info={"a": a_desc, "b": b_desc, "n": n, "shape": shape, "trans": trans,
                                      "types": parts[-2:]})


def address_of(text: str) -> tuple[str, int] | None:
    return address_operand(text)


class _LazyAddress(dict):
    """A generic access's info: its address is worked out only when a rule asks (kernels have thousands)."""

    def __init__(self, values: Values, text: str, at: int, space: str):
        super().__init__(space=space)
        self._args = (values, text, at)

    def get(self, key, default=None):
        if key == "addr" and "addr" not in self:
            values, text, at = self._args
            self["addr"] = values.address(text, at)
        return super().get(key, default)

    def __getitem__(self, key):
        value = self.get(key)
        if value is None and key not in self:
            raise KeyError(key)
        return value
