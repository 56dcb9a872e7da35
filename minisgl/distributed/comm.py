"""Collectives over the tensor-parallel group: no-ops at TP=1, torch.distributed otherwise."""

from __future__ import annotations

import torch
import torch.distributed as dist

from .info import DistributedInfo


def init_process_group(tp: DistributedInfo, addr: str, device: torch.device) -> None:
    if tp.size == 1 or dist.is_initialized():
        return
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, init_method=addr, rank=tp.rank, world_size=tp.size)


def _active() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def all_reduce(x: torch.Tensor) -> torch.Tensor:
    if _active():
        dist.all_reduce(x)
    return x


def all_gather(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Concatenate each rank's `x` along `dim` (every rank holds a same-shaped shard)."""
    if not _active():
        return x
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, x.contiguous())
    return torch.cat(parts, dim=dim)


def destroy() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
