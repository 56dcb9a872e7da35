"""Multi-LoRA serving: PEFT adapters read and checked against the base model (`adapter`), their
fixed pool of weight slots attached to the model's linears (`pool`), and the batched apply that
serves a batch mixing adapters and the base model in one forward pass (`linear`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .adapter import TARGET_MODULES, LoraAdapter, load_adapter
from .linear import LoraBatchState, LoraLinear
from .pool import LoraPool


def parse_lora_modules(value: Mapping[str, str] | Iterable[str] | None) -> dict[str, str]:
    """`lora_modules` as name -> path: a mapping, or `name=path` strings (the flag's form)."""
    if not value:
        return {}
    if isinstance(value, Mapping):
        return dict(value)
    modules = {}
    for item in value:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"--lora-modules takes name=path, got {item!r}")
        if name in modules:
            raise ValueError(f"--lora-modules names {name!r} twice")
        modules[name] = path
    return modules


__all__ = ["TARGET_MODULES", "LoraAdapter", "LoraBatchState", "LoraLinear", "LoraPool", "load_adapter",
           "parse_lora_modules"]
