"""An EAGLE-3 draft head, as published (LlamaForCausalLMEagle3 checkpoints, e.g.
yuhuili/EAGLE3-LLaMA3.1-Instruct-8B): one Llama decoder layer over the target model's hidden states.

At position i the head reads the token after it, x[i + 1] (embedded by the target's own
embed_tokens unless the checkpoint brings its own), and a hidden state: for positions the target
computed, `fc` fuses the target's residual stream at three layers (low, middle, high: concatenated,
3 * hidden wide); for positions it drafts beyond them, the head's own previous output. The layer
normalizes both (`input_layernorm` the embedding, `hidden_norm` the hidden state), attends with
q/k/v over their concatenation (2 * hidden wide), keeps the hidden state as its residual, and its
output after `norm` gives logits over a draft vocabulary (`lm_head`, draft_vocab_size rows) whose
ids map into the target's by `d2t` (target id = draft id + d2t[draft id]). Checkpoint names:

    fc.weight                                  [hidden, 3 * target hidden]
    midlayer.input_layernorm.weight, midlayer.hidden_norm.weight,
    midlayer.post_attention_layernorm.weight   [hidden]
    midlayer.self_attn.{q,k,v}_proj.weight     [heads * head_dim or kv_heads * head_dim, 2 * hidden]
    midlayer.self_attn.o_proj.weight           [hidden, heads * head_dim]
    midlayer.mlp.{gate,up}_proj.weight         [intermediate, hidden]; down_proj [hidden, intermediate]
    norm.weight [hidden]; lm_head.weight [draft vocab, hidden]
    d2t [draft vocab] (needed when the draft vocabulary is smaller); optional: t2d [vocab] (unused),
    embed_tokens.weight [vocab, hidden], q/k/v biases (attention_bias)

The head is replicated on every tensor-parallel rank (it is small); `load_eagle3_head` refuses a
checkpoint whose names or shapes do not fit, or that does not fit the target, naming what is wrong.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from safetensors import safe_open
from torch import nn

from minisgl.layers import RMSNorm, RotaryEmbedding
from minisgl.models import ModelConfig
from minisgl.models.config import rotary_from_hf
from minisgl.models.weight import checkpoint_files

if TYPE_CHECKING:
    from transformers import LlamaConfig

OPTIONAL = ("t2d", "embed_tokens.weight")
IGNORED = ("rotary_emb.inv_freq",)  # recomputed from the config


@dataclass(frozen=True)
class Eagle3Config:
    hidden_size: int
    intermediate_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    draft_vocab_size: int
    target_hidden_size: int
    rms_norm_eps: float
    attention_bias: bool
    norm_before_residual: bool  # the residual is the normalized hidden state (some newer heads)
    # Layers whose outputs the head was trained on (eagle_config.eagle_aux_hidden_state_layer_ids,
    # as SpecForge and SGLang read it); None: EAGLE-3's default.
    aux_layer_ids: tuple[int, ...] | None
    hf: LlamaConfig  # for the rotary embedding

    @classmethod
    def read(cls, path: str) -> Eagle3Config:
        file = os.path.join(path, "config.json")
        if not os.path.isfile(file):
            raise ValueError(f"--draft-model {path}: no config.json")
        with open(file) as f:
            raw = json.load(f)
        missing = [k for k in ("hidden_size", "intermediate_size", "num_attention_heads", "vocab_size") if k not in raw]
        if missing:
            raise ValueError(f"--draft-model {path}: config.json lacks {', '.join(missing)}")
        if raw.get("num_hidden_layers", 1) != 1:
            raise ValueError(f"--draft-model {path}: an EAGLE-3 head has one decoder layer, config.json says "
                             f"{raw['num_hidden_layers']}")
        from transformers import LlamaConfig  # here: its import is slow, and only a draft head needs it

        hf = LlamaConfig(**{k: v for k, v in raw.items() if k not in ("architectures", "model_type")})
        eagle = raw.get("eagle_config") or {}
        ids = eagle.get("eagle_aux_hidden_state_layer_ids")
        if eagle.get("use_aux_hidden_state") is False:
            raise ValueError(f"--draft-model {path}: use_aux_hidden_state false is an EAGLE-1/2 head, not EAGLE-3")
        heads = raw["num_attention_heads"]
        return cls(
            hidden_size=raw["hidden_size"], intermediate_size=raw["intermediate_size"], num_heads=heads,
            num_kv_heads=raw.get("num_key_value_heads") or heads,
            head_dim=raw.get("head_dim") or raw["hidden_size"] // heads,
            vocab_size=raw["vocab_size"], draft_vocab_size=raw.get("draft_vocab_size") or raw["vocab_size"],
            target_hidden_size=raw.get("target_hidden_size") or raw["hidden_size"],
            rms_norm_eps=raw.get("rms_norm_eps", 1e-6), attention_bias=bool(raw.get("attention_bias", False)),
            norm_before_residual=bool(raw.get("norm_before_residual", False)),
            aux_layer_ids=tuple(ids) if ids else None, hf=hf,
        )

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Every tensor a checkpoint must hold, with its shape."""
        h, q, kv = self.hidden_size, self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        inter, attn = self.intermediate_size, "midlayer.self_attn."
        out = {
            "fc.weight": (h, 3 * self.target_hidden_size),
            "midlayer.input_layernorm.weight": (h,), "midlayer.hidden_norm.weight": (h,),
            "midlayer.post_attention_layernorm.weight": (h,),
            attn + "q_proj.weight": (q, 2 * h), attn + "k_proj.weight": (kv, 2 * h), attn + "v_proj.weight": (kv, 2 * h),
            attn + "o_proj.weight": (h, q),
            "midlayer.mlp.gate_proj.weight": (inter, h), "midlayer.mlp.up_proj.weight": (inter, h),
            "midlayer.mlp.down_proj.weight": (h, inter),
            "norm.weight": (h,), "lm_head.weight": (self.draft_vocab_size, h),
        }
        if self.attention_bias:
            out.update({attn + "q_proj.bias": (q,), attn + "k_proj.bias": (kv,), attn + "v_proj.bias": (kv,)})
        if self.draft_vocab_size != self.vocab_size:
            out["d2t"] = (self.draft_vocab_size,)
        return out

    def optional_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"d2t": (self.draft_vocab_size,), "t2d": (self.vocab_size,),
                "embed_tokens.weight": (self.vocab_size, self.hidden_size)}


