from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import PretrainedConfig

from minisgl.quantization.config import CheckpointQuant, checkpoint_quant


@dataclass(frozen=True)
class RotaryConfig:
    inv_freq: tuple[float, ...]
    attention_scaling: float
    max_positions: int


@dataclass(frozen=True)
class ArchitectureTraits:
    """What an architecture's modeling code fixes and its HF config does not say. Every
    architecture states its own in models/registry.py, so a new one never inherits another
    family's traits through a shared name prefix."""

    qkv_bias: bool | None = None  # None: the config's `attention_bias` decides
    o_bias: bool | None = None  # None: the config's `attention_bias` decides
    qk_norm: bool = False  # RMSNorm over each head's q and k before rope


@dataclass(frozen=True)
class ModelConfig:
    """The architecture facts minisgl needs, read once from an HF config."""

    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    tie_word_embeddings: bool
    qkv_bias: bool
    o_bias: bool
    qk_norm: bool
    rotary: RotaryConfig
    max_position_embeddings: int
    eos_token_ids: tuple[int, ...]
    torch_dtype: torch.dtype
    # Mixture of experts (0 experts: a dense model).
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    norm_topk_prob: bool = False
    decoder_sparse_step: int = 1
    mlp_only_layers: tuple[int, ...] = ()
    quantization: CheckpointQuant | None = None  # the checkpoint's FP8 weights, None for plain ones

    def is_moe_layer(self, layer_id: int) -> bool:
        return (
            self.num_experts > 0
            and layer_id not in self.mlp_only_layers
            and (layer_id + 1) % self.decoder_sparse_step == 0
        )

    @classmethod
    def from_hf(cls, hf: PretrainedConfig, traits: ArchitectureTraits) -> ModelConfig:
        arch = (getattr(hf, "architectures", None) or ["<none>"])[0]
        act = getattr(hf, "hidden_act", "silu")
        if act != "silu":
            raise ValueError(f"{arch}: only SiLU-gated MLPs are supported, got hidden_act={act!r}")
        head_dim = getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads
        attention_bias = bool(getattr(hf, "attention_bias", False))
        eos = hf.eos_token_id
        eos_ids = tuple(eos) if isinstance(eos, (list, tuple)) else ((eos,) if eos is not None else ())
        dtype = getattr(hf, "dtype", None) or getattr(hf, "torch_dtype", None) or torch.float32
        if isinstance(dtype, str):
            dtype = getattr(torch, dtype)
        return cls(
            architecture=arch,
            vocab_size=hf.vocab_size,
            hidden_size=hf.hidden_size,
            intermediate_size=getattr(hf, "intermediate_size", 0),
            num_layers=hf.num_hidden_layers,
            num_heads=hf.num_attention_heads,
            num_kv_heads=getattr(hf, "num_key_value_heads", None) or hf.num_attention_heads,
            head_dim=head_dim,
            rms_norm_eps=hf.rms_norm_eps,
            tie_word_embeddings=bool(getattr(hf, "tie_word_embeddings", False)),
            qkv_bias=attention_bias if traits.qkv_bias is None else traits.qkv_bias,
            o_bias=attention_bias if traits.o_bias is None else traits.o_bias,
            qk_norm=traits.qk_norm,
            rotary=rotary_from_hf(hf, head_dim),
            max_position_embeddings=hf.max_position_embeddings,
            eos_token_ids=eos_ids,
            torch_dtype=dtype,
            num_experts=getattr(hf, "num_experts", 0) or 0,
            num_experts_per_tok=getattr(hf, "num_experts_per_tok", 0) or 0,
            moe_intermediate_size=getattr(hf, "moe_intermediate_size", 0) or 0,
            norm_topk_prob=bool(getattr(hf, "norm_topk_prob", False)),
            decoder_sparse_step=getattr(hf, "decoder_sparse_step", 1) or 1,
            mlp_only_layers=tuple(getattr(hf, "mlp_only_layers", ()) or ()),
            quantization=checkpoint_quant(getattr(hf, "quantization_config", None)),
        )


def _rope_params(hf: PretrainedConfig) -> dict:
    # transformers >= 5 keeps rope settings in `rope_parameters`; older ones in rope_theta/rope_scaling.
    params = dict(getattr(hf, "rope_parameters", None) or getattr(hf, "rope_scaling", None) or {})
    params.setdefault("rope_theta", getattr(hf, "rope_theta", 10000.0))
    params.setdefault("rope_type", params.get("type", "default"))
    return params


def rotary_from_hf(hf: PretrainedConfig, head_dim: int) -> RotaryConfig:
    """The rotary embedding an HF config describes (rope_theta, rope scaling), for `head_dim`-wide heads."""
    params = _rope_params(hf)
    rope_type = params["rope_type"]
    if rope_type == "default":
        inv_freq = 1.0 / (params["rope_theta"] ** (torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim))
        scaling = 1.0
    else:
        # Scaled variants (llama3, yarn, linear, ...) use transformers' own reference formulas.
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

        if rope_type not in ROPE_INIT_FUNCTIONS:
            raise ValueError(f"unsupported rope type {rope_type!r}; known: default, {', '.join(ROPE_INIT_FUNCTIONS)}")
        inv_freq, scaling = ROPE_INIT_FUNCTIONS[rope_type](hf, torch.device("cpu"))
    return RotaryConfig(tuple(inv_freq.tolist()), float(scaling), hf.max_position_embeddings)
