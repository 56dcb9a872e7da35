"""Model architectures, their registry, and checkpoint loading."""

from __future__ import annotations

from transformers import AutoConfig

from .config import ArchitectureTraits, ModelConfig, RotaryConfig
from .registry import ARCHITECTURES, Architecture, create_model, get_architecture
from .weight import init_dummy_weights, load_weights


def load_model_config(model_path: str) -> ModelConfig:
    hf = AutoConfig.from_pretrained(model_path)
    arch = (getattr(hf, "architectures", None) or ["<none>"])[0]
    return ModelConfig.from_hf(hf, get_architecture(arch).traits)  # an unknown one fails, naming the supported


__all__ = ["ARCHITECTURES", "Architecture", "ArchitectureTraits", "ModelConfig", "RotaryConfig", "create_model",
           "get_architecture", "init_dummy_weights", "load_weights", "load_model_config"]
