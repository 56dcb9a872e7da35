"""Multi-LoRA serving: PEFT adapters read and checked against the base model (`adapter`), their
fixed pool of weight slots attached to the model's linears (`pool`), loads read off the scheduler's
loop and installed between two steps (`loader`), and the batched apply that serves a batch mixing
adapters and the base model in one forward pass (`linear`)."""

from __future__ import annotations

from minisgl.utils.lora_modules import parse_lora_modules

from .adapter import TARGET_MODULES, LoraAdapter, load_adapter
from .linear import LoraBatchState, LoraLinear
from .loader import AdapterLoads
from .pool import LoraPool

__all__ = ["TARGET_MODULES", "AdapterLoads", "LoraAdapter", "LoraBatchState", "LoraLinear", "LoraPool", "load_adapter",
           "parse_lora_modules"]
