"""Peer buffers from torch.distributed: one view per rank of a tensor in torch's symmetric memory, each mapped into
this process (a peer's view reads and writes that GPU's memory over NVLink), for the multi-GPU plans
(``plan_all_gather_gemm``, ``plan_gemm_reduce_scatter``) run one process per GPU (torchrun).

The process group, the rendezvous and the memory are torch's (``torch.distributed._symmetric_memory``); tmakit
only reads the views. torch is imported here, on use: tmakit itself does not need it.
"""
from __future__ import annotations

from typing import Any

from ..errors import InvalidArgumentError


def symmetric_views(tensor: Any, group: Any = None) -> list:
    """``[view of rank 0's tensor, view of rank 1's, ...]``: the same shape, dtype and offset in every rank's
    allocation, each a torch tensor on this process's GPU. ``tensor`` comes from
    ``torch.distributed._symmetric_memory.empty`` on every rank of ``group`` (default: the world); every rank calls
    this together (a rendezvous)."""
    try:
        import torch.distributed as dist
        import torch.distributed._symmetric_memory as symm_mem
    except ImportError as e:  # pragma: no cover - the device image has torch
        raise InvalidArgumentError("tensor", type(tensor).__name__, "must be a torch tensor in symmetric memory "
                                   f"(torch.distributed is not importable: {e})", "install torch") from e
    if not dist.is_available() or not dist.is_initialized():
        raise InvalidArgumentError("group", group, "needs an initialized torch.distributed process group",
                                   'call torch.distributed.init_process_group("nccl") first (torchrun)')
    group = group if group is not None else dist.group.WORLD
    if not tensor.is_contiguous():
        raise InvalidArgumentError("tensor", f"strides {tuple(tensor.stride())}", "must be contiguous (every rank's "
                                   "view is read as the same contiguous block)", "pass tensor.contiguous() of a "
                                   "symmetric allocation, or a contiguous slice of one")
    why = "torch's rendezvous found no symmetric allocation holding it"  # it returns None for other tensors
    try:
        handle = symm_mem.rendezvous(tensor, getattr(group, "group_name", group))
    except (RuntimeError, TypeError, ValueError) as e:
        handle, why = None, str(e)
    if handle is None:
        raise InvalidArgumentError("tensor", f"{type(tensor).__name__} {tuple(getattr(tensor, 'shape', ()))}",
                                   f"must come from torch.distributed._symmetric_memory.empty ({why})",
                                   "allocate it with symm_mem.empty(shape, dtype=, device=) on every rank")
    # the same offset into every rank's allocation: a slice of a symmetric tensor views the same slice on each
    return [handle.get_buffer(r, tuple(tensor.shape), tensor.dtype, tensor.storage_offset())
            for r in range(handle.world_size)]


__all__ = ["symmetric_views"]
