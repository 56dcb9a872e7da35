"""Random LoRA adapters in PEFT's format for a model's shapes (only its config.json is read), for the
LoRA benchmarks (benchmark/offline/lora.py, benchmark/device/lora.sh): speed does not depend on the
values, and a dummy-weight model has no trained adapters.

    python -m minisgl.benchmark.lora_adapters MODEL_DIR OUT_DIR --num 8 --rank 16   # prints name=path ...
"""

from __future__ import annotations

import argparse
import json
import os

import torch
from safetensors.torch import save_file

from minisgl.lora import TARGET_MODULES
from minisgl.lora.adapter import module_shape
from minisgl.models import load_model_config


def random_adapter(path: str, model_dir: str, rank: int, seed: int) -> str:
    """A PEFT adapter directory with random A and B (bf16) on every supported module of every layer."""
    cfg = load_model_config(model_dir)
    gen = torch.Generator().manual_seed(seed)
    tensors = {}
    for layer in range(cfg.num_layers):
        for module, (where, _) in TARGET_MODULES.items():
            if where.startswith("mlp") and cfg.is_moe_layer(layer):
                continue
            in_f, out_f = module_shape(cfg, module)
            key = f"base_model.model.model.layers.{layer}.{where.split('.')[0]}.{module}"
            tensors[f"{key}.lora_A.weight"] = (torch.randn(rank, in_f, generator=gen) / in_f**0.5).to(torch.bfloat16)
            tensors[f"{key}.lora_B.weight"] = (torch.randn(out_f, rank, generator=gen) * 0.01).to(torch.bfloat16)
    os.makedirs(path, exist_ok=True)
    save_file(tensors, os.path.join(path, "adapter_model.safetensors"))
    with open(os.path.join(path, "adapter_config.json"), "w") as f:
        json.dump({"peft_type": "LORA", "r": rank, "lora_alpha": 2 * rank, "target_modules": list(TARGET_MODULES),
                   "bias": "none", "base_model_name_or_path": model_dir}, f)
    return path


def random_adapters(model_dir: str, out_dir: str, num: int, rank: int) -> dict[str, str]:
    """Adapters a0..a{num-1}: name -> path."""
    return {f"a{i}": random_adapter(os.path.join(out_dir, f"a{i}"), model_dir, rank, i) for i in range(num)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model_dir")
    p.add_argument("out_dir")
    p.add_argument("--num", type=int, default=8)
    p.add_argument("--rank", type=int, default=16)
    args = p.parse_args()
    print(" ".join(f"{n}={p}" for n, p in random_adapters(args.model_dir, args.out_dir, args.num, args.rank).items()))


if __name__ == "__main__":
    main()
