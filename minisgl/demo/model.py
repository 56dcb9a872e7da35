"""The built-in demo model (`python -m minisgl` with no `--model` works offline): its recipe, chat
template and tokens, and where its weights are. It is trained once, at its first start
(training.py), into a folder named by its recipe's key.

This module imports neither torch nor transformers: the launcher of a demo server finds the
model through it, and training (which needs both) is imported only when the cache lacks it.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass

from minisgl.utils import env
from minisgl.utils.logger import get_logger

from . import corpus

_logger = get_logger(__name__)
TRAINING_VERSION = 1  # bump when training.py changes what a recipe trains


@dataclass(frozen=True)
class Recipe:
    chats: int = 4000
    seed: int = 0
    steps: int = 800
    batch: int = 16
    lr: float = 1e-2
    warmup: int = 20
    vocab: int = 1024
    hidden_size: int = 64
    intermediate_size: int = 192
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 4
    head_dim: int = 16
    log_every: int = 100


DEMO_RECIPE = Recipe()


def recipe_key(recipe: Recipe, template: str) -> str:
    """A short hash of what the trained weights depend on: the recipe, the chat template, the
    corpus's and the training's versions and the libraries that compute them (their installed
    versions, read without importing them)."""
    libraries = [importlib.metadata.version(name) for name in ("torch", "tokenizers", "transformers")]
    blob = json.dumps([asdict(recipe), template, corpus.VERSION, TRAINING_VERSION, *libraries], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


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


def demo_model_dir() -> str:
    """The built-in demo model: trained once (training.py) into the user's cache directory, in a
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
                from .training import train_demo

                _logger.info("training the demo model on its synthetic chats (once, about a minute on a CPU)")
                tmp = tempfile.mkdtemp(prefix=f"demo-{key}.", dir=root)
                try:
                    train_demo(tmp, DEMO_RECIPE, DEMO_CHAT_TEMPLATE, SPECIAL_TOKENS)
                    os.replace(tmp, path)
                finally:
                    shutil.rmtree(tmp, ignore_errors=True)
    with open(os.path.join(path, "config.json")) as config:
        json.load(config)  # fail early if the cache is corrupt
    return path
