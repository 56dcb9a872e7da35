"""The per-rank inference engine: model, KV cache, attention backend, sampler."""

from .config import EngineConfig, resolve_device
from .engine import Engine, ForwardOutput
from .logits import LogitsAdjustment
from .sample import BatchSamplingArgs, Sampler

__all__ = ["Engine", "EngineConfig", "ForwardOutput", "BatchSamplingArgs", "Sampler", "LogitsAdjustment", "resolve_device"]
