"""``copy(dst, src)``: a device-to-device copy through shared memory with the chosen async-copy engine.

TMA path: bulk copies (cp.async.bulk) driven by one thread per block; cp.async path: a per-thread 16-byte
ring. Both need dst and src to agree modulo 16 bytes (then the edges are copied byte-wise). Arrays that do
not agree can only be copied byte by byte: ``backend="auto"`` does that and records it as the path (with a
log line); an explicit backend refuses, since it could not run as asked.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Hashable

from ..backend import BackendChoice, choose_backend
from ..errors import InvalidArgumentError
from . import _checks
from ._kernels import kernel, sm_count
from ._memo import LaunchMemo

log = logging.getLogger("tmakit")

_THREADS = {"tma": 32, "cp.async": 256}
_CHUNK = 8192  # bytes one block moves per ring stage (cuda_src/copy.cu)
_MEMO = LaunchMemo()  # prepared launches by geometry (ops/_memo.py)


@dataclass(frozen=True)
class CopyResult:
    backend: BackendChoice
    path: str  # "bulk" (TMA), "cp.async", or "bytes" (addresses differ modulo 16)
    nbytes: int


def copy(dst: Any, src: Any, *, backend: Any = "auto", stream: Any = None) -> CopyResult:
    """``dst[...] = src`` for contiguous device arrays of the same shape and dtype. Asynchronous on ``stream``.
    A repeated call with the same geometry launches the launch prepared the first time (ops/_memo.py)."""
    key = _MEMO.key((dst, src), (backend, tuple(_THREADS.items()), _CHUNK), stream)
    return _MEMO.run(key) or _prepare(dst, src, backend, stream, key)


def _prepare(dst: Any, src: Any, backend: Any, stream: Any, key: Hashable | None) -> CopyResult:
    d, s = _checks.view(dst, "dst"), _checks.view(src, "src")
    if d.shape != s.shape:
        raise InvalidArgumentError("dst", f"shape {d.shape}", f"must equal the shape of src {s.shape}",
                                   "allocate dst like src")
    _checks.require_same_dtype(d, s)
    _checks.require_same_device(d, s)
    _checks.require_contiguous(d, "dst")
    _checks.require_contiguous(s, "src")
    _checks.require_disjoint(d, s)
    choice = choose_backend(backend, device=d.device)
    notes = [(logging.INFO, choice.log_line)]
    nbytes = d.nbytes
    if nbytes == 0:
        return CopyResult(choice, "empty", 0)
    if (d.ptr - s.ptr) % 16:
        if choice.source != "auto":
            raise InvalidArgumentError(
                "src", f"address 0x{s.ptr:x}", f"differs from dst (0x{d.ptr:x}) modulo 16, so backend "
                f"{choice.name!r} cannot move 16-byte pieces", 'use backend="auto" (copies byte by byte) or aligned views')
        notes.append((logging.WARNING, "tmakit.ops.copy: dst and src differ modulo 16 bytes; copying byte by byte"))
        log.log(*notes[-1])
        k = kernel("copy.cu", "tmakit_copy_bytes", choice, d.device)
        grid, threads, path = min(-(-nbytes // 256), sm_count(d.device) * 8), 256, "bytes"
    else:
        k = kernel("copy.cu", "tmakit_copy", choice, d.device)
        threads, path = _THREADS[choice.name], "bulk" if choice.name == "tma" else "cp.async"
        grid = max(1, min(-(-nbytes // _CHUNK), k.resident_blocks(threads)))
    launch = k.bind(d.ptr, s.ptr, nbytes, grid=(grid, 1, 1), block=(threads, 1, 1), stream=stream, keep_args=False)
    launch()
    result = CopyResult(choice, path, nbytes)
    _MEMO.store(key, launch, result, tuple(notes))
    return result
