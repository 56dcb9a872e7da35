"""Tensor-parallel building blocks the model definitions are made of."""

from .activation import silu_and_mul
from .attention import AttentionLayer
from .embedding import ParallelLMHead, VocabParallelEmbedding
from .linear import ColumnParallelLinear, GateUpParallelLinear, QKVParallelLinear, ReplicatedLinear, RowParallelLinear
from .moe import MoELayer
from .norm import RMSNorm
from .rotary import RotaryEmbedding

__all__ = [
    "silu_and_mul", "AttentionLayer", "ParallelLMHead", "VocabParallelEmbedding", "ColumnParallelLinear",
    "GateUpParallelLinear", "QKVParallelLinear", "ReplicatedLinear", "RowParallelLinear", "MoELayer", "RMSNorm",
    "RotaryEmbedding",
]
