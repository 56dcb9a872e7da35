"""Fused CUDA kernels for the layers' hot paths, used for float16/bfloat16 tensors on CUDA:
FlashInfer's RMSNorm, add + RMSNorm, SiLU-and-mul and rotary kernels, and minisgl's Triton
kernels (q/k norm + rotary + KV store in one pass, see triton_kernels.py).

Everything else (the CPU, float32, the library missing, MINISGL_DISABLE_FUSED_KERNELS=1) uses
the layers' torch code. The imports happen on first use, never at package import.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace

import torch

from minisgl.utils import env

_HALF = (torch.float16, torch.bfloat16)


@functools.cache
def flashinfer_ops() -> SimpleNamespace | None:
    if env.DISABLE_FUSED_KERNELS.on():
        return None
    try:
        from flashinfer.jit.activation import gen_act_and_mul_module
        from flashinfer.jit.norm import gen_norm_module
        from flashinfer.rope import apply_rope_with_cos_sin_cache_inplace
    except ImportError:
        return None
    # The compiled modules are called directly: FlashInfer's public functions go through torch
    # custom-op registration, tens of microseconds of host time per call in eager (prefill) runs.
    norm = gen_norm_module().build_and_load()
    act = gen_act_and_mul_module("silu").build_and_load()
    pdl = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9

    def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        out = torch.empty_like(x)
        norm.rmsnorm(out, x, weight, eps, pdl)
        return out

    def fused_add_rmsnorm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
        norm.fused_add_rmsnorm(x, residual, weight, eps, pdl)

    def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty(x.shape[:-1] + (x.shape[-1] // 2,), dtype=x.dtype, device=x.device)
        act.silu_and_mul(out, x, pdl)
        return out

    return SimpleNamespace(rmsnorm=rmsnorm, fused_add_rmsnorm=fused_add_rmsnorm, silu_and_mul=silu_and_mul,
                           rope=apply_rope_with_cos_sin_cache_inplace)


@functools.cache
def triton_ops():
    """minisgl.layers.triton_kernels, or None without triton (or with fused kernels disabled)."""
    if env.DISABLE_FUSED_KERNELS.on():
        return None
    try:
        from . import triton_kernels
    except ImportError:
        return None
    return triton_kernels


def fused_ops(x: torch.Tensor) -> SimpleNamespace | None:
    """The fused kernels if they can run on `x`, else None."""
    if not x.is_cuda or x.dtype not in _HALF:
        return None
    return flashinfer_ops()


def triton_for(x: torch.Tensor):
    """The Triton kernels if they can run on `x`, else None."""
    if not x.is_cuda or x.dtype not in _HALF:
        return None
    return triton_ops()
