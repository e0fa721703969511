"""A copy against its tensor map: dimensionality, mode (tile / im2col / im2col::w), coordinate count, the
multicast mask against the cluster, the shared-memory alignment the map's swizzle needs
(tile-ai/tilelang#2379: a 128B-swizzled box at base + 128), and how the map reaches the kernel (by value as
``.param .align 64 .b8 [128]``: NVIDIA/cutlass#2905, a descriptor inside a params struct not 64-byte aligned)."""
from __future__ import annotations

from ..analysis import Kernel
from ..values import evaluate, leaves, substitute

MODES = {"tiled": ("tile",), "im2col": ("im2col", "im2col::w", "im2col::w::128")}


def check(k: Kernel) -> None:
    seen_params: set[str] = set()
    for ev in k.by_kind("tensor_load", "tensor_store", "prefetch"):
        param, tmap = k.map_of(ev.info["tmap"])
        _param_form(k, ev, param, seen_params)
        if tmap is None:
            if param is not None and param in k.values.params and param not in seen_params:
                seen_params.add(param)
                k.add("copy.unbound_map", "note", f"no tensor map is bound to parameter {_c_name(k, param)}, so its "
                      "copies are not checked against a map (rank, mode, box bytes, alignment)",
                      f"bind one: maps={{'{_c_name(k, param)}': tensor_map}} (--map {_c_name(k, param)}=\"...\")",
                      "copy", ev.inst)
            continue
        _against_map(k, ev, tmap)
        if ev.kind != "prefetch":
            _alignment(k, ev, tmap)
        if ev.info.get("multicast"):
            _multicast(k, ev)


def _c_name(k: Kernel, ptx_name: str) -> str:
    return k.c_names.get(ptx_name, ptx_name)


def _param_form(k: Kernel, ev, param: str | None, seen: set) -> None:
    tmap = ev.info["tmap"]
    through_pointer = any(leaf[0] == "ldp" for leaf in leaves(tmap))
    if through_pointer or param is None or param not in k.values.params:
        if through_pointer and k.maps.get(param) is None and ("ldp", param) not in seen:
            seen.add(("ldp", param))
            k.add("descriptor.global_tensormap", "note", f"the tensor map comes from global memory through "
                  f"{_c_name(k, param) if param else 'a pointer'}: its 64-byte alignment and fencing "
                  "(fence.proxy.tensormap::generic.acquire after a device-side change) are not visible here",
                  "pass maps by value (const __grid_constant__ CUtensorMap) where you can", "param", ev.inst)
        return
    info = k.values.params[param]
    off = evaluate(substitute(tmap, {("sym", param): 0}), {})
    if off is None:
        return
    good = info.size >= off + 128 and (info.align >= 64 and off % 64 == 0)
    if not good:
        k.add("descriptor.param_alignment", "error", f"the tensor map used at line {ev.inst.line} is kernel parameter "
              f"{_c_name(k, param)} ({info.ptx_type}, .align {info.align}) at byte {off}: a CUtensorMap must be 64-byte "
              "aligned (misaligned address in prefetch.tensormap / the copy)",
              "pass it as const __grid_constant__ CUtensorMap (.param .align 64 .b8 [128]), or alignas(64) the "
              "member inside a params struct", "param", ev.inst, parameter=param, value=off)


def _against_map(k: Kernel, ev, tmap) -> None:
    dims, mode = ev.info.get("dims"), ev.info.get("mode", "tile")
    what = f"the copy at line {ev.inst.line}"
    if dims is not None and dims != tmap.rank:
        k.add("copy.rank", "error", f"{what} is cp.async.bulk.tensor.{dims}d but its map has rank {tmap.rank} "
              f"(shape {tmap.shape})", f"use the {tmap.rank}d form, or describe a rank-{dims} map", "copy", ev.inst,
              value=dims)
    if mode not in MODES.get(tmap.mode, ()):
        k.add("copy.mode", "error", f"{what} uses the .{mode} load mode but its map is {tmap.mode}",
              f"use .{MODES[tmap.mode][0]} with this map, or encode an {'im2col' if mode != 'tile' else 'tiled'} map",
              "copy", ev.inst, value=mode)
    coords = ev.info.get("coords") or []
    if coords and dims is not None and len(coords) != dims:
        k.add("copy.coordinates", "error", f"{what} gives {len(coords)} coordinates to a {dims}d copy",
              f"give {dims} coordinates, innermost first", "copy", ev.inst, value=len(coords))


def _alignment(k: Kernel, ev, tmap) -> None:
    addr = ev.info.get("dst") if ev.kind == "tensor_load" else ev.info.get("src")
    if addr is None:
        return
    need = int(tmap.smem_alignment)
    if k.alignment(addr) >= need:
        return
    r = k.residue(addr, need)
    side = "destination" if ev.kind == "tensor_load" else "source"
    sw = tmap.swizzle.short
    if r is not None and r != 0:
        k.add("smem.alignment", "error", f"the shared-memory {side} of the copy at line {ev.inst.line} "
              f"({k.name(addr)}) sits {r} bytes past a {need}-byte boundary, but its map ({sw} swizzle) needs "
              f"{need}-byte alignment: TMA swizzles by the absolute shared address, so the data lands permuted",
              f"align the {side} to {need} bytes (align_shared(p, {need}), __align__({need}))", "swizzle", ev.inst,
              value=r)
        return
    unknown = any(leaf[0] in ("opq", "ldp", "phi") and leaf[1:2] != (-3,) for leaf in leaves(k.resolve_phis(addr)))
    if unknown:
        k.add("smem.alignment_unknown", "note", f"the alignment of the shared-memory {side} of the copy at line "
              f"{ev.inst.line} ({k.name(addr)}) is computed at run time; its map needs {need} bytes", "-", "swizzle",
              ev.inst)
        return
    k.add("smem.alignment", "warning", f"the shared-memory {side} of the copy at line {ev.inst.line} "
          f"({k.name(addr)}) is only known to be {k.alignment(addr)}-byte aligned, but its map ({sw} "
          f"swizzle) needs {need}: it works only where the linker happens to place it on a {need}-byte boundary",
          f"align it explicitly: align_shared(p, {need}) or __align__({need}) on the buffer", "swizzle", ev.inst,
          value=k.alignment(addr))


def _multicast(k: Kernel, ev) -> None:
    if k.cluster is None:
        return
    n = len(k.ranks)
    for rank in k.ranks:
        env = k.rank_env(rank)
        if k.runs_on(ev.inst, rank) is False:
            continue
        mask = evaluate(substitute(ev.info["mask"], env), env) if ev.info.get("mask") is not None else None
        if mask is None:
            continue
        if mask >> n:
            k.add("copy.multicast_mask", "error", f"the multicast copy at line {ev.inst.line} (CTA rank {rank}) has "
                  f"mask {mask:#x}, with bits for CTAs beyond the {n}-CTA cluster {k.cluster}",
                  f"mask only ranks 0..{n - 1} (e.g. (1 << {n}) - 1)", "copy", ev.inst, value=mask)
            return
        if mask == 0:
            k.add("copy.multicast_mask", "error", f"the multicast copy at line {ev.inst.line} has an empty CTA mask",
                  "set the bits of the CTAs that receive the box", "copy", ev.inst, value=mask)
            return
