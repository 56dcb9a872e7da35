"""Tensor-parallel linear layers.

Each parameter carries a `weight_loader(param, loaded, shard_id)` that copies this rank's slice
of a full HF checkpoint tensor into it, so the weight loader never needs to know the layout.
The parallel layers multiply through their `gemm` (`dense_linear`; minisgl.quantization swaps in
an FP8 GEMM for FP8 weights), the MLP's gate/up layer with the activation through its `gated_gemm`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from minisgl.core.context import get_global_ctx
from minisgl.distributed import DistributedInfo, all_reduce
from minisgl.kernels.dispatch import dense_gemv

from .activation import silu_and_mul


def _tp() -> DistributedInfo:
    return get_global_ctx().tp


def check_shape(param: torch.Tensor, loaded: torch.Tensor, what: str = "") -> None:
    if tuple(param.shape) != tuple(loaded.shape):
        raise ValueError(
            f"shape mismatch{' for ' + what if what else ''}: checkpoint has {tuple(loaded.shape)}, "
            f"the model expects {tuple(param.shape)}"
        )


def _load_rows(dst: torch.Tensor, src: torch.Tensor, start: int, rows: int) -> None:
    """Copy src[start:start+rows] (dim 0) into dst, checking the full tensor is big enough."""
    if src.shape[0] < start + rows or src.shape[1:] != dst.shape[1:]:
        raise ValueError(f"shape mismatch: checkpoint has {tuple(src.shape)}, the model expects a "
                         f"shard of {tuple(dst.shape)} at rows {start}..{start + rows}")
    dst.copy_(src.narrow(0, start, rows))


# Rows up to which the linear layers take the GEMV: one and two rows run it on CUDA cores for every
# shape. At 8 rows (tl.dot) Qwen3-8B decoded slower than with cuBLAS (benchmark/NOTES.md).
LINEAR_GEMV_MAX_ROWS = 2


def dense_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear, but decode's one or two bf16 rows on a Hopper GPU through the weight-streaming GEMV
    (the lm_head's, minisgl.kernels.dispatch.dense_gemv). Why: at one token a layer's q/k/v and o
    projections are a few MB each (less under tensor parallelism), and cuBLAS's time there is its
    launch and tile set-up rather than the read (benchmark/NOTES.md)."""
    y = dense_gemv(x, weight, max_rows=LINEAR_GEMV_MAX_ROWS)
    if y is None:
        return F.linear(x, weight, bias)
    return y if bias is None else y + bias


class ReplicatedLinear(nn.Module):
    def __init__(self, in_features: int, out_features: int, bias: bool = False):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features), requires_grad=False)
        self.bias = nn.Parameter(torch.empty(out_features), requires_grad=False) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)


