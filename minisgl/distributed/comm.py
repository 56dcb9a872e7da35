"""Collectives over the tensor-parallel group: no-ops at TP=1, torch.distributed otherwise."""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist

from .info import DistributedInfo

# Follower ranks wait in a gloo broadcast for rank 0's next messages; an offline LLM may sit idle
# between generate() calls for longer than torch's default 30 minutes. If rank 0 dies, the
# broadcast fails at once (connection closed), so a long timeout never leaves a follower hanging.
FOLLOWER_WAIT = timedelta(days=365)


# The custom all-reduce for small messages (minisgl.distributed.custom_allreduce), on CUDA only.
_CUSTOM = None
# The all-reduce fused with the residual add and RMSNorm (minisgl.distributed.fused_norm), on CUDA
# with the custom all-reduce, once the engine knows the model's width (enable_fused_norm).
_FUSED_NORM = None


def init_process_group(tp: DistributedInfo, addr: str, device: torch.device, custom_all_reduce: bool = True) -> None:
    """Join this rank's group at `addr` (a fresh rendezvous per engine start). A group left over
    from an engine that failed to start is an error, not something to reuse: its peers are gone."""
    global _CUSTOM
    if tp.size == 1:
        return
    if dist.is_initialized():
        raise RuntimeError("a tensor-parallel process group is already initialized in this process "
                           "(an engine that was not shut down?)")
    if device.type == "cuda":
        dist.init_process_group("nccl", init_method=addr, rank=tp.rank, world_size=tp.size)
        if custom_all_reduce:
            from . import custom_allreduce

            _CUSTOM = custom_allreduce.create(dist.group.WORLD, device)
    else:
        dist.init_process_group("gloo", init_method=addr, rank=tp.rank, world_size=tp.size, timeout=FOLLOWER_WAIT)


def _active() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def all_reduce(x: torch.Tensor) -> torch.Tensor:
    """Sum x over the ranks, in place: the custom all-reduce for messages it takes, else NCCL/gloo."""
    if _CUSTOM is not None and _CUSTOM.takes(x):
        return _CUSTOM(x)
    if _active():
        dist.all_reduce(x)
    return x


def enable_fused_norm(hidden: int, max_tokens: int, dtype: torch.dtype, device: torch.device) -> None:
    """Set up all_reduce_add_rmsnorm's fused kernel for up to `max_tokens` rows of `hidden`
    (collective; where the custom all-reduce runs, so not with --disable-custom-all-reduce)."""
    global _FUSED_NORM
    if _CUSTOM is None or max_tokens < 1 or dtype not in (torch.float16, torch.bfloat16):
        return
    from . import fused_norm

    _FUSED_NORM = fused_norm.create(dist.get_rank(), dist.get_world_size(), max_tokens, hidden, dtype, device)


def all_reduce_add_rmsnorm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
                           ) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(RMSNorm(sum of x over the ranks + residual) * weight, sum + residual) in one fused kernel,
    or None where it does not take x (then all_reduce and the norm's own kernel do it)."""
    if _FUSED_NORM is None or not _FUSED_NORM.takes(x, residual):
        return None
    return _FUSED_NORM(x, residual, weight, eps)


def all_gather(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Concatenate each rank's `x` along `dim` (every rank holds a same-shaped shard)."""
    if not _active():
        return x
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, x.contiguous())
    return torch.cat(parts, dim=dim)


_CPU_GROUP = None


def cpu_group():
    """A gloo group for broadcasting Python objects (scheduler messages), also when the tensor
    collectives run on NCCL."""
    global _CPU_GROUP
    if _CPU_GROUP is None:
        _CPU_GROUP = (dist.new_group(backend="gloo", timeout=FOLLOWER_WAIT) if dist.get_backend() != "gloo"
                      else dist.group.WORLD)
    return _CPU_GROUP


def broadcast_objects(objs: list, src: int = 0) -> list:
    """Every rank gets rank `src`'s list (same length on all ranks)."""
    if _active():
        dist.broadcast_object_list(objs, src=src, group=cpu_group())
    return objs


def all_gather_objects(obj) -> list:
    """Every rank's `obj`, in rank order, on every rank."""
    if not _active():
        return [obj]
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj, group=cpu_group())
    return out


def all_reduce_min(value: int) -> int:
    """The smallest `value` over all ranks (so every rank sizes its KV pool the same)."""
    if not _active():
        return value
    t = torch.tensor([value], dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MIN, group=cpu_group())
    return int(t.item())


def destroy() -> None:
    global _CPU_GROUP, _CUSTOM, _FUSED_NORM
    if _FUSED_NORM is not None:
        _FUSED_NORM.destroy()
    _CPU_GROUP = _CUSTOM = _FUSED_NORM = None
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
