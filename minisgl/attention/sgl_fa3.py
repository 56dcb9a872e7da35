"""sgl-kernel's FlashAttention-3 over the paged KV cache (Hopper), for prefill and decode, with
static buffers for decode CUDA graphs. Chosen with `--attn sgl-fa3` (or e.g. `sgl-fa3,flashinfer`).

FA3 reads the cache through a token-level page table, which is exactly minisgl's page table (row,
position) -> slot: the cache is viewed as pages of one slot, so any `--page-size` works and no
page ids are gathered. sgl_kernel is imported when the backend is created, never at package
import. It is opt-in: the automatic default stays FlashInfer, the path measured in
benchmark/NOTES.md (sgl-kernel could not be carried to the lent GPUs, see its "Notes").
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from minisgl.core.attn_backend import BaseAttnBackend
from minisgl.core.batch import BaseAttnMetadata, Batch
from minisgl.core.context import Context
from minisgl.core.host import indptr, to_device

from .base import AttnShape

SUPPORTED_HEAD_DIMS = (64, 96, 128, 256)


def supports(shape: AttnShape, device: torch.device) -> str | None:
    """Why sgl-kernel's FA3 cannot serve this model here, or None."""
    if shape.cache_dtype != shape.dtype:
        return "it reads a KV cache of the model's dtype only (no FP8 KV cache)"
    if device.type != "cuda":
        return "it needs a CUDA device"
    if torch.cuda.get_device_capability(device)[0] != 9:
        return "its FA3 kernels are built for Hopper GPUs (sm90) only"
    if shape.dtype not in (torch.float16, torch.bfloat16):
        return f"it needs float16 or bfloat16, the model runs in {shape.dtype}"
    if shape.head_dim not in SUPPORTED_HEAD_DIMS:
        return f"head_dim {shape.head_dim} is not one of {SUPPORTED_HEAD_DIMS}"
    if importlib.util.find_spec("sgl_kernel") is None:
        return "the sgl-kernel package is not installed (pip install 'minisgl[cuda]')"
    return None


@dataclass
class FA3Metadata(BaseAttnMetadata):
    cache_seqlens: torch.Tensor  # int32 [n]: each request's length after the step
    cu_seqlens_q: torch.Tensor  # int32 [n + 1]: query (extend) offsets
    page_table: torch.Tensor  # int32 [n, >= max seq_len]: slots of each request's positions
    max_seqlen_q: int


def create(ctx: Context, shape: AttnShape) -> SglFA3Backend:
    problem = supports(shape, ctx.device)
    if problem:
        raise RuntimeError(f"sgl-kernel FA3 attention backend: {problem}")
    from sgl_kernel.flash_attn import flash_attn_with_kvcache

    return SglFA3Backend(ctx, shape, flash_attn_with_kvcache)


