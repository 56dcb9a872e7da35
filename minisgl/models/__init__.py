"""Model architectures, their registry, and checkpoint loading."""

from __future__ import annotations

from transformers import AutoConfig

from .config import ModelConfig, RotaryConfig
from .registry import MODEL_REGISTRY, create_model, get_model_class
from .weight import init_dummy_weights, load_weights


def load_model_config(model_path: str) -> ModelConfig:
    hf = AutoConfig.from_pretrained(model_path)
    arch = (getattr(hf, "architectures", None) or ["<none>"])[0]
    get_model_class(arch)  # fails early, naming the supported architectures
    return ModelConfig.from_hf(hf)


__all__ = ["ModelConfig", "RotaryConfig", "MODEL_REGISTRY", "create_model", "get_model_class",
           "init_dummy_weights", "load_weights", "load_model_config"]
