"""Attention backends over the paged KV cache, chosen by name at engine start."""

from __future__ import annotations

from collections.abc import Callable

from minisgl.core import Context

from .base import BaseAttnBackend, BaseAttnMetadata
from .torch_native import TorchNativeBackend

ATTN_BACKENDS: dict[str, Callable[[Context], BaseAttnBackend]] = {
    "torch": TorchNativeBackend,
}


def default_backend(ctx: Context) -> str:
    return "torch"


def create_attention_backend(name: str, ctx: Context) -> BaseAttnBackend:
    if name == "auto":
        name = default_backend(ctx)
    if name not in ATTN_BACKENDS:
        raise ValueError(f"unknown attention backend {name!r}; available: {', '.join(sorted(ATTN_BACKENDS))}")
    return ATTN_BACKENDS[name](ctx)


__all__ = ["BaseAttnBackend", "BaseAttnMetadata", "ATTN_BACKENDS", "create_attention_backend"]
