"""Which class serves which HF `architectures` name, with the traits its config leaves unsaid."""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from .config import ArchitectureTraits, ModelConfig
from .decoder import DecoderForCausalLM


@dataclass(frozen=True)
class Architecture:
    model_class: type[nn.Module]
    traits: ArchitectureTraits


# The traits follow each family's HF modeling code: Llama, Qwen3 and Qwen3-MoE put
# `attention_bias` on q/k/v and o alike; Qwen2 always biases q/k/v and never o; Mistral never
# biases; Qwen3 and Qwen3-MoE normalize q and k per head.
ARCHITECTURES: dict[str, Architecture] = {
    "LlamaForCausalLM": Architecture(DecoderForCausalLM, ArchitectureTraits()),
    "MistralForCausalLM": Architecture(DecoderForCausalLM, ArchitectureTraits(qkv_bias=False, o_bias=False)),
    "Qwen2ForCausalLM": Architecture(DecoderForCausalLM, ArchitectureTraits(qkv_bias=True, o_bias=False)),
    "Qwen3ForCausalLM": Architecture(DecoderForCausalLM, ArchitectureTraits(qk_norm=True)),
    "Qwen3MoeForCausalLM": Architecture(DecoderForCausalLM, ArchitectureTraits(qk_norm=True)),
}


def get_architecture(name: str) -> Architecture:
    if name not in ARCHITECTURES:
        raise ValueError(f"unsupported model architecture {name!r}; supported: {', '.join(sorted(ARCHITECTURES))}")
    return ARCHITECTURES[name]


def create_model(cfg: ModelConfig) -> nn.Module:
    return get_architecture(cfg.architecture).model_class(cfg)
