"""Attention backends over the paged KV cache, chosen by name at engine start.

`--attn NAME` uses one backend for every batch; `--attn PREFILL,DECODE` uses one for prefill
(extend) batches and another for decode batches. `auto` picks per device: torch on the CPU,
FlashInfer on CUDA (FA3 prefill kernels on Hopper, FA2 with an FP8 KV cache), torch where FlashInfer cannot run (float32,
odd head sizes, package missing). `sgl-fa3` (sgl-kernel's FlashAttention-3, Hopper) is opt-in.
GPU backends import their libraries only when created.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from minisgl.core.attn_backend import BaseAttnBackend
from minisgl.core.batch import BaseAttnMetadata, Batch
from minisgl.core.context import Context
from minisgl.utils.logger import get_logger

from .base import AttnShape
from .torch_native import TorchNativeBackend

logger = get_logger(__name__)


def _flashinfer(prefill_kernel: str) -> Callable[[Context, AttnShape], BaseAttnBackend]:
    def make(ctx: Context, shape: AttnShape) -> BaseAttnBackend:
        from .flashinfer import FlashInferBackend

        return FlashInferBackend(ctx, shape, prefill_kernel=prefill_kernel)

    return make


# FlashInfer names and the prefill kernels they use ("fa3": FlashInfer's FA3 kernels, Hopper
# only); decode always runs FlashInfer's decode kernels.
FLASHINFER_PREFILL_KERNELS = {"flashinfer": "fa2", "fi": "fa2", "fa2": "fa2", "fa3": "fa3"}

def _sgl_fa3(ctx: Context, shape: AttnShape) -> BaseAttnBackend:
    from .sgl_fa3 import create

    return create(ctx, shape)


ATTN_BACKENDS: dict[str, Callable[[Context, AttnShape], BaseAttnBackend]] = {
    "torch": TorchNativeBackend,
    "sgl-fa3": _sgl_fa3,
    **{name: _flashinfer(kernel) for name, kernel in FLASHINFER_PREFILL_KERNELS.items()},
}


class HybridBackend(BaseAttnBackend):
    """One backend for prefill batches, another for decode batches (and their CUDA graphs)."""

    def __init__(self, prefill: BaseAttnBackend, decode: BaseAttnBackend):
        self.prefill, self.decode = prefill, decode
        self.supports_cuda_graph = decode.supports_cuda_graph
        self.supports_verify_graph = prefill.supports_verify_graph  # verify batches run the prefill side
        self.accepts_stored_kv = prefill.accepts_stored_kv and decode.accepts_stored_kv

    @property
    def label(self) -> str:
        return f"{self.prefill.label} prefill + {self.decode.label} decode"

    def _pick(self, batch: Batch) -> BaseAttnBackend:
        return self.decode if batch.is_decode else self.prefill

    def prepare_metadata(self, batch: Batch) -> None:
        self._pick(batch).prepare_metadata(batch)

    def forward(self, q, k, v, layer, batch):
        return self._pick(batch).forward(q, k, v, layer, batch)

    def attend_into(self, q, layer, batch, out) -> None:
        self._pick(batch).attend_into(q, layer, batch, out)

    def init_capture_graph(self, max_bs: int, batch_sizes: list[int]) -> None:
        self.decode.init_capture_graph(max_bs, batch_sizes)

    def prepare_for_capture(self, batch: Batch, bs: int) -> None:
        self.decode.prepare_for_capture(batch, bs)

    def prepare_for_replay(self, batch: Batch, bs: int) -> None:
        self.decode.prepare_for_replay(batch, bs)

    def init_verify_graph(self, max_bs: int, shapes: list[tuple[int, int]]) -> None:
        self.prefill.init_verify_graph(max_bs, shapes)

    def prepare_verify_graph(self, batch, bs, t, rows, seq_lens) -> None:
        self.prefill.prepare_verify_graph(batch, bs, t, rows, seq_lens)


def default_backend(ctx: Context, shape: AttnShape | None = None) -> str:
    if ctx.device.type != "cuda":
        return "torch"
    from .flashinfer import supports

    problem = supports(shape, ctx.device) if shape is not None else "unknown model shape"
    if problem:
        logger.info("attention: torch backend on CUDA (%s)", problem)
        return "torch"
    hopper = torch.cuda.get_device_capability(ctx.device)[0] == 9
    # FA3 prefill needs queries and KV of one dtype: an FP8 cache prefills with FA2.
    return "fa3,flashinfer" if hopper and shape.cache_dtype == shape.dtype else "flashinfer"


def _create_one(name: str, ctx: Context, shape: AttnShape | None) -> BaseAttnBackend:
    if name not in ATTN_BACKENDS:
        raise ValueError(f"unknown attention backend {name!r}; available: {', '.join(sorted(ATTN_BACKENDS))}")
    return ATTN_BACKENDS[name](ctx, shape)


def create_attention_backend(name: str, ctx: Context, shape: AttnShape | None = None) -> BaseAttnBackend:
    if name == "auto":
        name = default_backend(ctx, shape)
    parts = [p.strip() for p in name.split(",")]
    if len(parts) > 2 or not all(parts):
        raise ValueError(f"attention backend {name!r}: give one name or 'prefill,decode'")
    for p in parts:
        if p not in ATTN_BACKENDS:
            raise ValueError(f"unknown attention backend {p!r}; available: {', '.join(sorted(ATTN_BACKENDS))}")
    if len(parts) == 1 or parts[0] == parts[1]:
        return _create_one(parts[0], ctx, shape)
    if parts[0] in FLASHINFER_PREFILL_KERNELS and parts[1] in FLASHINFER_PREFILL_KERNELS:
        # FlashInfer both ways: one backend (one workspace), prefill kernels from the first name.
        return _flashinfer(FLASHINFER_PREFILL_KERNELS[parts[0]])(ctx, shape)
    return HybridBackend(_create_one(parts[0], ctx, shape), _create_one(parts[1], ctx, shape))


__all__ = [
    "ATTN_BACKENDS",
    "AttnShape",
    "BaseAttnBackend",
    "BaseAttnMetadata",
    "HybridBackend",
    "create_attention_backend",
    "default_backend",
]
