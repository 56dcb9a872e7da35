from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from minisgl.distributed import DistributedInfo

if TYPE_CHECKING:
    from minisgl.kvcache.mha_pool import MHAKVCache

    from .attn_backend import BaseAttnBackend
    from .batch import Batch


@dataclass(eq=False)
class Context:
    """The one object that holds the engine's shared state for this process.

    Layers read the current batch, the KV pool and the attention backend from here instead of
    having them threaded through every forward call.
    """

    device: torch.device
    tp: DistributedInfo
    page_table: torch.Tensor | None = None
    kv_cache: MHAKVCache | None = None
    attn_backend: BaseAttnBackend | None = None
    batch: Batch | None = None
    moe_backend: str = "loop"  # loop | grouped | fused | auto: see minisgl.layers.moe

    @contextmanager
    def forward_batch(self, batch: Batch) -> Iterator[Batch]:
        """`batch` is the current one for the layers inside the block (a forward pass, a graph
        capture), and no longer after it, even when the pass fails."""
        self.batch = batch
        try:
            yield batch
        finally:
            self.batch = None

    def current_batch(self) -> Batch:
        if self.batch is None:
            raise RuntimeError("no batch is being forwarded")
        return self.batch


_CTX: Context | None = None


def set_global_ctx(ctx: Context | None) -> None:
    global _CTX
    _CTX = ctx


def get_global_ctx() -> Context:
    if _CTX is None:
        raise RuntimeError("the engine context is not initialized; create an Engine first")
    return _CTX
