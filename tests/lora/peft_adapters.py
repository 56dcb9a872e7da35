"""Random PEFT LoRA adapters on the tiny test models, made by peft itself (get_peft_model +
save_pretrained), and peft's own greedy continuation as the reference; an adapter whose reading
blocks until the test lets it go (GatedAdapter)."""

from __future__ import annotations

import errno
import os
import shutil

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM

from minisgl.lora import TARGET_MODULES
from minisgl.lora.adapter import MLP_MODULES

# name -> (rank, alpha, use_rslora): three ranks, one with rsLoRA's scaling.
ADAPTERS = {"r4": (4, 8, False), "r8": (8, 32, True), "r16": (16, 16, False)}


def build_adapter(model_dir: str, path: str, rank: int, alpha: int, rslora: bool = False, seed: int = 1,
                  **config) -> str:
    """Save a random adapter (B non-zero: init_lora_weights=False) on every supported target module
    (q/k/v/o only on an MoE model: peft would put gate/up/down on its experts' fused parameters)."""
    torch.manual_seed(seed)
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    targets = [m for m in TARGET_MODULES if not getattr(base.config, "num_experts", 0) or m not in MLP_MODULES]
    config = {"target_modules": targets, **config}
    lora = LoraConfig(r=rank, lora_alpha=alpha, use_rslora=rslora, init_lora_weights=False, **config)
    get_peft_model(base, lora).save_pretrained(path)
    return path


def build_adapters(model_dir: str, root) -> dict[str, str]:
    return {name: build_adapter(model_dir, str(root / name), r, alpha, rslora, seed=i + 1)
            for i, (name, (r, alpha, rslora)) in enumerate(ADAPTERS.items())}


def peft_greedy(model_dir: str, adapter_dir: str | None, prompt: list[int], new_tokens: int) -> list[int]:
    """HF transformers + peft: the greedy continuation of `prompt` under the adapter (None: the base)."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    if adapter_dir is not None:
        model = PeftModel.from_pretrained(model, adapter_dir)
    out = model.generate(torch.tensor([prompt]), max_new_tokens=new_tokens, do_sample=False, pad_token_id=0,
                         eos_token_id=None, attention_mask=torch.ones(1, len(prompt), dtype=torch.long))
    return out[0, len(prompt):].tolist()


class GatedAdapter:
    """A copy of an adapter whose adapter_config.json is a named pipe: a load of it blocks reading
    the config (the first thing a load reads) until `release` writes it."""

    def __init__(self, src: str, dst: str):
        shutil.copytree(src, dst)
        self.path = dst
        self.fifo = os.path.join(dst, "adapter_config.json")
        with open(self.fifo, "rb") as f:
            self.config = f.read()
        os.unlink(self.fifo)
        os.mkfifo(self.fifo)
        self._writer: int | None = None

    def reader_blocked(self) -> bool:
        """Whether a load is reading the config now (and blocked there): a pipe's write end opens
        without blocking only while a reader holds it open."""
        if self._writer is None:
            try:
                self._writer = os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as e:
                if e.errno != errno.ENXIO:  # ENXIO: nobody reads it yet
                    raise
                return False
        return True

    def release(self) -> None:
        """The reader gets the whole config, then its end."""
        assert self._writer is not None, "nobody reads the config yet"
        os.write(self._writer, self.config)  # a pipe holds far more than one adapter_config.json
        self.close()

    def close(self) -> None:
        """A reader still waiting gets the end of the file (and refuses the adapter), never a hang."""
        if self._writer is not None:
            os.close(self._writer)
            self._writer = None
