"""The attention backend's interface: the context holds a backend, the layers call its `forward`,
the engine prepares each batch with it and captures CUDA graphs through its hooks. The backends
themselves are in minisgl.attention."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Protocol

import numpy as np
import torch

from .batch import Batch


class AttnLayer(Protocol):
    """What a backend reads from the layer it attends for (a minisgl.layers.AttentionLayer)."""

    layer_id: int
    num_heads: int
    num_kv_heads: int
    scale: float


class BaseAttnBackend(ABC):
    """Attention over the paged KV cache. One instance serves every layer of a forward pass.

    Backends that can run decode inside a CUDA graph set `supports_cuda_graph` and implement the
    three graph hooks: the graph runner calls `init_capture_graph` once, `prepare_for_capture`
    before capturing each batch size, and `prepare_for_replay` before each replay. Padding
    requests point at the page table's last (dummy) row with length 1.
    """

    supports_cuda_graph: bool = False

    @property
    def label(self) -> str:
        """How the start-up log and the /metrics info series name it: 'TorchNative'."""
        return type(self).__name__.removesuffix("Backend")
    # Whether forward() takes k = v = None when the caller already stored them at batch.out_loc.
    accepts_stored_kv: bool = False

    @abstractmethod
    def prepare_metadata(self, batch: Batch) -> None:
        """Build `batch.attn_metadata` (page indices, lengths) for the coming forward pass."""

    @abstractmethod
    def forward(self, q: torch.Tensor, k: torch.Tensor | None, v: torch.Tensor | None, layer: AttnLayer,
                batch: Batch) -> torch.Tensor:
        """Store this layer's new k/v at batch.out_loc (unless they are None: already stored) and
        return attention output [tokens, heads, dim]."""

    def attend_into(self, q: torch.Tensor, layer: AttnLayer, batch: Batch, out: torch.Tensor) -> None:
        """Attention of q over what the cache holds (this layer's k/v already stored), written into
        `out` [tokens, heads, dim]: a prefill replaying piecewise graphs (minisgl.engine.prefill_graph)
        reads it from there. A backend whose kernel takes an output buffer saves the copy."""
        out.copy_(self.forward(q, None, None, layer, batch))

    # -- CUDA graph hooks (decode only) --------------------------------------------------------

    def init_capture_graph(self, max_bs: int, batch_sizes: list[int]) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not support CUDA graphs")

    def prepare_for_capture(self, batch: Batch, bs: int) -> None:
        """Set `batch.attn_metadata` for capturing a decode graph of `bs` dummy requests."""
        raise NotImplementedError

    def prepare_for_replay(self, batch: Batch, bs: int) -> None:
        """Refill the static metadata of graph `bs` for `batch` (padded to `bs` with dummies)."""
        raise NotImplementedError

    # -- CUDA graph hooks (verify batches of speculative decoding, minisgl.engine.verify_graph) ----
    # Graph (bs, t): bs requests of t query tokens each, at the end of their `seq_lens` (causal from
    # the bottom right, as an extend); padding requests use the dummy row with length t.

    supports_verify_graph: bool = False

    def init_verify_graph(self, max_bs: int, shapes: list[tuple[int, int]]) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not capture verify graphs")

    def prepare_verify_graph(self, batch: Batch, bs: int, t: int, rows: np.ndarray, seq_lens: np.ndarray) -> None:
        """Set `batch.attn_metadata` (static buffers, refilled) for graph (bs, t), before its capture
        and each replay: `rows` / `seq_lens` (int64 [bs]) are the padded requests' page-table rows
        and lengths after the step."""
        raise NotImplementedError

    def graph_rows_lens(self, bs: int) -> torch.Tensor | None:
        """An int32 [2 bs] buffer from which graph `bs` reads each request's page-table row ([:bs])
        and length ([bs:]), which the graph's first kernel fills (no host copy), or None."""
        return None
