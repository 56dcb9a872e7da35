"""Tensor-parallel identity of this process and the collectives the layers use."""

from .comm import (
    all_gather,
    all_gather_objects,
    all_reduce,
    all_reduce_add_rmsnorm,
    all_reduce_min,
    broadcast_objects,
    destroy,
    enable_fused_norm,
    init_process_group,
)
from .info import DistributedInfo

__all__ = ["DistributedInfo", "all_reduce", "all_reduce_add_rmsnorm", "all_gather", "all_gather_objects",
           "all_reduce_min", "broadcast_objects", "init_process_group", "enable_fused_norm", "destroy"]
