"""Tiny random models of every supported architecture and small locally trained tokenizers: the
test suite compares minisgl with HF transformers on them, and benchmarks give config-only models a
tokenizer. (The built-in demo model is in minisgl/demo/.)"""

from __future__ import annotations

import os
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    AutoModelForCausalLM,
    LlamaConfig,
    MistralConfig,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen3Config,
    Qwen3MoeConfig,
)

from minisgl.demo.model import CHAT_TEMPLATE, SPECIAL_TOKENS

_CORPUS = """\
The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with a single step.
Large language models predict the next token from the tokens before it. A paged KV cache stores keys
and values in fixed-size pages, and a page table maps each request's positions onto cache slots.
Continuous batching lets new requests join while others decode; chunked prefill splits long prompts.
Radix trees share common prompt prefixes between requests so their pages are computed only once.
Hello, world! How are you today? I am fine, thank you. What is the capital of France? Paris.
Numbers: 0 1 2 3 4 5 6 7 8 9 10 42 100 2026. Unicode: café, naïve, 東京, Привет, 😀 emoji.
def main():\n    print("hello")\n    return 0\n
"""

ARCH_CONFIGS = {
    "LlamaForCausalLM": LlamaConfig,
    "MistralForCausalLM": MistralConfig,
    "Qwen2ForCausalLM": Qwen2Config,
    "Qwen3ForCausalLM": Qwen3Config,
    "Qwen3MoeForCausalLM": Qwen3MoeConfig,
}


def build_tokenizer(vocab_size: int = 384) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained on a small built-in corpus, with a ChatML template."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([_CORPUS] * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   bos_token=None, unk_token=None)
    fast.chat_template = CHAT_TEMPLATE
    return fast


def synthetic_tokenizer(vocab_size: int) -> PreTrainedTokenizerFast:
    """A word-level tokenizer covering every id of a vocabulary (token i is "t<i>"), so a server can
    stream text for a config-only model with dummy weights (benchmarks); the last id is EOS."""
    vocab = {f"t{i}": i for i in range(vocab_size)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with spaces
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=f"t{vocab_size - 1}")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def tiny_config(architecture: str, vocab_size: int, eos_token_id: int, **overrides):
    if architecture not in ARCH_CONFIGS:
        raise ValueError(f"no tiny config for {architecture}; known: {', '.join(ARCH_CONFIGS)}")
    kwargs: dict[str, Any] = dict(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=1024,
        rms_norm_eps=1e-6, tie_word_embeddings=False, eos_token_id=eos_token_id,
        # Larger than HF's 0.02 so that logits are spread and greedy choices have clear margins.
        initializer_range=0.2,
    )
    if architecture == "Qwen3MoeForCausalLM":
        kwargs.update(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=True)
    if architecture == "LlamaForCausalLM":
        kwargs.update(rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0, "original_max_position_embeddings": 256})
    kwargs.update(overrides)
    config = ARCH_CONFIGS[architecture](**kwargs)
    config.architectures = [architecture]
    return config


def build_tiny_model(path: str, architecture: str = "Qwen3ForCausalLM", seed: int = 0,
                     max_shard_size: str | None = None, dtype: torch.dtype = torch.float32, **overrides) -> str:
    """Write a random tiny model of `architecture` plus the tokenizer to `path`; return `path`."""
    tokenizer = build_tokenizer()
    config = tiny_config(architecture, vocab_size=len(tokenizer), eos_token_id=tokenizer.eos_token_id, **overrides)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    os.makedirs(path, exist_ok=True)
    kwargs = {"max_shard_size": max_shard_size} if max_shard_size else {}
    model.save_pretrained(path, **kwargs)
    tokenizer.save_pretrained(path)
    return path
