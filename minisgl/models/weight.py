"""Load HF safetensors checkpoints (one file or sharded with an index) into minisgl's layers.

HF stores q/k/v, gate/up and each MoE expert as separate tensors; minisgl merges them. The table
below maps a checkpoint name onto (parameter name, shard id); the parameter's own
`weight_loader` then copies this rank's slice. FP8 weights arrive scaled up to float32
(minisgl.quantization.dequantized); per-tensor KV-cache scales go to their attention layer.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterator

import torch
from safetensors import safe_open
from torch import nn
from tqdm import tqdm

from minisgl.quantization import dequantized
from minisgl.utils.logger import get_logger

logger = get_logger(__name__)

# (part of the checkpoint name, replacement in minisgl's name, shard id)
STACKED = [
    (".q_proj.", ".qkv_proj.", "q"),
    (".k_proj.", ".qkv_proj.", "k"),
    (".v_proj.", ".qkv_proj.", "v"),
    (".gate_proj.", ".gate_up_proj.", 0),
    (".up_proj.", ".gate_up_proj.", 1),
]
EXPERT = re.compile(r"^(.*\.mlp)\.experts\.(\d+)\.(gate|up|down)_proj\.weight$")
# Tensors in checkpoints that minisgl recomputes itself.
SKIPPED = ("rotary_emb.inv_freq",)
# Per-tensor FP8 KV-cache scales: `self_attn.k_scale` (fp8 and compressed-tensors checkpoints) or
# the older `self_attn.k_proj.output_scale`.
KV_SCALE = re.compile(r"^(.*\.self_attn)\.(?:([kv])_scale|([kv])_proj\.output_scale)$")


def checkpoint_files(path: str) -> list[str]:
    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            names = sorted(set(json.load(f)["weight_map"].values()))
        return [os.path.join(path, n) for n in names]
    files = sorted(f for f in os.listdir(path) if f.endswith(".safetensors"))
    if not files:
        raise FileNotFoundError(f"no .safetensors weights found in {path}")
    return [os.path.join(path, f) for f in files]


def iter_checkpoint(path: str, quant=None, device: torch.device | None = None
                    ) -> Iterator[tuple[str, torch.Tensor, bool]]:
    """(name, tensor, was_fp8) for each tensor, FP8 weights scaled up (see dequantized)."""
    with contextlib.ExitStack() as stack:
        # All files open at once: an FP8 weight's scale may sit in another file.
        handles = [stack.enter_context(safe_open(file, framework="pt")) for file in checkpoint_files(path)]
        where = {name: f for f in handles for name in f.keys()}
        tensors = dequantized(where, lambda name: where[name].get_tensor(name), quant, device or torch.device("cpu"))
        yield from tqdm(tensors, total=len(where), desc="Loading weights", unit="tensor", mininterval=1.0)


def map_name(name: str) -> tuple[str, object]:
    """Checkpoint name -> (minisgl parameter name, shard id or None)."""
    m = EXPERT.match(name)
    if m:
        prefix, expert, kind = m.groups()
        param = "w2" if kind == "down" else "w13"
        return f"{prefix}.{param}", (int(expert), 1 if kind == "up" else 0)
    for part, replacement, shard in STACKED:
        if part in name:
            return name.replace(part, replacement), shard
    return name, None


def load_weights(model: nn.Module, path: str, device: torch.device, dtype: torch.dtype) -> set[str]:
    """Load the checkpoint; returns the names of the parameters loaded from FP8 tensors."""
    params = dict(model.named_parameters(remove_duplicate=False))
    tied = getattr(model.config, "tie_word_embeddings", False)
    loaded: set[str] = set()
    fp8: set[str] = set()
    for ckpt_name, tensor, was_fp8 in iter_checkpoint(path, model.config.quantization, device):
        if any(s in ckpt_name for s in SKIPPED) or (tied and ckpt_name == "lm_head.weight"):
            continue
        kv_scale = KV_SCALE.match(ckpt_name)
        if kv_scale:
            attn = model.get_submodule(kv_scale.group(1) + ".attn")
            setattr(attn, f"{kv_scale.group(2) or kv_scale.group(3)}_scale", float(tensor.float().max()))
            continue
        name, shard = map_name(ckpt_name)
        if name not in params:
            raise ValueError(f"checkpoint tensor {ckpt_name!r} {tuple(tensor.shape)} has no place in "
                             f"{model.config.architecture}")
        param = params[name]
        tensor = tensor.to(device=device, dtype=dtype)
        loader = getattr(param, "weight_loader", None)
        try:
            if loader is not None:
                loader(param, tensor, shard)
            else:
                if tuple(param.shape) != tuple(tensor.shape):
                    raise ValueError(f"checkpoint has {tuple(tensor.shape)}, the model expects {tuple(param.shape)}")
                param.data.copy_(tensor)
        except ValueError as e:
            raise ValueError(f"cannot load checkpoint tensor {ckpt_name!r}: {e}") from None
        loaded.add(f"{name}#{shard}")
        if was_fp8:
            fp8.add(name)
    missing = [n for n in expected_tensors(model) if n not in loaded]
    if missing:
        shown = ", ".join(m.replace("#None", "") for m in missing[:8])
        raise ValueError(f"checkpoint at {path} lacks {len(missing)} tensor(s) the model needs: {shown}"
                         + (" ..." if len(missing) > 8 else ""))
    logger.info("loaded %d tensors from %s", len(loaded), path)
    return fp8


def expected_tensors(model: nn.Module) -> list[str]:
    """Every (parameter, shard) the checkpoint must provide, in the loader's `name#shard` form.

    Merged parameters list their shards in `param.shard_ids` (set by the layer that merges them).
    """
    tied = getattr(model.config, "tie_word_embeddings", False)
    return [
        f"{name}#{shard}"
        for name, param in model.named_parameters()
        if not (tied and name == "lm_head.weight")
        for shard in getattr(param, "shard_ids", [None])
    ]


@torch.no_grad()
def init_dummy_weights(model: nn.Module, seed: int = 0) -> None:
    """Small random weights (norms at one) for benchmarks: speed does not depend on the values."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    device_gen = None
    for name, param in model.named_parameters():
        if name.endswith("norm.weight"):
            param.fill_(1.0)
        elif param.is_cuda:  # drawn on the device: seconds instead of minutes for 8B parameters
            if device_gen is None:
                device_gen = torch.Generator(device=param.device).manual_seed(seed)
            param.uniform_(-0.02, 0.02, generator=device_gen)
        else:
            param.copy_(torch.empty(param.shape).uniform_(-0.02, 0.02, generator=gen).to(param.dtype))
