"""PTX -> cubin for the hang doctor's rewritten kernels, without the driver's JIT.

The driver can only JIT PTX of a version it knows, and NVRTC may be newer than the driver (tmakit loads NVRTC's
cubins for that reason), so the instrumented PTX goes through nvJitLink (``cuda.bindings.nvjitlink``, the
nvidia-nvjitlink wheel) when it loads, else the ``ptxas`` of the CUDA toolkit or of the nvidia wheels
(``cuda.pathfinder``), else PATH. ``assembler()`` says which one is used.
"""
from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from ..errors import CompileError, UnsupportedDeviceError

_FIX = ("pip install nvidia-nvjitlink (nvJitLink) or put the CUDA toolkit's ptxas on the PATH: a checked launch "
        "assembles its rewritten PTX itself (the driver's JIT may be older than the PTX)")


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
    """'nvjitlink', the ptxas path, or raises UnsupportedDeviceError saying how to get one."""
    if _nvjitlink() is not None:
        return "nvjitlink"
    ptxas = _ptxas()
    if ptxas:
        return ptxas
    raise UnsupportedDeviceError(f"no PTX assembler for a checked launch: {_FIX}")


def ptx_to_cubin(ptx: str, arch: str, name: str = "checked.ptx") -> bytes:
    """Assemble PTX text for ``arch`` (``sm_90a``) into a cubin."""
    tool = assembler()
    if tool == "nvjitlink":
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
