"""FP8 GEMMs on Hopper: weights in e4m3 with one float32 scale per output channel. Above 16 rows,
activations are quantized per token at run time (one Triton kernel) and `torch._scaled_mm`'s
row-wise scaled FP8 GEMM writes bfloat16; at 16 rows and fewer (decode at small batch, where
reading the weight is the whole cost and the tensor-core GEMM leaves most SMs idle) a Triton
GEMV streams the FP8 weight over all SMs in one launch and keeps the activations in bf16; for the
MLP's gate/up projection it also applies silu(gate) * up (`fp8_linear_silu_and_mul`), for the
attention's q/k/v one the rotary embedding and the KV store (`fp8_qkv_rope_store`). The kernels
are in minisgl.kernels. Activations are always quantized dynamically: a checkpoint's static
per-tensor input scale is coarser than a per-token one, so it is not used.

Everything GPU-specific (triton, the CUDA capability) is looked at only when asked."""

from __future__ import annotations

import torch

from minisgl.kernels.dispatch import fp8_gemm_ops, gemv_for
from minisgl.layers.activation import silu_and_mul

from .fp8 import FP8, FP8_MAX


def fp8_gemm_problem(device: torch.device, dtype: torch.dtype) -> str | None:
    """Why FP8 GEMMs cannot run here (then weights are dequantized at load), or None."""
    if device.type != "cuda":
        return "no FP8 GEMM on the CPU"
    if torch.cuda.get_device_capability(device) < (9, 0):
        return "row-wise scaled FP8 GEMMs need a Hopper (sm90) or newer GPU"
    if dtype != torch.bfloat16:
        return f"row-wise scaled FP8 GEMMs write bfloat16, the model runs in {str(dtype).removeprefix('torch.')}"
    if not hasattr(torch, "_scaled_mm"):
        return "this torch has no _scaled_mm"
    return None


def quantize_per_token(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [rows, K] (last dim contiguous) -> (e4m3 [rows, K], float32 scales [rows, 1])."""
    kernels = fp8_gemm_ops() if x.is_cuda else None
    if kernels is not None:
        return kernels.quantize_per_token(x, FP8)
    scale = (x.float().abs().amax(dim=1, keepdim=True) / FP8_MAX).clamp_(min=1e-12)
    return (x.float() / scale).clamp_(-FP8_MAX, FP8_MAX).to(FP8), scale


def _rows(x: torch.Tensor) -> torch.Tensor:
    x2 = x.reshape(-1, x.shape[-1])
    return x2 if x2.stride(-1) == 1 else x2.contiguous()


def fp8_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, *,
               weight_scale: torch.Tensor) -> torch.Tensor:
    """F.linear(x, weight * weight_scale[:, None], bias) with `weight` e4m3 [N, K] and
    `weight_scale` float32 [1, N]: an FP8 GEMM with x quantized per token."""
    x2 = _rows(x)
    kernels = gemv_for(x2)
    if kernels is not None:  # decode at small batch: stream the FP8 weight, x stays bf16
        y = kernels.gemv(x2, weight, weight_scale.view(-1))
    else:
        xq, xs = quantize_per_token(x2)
        # weight.t() is column-major, as the FP8 GEMM wants its second operand.
        y = torch._scaled_mm(xq, weight.t(), scale_a=xs, scale_b=weight_scale, out_dtype=x.dtype)
    if bias is not None:  # added here: not every torch takes a bias with row-wise scales
        y = y + bias
    return y.reshape(*x.shape[:-1], weight.shape[0])


def fp8_linear_silu_and_mul(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, *,
                            weight_scale: torch.Tensor) -> torch.Tensor:
    """silu_and_mul(fp8_linear(...)) for a [gate; up] weight: at small batch one kernel (the GEMV
    with the activation in its epilogue), else the GEMM and silu_and_mul."""
    x2 = _rows(x)
    kernels = gemv_for(x2) if bias is None else None
    if kernels is None:
        return silu_and_mul(fp8_linear(x2, weight, bias, weight_scale=weight_scale)).reshape(*x.shape[:-1], -1)
    y = kernels.gemv(x2, weight, weight_scale.view(-1), gated=True)
    return y.reshape(*x.shape[:-1], weight.shape[0] // 2)


def fp8_qkv_rope_store(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, *,
                       weight_scale: torch.Tensor, **attention) -> torch.Tensor | None:
    """The q/k/v layer's FP8 gemm with the rotary embedding and the KV store in its epilogue
    (minisgl.kernels.qkv_rope.fp8_qkv_rope_store, whose keywords `attention` are): q rotated, k
    and v in the cache. None where that kernel does not run (large batch, a bias, tiles that do
    not fit a head): then the caller multiplies, rotates and stores as usual."""
    x2 = _rows(x)
    kernels = gemv_for(x2) if bias is None else None
    if kernels is None:
        return None
    return kernels.fp8_qkv_rope_store(x2, weight, weight_scale.view(-1), **attention)
