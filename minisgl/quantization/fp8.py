"""FP8 (e4m3) numerics: scaling weights up from a checkpoint's scales, and quantizing per output
channel (row) for the FP8 GEMM and for `--quantization fp8`."""

from __future__ import annotations

import torch

from .config import CheckpointQuant

FP8 = torch.float8_e4m3fn
FP8_MAX = torch.finfo(FP8).max  # 448


def dequantize(weight: torch.Tensor, scale: torch.Tensor, quant: CheckpointQuant, name: str = "") -> torch.Tensor:
    """A checkpoint's FP8 weight [out, in] times its scale, in float32 (exact: 4 significant bits
    times a float32 scale fit float32's 24)."""
    out, cols = weight.shape
    scale = scale.float()
    if quant.strategy == "block":
        bn, bk = quant.block
        want = (-(-out // bn), -(-cols // bk))
        if tuple(scale.shape) != want:
            raise ValueError(f"{name}: block scales of shape {tuple(scale.shape)}, expected {want} for a "
                             f"{out}x{cols} weight in {bn}x{bk} blocks")
        scale = scale.repeat_interleave(bn, 0)[:out].repeat_interleave(bk, 1)[:, :cols]
    elif quant.strategy == "channel":
        if scale.numel() != out:
            raise ValueError(f"{name}: {scale.numel()} channel scales for a weight of {out} rows")
        scale = scale.reshape(out, 1)
    elif scale.numel() == 1:
        scale = scale.reshape(1, 1)
    else:
        raise ValueError(f"{name}: a per-tensor scale must be one number, got shape {tuple(scale.shape)}")
    return weight.float() * scale


def quantize_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row FP8: (weight / scale saturated to e4m3, float32 scales [rows]), amax / 448 per row."""
    w = weight.float()
    scale = (w.abs().amax(dim=1) / FP8_MAX).clamp_(min=1e-12)
    return (w / scale[:, None]).clamp_(-FP8_MAX, FP8_MAX).to(FP8), scale


def round_trip_rows(weight: torch.Tensor) -> torch.Tensor:
    """The weight as per-row FP8 represents it, back in its own dtype (FP8 weights where no FP8
    GEMM runs: the CPU, GPUs before Hopper)."""
    q, scale = quantize_rows(weight)
    return (q.float() * scale[:, None]).to(weight.dtype)
