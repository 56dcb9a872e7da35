"""What a backend must know about the model to be built (AttnShape). The interface every backend
implements, BaseAttnBackend, and its per-batch metadata are minisgl.core's: the context holds the
backend and the batch its metadata."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class AttnShape:
    """What a backend must know about the model before the first batch (this rank's heads)."""

    num_qo_heads: int
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype  # queries and outputs
    kv_dtype: torch.dtype | None = None  # what the KV cache stores; None: `dtype`

    @property
    def cache_dtype(self) -> torch.dtype:
        return self.kv_dtype or self.dtype
