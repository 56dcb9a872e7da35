"""`qk_norm_rope_store`: per-head RMSNorm of q and k (Qwen3; optional), rotary embedding, and the
store of k and v into this layer's KV cache, in one pass over each token's q/k/v (instead of five
kernels: two norms, rope, two index copies)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .device import pdl_launch, pdl_supported
from .launch import launch


@triton.jit
def _norm_rope_heads(src, dst, ok, w_ptr, offs, cos, sin, eps, scale, HALF: tl.constexpr, D: tl.constexpr,
                     NORM: tl.constexpr):
    """One token's heads (rows `ok`) from `src` to `dst`, each as its two rotate-half halves:
    RMS-normed by the weight at w_ptr when NORM, rotated by cos/sin, times `scale`."""
    x1 = tl.load(src, mask=ok, other=0.0).to(tl.float32)
    x2 = tl.load(src + HALF, mask=ok, other=0.0).to(tl.float32)
    if NORM:
        r = tl.rsqrt((tl.sum(x1 * x1, 1) + tl.sum(x2 * x2, 1)) / D + eps)[:, None]
        x1 = x1 * r * tl.load(w_ptr + offs).to(tl.float32)[None, :]
        x2 = x2 * r * tl.load(w_ptr + HALF + offs).to(tl.float32)[None, :]
    tl.store(dst, ((x1 * cos - x2 * sin) * scale).to(dst.dtype.element_ty), mask=ok)
    tl.store(dst + HALF, ((x2 * cos + x1 * sin) * scale).to(dst.dtype.element_ty), mask=ok)


@triton.jit
def _qk_norm_rope_store_kernel(
    q_ptr, k_ptr, v_ptr, q_out_ptr, qw_ptr, kw_ptr, cos_sin_ptr, pos_ptr, loc_ptr, kc_ptr, vc_ptr,
    q_st, q_sh, k_st, k_sh, v_st, v_sh, eps, k_inv_scale, v_inv_scale,
    HQ: tl.constexpr, HK: tl.constexpr, HQ_P: tl.constexpr, HK_P: tl.constexpr, D: tl.constexpr,
    NORM: tl.constexpr, PDL: tl.constexpr,
):
    HALF: tl.constexpr = D // 2
    if PDL:  # wait for the qkv GEMM, then let the attention kernel after this one launch at once
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    t = tl.program_id(0).to(tl.int64)
    pos = tl.load(pos_ptr + t).to(tl.int64)
    loc = tl.load(loc_ptr + t).to(tl.int64)
    offs = tl.arange(0, HALF)
    cos = tl.load(cos_sin_ptr + pos * D + offs)[None, :]
    sin = tl.load(cos_sin_ptr + pos * D + HALF + offs)[None, :]

    # q heads -> q_out [T, HQ, D] (contiguous)
    hq = tl.arange(0, HQ_P)[:, None]
    mq = hq < HQ
    _norm_rope_heads(q_ptr + t * q_st + hq * q_sh + offs[None, :], q_out_ptr + t * (HQ * D) + hq * D + offs[None, :],
                     mq, qw_ptr, offs, cos, sin, eps, 1.0, HALF, D, NORM)

    # k heads -> the cache slot `loc`; an FP8 cache holds k / k_scale (the conversion saturates,
    # satfinite, on Hopper).
    hk = tl.arange(0, HK_P)[:, None]
    mk = hk < HK
    _norm_rope_heads(k_ptr + t * k_st + hk * k_sh + offs[None, :], kc_ptr + loc * (HK * D) + hk * D + offs[None, :],
                     mk, kw_ptr, offs, cos, sin, eps, k_inv_scale, HALF, D, NORM)

    # v -> the cache slot `loc` (times 1 / v_scale: exact for a cache of v's own dtype and scale 1)
    full = tl.arange(0, D)[None, :]
    vals = tl.load(v_ptr + t * v_st + hk * v_sh + full, mask=mk).to(tl.float32)
    tl.store(vc_ptr + loc * (HK * D) + hk * D + full, (vals * v_inv_scale).to(vc_ptr.dtype.element_ty), mask=mk)


def qk_norm_rope_store(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor,
                       cos_sin: torch.Tensor, out_loc: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                       q_weight: torch.Tensor | None = None, k_weight: torch.Tensor | None = None,
                       eps: float = 1e-6, k_scale: float = 1.0, v_scale: float = 1.0) -> torch.Tensor:
    """q [T, HQ, D], k/v [T, HK, D] (last dim contiguous, any token/head strides); cos_sin float32
    [positions, D] (cos half, sin half); k_cache/v_cache [slots, HK, D] contiguous (of q's dtype or
    FP8, which stores k / k_scale and v / v_scale). Writes the normed, rotated k and v at
    `out_loc`; returns the normed, rotated q as a new [T, HQ, D] tensor."""
    tokens, hq, d = q.shape
    hk = k.shape[1]
    q_out = torch.empty((tokens, hq, d), dtype=q.dtype, device=q.device)
    if tokens == 0:
        return q_out
    norm = q_weight is not None
    args = (q, k, v, q_out, q_weight if norm else q, k_weight if norm else k, cos_sin, positions, out_loc, k_cache,
            v_cache, q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), eps,
            1.0 / k_scale, 1.0 / v_scale)
    pdl = pdl_supported(q.device)
    consts = {"HQ": hq, "HK": hk, "HQ_P": triton.next_power_of_2(hq), "HK_P": triton.next_power_of_2(hk), "D": d,
              "NORM": norm, "PDL": pdl}
    launch(_qk_norm_rope_store_kernel, (tokens, 1, 1), args, consts, num_warps=4, **pdl_launch(pdl))
    return q_out
