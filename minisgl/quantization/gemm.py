"""FP8 GEMMs on Hopper: weights in e4m3 with one float32 scale per output channel. Above 16 rows,
activations are quantized per token at run time (one Triton kernel) and `torch._scaled_mm`'s
row-wise scaled FP8 GEMM writes bfloat16; at 16 rows and fewer (decode at small batch, where
reading the weight is the whole cost and the tensor-core GEMM leaves most SMs idle) a Triton
GEMV streams the FP8 weight over all SMs in one launch and keeps the activations in bf16; for the
MLP's gate/up projection it also applies silu(gate) * up (`fp8_linear_silu_and_mul`), for the
attention's q/k/v one the rotary embedding and the KV store (`fp8_qkv_rope_store`). The same
GEMV streams the bf16 lm_head at decode (`head_gemv`): 12% faster than cuBLAS there.
Activations are always quantized dynamically: a checkpoint's static per-tensor input scale is
coarser than a per-token one, so it is not used.

Everything GPU-specific (triton, the CUDA capability) is looked at only when asked."""

from __future__ import annotations

import functools

import torch

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


@functools.cache
def _triton():
    try:
        from minisgl.kernels import gemv
    except ImportError:
        return None
    return gemv


def quantize_per_token(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [rows, K] (last dim contiguous) -> (e4m3 [rows, K], float32 scales [rows, 1])."""
    kernels = _triton() if x.is_cuda else None
    if kernels is not None:
        return kernels.quantize_per_token(x)
    scale = (x.float().abs().amax(dim=1, keepdim=True) / FP8_MAX).clamp_(min=1e-12)
    return (x.float() / scale).clamp_(-FP8_MAX, FP8_MAX).to(FP8), scale


@functools.cache
def _triton_qkv():
    try:
        from minisgl.kernels import qkv_rope
    except ImportError:
        return None
    return qkv_rope


def _gemv(x2: torch.Tensor):
    """The Triton kernels when x2 (rows of a bf16 input) is decode at small batch, else None."""
    kernels = _triton()
    if kernels is not None and x2.shape[0] <= kernels.GEMV_MAX_ROWS and x2.dtype == torch.bfloat16:
        return kernels
    return None


def _rows(x: torch.Tensor) -> torch.Tensor:
    x2 = x.reshape(-1, x.shape[-1])
    return x2 if x2.stride(-1) == 1 else x2.contiguous()


def head_gemv(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor | None:
    """x [rows, K] @ weight^T for an unquantized weight in x's dtype (the lm_head), into `out` when
    given, by the weight-streaming GEMV where it was measured faster than the library GEMM: up to
    16 bf16 rows on a Hopper GPU (Llama-3.1-8B's 1.05 GB head at one row: 332 against 377 us,
    benchmark/NOTES.md). None elsewhere: the caller multiplies as usual."""
    if not x.is_cuda or x.dim() != 2 or x.stride(-1) != 1 or weight.dtype != x.dtype:
        return None
    if torch.cuda.get_device_capability(x.device) < (9, 0) or _gemv(x) is None:
        return None
    return _triton().gemv(x, weight, out=out)


def fp8_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, *,
               weight_scale: torch.Tensor) -> torch.Tensor:
    """F.linear(x, weight * weight_scale[:, None], bias) with `weight` e4m3 [N, K] and
    `weight_scale` float32 [1, N]: an FP8 GEMM with x quantized per token."""
    x2 = _rows(x)
    kernels = _gemv(x2)
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
    kernels = _gemv(x2) if bias is None else None
    if kernels is None:
        return silu_and_mul(fp8_linear(x2, weight, bias, weight_scale=weight_scale)).reshape(*x.shape[:-1], -1)
    y = kernels.gemv(x2, weight, weight_scale.view(-1), gated=True)
    return y.reshape(*x.shape[:-1], weight.shape[0] // 2)


def fp8_qkv_rope_store(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, *,
                       weight_scale: torch.Tensor, **attention) -> torch.Tensor | None:
    """The q/k/v layer's FP8 gemm with the rotary embedding and the KV store in its epilogue
    (triton_qkv.fp8_qkv_rope_store, whose keywords `attention` are): q rotated, k and v in the
    cache. None where that kernel does not run (large batch, a bias, tiles that do not fit a
    head): then the caller multiplies, rotates and stores as usual."""
    x2 = _rows(x)
    if bias is not None or _gemv(x2) is None or _triton_qkv() is None:
        return None
    return _triton_qkv().fp8_qkv_rope_store(x2, weight, weight_scale.view(-1), **attention)
