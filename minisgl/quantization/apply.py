"""Turning a loaded model's linear layers into FP8 ones, after its weights are in place.

The tensor-parallel linear layers (attention q/k/v and output, MLP gate/up and down) are the
ones FP8 checkpoints quantize; embeddings, the LM head, norms and MoE experts and routers stay in
the model's dtype (an FP8 MoE checkpoint's experts are dequantized at load).
- Where FP8 GEMMs run (Hopper, bfloat16): each weight is re-quantized per output channel and the
  layer's `gemm` becomes `fp8_linear` (gemm.py). Per-tensor and per-channel checkpoint scales survive
  this exactly; 128x128 block scales are folded into per-row ones (one more rounding to e4m3).
- Elsewhere the weights stay dequantized in the model's dtype; with `--quantization fp8` of a
  plain checkpoint they are first rounded through per-row FP8, so the numbers are FP8's anywhere.
"""

from __future__ import annotations

import functools

import torch
from torch import nn

from minisgl.layers.linear import ColumnParallelLinear, GateUpParallelLinear, QKVParallelLinear, RowParallelLinear
from minisgl.utils.logger import get_logger

from .config import ONLINE_QUANTIZATION, CheckpointQuant
from .fp8 import quantize_rows, round_trip_rows
from .gemm import fp8_gemm_problem, fp8_linear, fp8_linear_silu_and_mul, fp8_qkv_rope_store

logger = get_logger(__name__)


def check_online_quantization(name: str | None) -> None:
    if name is not None and name not in ONLINE_QUANTIZATION:
        raise ValueError(f"unknown quantization {name!r}; supported: {', '.join(ONLINE_QUANTIZATION)}")


def fp8_linears(model: nn.Module, only: set[str] | None = None) -> list[tuple[str, nn.Module]]:
    """The linear layers to run in FP8: those whose weight is in `only` (all when None)."""
    return [(name, m) for name, m in model.named_modules()
            if isinstance(m, (ColumnParallelLinear, RowParallelLinear)) and (only is None or f"{name}.weight" in only)]


@torch.no_grad()
def quantize_model(model: nn.Module, checkpoint: CheckpointQuant | None, online: str | None,
                   fp8_weights: set[str] | None, device: torch.device, dtype: torch.dtype) -> str | None:
    """Make the FP8 layers FP8 (see the module docstring); returns a line for the log, or None
    when the model has no FP8 weights. `fp8_weights`: parameters loaded from FP8 tensors (None:
    every linear layer, e.g. with dummy weights)."""
    check_online_quantization(online)
    if checkpoint is None and online is None:
        return None
    layers = fp8_linears(model, fp8_weights if checkpoint is not None else None)
    problem = fp8_gemm_problem(device, dtype)
    source = checkpoint.describe() if checkpoint is not None else f"--quantization {online} (per-channel, dynamic)"
    gemm = 0
    for _, layer in layers:
        w = layer.weight
        if problem is None and w.shape[0] % 16 == 0 and w.shape[1] % 16 == 0:  # _scaled_mm's alignment
            q, scale = quantize_rows(w.data)
            layer.weight = nn.Parameter(q, requires_grad=False)
            layer.register_buffer("weight_scale", scale.view(1, -1), persistent=False)
            layer.gemm = functools.partial(fp8_linear, weight_scale=layer.weight_scale)
            if isinstance(layer, GateUpParallelLinear):
                layer.gated_gemm = functools.partial(fp8_linear_silu_and_mul, weight_scale=layer.weight_scale)
            if isinstance(layer, QKVParallelLinear):
                layer.rope_store_gemm = functools.partial(fp8_qkv_rope_store, weight_scale=layer.weight_scale)
            gemm += 1
        elif checkpoint is None:
            w.data.copy_(round_trip_rows(w.data))
    if device.type == "cuda":
        torch.cuda.empty_cache()  # the bf16 copies: give the KV cache their memory
    if gemm:
        how = (f"FP8 GEMMs in {gemm} of {len(layers)} linear layers (per-channel scales; a Triton weight-streaming "
               "GEMV at <= 16 rows, silu(gate) * up in the gate/up one, rotary + KV store in the q/k/v one "
               "without q/k norms; torch._scaled_mm above)")
        if checkpoint is not None and checkpoint.static_activations:
            how += "; the static input scales are unused: activations are quantized per token"
    else:
        how = f"dequantized to {str(dtype).removeprefix('torch.')} at load ({problem})"
    return f"weights: {source}: {how}"