class ColumnParallelLinear(nn.Module):
    """Splits the output features across ranks; each rank returns its slice (no communication).

    `output_sizes` lists the logical sub-matrices stacked in this weight (e.g. gate and up); each
    is split across ranks on its own, and `shard_id` in the loader says which one is loaded.
    """

    def __init__(self, in_features: int, output_sizes: list[int], bias: bool = False):
        super().__init__()
        tp = _tp()
        for size in output_sizes:
            if size % tp.size:
                raise ValueError(f"output size {size} is not divisible by tensor-parallel size {tp.size}")
        self.local_sizes = [size // tp.size for size in output_sizes]
        out = sum(self.local_sizes)
        self.weight = nn.Parameter(torch.empty(out, in_features), requires_grad=False)
        self.bias = nn.Parameter(torch.empty(out), requires_grad=False) if bias else None
        self.gemm = dense_linear
        self.lora = None  # minisgl.lora.LoraLinear once an adapter pool is attached: adds the adapters' deltas
        for param in (self.weight, self.bias):
            if param is not None:
                param.weight_loader = self.weight_loader
                if len(output_sizes) > 1:
                    param.shard_ids = self.shard_ids()

    def shard_ids(self) -> list:
        return list(range(len(self.local_sizes)))

    def shard_offsets(self, shard_id: int | str | None) -> tuple[int, int, int]:
        """(offset in the local weight, rows, start row in the full checkpoint tensor)."""
        idx = 0 if shard_id is None else int(shard_id)
        size = self.local_sizes[idx]
        return sum(self.local_sizes[:idx]), size, _tp().rank * size

    def weight_loader(self, param: nn.Parameter, loaded: torch.Tensor, shard_id=None) -> None:
        offset, rows, start = self.shard_offsets(shard_id)
        _load_rows(param.data.narrow(0, offset, rows), loaded, start, rows)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.gemm(x, self.weight, self.bias)
        return y if self.lora is None else self.lora.add(x, y)


class QKVParallelLinear(ColumnParallelLinear):
    """q, k and v projections in one matmul. Attention heads are split across ranks; when there
    are fewer KV heads than ranks, each KV head is replicated on tp/num_kv_heads ranks.
    `rope_store_gemm`, where minisgl.quantization sets one (an FP8 kernel at small batch), also
    rotates q and k and stores k and v in the KV cache in its epilogue (AttentionLayer.project)."""

    def __init__(self, hidden: int, head_dim: int, num_heads: int, num_kv_heads: int, bias: bool):
        tp = _tp()
        if num_heads % tp.size:
            raise ValueError(f"{num_heads} attention heads are not divisible by tensor-parallel size {tp.size}")
        if num_kv_heads % tp.size and tp.size % num_kv_heads:
            raise ValueError(f"{num_kv_heads} KV heads cannot be split over tensor-parallel size {tp.size}")
        self.head_dim = head_dim
        self.local_heads = num_heads // tp.size
        self.local_kv_heads = max(1, num_kv_heads // tp.size)
        self.kv_replicas = max(1, tp.size // num_kv_heads)
        sizes = [self.local_heads * head_dim, self.local_kv_heads * head_dim, self.local_kv_heads * head_dim]
        super().__init__(hidden, [s * tp.size for s in sizes], bias)
        self.rope_store_gemm = None

    def shard_ids(self) -> list:
        return ["q", "k", "v"]

    def shard_offsets(self, shard_id) -> tuple[int, int, int]:
        idx = {"q": 0, "k": 1, "v": 2}[shard_id]
        rows = self.local_sizes[idx]
        rank = _tp().rank
        start_head = rank * self.local_heads if idx == 0 else (rank // self.kv_replicas) * self.local_kv_heads
        return sum(self.local_sizes[:idx]), rows, start_head * self.head_dim


class GateUpParallelLinear(ColumnParallelLinear):
    """The MLP's gate and up projections in one matmul ([gate; up] rows, each split across ranks);
    `silu_and_mul(x)` returns silu(x @ gate^T) * (x @ up^T): the layer's GEMM then the activation,
    or `gated_gemm` where minisgl.quantization sets one (an FP8 kernel that applies the activation
    in the GEMM's epilogue at small batch: one kernel fewer per layer)."""

    def __init__(self, in_features: int, intermediate: int, bias: bool = False):
        super().__init__(in_features, [intermediate, intermediate], bias)
        self.gated_gemm = None

    def silu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
        # Not with an adapter pool: the deltas belong to gate and up before the activation, which the
        # fused kernel applies in its epilogue. (Fusing when no request uses an adapter would help
        # eager passes only: the decode graphs, captured with the pool, always run the LoRA apply.)
        if self.gated_gemm is not None and self.lora is None:
            return self.gated_gemm(x, self.weight, self.bias)
        return silu_and_mul(self(x))


class RowParallelLinear(nn.Module):
    """Splits the input features across ranks and all-reduces the partial outputs; with
    reduce=False it returns this rank's partial sum (the bias on rank 0 only) for the layer after it
    to reduce (the decoder's next RMSNorm, which fuses the all-reduce where it can)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False, reduce: bool = True):
        super().__init__()
        tp = _tp()
        self.reduce = reduce
        self.adds_bias = reduce or tp.rank == 0  # a partial sum carries the bias once over the ranks
        if in_features % tp.size:
            raise ValueError(f"input size {in_features} is not divisible by tensor-parallel size {tp.size}")
        self.local_in = in_features // tp.size
        self.weight = nn.Parameter(torch.empty(out_features, self.local_in), requires_grad=False)
        self.weight.weight_loader = self.weight_loader
        self.bias = nn.Parameter(torch.empty(out_features), requires_grad=False) if bias else None
        self.gemm = dense_linear
        self.lora = None  # as ColumnParallelLinear's; its delta is a partial sum, reduced with the output

    def weight_loader(self, param: nn.Parameter, loaded: torch.Tensor, shard_id=None) -> None:
        start = _tp().rank * self.local_in
        if loaded.dim() != 2 or loaded.shape[0] != param.shape[0] or loaded.shape[1] < start + self.local_in:
            raise ValueError(f"shape mismatch: checkpoint has {tuple(loaded.shape)}, the model expects "
                             f"({param.shape[0]}, {self.local_in * _tp().size})")
        param.data.copy_(loaded.narrow(1, start, self.local_in))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.gemm(x, self.weight, None)
        if self.lora is not None:
            y = self.lora.add(x, y)
        if self.reduce:
            y = all_reduce(y)
        return y if self.bias is None or not self.adds_bias else y + self.bias
