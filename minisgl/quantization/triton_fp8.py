"""Triton kernel for the FP8 GEMM's activations: per-token (row) quantization to e4m3 in one
launch (torch would take five: abs, amax, divide, clamp, cast). Imported only on CUDA."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .fp8 import FP8, FP8_MAX


@triton.jit
def _per_token_fp8_kernel(x_ptr, q_ptr, s_ptr, stride_x, K, BLOCK: tl.constexpr, LIMIT: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    amax = tl.full((), 0.0, tl.float32)
    for start in range(0, K, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_x + offs, mask=offs < K, other=0.0).to(tl.float32)
        amax = tl.maximum(amax, tl.max(tl.abs(x), 0))
    scale = tl.maximum(amax / LIMIT, 1e-12)
    tl.store(s_ptr + row, scale)
    for start in range(0, K, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_x + offs, mask=offs < K, other=0.0).to(tl.float32)
        q = tl.minimum(tl.maximum(x / scale, -LIMIT), LIMIT)
        tl.store(q_ptr + row * K + offs, q.to(q_ptr.dtype.element_ty), mask=offs < K)


def quantize_per_token(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [rows, K] (last dim contiguous) -> (e4m3 [rows, K], float32 scales [rows, 1])."""
    rows, k = x.shape
    q = torch.empty((rows, k), dtype=FP8, device=x.device)
    s = torch.empty((rows, 1), dtype=torch.float32, device=x.device)
    if rows:
        _per_token_fp8_kernel[(rows,)](x, q, s, x.stride(0), k, BLOCK=1024, LIMIT=FP8_MAX, num_warps=4)
    return q, s


@triton.jit
def _fp8_weight_gemm_kernel(x_ptr, w_ptr, s_ptr, y_ptr, M, N, K, stride_xm, stride_wn, stride_ym, k_per_split,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """y[M, N] += (x[M, K] @ w[N, K]^T over this program's K range) * s[N], in float32 (atomic:
    the K splits of one N block add into the same outputs)."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    rm = tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    k_start = pid_k * k_per_split
    k_end = tl.minimum(k_start + k_per_split, K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(k_start, k_end, BLOCK_K):
        kk = k0 + rk
        x = tl.load(x_ptr + rm[:, None] * stride_xm + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < k_end),
                    other=0.0)
        w = tl.load(w_ptr + rn[None, :] * stride_wn + kk[:, None], mask=(rn[None, :] < N) & (kk[:, None] < k_end),
                    other=0.0)
        acc += tl.dot(x.to(tl.bfloat16), w.to(tl.bfloat16))
    acc = acc * tl.load(s_ptr + rn, mask=rn < N, other=0.0)[None, :]
    tl.atomic_add(y_ptr + rm[:, None] * stride_ym + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


# Tiles of the small-batch GEMM: 16 rows (tl.dot's least), 64 output features, 256 of K a step;
# K is split until about two programs per SM (132 on an H100) stream the weight.
SMALL_M, BLOCK_N, BLOCK_K, TARGET_PROGRAMS = 16, 64, 256, 264


def fp8_weight_gemm(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x [M <= 16, K] (bf16, rows contiguous) @ (weight [N, K] e4m3 * scale [N])^T in bf16, with x
    kept in bf16: a weight-streaming GEMM for decode at small batch, where the weight read is
    the whole cost and an FP8 tensor-core GEMM leaves most SMs idle (few output tiles, no K split)."""
    m, k = x.shape
    n = weight.shape[0]
    n_blocks = triton.cdiv(n, BLOCK_N)
    k_steps = triton.cdiv(k, BLOCK_K)
    split = max(1, min(k_steps, TARGET_PROGRAMS // n_blocks))
    k_per_split = triton.cdiv(k_steps, split) * BLOCK_K
    split = triton.cdiv(k, k_per_split)
    y = torch.zeros((m, n), dtype=torch.float32, device=x.device)
    _fp8_weight_gemm_kernel[(n_blocks, split)](x, weight, scale, y, m, n, k, x.stride(0), weight.stride(0), y.stride(0),
                                               k_per_split, BLOCK_M=SMALL_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
                                               num_warps=4, num_stages=4)
    return y.to(x.dtype)
