"""Rotary position embedding (HF's non-interleaved rotate-half layout) from a cos/sin cache."""

from __future__ import annotations

import torch
from torch import nn

from minisgl.kernels.dispatch import fused_ops


class RotaryEmbedding(nn.Module):
    def __init__(self, inv_freq: torch.Tensor, max_positions: int, attention_scaling: float = 1.0):
        super().__init__()
        t = torch.arange(max_positions, dtype=torch.float32)
        freqs = torch.outer(t, inv_freq.float())
        # float32 [max_positions, rotary_dim]: cos of each frequency in the first half, sin in the
        # second (the layout FlashInfer's kernel reads); the torch path repeats each half twice
        # (HF's cat(freqs, freqs)) and casts to the activation dtype at use, as HF does.
        self.register_buffer("cos_sin", torch.cat((freqs.cos() * attention_scaling, freqs.sin() * attention_scaling),
                                                   dim=-1), persistent=False)

    @staticmethod
    def _rotate_half(x: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        return torch.cat((-x[..., half:], x[..., :half]), dim=-1)

    def forward(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor):
        """q: [tokens, heads, dim], k: [tokens, kv_heads, dim]."""
        ops = fused_ops(q)
        if ops is not None and q.stride(-1) == 1 and k.stride(-1) == 1:
            ops.rope(positions, q, k, q.shape[-1], self.cos_sin, is_neox=True)  # in place
            return q, k
        cos, sin = self.cos_sin[positions].unsqueeze(1).chunk(2, dim=-1)
        cos = torch.cat((cos, cos), dim=-1).to(q.dtype)
        sin = torch.cat((sin, sin), dim=-1).to(q.dtype)
        q = q * cos + self._rotate_half(q) * sin
        k = k * cos + self._rotate_half(k) * sin
        return q, k
