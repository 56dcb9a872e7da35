from __future__ import annotations

import torch
from torch import nn

from minisgl.core import get_global_ctx


class AttentionLayer(nn.Module):
    """Stores this layer's new K/V in the paged cache and attends over it via the backend."""

    def __init__(self, layer_id: int, num_heads: int, num_kv_heads: int, head_dim: int):
        super().__init__()
        self.layer_id = layer_id
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.scale = head_dim**-0.5

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        ctx = get_global_ctx()
        return ctx.attn_backend.forward(q, k, v, self, ctx.current_batch())
