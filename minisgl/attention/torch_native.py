"""Attention in plain torch over the paged cache: the CPU path, and the reference for GPU kernels.
An FP8 cache is dequantized as it is read (MHAKVCache.read_kv)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from minisgl.core.attn_backend import BaseAttnBackend
from minisgl.core.batch import BaseAttnMetadata, Batch
from minisgl.core.context import Context
from minisgl.core.host import to_device

# Decode graphs gather every request's whole page-table row: only for short tables (tests).
GRAPH_MAX_TABLE_WIDTH = 4096


@dataclass
class TorchAttnMetadata(BaseAttnMetadata):
    # For each request, the cache slots of positions [0, seq_len).
    kv_slots: list[torch.Tensor]


@dataclass
class TorchGraphMetadata(BaseAttnMetadata):
    """Decode inside a CUDA graph: static page-table rows and lengths, padded to the graph size."""

    rows: torch.Tensor  # int64 [bs]
    lens: torch.Tensor  # int64 [bs]


@dataclass
class TorchVerifyMetadata(TorchGraphMetadata):
    """A verify graph: each request's `t` queries are its last t positions (lens - t ..)."""

    t: int = 1


class TorchNativeBackend(BaseAttnBackend):
    def __init__(self, ctx: Context, shape=None):
        self.ctx = ctx
        self.supports_cuda_graph = ctx.device.type == "cuda" and ctx.page_table.shape[1] <= GRAPH_MAX_TABLE_WIDTH
        self.supports_verify_graph = self.supports_cuda_graph
        self.dummy_row = ctx.page_table.shape[0] - 1

    def prepare_metadata(self, batch: Batch) -> None:
        table = self.ctx.page_table
        batch.attn_metadata = TorchAttnMetadata(
            extend_lens=[r.extend_len for r in batch.reqs],
            seq_lens=[r.device_len for r in batch.reqs],
            kv_slots=[table[r.table_idx, : r.device_len].long() for r in batch.reqs],
        )

    def forward(self, q, k, v, layer, batch):
        kv = self.ctx.kv_cache
        kv.store_kv(k, v, batch.out_loc, layer.layer_id)
        meta = batch.attn_metadata
        if isinstance(meta, TorchVerifyMetadata):
            return self._graph_verify(q, layer, meta)
        if isinstance(meta, TorchGraphMetadata):
            return self._graph_decode(q, layer, meta)
        out = torch.empty_like(q)
        start = 0
        for ext, seq, slots in zip(meta.extend_lens, meta.seq_lens, meta.kv_slots):
            qr = q[start : start + ext].transpose(0, 1)  # [heads, ext, dim]
            kr, vr = (x.transpose(0, 1) for x in kv.read_kv(layer.layer_id, slots, q.dtype))  # [kv_heads, seq, dim]
            # Query i sits at position seq - ext + i and sees keys up to that position.
            mask = None
            if ext > 1:
                q_pos = torch.arange(seq - ext, seq, device=q.device).unsqueeze(1)
                mask = torch.arange(seq, device=q.device).unsqueeze(0) <= q_pos
            o = F.scaled_dot_product_attention(qr, kr, vr, attn_mask=mask, scale=layer.scale,
                                               enable_gqa=layer.num_heads != layer.num_kv_heads)
            out[start : start + ext] = o.transpose(0, 1)
            start += ext
        return out

    # -- CUDA graphs: dense decode over whole page-table rows -------------------------------------

    def _graph_decode(self, q, layer, meta: TorchGraphMetadata):
        slots = self.ctx.page_table[meta.rows].long()  # [bs, width]
        width = slots.shape[1]
        visible = torch.arange(width, device=q.device).unsqueeze(0) < meta.lens.unsqueeze(1)
        kr, vr = (x.transpose(1, 2) for x in self.ctx.kv_cache.read_kv(layer.layer_id, slots, q.dtype))  # [bs, kv_heads, width, dim]
        o = F.scaled_dot_product_attention(q.unsqueeze(2), kr, vr, attn_mask=visible[:, None, None, :],
                                           scale=layer.scale, enable_gqa=layer.num_heads != layer.num_kv_heads)
        return o.squeeze(2)

    def _graph_verify(self, q, layer, meta: TorchVerifyMetadata):
        """t queries a request, masked causally over whole page-table rows (fixed shapes: no host
        lengths); query j of request b sits at position lens[b] - t + j."""
        bs, t = meta.rows.shape[0], meta.t
        slots = self.ctx.page_table[meta.rows].long()  # [bs, width]
        width = slots.shape[1]
        q_pos = meta.lens.unsqueeze(1) - t + torch.arange(t, device=q.device)  # [bs, t]
        visible = torch.arange(width, device=q.device).view(1, 1, width) <= q_pos.unsqueeze(2)  # [bs, t, width]
        kr, vr = (x.transpose(1, 2) for x in self.ctx.kv_cache.read_kv(layer.layer_id, slots, q.dtype))
        qr = q.reshape(bs, t, *q.shape[1:]).transpose(1, 2)  # [bs, heads, t, dim]
        o = F.scaled_dot_product_attention(qr, kr, vr, attn_mask=visible.unsqueeze(1), scale=layer.scale,
                                           enable_gqa=layer.num_heads != layer.num_kv_heads)
        return o.transpose(1, 2).reshape(q.shape)

    def init_capture_graph(self, max_bs: int, batch_sizes: list[int]) -> None:
        if not self.supports_cuda_graph:
            raise NotImplementedError("torch attention captures graphs only on CUDA with short page tables")
        device = self.ctx.device
        self.g_rows = torch.full((max_bs,), self.dummy_row, dtype=torch.int64, device=device)
        self.g_lens = torch.ones(max_bs, dtype=torch.int64, device=device)

    def prepare_for_capture(self, batch: Batch, bs: int) -> None:
        self.g_rows[:bs].fill_(self.dummy_row)
        self.g_lens[:bs].fill_(1)
        batch.attn_metadata = TorchGraphMetadata([1] * bs, [1] * bs, self.g_rows[:bs], self.g_lens[:bs])

    def prepare_for_replay(self, batch: Batch, bs: int) -> None:
        rows, _, device_lens = batch.host_arrays
        pad = bs - len(rows)
        host = np.concatenate([rows, np.full(pad, self.dummy_row, dtype=np.int64),
                               device_lens, np.ones(pad, dtype=np.int64)])
        both = to_device(host, self.ctx.device)
        self.g_rows[:bs].copy_(both[:bs])
        self.g_lens[:bs].copy_(both[bs:])
        batch.attn_metadata = TorchGraphMetadata([1] * len(rows), device_lens.tolist(), self.g_rows[:bs],
                                                 self.g_lens[:bs])

    # -- CUDA graphs (verify): the same, t queries a request ---------------------------------------

    def init_verify_graph(self, max_bs: int, shapes: list[tuple[int, int]]) -> None:
        device = self.ctx.device
        self.v_rows = torch.full((max_bs,), self.dummy_row, dtype=torch.int64, device=device)
        self.v_lens = torch.ones(max_bs, dtype=torch.int64, device=device)

    def prepare_verify_graph(self, batch: Batch, bs: int, t: int, rows: np.ndarray, seq_lens: np.ndarray) -> None:
        both = to_device(np.concatenate([rows, seq_lens]), self.ctx.device)
        self.v_rows[:bs].copy_(both[:bs], non_blocking=True)
        self.v_lens[:bs].copy_(both[bs:], non_blocking=True)
        batch.attn_metadata = TorchVerifyMetadata([t] * bs, seq_lens.tolist(), self.v_rows[:bs], self.v_lens[:bs], t)
