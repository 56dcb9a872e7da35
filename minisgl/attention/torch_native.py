"""Attention in plain torch over the paged cache: the CPU path, and the reference for GPU kernels."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from minisgl.core import Batch, Context

from .base import BaseAttnBackend, BaseAttnMetadata


@dataclass
class TorchAttnMetadata(BaseAttnMetadata):
    # For each request, the cache slots of positions [0, seq_len).
    kv_slots: list[torch.Tensor]


class TorchNativeBackend(BaseAttnBackend):
    def __init__(self, ctx: Context):
        self.ctx = ctx

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
        k_cache, v_cache = kv.k_cache(layer.layer_id), kv.v_cache(layer.layer_id)
        meta: TorchAttnMetadata = batch.attn_metadata
        out = torch.empty_like(q)
        start = 0
        for ext, seq, slots in zip(meta.extend_lens, meta.seq_lens, meta.kv_slots):
            qr = q[start : start + ext].transpose(0, 1)  # [heads, ext, dim]
            kr = k_cache[slots].transpose(0, 1)  # [kv_heads, seq, dim]
            vr = v_cache[slots].transpose(0, 1)
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
