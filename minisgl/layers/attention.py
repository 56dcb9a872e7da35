from __future__ import annotations

import torch
from torch import nn

from minisgl.core.context import get_global_ctx
from minisgl.kernels.dispatch import triton_for


class AttentionLayer(nn.Module):
    """Stores this layer's new K/V in the paged cache and attends over it via the backend.

    Given `positions` and `rotary` (and Qwen3's per-head `q_norm` / `k_norm`), it also applies
    those to q and k first: on CUDA in half precision with a backend that accepts K/V already in
    the cache, one Triton kernel normalizes, rotates and stores them; otherwise the layers' own
    code runs, then the backend stores. Called with k and v None, it attends over what the cache
    holds: `project` stored them.
    """

    def __init__(self, layer_id: int, num_heads: int, num_kv_heads: int, head_dim: int):
        super().__init__()
        self.layer_id = layer_id
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.scale = head_dim**-0.5
        # Per-tensor FP8 KV-cache scales from the checkpoint (`self_attn.k_scale` / `v_scale`),
        # None when it has none; the engine hands them to the KV pool.
        self.k_scale: float | None = None
        self.v_scale: float | None = None

    def project(self, qkv_proj, x: torch.Tensor, positions: torch.Tensor, rotary) -> torch.Tensor | None:
        """The q/k/v projection, rotary and KV store in one kernel, where the projection has one
        (QKVParallelLinear.rope_store_gemm: FP8 at small batch) and the backend reads K/V from the
        cache: returns q, rotated, with this step's k and v in the cache. Else None."""
        gemm = qkv_proj.rope_store_gemm
        ctx = get_global_ctx()
        # LoRA adds to q/k/v after the GEMM, which the fused kernel has already rotated and stored.
        if (gemm is None or qkv_proj.lora is not None or not ctx.attn_backend.accepts_stored_kv
                or rotary.cos_sin.shape[1] != self.head_dim):
            return None
        kv = ctx.kv_cache
        return gemm(x, qkv_proj.weight, qkv_proj.bias, heads=self.num_heads, kv_heads=self.num_kv_heads,
                    positions=positions, cos_sin=rotary.cos_sin, out_loc=ctx.current_batch().out_loc,
                    k_cache=kv.k_cache(self.layer_id), v_cache=kv.v_cache(self.layer_id),
                    k_scale=kv.k_scales[self.layer_id], v_scale=kv.v_scales[self.layer_id])

    def forward(self, q: torch.Tensor, k: torch.Tensor | None, v: torch.Tensor | None,
                positions: torch.Tensor | None = None,
                rotary=None, q_norm=None, k_norm=None) -> torch.Tensor:
        ctx = get_global_ctx()
        batch = ctx.current_batch()
        backend = ctx.attn_backend
        if rotary is not None:
            kernels = triton_for(q) if backend.accepts_stored_kv else None
            if kernels is not None and rotary.cos_sin.shape[1] == self.head_dim and _pow2(self.head_dim):
                kv = ctx.kv_cache
                q = kernels.qk_norm_rope_store(
                    q, k, v, positions, rotary.cos_sin, batch.out_loc, kv.k_cache(self.layer_id),
                    kv.v_cache(self.layer_id), q_norm.weight if q_norm is not None else None,
                    k_norm.weight if k_norm is not None else None, q_norm.eps if q_norm is not None else 1e-6,
                    kv.k_scales[self.layer_id], kv.v_scales[self.layer_id])
                return backend.forward(q, None, None, self, batch)
            if q_norm is not None:
                q, k = q_norm(q), k_norm(k)
            q, k = rotary(positions, q, k)
        return backend.forward(q, k, v, self, batch)


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0
