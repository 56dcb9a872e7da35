"""Vocabulary-parallel embedding and LM head: each rank holds a contiguous slice of the vocab."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from minisgl.core.context import get_global_ctx
from minisgl.distributed import all_gather, all_reduce
from minisgl.kernels.dispatch import dense_gemv


class VocabParallelEmbedding(nn.Module):
    def __init__(self, vocab_size: int, hidden: int):
        super().__init__()
        tp = get_global_ctx().tp
        self.vocab_size = vocab_size
        self.per_rank = -(-vocab_size // tp.size)  # ceil: the last rank is padded
        self.start = tp.rank * self.per_rank
        self.tp_size = tp.size
        self.weight = nn.Parameter(torch.empty(self.per_rank, hidden), requires_grad=False)
        self.weight.weight_loader = self.weight_loader

    def weight_loader(self, param: nn.Parameter, loaded: torch.Tensor, shard_id=None) -> None:
        if loaded.shape != (self.vocab_size, param.shape[1]):
            raise ValueError(f"shape mismatch: checkpoint has {tuple(loaded.shape)}, the model expects "
                             f"({self.vocab_size}, {param.shape[1]})")
        rows = max(0, min(self.per_rank, self.vocab_size - self.start))
        param.data.zero_()
        param.data[:rows].copy_(loaded[self.start : self.start + rows])

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if self.tp_size == 1:
            return F.embedding(ids, self.weight)
        local = ids - self.start
        outside = (local < 0) | (local >= self.per_rank)
        out = F.embedding(local.masked_fill(outside, 0), self.weight)
        return all_reduce(out.masked_fill(outside.unsqueeze(-1), 0))


class ParallelLMHead(VocabParallelEmbedding):
    """Projects hidden states to vocabulary logits; each rank computes its slice, then all-gather."""

    def __init__(self, vocab_size: int, hidden: int, tie_to: VocabParallelEmbedding | None = None):
        super().__init__(vocab_size, hidden)
        if tie_to is not None:
            self.weight = tie_to.weight

    def project(self, hidden: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """This rank's slice of the logits for hidden [rows, H], into `out` when given. Decode's few
        rows on a GPU take the weight-streaming GEMV, which reads the head faster than cuBLAS
        (benchmark/NOTES.md)."""
        logits = dense_gemv(hidden, self.weight, out)
        if logits is None:
            logits = F.linear(hidden, self.weight) if out is None else torch.mm(hidden, self.weight.t(), out=out)
        return logits

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = all_gather(self.project(hidden), dim=-1)
        return logits[..., : self.vocab_size]
