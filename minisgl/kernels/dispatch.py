"""Which kernels run on a tensor, imported on first use: FlashInfer's RMSNorm, add + RMSNorm,
SiLU-and-mul and rotary kernels, and minisgl's Triton kernels, for float16/bfloat16 tensors on
CUDA; the weight-streaming GEMV and the FP8 GEMMs' Triton kernels for decode's few bf16 rows.

Each function returns the kernels, or None where they cannot run (the CPU, float32, the library
missing, MINISGL_DISABLE_FUSED_KERNELS=1 for the fused ones): the caller's torch code runs then.
Nothing here imports triton or FlashInfer at package import, so minisgl runs without them.
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
def triton_ops() -> SimpleNamespace | None:
    """minisgl's Triton kernels of the layers and the sampler, or None without triton (or with
    fused kernels disabled)."""
    if env.DISABLE_FUSED_KERNELS.on():
        return None
    try:
        from .device import pdl_supported
        from .qk_norm_rope import qk_norm_rope_store
        from .rmsnorm import add_rmsnorm
        from .sampling import WIDE_ROWS, sample_gumbel_max
    except ImportError:
        return None
    return SimpleNamespace(add_rmsnorm=add_rmsnorm, pdl_supported=pdl_supported, qk_norm_rope_store=qk_norm_rope_store,
                           sample_gumbel_max=sample_gumbel_max, WIDE_ROWS=WIDE_ROWS)


def fused_ops(x: torch.Tensor) -> SimpleNamespace | None:
    """The fused kernels if they can run on `x`, else None."""
    if not x.is_cuda or x.dtype not in _HALF:
        return None
    return flashinfer_ops()


def triton_for(x: torch.Tensor) -> SimpleNamespace | None:
    """The Triton kernels if they can run on `x`, else None."""
    if not x.is_cuda or x.dtype not in _HALF:
        return None
    return triton_ops()


@functools.cache
def fp8_gemm_ops() -> SimpleNamespace | None:
    """The FP8 GEMMs' Triton kernels (per-token activation quantization, the weight-streaming
    GEMV, the q/k/v GEMV with rotary and KV store), or None without triton."""
    try:
        from .gemv import GEMV_MAX_ROWS, gemv
        from .qkv_rope import fp8_qkv_rope_store
        from .quantize import quantize_per_token
    except ImportError:
        return None
    return SimpleNamespace(GEMV_MAX_ROWS=GEMV_MAX_ROWS, gemv=gemv, fp8_qkv_rope_store=fp8_qkv_rope_store,
                           quantize_per_token=quantize_per_token)


def gemv_for(x: torch.Tensor) -> SimpleNamespace | None:
    """fp8_gemm_ops() when x (rows of a bf16 input) is decode at small batch, where the GEMV
    runs, else None."""
    ops = fp8_gemm_ops()
    if ops is not None and x.shape[0] <= ops.GEMV_MAX_ROWS and x.dtype == torch.bfloat16:
        return ops
    return None


def dense_gemv(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None = None,
               max_rows: int | None = None) -> torch.Tensor | None:
    """x [rows, K] @ weight^T for an unquantized weight in x's dtype (the lm_head and the linear
    layers), into `out` when given, by the weight-streaming GEMV where it was measured faster than
    the library GEMM: bf16 rows on a Hopper GPU, up to `max_rows` or the GEMV's own limit of 16
    (benchmark/NOTES.md). None elsewhere: the caller multiplies as usual."""
    if not x.is_cuda or x.dim() != 2 or x.stride(-1) != 1 or weight.dtype != x.dtype:
        return None
    if max_rows is not None and x.shape[0] > max_rows:
        return None
    if torch.cuda.get_device_capability(x.device) < (9, 0):
        return None
    ops = gemv_for(x)
    return None if ops is None else ops.gemv(x, weight, out=out)
