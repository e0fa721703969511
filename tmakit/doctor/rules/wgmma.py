"""wgmma shared-memory descriptors built in the kernel against the map whose boxes fill the stage they read
(swizzle mode, LBO/SBO, the K advance), through ``tmakit.check_wgmma_descriptor``.

Sources: KnowingNothing/MatmulTutorial#14 (swizzle off in the map, 128B in the descriptor: 87% wrong),
KnowingNothing/MatmulTutorial#10 (what LBO and SBO are with a 128B swizzle), tile-ai/tilelang#813 (LBO/SBO
written in bytes where the descriptor holds 16-byte units).

Each descriptor is evaluated for the first loop trip with every shared variable at address 0 (so a start
address is an offset into its variable) and matched with the TMA load whose destination holds that offset.
"""
from __future__ import annotations

from ..analysis import Kernel
from ...layout.wgmma import WgmmaDescriptor, check_wgmma_descriptor, wgmma_descriptors
from ...errors import TmakitError
from ..values import Expr, evaluate, leaves

_FIELD = {0: 0, 3: 1, 2: 2, 1: 3}  # CUtensorMapSwizzle -> the descriptor's swizzle field (1=128B, 2=64B, 3=32B)
_NAMES = ("none", "128B", "64B", "32B")


def _first_trip(k: Kernel, exprs: list[Expr], tid: int) -> dict:
    env: dict = {"%tid.x": tid, "%tid.y": 0, "%tid.z": 0, "%laneid": tid % 32, "%warpid": tid // 32,
                 **k.rank_env(0)}
    for e in exprs:
        for leaf in leaves(e):
            if leaf[0] == "sym":
                env[leaf] = 0
            elif leaf[0] == "phi" and leaf not in env:
                start = _phi_start(k, leaf, env, 0)
                if start is not None:
                    env[leaf] = start
    return env


def _phi_start(k: Kernel, leaf, env: dict, depth: int):
    """A loop-carried value's first known value: its definitions in order, a nested loop's counter (a phi whose
    start is another loop's phi) followed outwards a few levels."""
    if depth > 4:
        return None
    for d in sorted(leaf[2]):
        e = k.values.definition(d, leaf[1])
        for inner in leaves(e):
            if inner[0] == "sym":
                env.setdefault(inner, 0)
            elif inner[0] == "phi" and inner != leaf and inner not in env:
                v = _phi_start(k, inner, env, depth + 1)
                if v is not None:
                    env[inner] = v
        v = evaluate(e, env)
        if v is not None:
            return v
    return None


def check(k: Kernel) -> None:
    loads = [(e, k.map_of(e.info["tmap"])[1]) for e in k.by_kind("tensor_load")]
    loads = [(e, m) for e, m in loads if m is not None and m.mode == "tiled" and e.info.get("dst") is not None]
    mmas = k.by_kind("wgmma")
    if not mmas or not loads:
        return
    for mma in mmas:
        types = mma.info.get("types", [])
        sixteen = all(t in ("bf16", "f16") for t in types)
        tset = k.thread_set(mma.inst, k.block_sizes[-1])
        tid = min(tset) if tset else 0
        for role, desc, trans in (("A", mma.info.get("a"), mma.info["trans"][0]),
                                  ("B", mma.info.get("b"), mma.info["trans"][1])):
            if desc is None:
                continue
            _check_one(k, mma, role, desc, "MN" if (trans and sixteen) else "K", loads, tid)


def _check_one(k: Kernel, mma, role: str, desc: Expr, major: str, loads, tid: int) -> None:
    syms = {l for l in leaves(desc) if l[0] == "sym"}
    if not syms:
        return
    env = _first_trip(k, [desc] + [e.info["dst"] for e, _ in loads], tid)
    value = evaluate(desc, env)
    if value is None:
        k.add("descriptor.wgmma_unknown", "note", f"the {role} descriptor of the wgmma at line {mma.inst.line} is "
              "computed from values known only at run time; it is not checked against the map", "-", "wgmma",
              mma.inst)
        return
    got = WgmmaDescriptor.decode(value & (2**64 - 1))
    match = None
    for ev, tmap in loads:
        if not syms & {l for l in leaves(ev.info["dst"]) if l[0] == "sym"}:
            continue
        dst = evaluate(ev.info["dst"], env)
        if dst is not None and dst <= got.start_address < dst + tmap.smem_bytes:
            match = (ev, tmap, dst)
            break
    if match is None:
        return
    ev, tmap, dst = match
    where = f"the {role} descriptor of the wgmma at line {mma.inst.line} (reading the stage the TMA at line " \
            f"{ev.inst.line} fills)"
    want_field = _FIELD.get(int(tmap.swizzle))
    if want_field is not None and got.swizzle_field != want_field:
        k.add("descriptor.wgmma_swizzle", "error", f"{where} says swizzle {_NAMES[got.swizzle_field]} (bits 62-63 = "
              f"{got.swizzle_field}) but the map writes the stage with {tmap.swizzle.short} swizzle: wgmma reads the "
              "tile permuted (most of the product wrong)", f"set the descriptor's swizzle field to {want_field} "
              f"({tmap.swizzle.short}; 1=128B, 2=64B, 3=32B), or describe the map with the swizzle the descriptor "
              "names", "wgmma", mma.inst, value=_NAMES[got.swizzle_field])
        return
    n = int(mma.info.get("n") or 0)
    mn = 64 if role == "A" else (n or None)
    box_k = tmap.box_shape[-1] if major == "K" else (tmap.box_shape[-2] if len(tmap.box_shape) > 1 else 16)
    stage_k = max(16, box_k // 16 * 16)
    try:
        want = wgmma_descriptors(tmap, role, major, stage_address=dst, k=stage_k, mn=mn)
    except TmakitError as exc:
        k.add("descriptor.wgmma_unknown", "note", f"{where}: the stage's geometry is not one tmakit models ({exc})",
              "-", "wgmma", mma.inst)
        return
    slot = min(range(len(want)), key=lambda i: abs(want[i].start_address - got.start_address))
    descs = [w.value for w in want]
    descs[slot] = got.value
    violations = [v for v in check_wgmma_descriptor(tmap, role, major, descs, stage_address=dst, k=stage_k, mn=mn)
                  if v.rule != "wgmma.stage_alignment"]
    for v in violations:
        k.add("descriptor.wgmma", "error", f"{where}: {v.message} ({v.parameter} = {v.value!r}, rule {v.rule})",
              v.fix, "wgmma", mma.inst, value=v.value)
