"""Tiny models and locally trained tokenizers.

The built-in demo (`python -m minisgl` with no `--model` works offline) is trained at its first
start (demo_training); the test suite compares minisgl with HF transformers on tiny random models.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    LlamaConfig,
    MistralConfig,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen3Config,
    Qwen3MoeConfig,
)

from minisgl.utils import env
from minisgl.utils.logger import get_logger

from .demo_training import Recipe, recipe_key, train_demo

_logger = get_logger(__name__)
DEMO_RECIPE = Recipe()

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# The demo's own template: CHAT_TEMPLATE's turns (the same prompt for a chat without tools), plus
# tools in the system turn (a short preamble: the demo model is trained on it), earlier calls and
# tool results as Qwen2.5/Qwen3 render them (Hermes syntax), so a server started with no flags reads
# tool_choice auto's calls with its hermes parser.
# HF renders templates with trim_blocks: a newline right after a tag is written {{ '\\n' }}.
DEMO_CHAT_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\n# Tools\n<tools>{% for t in tools %}{{ '\\n' }}{{ t | tojson }}{% endfor %}"
    "{{ '\\n' }}</tools>\nTo call one, write <tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n{% endif %}'
    "{% for m in messages %}{% if m['role'] == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m['content'] }}"
    "\n</tool_response><|im_end|>\n{% else %}<|im_start|>{{ m['role'] }}\n{% if m['content'] %}{{ m['content'] }}"
    "{% endif %}{% for c in m['tool_calls'] or [] %}{% if m['content'] or not loop.first %}{{ '\\n' }}{% endif %}"
    '<tool_call>\n{"name": "{{ c.function.name }}", "arguments": {% if c.function.arguments is string %}'
    "{{ c.function.arguments }}{% else %}{{ c.function.arguments | tojson }}{% endif %}}\n</tool_call>"
    "{% endfor %}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
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
    kwargs = dict(
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


def demo_model_dir() -> str:
    """The built-in demo model: trained once (demo_training) into the user's cache directory, in a
    folder named by its recipe's key, so a changed recipe or template trains anew. Concurrent first
    starts wait on one lock; the model appears whole (trained in a temp folder, then renamed). A
    model of the same key in MINISGL_PREBUILT_CACHE (the container image's) is used as it is."""
    key = recipe_key(DEMO_RECIPE, DEMO_CHAT_TEMPLATE)
    prebuilt = env.PREBUILT_CACHE.get()
    if prebuilt and os.path.exists(os.path.join(prebuilt, f"demo-{key}", "config.json")):
        return os.path.join(prebuilt, f"demo-{key}")
    root = os.path.expanduser(env.CACHE.get())
    path = os.path.join(root, f"demo-{key}")
    if not os.path.exists(os.path.join(path, "config.json")):
        os.makedirs(root, exist_ok=True)
        with open(os.path.join(root, f"demo-{key}.lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not os.path.exists(os.path.join(path, "config.json")):
                _logger.info("training the demo model on its synthetic chats (once, about a minute on a CPU)")
                tmp = tempfile.mkdtemp(prefix=f"demo-{key}.", dir=root)
                try:
                    train_demo(tmp, DEMO_RECIPE, DEMO_CHAT_TEMPLATE, SPECIAL_TOKENS)
                    os.replace(tmp, path)
                finally:
                    shutil.rmtree(tmp, ignore_errors=True)
    AutoConfig.from_pretrained(path)  # fail early if the cache is corrupt
    return path
