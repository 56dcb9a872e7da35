"""Test-side FP8 checkpoints: a random float32 model's linear weights quantized into each layout
the Hub publishes (written here from the formats' definitions, independently of minisgl's
reader), plus the float32 checkpoint of exactly the weights they represent (the reference)."""

from __future__ import annotations

import json
import os
import shutil

import torch
from safetensors.torch import load_file, save_file

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0
LINEAR = (".q_proj.weight", ".k_proj.weight", ".v_proj.weight", ".o_proj.weight", ".gate_proj.weight",
          ".up_proj.weight", ".down_proj.weight")


def _compressed_tensors(weights: str, activations: dict) -> dict:
    fp8 = {"num_bits": 8, "type": "float", "symmetric": True}
    return {"quant_method": "compressed-tensors", "format": "float-quantized", "quantization_status": "compressed",
            "ignore": ["lm_head"], "kv_cache_scheme": None,
            "config_groups": {"group_0": {"targets": ["Linear"],
                                          "weights": {**fp8, "strategy": weights, "dynamic": False},
                                          "input_activations": {**fp8, **activations}}}}


# config.json's quantization_config for each layout, as the published checkpoints write it.
QUANT_CONFIGS = {
    "fp8-block": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]},
    "ct-tensor-static": _compressed_tensors("tensor", {"strategy": "tensor", "dynamic": False}),
    "ct-channel-dynamic": _compressed_tensors("channel", {"strategy": "token", "dynamic": True}),
}


def quantize(w: torch.Tensor, layout: str) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """({suffix: tensor} replacing `weight` in the checkpoint, the float32 weight they represent)."""
    w = w.float()
    if layout == "fp8-block":
        rows, cols = w.shape
        pr, pc = -rows % 128, -cols % 128
        tiles = torch.nn.functional.pad(w, (0, pc, 0, pr)).reshape((rows + pr) // 128, 128, (cols + pc) // 128, 128)
        scale = tiles.abs().amax(dim=(1, 3)) / FP8_MAX  # [row blocks, column blocks]
        q = (tiles / scale[:, None, :, None]).to(FP8)
        deq = (q.float() * scale[:, None, :, None]).reshape(rows + pr, cols + pc)[:rows, :cols]
        q = q.reshape(rows + pr, cols + pc)[:rows, :cols].contiguous()
        return {"weight": q, "weight_scale_inv": scale}, deq
    if layout == "ct-tensor-static":
        scale = w.abs().max().reshape(1) / FP8_MAX
        q = (w / scale).to(FP8)
        return {"weight": q, "weight_scale": scale, "input_scale": torch.tensor([0.02])}, q.float() * scale
    if layout == "ct-channel-dynamic":
        scale = w.abs().amax(dim=1, keepdim=True) / FP8_MAX
        q = (w / scale).to(FP8)
        return {"weight": q, "weight_scale": scale}, q.float() * scale
    raise ValueError(layout)


def round_trip_rows(w: torch.Tensor) -> torch.Tensor:
    """What `--quantization fp8` makes of a weight: per-row e4m3 and back."""
    scale = w.float().abs().amax(dim=1, keepdim=True) / FP8_MAX
    return (w.float() / scale).to(FP8).float() * scale


def _copy_with(src: str, dst: str, tensors: dict[str, torch.Tensor], quantization_config: dict | None) -> str:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.safetensors", "*.index.json"))
    save_file({k: t.contiguous() for k, t in tensors.items()}, os.path.join(dst, "model.safetensors"),
              metadata={"format": "pt"})
    with open(os.path.join(dst, "config.json")) as f:
        config = json.load(f)
    if quantization_config is not None:
        config["quantization_config"] = quantization_config
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    return dst


def write_fp8_checkpoint(model_dir: str, out_dir: str, layout: str) -> tuple[str, str]:
    """(FP8 checkpoint dir, float32 reference dir holding the weights it represents)."""
    state = load_file(os.path.join(model_dir, "model.safetensors"))
    fp8, ref = {}, {}
    for name, tensor in state.items():
        if name.endswith(LINEAR):
            parts, deq = quantize(tensor, layout)
            prefix = name.removesuffix("weight")
            fp8.update({prefix + suffix: t for suffix, t in parts.items()})
            ref[name] = deq
        else:
            fp8[name] = ref[name] = tensor
    return (_copy_with(model_dir, os.path.join(out_dir, layout), fp8, QUANT_CONFIGS[layout]),
            _copy_with(model_dir, os.path.join(out_dir, layout + "-reference"), ref, None))


def write_with_tensors(model_dir: str, out_dir: str, extra: dict[str, torch.Tensor],
                       transform=lambda name, t: t, quantization_config: dict | None = None) -> str:
    """A copy of the checkpoint with each tensor transformed and `extra` tensors added."""
    state = load_file(os.path.join(model_dir, "model.safetensors"))
    tensors = {name: transform(name, t) for name, t in state.items()} | extra
    return _copy_with(model_dir, out_dir, tensors, quantization_config)
