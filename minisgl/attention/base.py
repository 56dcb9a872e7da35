from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from minisgl.core import Batch
    from minisgl.layers.attention import AttentionLayer


@dataclass
class BaseAttnMetadata:
    """Per-batch facts every backend needs, built once before the forward pass."""

    # Tokens computed for each request (its extend length) and its full length after the step.
    extend_lens: list[int]
    seq_lens: list[int]


class BaseAttnBackend(ABC):
    """Attention over the paged KV cache. One instance serves every layer of a forward pass."""

    @abstractmethod
    def prepare_metadata(self, batch: Batch) -> None:
        """Build `batch.attn_metadata` (page indices, lengths) for the coming forward pass."""

    @abstractmethod
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: AttentionLayer,
                batch: Batch) -> torch.Tensor:
        """Store this layer's new k/v at batch.out_loc and return attention output [tokens, heads, dim]."""
