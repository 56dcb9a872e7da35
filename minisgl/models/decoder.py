"""The pre-norm decoder-only transformer shared by every supported architecture.

Llama, Mistral, Qwen2, Qwen3 and Qwen3-MoE differ only in switches of ModelConfig, read from the HF
config and each architecture's traits (models/registry.py): q/k/v biases (Qwen2), per-head q/k
RMSNorm (Qwen3), rope scaling (Llama-3) and MoE feed-forward layers (Qwen3-MoE).
"""

from __future__ import annotations

import torch
from torch import nn

from minisgl.core.context import get_global_ctx
from minisgl.layers import (
    AttentionLayer,
    GateUpParallelLinear,
    MoELayer,
    ParallelLMHead,
    QKVParallelLinear,
    RMSNorm,
    RotaryEmbedding,
    RowParallelLinear,
    VocabParallelEmbedding,
)

from .config import ModelConfig


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_id: int, rotary: RotaryEmbedding):
        super().__init__()
        self.qkv_proj = QKVParallelLinear(cfg.hidden_size, cfg.head_dim, cfg.num_heads, cfg.num_kv_heads, cfg.qkv_bias)
        # Partial sums out of o_proj and the MLP: the next RMSNorm all-reduces them, fused with the
        # residual add and the norm where it can (one launch instead of two, no barrier).
        self.o_proj = RowParallelLinear(cfg.num_heads * cfg.head_dim, cfg.hidden_size, cfg.o_bias, reduce=False)
        self.heads, self.kv_heads = self.qkv_proj.local_heads, self.qkv_proj.local_kv_heads
        self.head_dim = cfg.head_dim
        if cfg.qk_norm:
            self.q_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps)
            self.k_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps)
        self.qk_norm = cfg.qk_norm
        self.rotary = rotary
        self.attn = AttentionLayer(layer_id, self.heads, self.kv_heads, cfg.head_dim)

    def forward(self, positions: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        # FP8 at small batch, one kernel projects, rotates and stores K/V (not with per-head q/k
        # norms: they need a whole head, which none of its programs has).
        q = None if self.qk_norm else self.attn.project(self.qkv_proj, x, positions, self.rotary)
        if q is not None:
            o = self.attn(q, None, None)
        else:
            q, k, v = self.qkv_proj(x).split(
                [self.heads * self.head_dim, self.kv_heads * self.head_dim, self.kv_heads * self.head_dim], dim=-1
            )
            q = q.view(-1, self.heads, self.head_dim)
            k = k.view(-1, self.kv_heads, self.head_dim)
            v = v.view(-1, self.kv_heads, self.head_dim)
            # The attention layer applies the q/k norms (Qwen3) and rotary before attending, fused
            # with the KV store where a kernel can.
            o = self.attn(q, k, v, positions, self.rotary, self.q_norm if self.qk_norm else None,
                          self.k_norm if self.qk_norm else None)
        return self.o_proj(o.reshape(-1, self.heads * self.head_dim))


class MLP(nn.Module):
    def __init__(self, hidden: int, intermediate: int):
        super().__init__()
        self.gate_up_proj = GateUpParallelLinear(hidden, intermediate)
        self.down_proj = RowParallelLinear(intermediate, hidden, reduce=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.gate_up_proj.silu_and_mul(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_id: int, rotary: RotaryEmbedding):
        super().__init__()
        self.self_attn = Attention(cfg, layer_id, rotary)
        if cfg.is_moe_layer(layer_id):
            self.mlp = MoELayer(cfg.hidden_size, cfg.moe_intermediate_size, cfg.num_experts,
                                cfg.num_experts_per_tok, cfg.norm_topk_prob, reduce=False)
        else:
            self.mlp = MLP(cfg.hidden_size, cfg.intermediate_size)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, positions, x, residual, taken: list[torch.Tensor] | None = None):
        """x: the embeddings (residual None) or the last layer's MLP output as this rank's partial
        sum; returns this layer's, with the residual stream. `taken`: where a copy of the residual
        stream entering this layer goes (the fused norms update it in place later)."""
        if residual is None:
            residual, x = x, self.input_layernorm(x)
        else:
            x, residual = self.input_layernorm(x, residual, reduce=True)
        if taken is not None:
            taken.append(residual.clone())
        x = self.self_attn(positions, x)
        x, residual = self.post_attention_layernorm(x, residual, reduce=True)
        return self.mlp(x), residual


class DecoderModel(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        # float32 frequencies whatever the model dtype (bf16 would round them, unlike HF).
        rotary = RotaryEmbedding(torch.tensor(cfg.rotary.inv_freq, dtype=torch.float32), cfg.rotary.max_positions,
                                 cfg.rotary.attention_scaling)
        self.embed_tokens = VocabParallelEmbedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg, i, rotary) for i in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        # An EAGLE-3 drafter (minisgl.speculative.eagle3) reads the residual stream entering these
        # layers (record_hidden): after each forward, `aux_hidden` [tokens, len(aux_layers) * hidden]
        # holds them side by side, in this order. A CUDA graph's pass leaves it in the graph's pool:
        # its runner copies it to a static buffer and points `aux_hidden` there after each replay.
        self.aux_layers: tuple[int, ...] = ()
        self.aux_hidden: torch.Tensor | None = None

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        x, residual = self.embed_tokens(input_ids), None
        taken: dict[int, list[torch.Tensor]] = {i: [] for i in self.aux_layers}
        for i, layer in enumerate(self.layers):
            x, residual = layer(positions, x, residual, taken.get(i))
        if taken:
            self.aux_hidden = torch.cat([taken[i][0] for i in self.aux_layers], dim=-1)
        return self.norm(x, residual, reduce=True)[0]


class DecoderForCausalLM(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.config = cfg
        self.model = DecoderModel(cfg)
        tie = self.model.embed_tokens if cfg.tie_word_embeddings else None
        self.lm_head = ParallelLMHead(cfg.vocab_size, cfg.hidden_size, tie_to=tie)

    def forward(self) -> torch.Tensor:
        """Runs the context's current batch; returns float32 logits of its rows that get them
        (`Batch.logit_indices`: each request's last token, or more, see `Batch.logit_counts`)."""
        batch = get_global_ctx().current_batch()
        hidden = self.model(batch.input_ids, batch.positions)
        return self.lm_head(hidden[batch.logit_indices]).float()


def record_hidden(model: nn.Module, layers: tuple[int, ...]) -> None:
    """Have every forward pass of `model` record the residual stream entering `layers`
    (DecoderModel.aux_hidden); before any CUDA graph is captured, so that graphs record it too."""
    inner = getattr(model, "model", None)
    if not isinstance(inner, DecoderModel):
        raise ValueError(f"{type(model).__name__} does not record hidden states (only the shared decoder's "
                         "architectures do: an EAGLE-3 head needs them)")
    if not all(0 <= i < len(inner.layers) for i in layers):
        raise ValueError(f"hidden states of layers {layers} asked for, the model has {len(inner.layers)}")
    inner.aux_layers = tuple(layers)


def hidden_recorder(model: nn.Module) -> DecoderModel | None:
    """`model`'s decoder when its forward passes record hidden states (record_hidden), else None."""
    inner = getattr(model, "model", None)
    return inner if isinstance(inner, DecoderModel) and inner.aux_layers else None
