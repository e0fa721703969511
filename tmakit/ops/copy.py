"""``plan_copy(dst, src)`` / ``copy(dst, src)``: a device-to-device copy through shared memory with the chosen
async-copy engine.

TMA path: bulk copies (cp.async.bulk) driven by one thread per block; cp.async path: a per-thread 16-byte
ring. Both need dst and src to agree modulo 16 bytes (then the edges are copied byte-wise). Arrays that do
not agree can only be copied byte by byte: ``backend="auto"`` does that and records it as the path (with a
log line); an explicit backend refuses, since it could not run as asked.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from ..backend import BackendChoice, choose_backend
from .. import _driver
from ..device import device_limits
from ..errors import InvalidArgumentError
from . import _checks
from ._kernels import kernel, sm_count
from ._plan_cache import cached
from ._cache_policy import L2Eviction
from ._plan import Plan

log = logging.getLogger("tmakit")

# Facts of cuda_src/copy.cu, not tuning choices: one warp per block on the TMA path (one thread drives the
# copy engine), 256 threads on the cp.async path (its slot layout), which moves 8 KiB per block per stage.
_KERNEL_THREADS = {"tma": 32, "cp.async": 256}
_CP_ASYNC_CHUNK = 8192


@dataclass(frozen=True)
class CopyResult:
    backend: BackendChoice
    path: str  # "bulk" (TMA), "cp.async", "bytes" (addresses differ modulo 16) or "empty"
    nbytes: int
    blocks: int = 0  # the grid


class CopyPlan(Plan):
    op, names = "copy", ("dst", "src")

    def _retarget(self, views: tuple) -> None:
        d, s = views
        _checks.refuse_overlap([("dst", d)], [("src", s)])
        if self.result.path in ("bulk", "cp.async") and (d.ptr - s.ptr) % 16:
            self._refuse("src", f"address 0x{s.ptr:x}", f"differs from dst (0x{d.ptr:x}) modulo 16 where the plan's "
                         f"buffers did not, so its {self.result.path} path cannot move 16-byte pieces")
        if self._launch is not None:
            self._update(0, d.ptr)
            self._update(1, s.ptr)


def _tuning_int(name: str, value: Any, low: int, high: int, rule: str = "") -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high or (rule and value % 16):
        raise InvalidArgumentError(name, value, f"must be an int in [{low}, {high}]{rule}", "leave it at its default")
    return value


def plan_copy(dst: Any, src: Any, *, backend: Any = "auto", stream: Any = None, blocks: int | None = None,
              chunk_bytes: int = 32768, stages: int = 3, source_eviction: Any = "normal",
              checked: bool | str | None = None, across: str = "pull") -> CopyPlan:
    """A prepared ``dst[...] = src`` for contiguous device arrays of the same shape and dtype, asynchronous on
    ``stream``: ``plan()`` copies, ``plan(dst2, src2)`` copies other buffers of the same geometry. ``src`` may live
    on another GPU of the host: ``across="pull"`` runs the kernel on dst's GPU, reading src over the peer path,
    ``"push"`` on src's GPU, writing dst over it (peer access is checked and enabled; ``stream``, when given, is one
    of the GPU that runs it).

    ``blocks``: the grid; blocks walk the chunks grid-stride. Default: one block per chunk, which the block
    scheduler balances across the SMs (measured on the H100, 1 GiB: 1.02x torch's copy on both paths, where a
    grid of the resident blocks walking the chunks made 0.96-0.98x).
    TMA path tuning (the cp.async path's ring is fixed): ``chunk_bytes`` per bulk copy (a multiple of 16),
    ``stages`` in each block's ring (dynamic shared memory ``stages * chunk_bytes``; used when a block walks
    several chunks), ``source_eviction`` the L2 priority of the source lines ("normal", "first", "last").
    """
    d, s = _checks.view(dst, "dst"), _checks.view(src, "src")
    if d.shape != s.shape:
        raise InvalidArgumentError("dst", f"shape {d.shape}", f"must equal the shape of src {s.shape}",
                                   "allocate dst like src")
    _checks.require_same_dtype(d, s)
    if across not in ("pull", "push"):
        raise InvalidArgumentError("across", across, 'must be "pull" (dst\'s GPU reads src) or "push" (src\'s GPU '
                                   'writes dst)', 'leave it at "pull"')
    dev = d.device if across == "pull" or d.device == s.device else s.device  # the GPU that runs the copy
    if d.device != s.device:  # across GPUs of one host, over the peer path (NVLink)
        _driver.enable_peer_access(dev, s.device if dev == d.device else d.device)  # raises, naming both GPUs
    _checks.require_contiguous(d, "dst")
    _checks.require_contiguous(s, "src")
    _checks.refuse_overlap([("dst", d)], [("src", s)])
    if blocks is not None and (not isinstance(blocks, int) or isinstance(blocks, bool) or not 1 <= blocks < 2**31):
        raise InvalidArgumentError("blocks", blocks, "must be an int in [1, 2**31)", "leave it None for the default")
    chunk_bytes = _tuning_int("chunk_bytes", chunk_bytes, 1024, 1 << 17, " and a multiple of 16")
    stages = _tuning_int("stages", stages, 2, 8)
    eviction = L2Eviction.parse(source_eviction, "source_eviction")
    choice = choose_backend(backend, device=dev)
    nbytes = d.nbytes
    if nbytes == 0:
        return CopyPlan(CopyResult(choice, "empty", 0), (d, s))
    if (d.ptr - s.ptr) % 16:
        if choice.source != "auto":
            raise InvalidArgumentError(
                "src", f"address 0x{s.ptr:x}", f"differs from dst (0x{d.ptr:x}) modulo 16, so backend "
                f"{choice.name!r} cannot move 16-byte pieces", 'use backend="auto" (copies byte by byte) or aligned views')
        log.warning("tmakit.ops.copy: dst and src differ modulo 16 bytes; copying byte by byte")
        k = kernel("copy.cu", "tmakit_copy_bytes", choice, dev)
        threads, path, shared_mem = 256, "bytes", 0
        grid = blocks or min(-(-nbytes // 256), sm_count(dev) * 8)
    elif choice.name == "tma":
        k = kernel("copy.cu", "tmakit_copy", choice, dev, TMAKIT_COPY_CHUNK=chunk_bytes, TMAKIT_COPY_STAGES=stages,
                   TMAKIT_COPY_SOURCE_EVICTION=int(eviction))
        threads, path, shared_mem = _KERNEL_THREADS["tma"], "bulk", stages * chunk_bytes
        limit = device_limits(dev).smem_per_block_optin
        if shared_mem > limit:
            raise InvalidArgumentError("chunk_bytes", chunk_bytes, f"times stages ({stages}) must fit the {limit} bytes of "
                                       "shared memory a block may use", "use fewer stages or smaller chunks")
        grid = blocks or -(-nbytes // chunk_bytes)  # one chunk per block: the block scheduler balances the tail
    else:
        k = kernel("copy.cu", "tmakit_copy", choice, dev)
        threads, path, shared_mem = _KERNEL_THREADS[choice.name], "cp.async", 0
        grid = blocks or -(-nbytes // _CP_ASYNC_CHUNK)  # one 8 KiB chunk per block, as on the TMA path
    return CopyPlan(CopyResult(choice, path, nbytes, grid), (d, s), k, (d.ptr, s.ptr, nbytes), checked=checked,
                    grid=(grid, 1, 1), block=(threads, 1, 1), shared_mem=shared_mem, stream=stream,
                    pdl=choice.arch.major >= 9)  # the kernel waits (griddepcontrol) before it touches memory


_NAMES = ("dst", "src")


def copy(dst: Any, src: Any, *, backend: Any = "auto", stream: Any = None, **tuning: Any) -> CopyResult:
    """``dst[...] = src`` once (``plan_copy(...)()``). A geometry seen before re-points the plan made then
    (``tmakit.ops._plan_cache``); for repeated copies of the same buffers keep the plan."""
    return cached("copy", _NAMES, (dst, src), stream, {"backend": backend, **tuning},
                  lambda: plan_copy(dst, src, backend=backend, stream=stream, **tuning), None)
