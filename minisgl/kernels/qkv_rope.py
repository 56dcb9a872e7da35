"""The attention's q/k/v FP8 GEMV with rotary embedding and the KV store in its epilogue: at small
batch, one kernel where there were two (the GEMV, then qk_norm_rope.qk_norm_rope_store).

Why: a decode step at batch 1 is a few hundred short kernels, and each boundary between two of
them costs a gap that programmatic dependent launch does not hide; the rope + store kernel paid
one every layer for a few hundred bytes of work (the TPOT with it fused and without:
benchmark/NOTES.md).

How: rotate-half rotary pairs output feature d of a head with d + D/2. Each program streams the
weight rows of BLOCK_N / 2 such pairs of one head (the GEMV reads rows by pointer, so they need
not be adjacent), so its epilogue has both halves of every pair: it rotates q and k in float32
(before any bfloat16 rounding), writes q, and writes k and v into the cache slot of each token
(divided by the FP8 cache's scales). Per-head q/k norms (Qwen3) need a whole head, which no
program has: those models keep the separate kernel.
Imported only on CUDA (and by the CPU tests, under Triton's interpreter).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .device import pdl_launch, pdl_supported
from .gemv import GEMV_MAX_ROWS, gemv_config
from .gemv_tiles import load_tile, mac, output_tile, zero_accumulator


@triton.jit
def _rotated_store(dst, a, b, scale, ok, HALF: tl.constexpr):
    tl.store(dst, (a * scale).to(dst.dtype.element_ty), mask=ok)
    tl.store(dst + HALF, (b * scale).to(dst.dtype.element_ty), mask=ok)


@triton.jit
def _fp8_qkv_rope_kernel(x_ptr, w_ptr, s_ptr, q_ptr, kc_ptr, vc_ptr, cos_sin_ptr, pos_ptr, loc_ptr, M, K,
                         stride_xm, stride_wn, k_inv_scale, v_inv_scale, HQ: tl.constexpr, HK: tl.constexpr,
                         D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                         DOT: tl.constexpr, EVEN_K: tl.constexpr, IEEE: tl.constexpr, PDL: tl.constexpr,
                         STAGES: tl.constexpr):
    """Program (head h of the HQ + 2 HK, part j): output features d and d + D/2 of head h for
    d in [j * PAIRS, (j + 1) * PAIRS), side by side in its tile; the loop is _gemv_kernel's."""
    HALF: tl.constexpr = D // 2
    PAIRS: tl.constexpr = BLOCK_N // 2
    PARTS: tl.constexpr = HALF // PAIRS
    pid = tl.program_id(0)
    h = pid // PARTS
    first_dim = (pid % PARTS) * PAIRS
    dims = first_dim + tl.arange(0, PAIRS)
    i = tl.arange(0, BLOCK_N)
    rn = h * D + first_dim + i // 2 + (i % 2) * HALF
    rm = tl.arange(0, BLOCK_M)
    rk = tl.arange(0, BLOCK_K)
    m_ok = rm < M
    n_ok = rn < (HQ + 2 * HK) * D  # (always: a row for every program; the GEMV helpers want a mask)
    if PDL:
        tl.extra.cuda.gdc_wait()
    # Positions and slots were written at the start of the step: loaded now, used after the loop.
    pos = tl.load(pos_ptr + rm, mask=m_ok, other=0).to(tl.int64)
    loc = tl.load(loc_ptr + rm, mask=m_ok, other=0).to(tl.int64)
    cos = tl.load(cos_sin_ptr + pos[:, None] * D + dims[None, :])
    sin = tl.load(cos_sin_ptr + pos[:, None] * D + HALF + dims[None, :])
    x_ptrs = x_ptr + rm[:, None] * stride_xm + rk[None, :]
    w_ptrs = w_ptr + rn.to(tl.int64)[:, None] * stride_wn + rk[None, :]
    acc = zero_accumulator(BLOCK_M, BLOCK_N, BLOCK_K, DOT)
    for k0 in tl.range(0, K, BLOCK_K, num_stages=STAGES):
        x = load_tile(x_ptrs + k0, m_ok, rk, K - k0, EVEN_K)
        acc = mac(acc, x, load_tile(w_ptrs + k0, n_ok, rk, K - k0, EVEN_K), DOT, IEEE)
    first, second = tl.split(tl.reshape(output_tile(acc, s_ptr, rn, n_ok, DOT, True), (BLOCK_M, PAIRS, 2)))
    ok = m_ok[:, None]
    if h < HQ:
        _rotated_store(q_ptr + (rm[:, None] * HQ + h) * D + dims[None, :], first * cos - second * sin,
                       second * cos + first * sin, 1.0, ok, HALF)
    elif h < HQ + HK:
        _rotated_store(kc_ptr + (loc[:, None] * HK + h - HQ) * D + dims[None, :], first * cos - second * sin,
                       second * cos + first * sin, k_inv_scale, ok, HALF)
    else:
        _rotated_store(vc_ptr + (loc[:, None] * HK + h - HQ - HK) * D + dims[None, :], first, second,
                       v_inv_scale, ok, HALF)
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()


def fused_tile(rows: int, n: int, k: int, head_dim: int, device: torch.device | None = None):
    """The GEMV's tile for these shapes (on `device`) if its pairs fit a half head, else None."""
    if rows > GEMV_MAX_ROWS or head_dim % 2:
        return None
    cfg = gemv_config(rows, n, k, device=device)
    return cfg if cfg.block_n % 2 == 0 and (head_dim // 2) % (cfg.block_n // 2) == 0 else None


def fp8_qkv_rope_store(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, heads: int, kv_heads: int,
                       positions: torch.Tensor, cos_sin: torch.Tensor, out_loc: torch.Tensor,
                       k_cache: torch.Tensor, v_cache: torch.Tensor, k_scale: float = 1.0,
                       v_scale: float = 1.0) -> torch.Tensor | None:
    """x [M <= 16, K] (bf16, rows contiguous) @ (weight [(heads + 2 kv_heads) D, K] e4m3 * scale)^T
    split into q, k, v heads of D = k_cache.shape[-1]; q and k rotated by cos_sin (float32
    [positions, D], cos half then sin half) at `positions` (HF's rotate-half layout); k / k_scale
    and v / v_scale stored at slot out_loc[m] of k_cache / v_cache ([slots, kv_heads, D],
    contiguous). Returns q [M, heads, D] in x's dtype, or None where the tiles do not fit."""
    m, k = x.shape
    d = k_cache.shape[-1]
    cfg = fused_tile(m, weight.shape[0], k, d, x.device)
    if cfg is None:
        return None
    q = torch.empty((m, heads, d), dtype=x.dtype, device=x.device)
    if m == 0:
        return q
    pdl = pdl_supported(x.device)
    grid = ((heads + 2 * kv_heads) * d // cfg.block_n,)
    _fp8_qkv_rope_kernel[grid](
        x, weight, scale, q, k_cache, v_cache, cos_sin, positions, out_loc, m, k, x.stride(0), weight.stride(0),
        1.0 / k_scale, 1.0 / v_scale, HQ=heads, HK=kv_heads, D=d, BLOCK_M=16 if cfg.dot else triton.next_power_of_2(m),
        BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, DOT=cfg.dot, EVEN_K=k % cfg.block_k == 0, IEEE=not x.is_cuda,
        PDL=pdl, STAGES=cfg.num_stages, num_warps=cfg.num_warps, num_stages=cfg.num_stages, **pdl_launch(pdl))
    return q