class Eagle3Head(nn.Module):
    d2t: torch.Tensor

    def __init__(self, cfg: Eagle3Config, max_positions: int):
        super().__init__()
        self.cfg = cfg
        h = cfg.hidden_size
        self.heads, self.kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.fc = nn.Linear(3 * cfg.target_hidden_size, h, bias=False)
        self.input_layernorm = RMSNorm(h, cfg.rms_norm_eps)
        self.hidden_norm = RMSNorm(h, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(h, cfg.rms_norm_eps)
        self.q_proj = nn.Linear(2 * h, self.heads * self.head_dim, bias=cfg.attention_bias)
        self.k_proj = nn.Linear(2 * h, self.kv_heads * self.head_dim, bias=cfg.attention_bias)
        self.v_proj = nn.Linear(2 * h, self.kv_heads * self.head_dim, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(self.heads * self.head_dim, h, bias=False)
        self.gate_proj = nn.Linear(h, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(h, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, h, bias=False)
        self.norm = RMSNorm(h, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(h, cfg.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(cfg.draft_vocab_size, dtype=torch.int64))
        self.embed_tokens: nn.Embedding | None = None  # the checkpoint's own, if it has one
        rot = rotary_from_hf(cfg.hf, cfg.head_dim)
        self.rotary = RotaryEmbedding(torch.tensor(rot.inv_freq, dtype=torch.float32),
                                      max(rot.max_positions, max_positions), rot.attention_scaling)

    def fuse(self, aux_hidden: torch.Tensor) -> torch.Tensor:
        """The target's three layers' hidden states [n, 3 * target hidden] as one [n, hidden]."""
        return self.fc(aux_hidden)

    def layer(self, embeds: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor,
              attend: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """The decoder layer at `positions`: `attend(q, k, v)` ([n, heads or kv heads, head_dim],
        rotated) stores k/v and attends. Returns the output before `norm` [n, hidden]: the hidden
        state of the next draft step."""
        normed = self.hidden_norm(hidden)
        residual = normed if self.cfg.norm_before_residual else hidden
        x = torch.cat([self.input_layernorm(embeds), normed], dim=-1)
        q = self.q_proj(x).view(-1, self.heads, self.head_dim)
        k = self.k_proj(x).view(-1, self.kv_heads, self.head_dim)
        v = self.v_proj(x).view(-1, self.kv_heads, self.head_dim)
        q, k = self.rotary(positions, q, k)
        h = self.o_proj(attend(q, k, v).reshape(-1, self.heads * self.head_dim)) + residual
        x = self.post_attention_layernorm(h)
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x)) + h

    def draft_tokens(self, prenorm: torch.Tensor) -> torch.Tensor:
        """The most likely next token of each row, as a target-vocabulary id (int64 [n])."""
        best = self.lm_head(self.norm(prenorm)).argmax(dim=-1)
        return best + self.d2t[best]


def _param_name(name: str) -> str:
    """A checkpoint name as the head's parameter name (the layer's modules sit on the head itself)."""
    return name.removeprefix("midlayer.").replace("self_attn.", "").replace("mlp.", "")


def read_checkpoint(path: str) -> dict[str, torch.Tensor]:
    """Every tensor of a safetensors checkpoint (or a pytorch_model.bin, as yuhuili's heads ship)."""
    bin_file = os.path.join(path, "pytorch_model.bin")
    if not any(f.endswith(".safetensors") for f in os.listdir(path)) and os.path.isfile(bin_file):
        tensors = torch.load(bin_file, map_location="cpu", weights_only=True)
    else:
        tensors = {}
        for file in checkpoint_files(path):
            with safe_open(file, framework="pt") as f:
                tensors.update({name: f.get_tensor(name) for name in f.keys()})
    return {name.removeprefix("model."): t for name, t in tensors.items() if not name.endswith(IGNORED)}


def check_checkpoint(cfg: Eagle3Config, tensors: dict[str, torch.Tensor]) -> str | None:
    """What is wrong with `tensors` as a checkpoint of `cfg`'s head, or None."""
    required, optional = cfg.shapes(), cfg.optional_shapes()
    missing = sorted(set(required) - set(tensors))
    if missing:
        return f"missing {', '.join(missing)}"
    unknown = sorted(set(tensors) - set(required) - set(optional))
    if unknown:
        return f"unexpected tensors {', '.join(unknown)}"
    for name, t in tensors.items():
        want = required.get(name) or optional[name]
        if tuple(t.shape) != want:
            return f"{name} has shape {tuple(t.shape)}, the config.json's sizes need {want}"
    if "d2t" in tensors:
        targets = torch.arange(cfg.draft_vocab_size) + tensors["d2t"].long()
        if targets.min() < 0 or targets.max() >= cfg.vocab_size:
            return f"d2t maps draft ids outside the target vocabulary (0..{cfg.vocab_size - 1})"
    return None


def load_eagle3_head(path: str, target: ModelConfig, max_positions: int, device: torch.device,
                     dtype: torch.dtype) -> Eagle3Head:
    """The head at `path` (a local directory), checked against itself and against `target`."""
    if not os.path.isdir(path):
        raise ValueError(f"--draft-model {path}: not a directory")
    cfg = Eagle3Config.read(path)
    if cfg.vocab_size != target.vocab_size:
        raise ValueError(f"--draft-model {path}: vocab_size {cfg.vocab_size}, the target model's is {target.vocab_size}")
    if cfg.target_hidden_size != target.hidden_size:
        raise ValueError(f"--draft-model {path}: drafts from hidden states of size {cfg.target_hidden_size}, the "
                         f"target model's are {target.hidden_size}")
    tensors = read_checkpoint(path)
    problem = check_checkpoint(cfg, tensors)
    if problem:
        raise ValueError(f"--draft-model {path}: not an EAGLE-3 head for its config.json: {problem}")
    if "embed_tokens.weight" not in tensors and cfg.hidden_size != target.hidden_size:
        raise ValueError(f"--draft-model {path}: hidden_size {cfg.hidden_size} needs its own embed_tokens (the "
                         f"target's embeddings are {target.hidden_size} wide)")
    with torch.device(device):
        head = Eagle3Head(cfg, max_positions)
    for p in head.parameters():  # not the buffers: the rotary table stays float32, as the target's
        p.data = p.data.to(dtype)
    params = dict(head.named_parameters())
    for name, t in tensors.items():
        if name == "d2t":
            head.d2t.copy_(t.long())
        elif name == "embed_tokens.weight":
            head.embed_tokens = nn.Embedding.from_pretrained(t.to(device, dtype), freeze=True)
        elif name != "t2d":
            params[_param_name(name)].data.copy_(t)
    return head.eval()
