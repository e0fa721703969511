"""PTX -> cubin for the hang doctor's rewritten kernels, without the driver's JIT.

The driver can only JIT PTX of a version it knows, and NVRTC may be newer than the driver (tmakit loads NVRTC's
cubins for that reason), so the instrumented PTX goes through the ``ptxas`` of the CUDA toolkit or of the nvidia
wheels (``cuda.pathfinder``, else PATH), else nvJitLink (``cuda.bindings.nvjitlink``, the nvidia-nvjitlink wheel).
``assembler()`` says which one is used.

ptxas comes first because it compiles the module whole, as NVRTC did. nvJitLink compiles PTX as relocatable code
and links it, and the link places a dynamic (``extern``) shared array only 16-byte aligned, whatever its
``.align`` says: measured on the H100, an ``extern __shared__ __align__(1024)`` buffer landed at shared offset
0x410 and a 128B-swizzled TMA into it faulted (misaligned address). So nvJitLink is refused for PTX that declares
such an array with an alignment above 16 (tmakit's own kernels align their dynamic shared memory by hand).
"""
from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..errors import CompileError, UnsupportedDeviceError

_FIX = ("put the CUDA toolkit's ptxas on the PATH (or pip install nvidia-nvjitlink): a checked launch "
        "assembles its rewritten PTX itself (the driver's JIT may be older than the PTX)")
_EXTERN_SHARED = re.compile(r"^\s*\.extern\s+\.shared\s+\.align\s+(\d+)\s+\.\w+\s+([\w$]+)", re.M)


def _nvjitlink():
    try:
        from cuda.bindings import nvjitlink

        nvjitlink.version()
        return nvjitlink
    except Exception:  # noqa: BLE001 - the library is optional: absent or unloadable means "use ptxas"
        return None


def _ptxas() -> str | None:
    try:
        from cuda import pathfinder

        found = pathfinder.find_nvidia_binary_utility("ptxas")
        if found:
            return str(found)
    except Exception:  # noqa: BLE001 - pathfinder may not know this layout; fall back to PATH
        pass
    return shutil.which("ptxas")


def assembler() -> str:
    """The ptxas path, or 'nvjitlink', or raises UnsupportedDeviceError saying how to get one."""
    ptxas = _ptxas()
    if ptxas:
        return ptxas
    if _nvjitlink() is not None:
        return "nvjitlink"
    raise UnsupportedDeviceError(f"no PTX assembler for a checked launch: {_FIX}")


def overaligned_extern_shared(ptx: str) -> list[tuple[str, int]]:
    """(name, alignment) of each dynamic shared array the PTX declares with an alignment above 16 bytes."""
    return [(m.group(2), int(m.group(1))) for m in _EXTERN_SHARED.finditer(ptx) if int(m.group(1)) > 16]


def ptx_to_cubin(ptx: str, arch: str, name: str = "checked.ptx") -> bytes:
    """Assemble PTX text for ``arch`` (``sm_90a``) into a cubin, the whole module at once."""
    tool = assembler()
    if tool == "nvjitlink":
        over = overaligned_extern_shared(ptx)
        if over:
            sym, align = over[0]
            raise UnsupportedDeviceError(
                f"{name}: the dynamic shared array {sym} is declared {align}-byte aligned, and nvJitLink (the only "
                "PTX assembler found) links relocatable code that places it 16-byte aligned, so the checked twin "
                "would fault where the kernel does not; put the CUDA toolkit's ptxas on the PATH, or align the "
                "dynamic shared memory base in the kernel by hand (round its address up)")
        return _with_nvjitlink(_nvjitlink(), ptx, arch, name)
    with tempfile.TemporaryDirectory(prefix="tmakit-checked-") as tmp:
        src, out = Path(tmp, "kernel.ptx"), Path(tmp, "kernel.cubin")
        src.write_text(ptx)
        proc = subprocess.run([tool, f"-arch={arch}", str(src), "-o", str(out)], capture_output=True, text=True,
                              timeout=600)
        if proc.returncode != 0:
            raise CompileError(name, proc.stderr or proc.stdout, [f"-arch={arch}"], ptx)
        return out.read_bytes()


def _with_nvjitlink(nvjitlink, ptx: str, arch: str, name: str) -> bytes:
    handle = nvjitlink.create(1, [f"-arch={arch}"])
    try:
        data = ptx.encode() + b"\0"
        try:
            nvjitlink.add_data(handle, nvjitlink.InputType.PTX, data, len(data), name)
            nvjitlink.complete(handle)
        except Exception as exc:  # noqa: BLE001 - nvJitLink reports through its log
            size = nvjitlink.get_error_log_size(handle)
            log = bytearray(size)
            nvjitlink.get_error_log(handle, log)
            raise CompileError(name, log.decode(errors="replace").rstrip("\0") or str(exc), [f"-arch={arch}"],
                               ptx) from None
        size = nvjitlink.get_linked_cubin_size(handle)
        cubin = bytearray(size)
        nvjitlink.get_linked_cubin(handle, cubin)
        return bytes(cubin)
    finally:
        nvjitlink.destroy(handle)
