"""What an HF checkpoint's `quantization_config` says about its weights, read once at start.

Two FP8 layouts are served, as published on the Hub:
- `quant_method: fp8` (Qwen3-*-FP8, DeepSeek): with `weight_block_size` [bn, bk], each weight
  has a `weight_scale_inv` of ceil(out/bn) x ceil(in/bk) block scales; without it one per-tensor
  `weight_scale` (and `input_scale` when `activation_scheme` is static).
- `quant_method: compressed-tensors`, `format: float-quantized` (llm-compressor's FP8, e.g. the
  Llama-3.1 FP8 checkpoints): `weight_scale` per tensor or per output channel, input activations
  dynamic (per token) or static (a per-tensor `input_scale`).
Anything else is refused at start, naming what is supported.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from minisgl.utils import choices


@dataclass(frozen=True)
class CheckpointQuant:
    """How the checkpoint's FP8 weights are scaled."""

    method: str  # a key of QUANT_METHODS
    strategy: str  # "block", "channel" or "tensor": the shape of each weight's scale
    scale_name: str  # the suffix replacing "weight" in a weight's name: its scale tensor
    block: tuple[int, int] | None = None  # (rows, columns) per block scale
    static_activations: bool = False  # the checkpoint holds per-tensor input scales

    def describe(self) -> str:
        shape = f"{self.block[0]}x{self.block[1]} block" if self.block else f"per-{self.strategy}"
        return f"{self.method} FP8, {shape} weight scales, {'static' if self.static_activations else 'dynamic'} activations"


def _fp8(cfg: dict[str, Any]) -> CheckpointQuant:
    if cfg.get("fmt", "e4m3") != "e4m3":
        raise ValueError(f"quant_method fp8: only the e4m3 format is supported, the checkpoint says {cfg['fmt']!r}")
    static = cfg.get("activation_scheme", "dynamic") == "static"
    block = cfg.get("weight_block_size")
    if block:
        if len(block) != 2 or not all(isinstance(b, int) and b > 0 for b in block):
            raise ValueError(f"quant_method fp8: weight_block_size must be two positive integers, got {block!r}")
        return CheckpointQuant("fp8", "block", "weight_scale_inv", (block[0], block[1]), static)
    return CheckpointQuant("fp8", "tensor", "weight_scale", None, static)


def _compressed_tensors(cfg: dict[str, Any]) -> CheckpointQuant:
    fmt = cfg.get("format")
    if fmt != "float-quantized":
        raise ValueError(f"compressed-tensors: only the float-quantized (FP8) format is supported, the checkpoint "
                         f"says {fmt!r}")
    groups = list((cfg.get("config_groups") or {}).values())
    if len(groups) != 1:
        raise ValueError(f"compressed-tensors: one config group is supported, the checkpoint has {len(groups)}")
    weights, acts = groups[0].get("weights") or {}, groups[0].get("input_activations")
    fp8 = {"num_bits": 8, "type": "float"}
    if any(weights.get(k) != v for k, v in fp8.items()) or weights.get("dynamic"):
        raise ValueError(f"compressed-tensors: weights must be static 8-bit floats, the checkpoint has {weights}")
    strategy = weights.get("strategy")
    if strategy not in ("tensor", "channel"):
        raise ValueError(f"compressed-tensors: weight strategy {strategy!r} is not supported; tensor or channel")
    if acts is not None and any(acts.get(k) != v for k, v in fp8.items()):
        raise ValueError(f"compressed-tensors: input activations must be 8-bit floats, the checkpoint has {acts}")
    static = acts is not None and not acts.get("dynamic", False)
    return CheckpointQuant("compressed-tensors", strategy, "weight_scale", None, static)


# quant_method -> reader of the rest of its quantization_config.
QUANT_METHODS: dict[str, Callable[[dict[str, Any]], CheckpointQuant]] = {
    "fp8": _fp8,
    "compressed-tensors": _compressed_tensors,
}
# --quantization values: how to quantize a checkpoint of unquantized weights at load.
ONLINE_QUANTIZATION = choices.ONLINE_QUANTIZATION  # --quantization's values


def checkpoint_quant(quantization_config: dict[str, Any] | None) -> CheckpointQuant | None:
    """The checkpoint's quantization, None for plain weights; ValueError for what is not served."""
    if not quantization_config:
        return None
    cfg = quantization_config if isinstance(quantization_config, dict) else quantization_config.to_dict()
    method = cfg.get("quant_method")
    if method not in QUANT_METHODS:
        raise ValueError(f"unsupported quantization method {method!r} in the checkpoint's quantization_config; "
                         f"supported: {', '.join(QUANT_METHODS)}")
    return QUANT_METHODS[method](cfg)