class SglFA3Backend(BaseAttnBackend):
    """The metadata and graph buffers around a kernel with the interface of sgl_kernel's
    `flash_attn_with_kvcache` (varlen queries, paged cache, `cache_seqlens`, causal from the
    bottom right)."""

    supports_cuda_graph = True
    supports_verify_graph = True
    accepts_stored_kv = True

    def __init__(self, ctx: Context, shape: AttnShape, attend: Callable[..., torch.Tensor]):
        self.attend = attend
        self.ctx = ctx
        self.sm_scale = shape.head_dim**-0.5
        self.dummy_row = ctx.page_table.shape[0] - 1
        kv = ctx.kv_cache
        one_slot_pages = (-1, 1, shape.num_kv_heads, shape.head_dim)
        self.kv_views = [(kv.k_cache(i).view(one_slot_pages), kv.v_cache(i).view(one_slot_pages))
                         for i in range(kv.k_buffer.shape[0])]

    def prepare_metadata(self, batch: Batch) -> None:
        rows, cached, device_lens = batch.host_arrays
        extend = device_lens - cached
        dev = self.ctx.device
        max_len = int(device_lens.max())
        table = self.ctx.page_table[to_device(rows, dev), :max_len]
        batch.attn_metadata = FA3Metadata(
            extend_lens=extend.tolist(), seq_lens=device_lens.tolist(),
            cache_seqlens=to_device(device_lens.astype(np.int32), dev), cu_seqlens_q=to_device(indptr(extend), dev),
            page_table=table, max_seqlen_q=int(extend.max()))

    def forward(self, q, k, v, layer, batch):
        if k is not None:
            self.ctx.kv_cache.store_kv(k, v, batch.out_loc, layer.layer_id)
        m: FA3Metadata = batch.attn_metadata
        k_cache, v_cache = self.kv_views[layer.layer_id]
        return self.attend(q, k_cache, v_cache, cache_seqlens=m.cache_seqlens, page_table=m.page_table,
                           cu_seqlens_q=m.cu_seqlens_q, max_seqlen_q=m.max_seqlen_q, softmax_scale=self.sm_scale,
                           causal=True)

    # -- CUDA graphs (decode): the kernel reads lengths and table rows from static buffers --------

    def init_capture_graph(self, max_bs: int, batch_sizes: list[int]) -> None:
        dev = self.ctx.device
        self.g_seqlens = torch.ones(max_bs, dtype=torch.int32, device=dev)
        self.g_cu_q = torch.arange(max_bs + 1, dtype=torch.int32, device=dev)  # one query per request
        self.g_table = torch.zeros(max_bs, self.ctx.page_table.shape[1], dtype=torch.int32, device=dev)

    def _graph_metadata(self, batch: Batch, bs: int, seq_lens: list[int]) -> None:
        batch.attn_metadata = FA3Metadata(
            extend_lens=[1] * len(seq_lens), seq_lens=seq_lens, cache_seqlens=self.g_seqlens[:bs],
            cu_seqlens_q=self.g_cu_q[: bs + 1], page_table=self.g_table[:bs], max_seqlen_q=1)

    def prepare_for_capture(self, batch: Batch, bs: int) -> None:
        self.g_seqlens[:bs].fill_(1)
        self.g_table[:bs, 0] = self.ctx.page_table[self.dummy_row, 0]
        self._graph_metadata(batch, bs, [])

    def prepare_for_replay(self, batch: Batch, bs: int) -> None:
        rows, _, device_lens = batch.host_arrays
        pad = bs - len(rows)
        rows = np.concatenate([rows, np.full(pad, self.dummy_row, dtype=np.int64)])
        lens = np.concatenate([device_lens, np.ones(pad, dtype=np.int64)]).astype(np.int32)
        dev = self.ctx.device
        self.g_seqlens[:bs].copy_(to_device(lens, dev))
        # Only the columns this batch reads: the kernel never looks past cache_seqlens.
        max_len = int(lens.max())
        self.g_table[:bs, :max_len] = self.ctx.page_table[to_device(rows, dev), :max_len]
        self._graph_metadata(batch, bs, device_lens.tolist())

    # -- CUDA graphs (verify): t queries a request, the same static lengths and table ---------------

    def init_verify_graph(self, max_bs: int, shapes: list[tuple[int, int]]) -> None:
        dev = self.ctx.device
        self.v_seqlens = torch.ones(max_bs, dtype=torch.int32, device=dev)
        self.v_table = torch.zeros(max_bs, self.ctx.page_table.shape[1], dtype=torch.int32, device=dev)
        self.v_cu_q = {t: torch.arange(max_bs + 1, dtype=torch.int32, device=dev) * t for t in {t for _, t in shapes}}

    def prepare_verify_graph(self, batch: Batch, bs: int, t: int, rows: np.ndarray, seq_lens: np.ndarray) -> None:
        dev = self.ctx.device
        self.v_seqlens[:bs].copy_(to_device(seq_lens.astype(np.int32), dev))
        max_len = int(seq_lens.max())  # the kernel never looks past cache_seqlens
        self.v_table[:bs, :max_len] = self.ctx.page_table[to_device(rows, dev), :max_len]
        batch.attn_metadata = FA3Metadata(
            extend_lens=[t] * bs, seq_lens=seq_lens.tolist(), cache_seqlens=self.v_seqlens[:bs],
            cu_seqlens_q=self.v_cu_q[t][: bs + 1], page_table=self.v_table[:bs], max_seqlen_q=t)
