"""Tiny random EAGLE-3 heads in the published checkpoint format (config.json with
LlamaForCausalLMEagle3's fields, model.safetensors with fc / midlayer / norm / lm_head / d2t / t2d),
for a tiny target model directory."""

from __future__ import annotations

import json
import os

import torch
from safetensors.torch import save_file

TINY_TARGET = {"num_hidden_layers": 4}  # EAGLE-3 reads layers 2, n // 2 and n - 3: a target of 4 layers has them


def head_tensors(config: dict, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    h, inter = config["hidden_size"], config["intermediate_size"]
    q = config["num_attention_heads"] * config["head_dim"]
    kv = config["num_key_value_heads"] * config["head_dim"]
    vocab, draft = config["vocab_size"], config["draft_vocab_size"]

    def rand(*shape, scale=0.2):
        return torch.randn(*shape, generator=g) * scale

    def norm():
        return 1 + rand(h, scale=0.1)

    # The draft vocabulary: a random subset of the target's, in order; target id = draft id + d2t.
    kept = torch.randperm(vocab, generator=g)[:draft].sort().values
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[kept] = True
    return {
        "fc.weight": rand(h, 3 * h, scale=0.1),
        "midlayer.input_layernorm.weight": norm(), "midlayer.hidden_norm.weight": norm(),
        "midlayer.post_attention_layernorm.weight": norm(),
        "midlayer.self_attn.q_proj.weight": rand(q, 2 * h), "midlayer.self_attn.k_proj.weight": rand(kv, 2 * h),
        "midlayer.self_attn.v_proj.weight": rand(kv, 2 * h), "midlayer.self_attn.o_proj.weight": rand(h, q),
        "midlayer.mlp.gate_proj.weight": rand(inter, h), "midlayer.mlp.up_proj.weight": rand(inter, h),
        "midlayer.mlp.down_proj.weight": rand(h, inter),
        "norm.weight": norm(), "lm_head.weight": rand(draft, h, scale=0.5),
        "d2t": kept - torch.arange(draft), "t2d": t2d,
    }


def head_config(target_dir: str, draft_vocab_size: int = 200) -> dict:
    with open(os.path.join(target_dir, "config.json")) as f:
        target = json.load(f)
    config = {
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
        "hidden_size": target["hidden_size"], "intermediate_size": 96, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "num_hidden_layers": 1, "hidden_act": "silu",
        "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": 256,
        "vocab_size": target["vocab_size"], "draft_vocab_size": draft_vocab_size, "tie_word_embeddings": False,
        "torch_dtype": "float32",
    }
    if "rope_scaling" in target and target["rope_scaling"]:  # as Llama-3.1's heads carry the target's
        config["rope_scaling"] = target["rope_scaling"]
    return config


def build_eagle3_head(path: str, target_dir: str, seed: int = 0, tensors: dict | None = None,
                      **config_overrides) -> str:
    """Write a random head for the target at `target_dir` to `path`; `tensors` replaces the weights."""
    config = {**head_config(target_dir), **config_overrides}
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    save_file(tensors if tensors is not None else head_tensors(config, seed), os.path.join(path, "model.safetensors"))
    return path
