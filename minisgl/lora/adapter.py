"""Reading a PEFT LoRA adapter directory (adapter_config.json + adapter_model.safetensors) and
checking it against the base model, so that an adapter this engine cannot apply exactly is refused
at load with the reason, never half-applied.

What is applied: y += scaling * (x @ A^T) @ B^T on q/k/v/o and gate/up/down projections, with
scaling = lora_alpha / r (lora_alpha / sqrt(r) with use_rslora), as peft computes it; r and alpha
per module where rank_pattern / alpha_pattern give them (peft's matching rule).

rank_pattern / alpha_pattern keys are regular expressions from the adapter's author, run here against
every module's name: they are matched by the `regex` module, which releases the GIL while it matches
and gives up at a deadline, so a backtracking pattern refuses the adapter within PATTERN_BUDGET_S
instead of freezing the process that loads it.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from dataclasses import dataclass

import regex
import torch
from safetensors.torch import load_file

from minisgl.models import ModelConfig

# PEFT's module name -> (the decoder layer's merged linear, the sub-projection's shard id in it).
TARGET_MODULES: dict[str, tuple[str, object]] = {
    "q_proj": ("self_attn.qkv_proj", "q"),
    "k_proj": ("self_attn.qkv_proj", "k"),
    "v_proj": ("self_attn.qkv_proj", "v"),
    "o_proj": ("self_attn.o_proj", None),
    "gate_proj": ("mlp.gate_up_proj", 0),
    "up_proj": ("mlp.gate_up_proj", 1),
    "down_proj": ("mlp.down_proj", None),
}
MLP_MODULES = ("gate_proj", "up_proj", "down_proj")

# adapter_config.json keys that change what the adapter computes and that this engine does not
# implement: a truthy value is refused, naming the key (ignoring it would serve other outputs).
UNSUPPORTED = {
    "use_dora": "DoRA",
    "bias": "trained biases",
    "lora_bias": "trained LoRA biases",
    "modules_to_save": "fully trained modules (modules_to_save)",
    "fan_in_fan_out": "transposed (Conv1D) weights (fan_in_fan_out)",
    "target_parameters": "LoRA on parameters (target_parameters)",
    "layer_replication": "layer replication",
    "trainable_token_indices": "trained token embeddings (trainable_token_indices)",
    "alora_invocation_tokens": "activated LoRA (alora_invocation_tokens)",
    "arrow_config": "Arrow routing (arrow_config)",
    "use_qalora": "QA-LoRA",
    "use_bdlora": "block-diagonal LoRA (use_bdlora)",
    "monteclora_config": "MonteCLoRA",
    "velora_config": "VeLoRA",
    "kasa_config": "KaSA",
}

_KEY = re.compile(r"^base_model\.model\.model\.layers\.(\d+)\.(?:self_attn|mlp)\.(\w+)\.lora_([AB])\.weight$")


@dataclass
class LoraAdapter:
    """One adapter's full (unsharded) weights: (layer, module) -> (A [r, in], B [out, r], scaling)."""

    name: str
    path: str
    rank: int  # the largest of its modules'
    weights: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor, float]]

    @property
    def modules(self) -> list[str]:
        return sorted({m for _, m in self.weights})


def module_shape(cfg: ModelConfig, module: str) -> tuple[int, int]:
    """(in_features, out_features) of a target module in the base model, unsharded."""
    q, kv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    h, inter = cfg.hidden_size, cfg.intermediate_size
    return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
            "gate_proj": (h, inter), "up_proj": (h, inter), "down_proj": (inter, h)}[module]


def config_problem(config: dict, max_rank: int) -> str | None:
    """Why an adapter_config.json cannot be served here, or None."""
    if config.get("peft_type", "LORA") != "LORA":
        return f"peft_type {config.get('peft_type')!r} is not supported (only LORA)"
    r = config.get("r")
    if not isinstance(r, int) or r < 1:
        return f"r must be a positive integer, got {r!r}"
    if r > max_rank and not config.get("rank_pattern"):  # else checked per module, on the weights
        return f"rank {r} exceeds max_lora_rank {max_rank} (--max-lora-rank)"
    for key, what in UNSUPPORTED.items():
        value = config.get(key)
        if value and value != "none":
            return f"{what} ({key}={value!r}) are not supported"
    targets = config.get("target_modules")
    if isinstance(targets, list):
        other = sorted(set(targets) - set(TARGET_MODULES))
        if other:
            return (f"target modules {', '.join(other)} are not supported "
                    f"(supported: {', '.join(TARGET_MODULES)})")
    return None


# Matching every pattern against every module name of one adapter, all together, takes at most this
# long: real patterns (module names, a layer range) take microseconds.
PATTERN_BUDGET_S = 2.0


