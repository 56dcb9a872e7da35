"""Per-token (row) quantization of activations to FP8 in one launch (torch would take five: abs,
amax, divide, clamp, cast): the FP8 GEMM's input above the GEMV's rows."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


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


def quantize_per_token(x: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """x [rows, K] (last dim contiguous) -> (x / scale in the FP8 `dtype` [rows, K], float32
    scales [rows, 1]), a row's scale its amax / the largest value of `dtype`."""
    rows, k = x.shape
    q = torch.empty((rows, k), dtype=dtype, device=x.device)
    s = torch.empty((rows, 1), dtype=torch.float32, device=x.device)
    if rows:
        _per_token_fp8_kernel[(rows,)](x, q, s, x.stride(0), k, BLOCK=1024, LIMIT=torch.finfo(dtype).max, num_warps=4)
    return q, s
