"""Mixture-of-experts feed-forward (Qwen3-MoE): softmax top-k routing over SwiGLU experts.

Implementations, chosen by `Context.moe_backend`:
- "loop": one matmul pair per expert that received tokens. The CPU default and the reference.
- "grouped": tokens sorted by expert and every expert's matmul in one `torch.nn.functional.
  grouped_mm` call: a fused grouped GEMM with no host sync for bf16 on Hopper; for other dtypes
  PyTorch loops over the groups, reading their offsets on the host (no CUDA graph then).
- "fused": Triton, with no host sync: for decode's few tokens (up to DECODE_MAX_TOKENS)
  `minisgl.kernels.moe_decode` (top-k routing, then one GEMV launch for every (token, expert)
  pair's gate_up and one for each token's down projections summed over its experts), above it
  `minisgl.kernels.fused_moe` (tokens aligned to expert blocks, one tensor-core GEMM launch for
  gate_up and one for down).
- "auto" (the GPU default): "fused" for batches of up to FUSED_MAX_TOKENS tokens, "grouped" above
  (bf16 only: else "fused" throughout): whichever measured faster at that size
  (benchmark/offline/moe_layer.py; see benchmark/NOTES.md). Decode batches, captured in CUDA
  graphs, are all within FUSED_MAX_TOKENS.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from minisgl.core.context import get_global_ctx
from minisgl.distributed import all_reduce
from minisgl.utils.choices import MOE_BACKENDS

from .activation import silu_and_mul
from .linear import ReplicatedLinear

# Up to this many tokens in a batch the fused Triton path measured faster than the grouped GEMM with
# Qwen3-30B-A3B's shapes, whole experts and TP=2 shares alike (benchmark/offline/moe_layer.py; the
# figures are in benchmark/NOTES.md).
FUSED_MAX_TOKENS = 1024
BACKENDS = MOE_BACKENDS  # --moe-backend's names live with the flag's other choices


class MoELayer(nn.Module):
    def __init__(self, hidden: int, intermediate: int, num_experts: int, top_k: int, norm_topk_prob: bool,
                 reduce: bool = True):
        super().__init__()
        self.reduce = reduce  # False: return this rank's partial sum, as RowParallelLinear(reduce=False)
        tp = get_global_ctx().tp
        if intermediate % tp.size:
            raise ValueError(f"MoE intermediate size {intermediate} is not divisible by tensor-parallel size {tp.size}")
        self.num_experts = num_experts
        self.top_k = top_k
        self.norm_topk_prob = norm_topk_prob
        self.local_inter = intermediate // tp.size
        self.rank = tp.rank
        self.gate = ReplicatedLinear(hidden, num_experts)
        # w13 stacks each expert's [gate; up] rows, w2 is each expert's down projection.
        self.w13 = nn.Parameter(torch.empty(num_experts, 2 * self.local_inter, hidden), requires_grad=False)
        self.w2 = nn.Parameter(torch.empty(num_experts, hidden, self.local_inter), requires_grad=False)
        self.w13.weight_loader = self.load_w13
        self.w2.weight_loader = self.load_w2
        self.w13.shard_ids = [(e, which) for e in range(num_experts) for which in (0, 1)]
        self.w2.shard_ids = [(e, 0) for e in range(num_experts)]

    def load_w13(self, param: nn.Parameter, loaded: torch.Tensor, shard_id: tuple[int, int]) -> None:
        expert, which = shard_id  # which: 0 = gate, 1 = up
        rows = loaded.narrow(0, self.rank * self.local_inter, self.local_inter)
        dst = param.data[expert].narrow(0, which * self.local_inter, self.local_inter)
        if dst.shape != rows.shape:
            raise ValueError(f"shape mismatch: checkpoint has {tuple(loaded.shape)}, expert shard is {tuple(dst.shape)}")
        dst.copy_(rows)

    def load_w2(self, param: nn.Parameter, loaded: torch.Tensor, shard_id: tuple[int, int]) -> None:
        expert, _ = shard_id
        cols = loaded.narrow(1, self.rank * self.local_inter, self.local_inter)
        if param.data[expert].shape != cols.shape:
            raise ValueError(f"shape mismatch: checkpoint has {tuple(loaded.shape)}, expert shard is "
                             f"{tuple(param.data[expert].shape)}")
        param.data[expert].copy_(cols)

    def warm_up(self) -> None:
        """Build the fused path's Triton kernels at start (the engine calls this on CUDA)."""
        if get_global_ctx().moe_backend in ("fused", "auto") and self.w13.is_cuda:
            from minisgl.kernels.fused_moe import warm_up
            from minisgl.kernels.moe_decode import warm_up as warm_up_decode

            warm_up(self.w13, self.w2, self.top_k, self.norm_topk_prob)
            warm_up_decode(self.w13, self.w2, self.gate.weight, self.top_k, self.norm_topk_prob)

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        probs = F.softmax(self.gate(x), dim=-1, dtype=torch.float32)
        weights, experts = torch.topk(probs, self.top_k, dim=-1)
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights.to(x.dtype), experts

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.experts(x)
        return all_reduce(out) if self.reduce else out

    def experts(self, x: torch.Tensor) -> torch.Tensor:
        """This rank's share of the layer's output (its slice of every expert's intermediate)."""
        backend = get_global_ctx().moe_backend
        if backend == "auto":
            backend = "grouped" if x.shape[0] > FUSED_MAX_TOKENS and x.dtype == torch.bfloat16 else "fused"
        if backend == "fused":
            from minisgl.kernels.moe_decode import (
                DECODE_MAX_TOKENS,
                decode_experts,
                router_logits,
            )

            if x.shape[0] <= DECODE_MAX_TOKENS:
                logits = router_logits(x, self.gate.weight)
                return decode_experts(x, logits, self.w13, self.w2, self.top_k, self.norm_topk_prob)
            from minisgl.kernels.fused_moe import fused_experts

            return fused_experts(x, self.gate(x), self.w13, self.w2, self.top_k, self.norm_topk_prob)
        weights, experts = self.route(x)
        if backend == "grouped":
            return self.grouped_experts(x, weights, experts)
        return self.loop_experts(x, weights, experts)

    def grouped_experts(self, x: torch.Tensor, weights: torch.Tensor, experts: torch.Tensor) -> torch.Tensor:
        top_k = experts.shape[1]
        flat = experts.flatten()
        order = flat.argsort(stable=True)  # (token, slot) pairs grouped by expert
        token_of = order // top_k
        # scatter_add, not bincount: bincount reads its maximum back to the host (no CUDA graph).
        counts = torch.zeros(self.num_experts, dtype=torch.int32, device=x.device)
        ends = counts.scatter_add_(0, flat, torch.ones_like(flat, dtype=torch.int32)).cumsum(0, dtype=torch.int32)
        h = F.grouped_mm(x[token_of], self.w13.transpose(1, 2), offs=ends)
        h = F.grouped_mm(silu_and_mul(h), self.w2.transpose(1, 2), offs=ends)
        h = h * weights.flatten()[order].unsqueeze(1)
        return torch.zeros_like(x).index_add_(0, token_of, h)

    def loop_experts(self, x: torch.Tensor, weights: torch.Tensor, experts: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(x)
        for e in experts.unique().tolist():
            token_idx, slot = torch.where(experts == e)
            h = silu_and_mul(F.linear(x[token_idx], self.w13[e]))
            h = F.linear(h, self.w2[e]) * weights[token_idx, slot, None]
            out.index_add_(0, token_idx, h)
        return out