class PatternRules:
    """One adapter's rank_pattern and alpha_pattern, matched as peft's get_pattern_key does (the
    first key that matches the end of the module's name wins) within one deadline for the whole
    adapter: a ValueError naming the pattern when it is not a regular expression or runs past it."""

    def __init__(self, config: dict, budget_s: float = PATTERN_BUDGET_S):
        self.config = config
        self.deadline = time.monotonic() + budget_s
        self.compiled: dict[str, regex.Pattern] = {}

    def _matches(self, field: str, key: str, name: str) -> bool:
        if key not in self.compiled:
            try:
                self.compiled[key] = regex.compile(rf"(.*\.)?({key})$")
            except (regex.error, TypeError, ValueError) as e:
                raise ValueError(f"{field} key {_shown(key)} is not a regular expression: {e}") from None
        left = self.deadline - time.monotonic()
        try:
            if left <= 0:
                raise TimeoutError
            return self.compiled[key].match(name, timeout=left) is not None
        except TimeoutError:
            raise ValueError(f"{field} key {_shown(key)} did not finish matching the module names within "
                             f"{PATTERN_BUDGET_S:g} s (a backtracking pattern?)") from None

    def value(self, field: str, name: str, default):
        for key, value in (self.config.get(field) or {}).items():
            if self._matches(field, key, name):
                return value
        return default

    def rank_alpha(self, layer: int, module: str) -> tuple[int, float]:
        name = f"model.layers.{layer}.{TARGET_MODULES[module][0].split('.')[0]}.{module}"
        return (self.value("rank_pattern", name, self.config["r"]),
                self.value("alpha_pattern", name, self.config.get("lora_alpha", 8)))


def _shown(key: str) -> str:
    return repr(key) if len(key) <= 80 else f"{key[:80]!r}... ({len(key)} characters)"


def weights_problem(tensors: dict[str, torch.Tensor], cfg: ModelConfig, config: dict, max_rank: int
                    ) -> tuple[str | None, dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor, float]]]:
    """(why the tensors do not fit the base model or None, (A, B, scaling) by (layer, module))."""
    halves: dict[tuple[int, str], dict[str, torch.Tensor]] = {}
    rules = PatternRules(config)
    for key, tensor in tensors.items():
        m = _KEY.match(key)
        if m is None or m.group(2) not in TARGET_MODULES:
            return f"tensor {key!r} is not a LoRA weight of {', '.join(TARGET_MODULES)}", {}
        layer, module, half = int(m.group(1)), m.group(2), m.group(3)
        if layer >= cfg.num_layers:
            return f"tensor {key!r} is for layer {layer}, the base model has {cfg.num_layers} (base-model mismatch)", {}
        if module in MLP_MODULES and cfg.is_moe_layer(layer):
            return f"tensor {key!r}: LoRA on MoE experts is not supported", {}
        r = rules.rank_alpha(layer, module)[0]
        if r > max_rank:
            return f"rank {r} of layer {layer} {module} exceeds max_lora_rank {max_rank} (--max-lora-rank)", {}
        in_f, out_f = module_shape(cfg, module)
        want = (r, in_f) if half == "A" else (out_f, r)
        if tuple(tensor.shape) != want:
            return (f"tensor {key!r} has shape {tuple(tensor.shape)}, the base model needs {want} "
                    "(base-model mismatch)"), {}
        halves.setdefault((layer, module), {})[half] = tensor
    pairs = {}
    for (layer, module), ab in sorted(halves.items()):
        if len(ab) != 2:
            missing = "B" if "A" in ab else "A"
            return f"layer {layer} {module} has no lora_{missing} weight", {}
        r, alpha = rules.rank_alpha(layer, module)
        scaling = alpha / math.sqrt(r) if config.get("use_rslora") else alpha / r
        pairs[(layer, module)] = (ab["A"], ab["B"], scaling)
    if not pairs:
        return "the adapter has no LoRA weights", {}
    return None, pairs


def load_adapter(name: str, path: str, cfg: ModelConfig, max_rank: int) -> LoraAdapter:
    """Read and check the adapter at `path`; a ValueError naming the adapter and the reason when it
    cannot be served on this base model."""
    def refuse(reason: str) -> ValueError:
        return ValueError(f"LoRA adapter {name!r} ({path}): {reason}")

    config_file = os.path.join(path, "adapter_config.json")
    weights_file = os.path.join(path, "adapter_model.safetensors")
    for file in (config_file, weights_file):
        # Any path that is not a folder: a FIFO or a slow filesystem's file is read as any other.
        if not os.path.exists(file) or os.path.isdir(file):
            raise refuse(f"{os.path.basename(file)} not found (a PEFT adapter directory has adapter_config.json "
                         "and adapter_model.safetensors)")
    with open(config_file) as f:
        config = json.load(f)
    problem = config_problem(config, max_rank)
    if problem:
        raise refuse(problem)
    tensors = load_file(weights_file)
    try:
        problem, weights = weights_problem(tensors, cfg, config, max_rank)
    except ValueError as e:  # a rank_pattern / alpha_pattern key that cannot be matched
        raise refuse(str(e)) from None
    if problem:
        base = config.get("base_model_name_or_path")
        raise refuse(problem + (f"; it was trained on {base}" if base and "mismatch" in problem else ""))
    return LoraAdapter(name, path, max(a.shape[0] for a, _, _ in weights.values()), weights)
