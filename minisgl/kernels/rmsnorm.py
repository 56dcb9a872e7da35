"""`add_rmsnorm`: the pre-norm layer's residual add + RMSNorm, on Hopper in place of FlashInfer's:
it lets the kernel after it (the next GEMM) launch while it runs (programmatic dependent launch)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .device import pdl_launch
from .launch import launch


@triton.jit
def _add_rmsnorm_kernel(x_ptr, r_ptr, w_ptr, stride_x, stride_r, D, eps, BLOCK: tl.constexpr, PDL: tl.constexpr):
    """Row t: r[t] = x[t] + r[t] (rounded to the model dtype, as HF adds), x[t] = rmsnorm(r[t]) * w.
    PDL: wait for the kernel before (it wrote x), then at once let the kernel after launch: it
    waits for this one to finish, but is launched and placed on the SMs meanwhile, where a
    trigger at the end (FlashInfer's norms) adds its launch to every layer's critical path
    (measured on a batch-1 step's GEMMs and norms: benchmark/NOTES.md)."""
    t = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < D
    w = tl.load(w_ptr + offs, mask=mask, other=0.0)
    if PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    x = tl.load(x_ptr + t * stride_x + offs, mask=mask, other=0.0)
    dtype = x.dtype  # float32 math, rounded to it where torch's half-precision ops round
    h = (x.to(tl.float32) + tl.load(r_ptr + t * stride_r + offs, mask=mask, other=0.0).to(tl.float32)).to(dtype)
    tl.store(r_ptr + t * stride_r + offs, h, mask=mask)
    hf = h.to(tl.float32)
    normed = (hf * tl.rsqrt(tl.sum(hf * hf, 0) / D + eps)).to(dtype)
    tl.store(x_ptr + t * stride_x + offs, (normed.to(tl.float32) * w.to(tl.float32)).to(dtype), mask=mask)


def add_rmsnorm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, pdl: bool) -> None:
    """In place, x and residual [rows, D] (last dim contiguous): residual += x, then x =
    RMSNorm(residual) * weight, as minisgl.layers.RMSNorm computes it in torch."""
    rows, d = x.shape
    if rows:
        launch(_add_rmsnorm_kernel, (rows, 1, 1), (x, residual, weight, x.stride(0), residual.stride(0), d, eps),
               {"BLOCK": triton.next_power_of_2(d), "PDL": pdl}, num_warps=8, **pdl_launch(pdl))
