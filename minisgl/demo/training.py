"""Train the demo model on its synthetic chats (corpus.py), on the CPU, at the first start.

A BPE tokenizer is trained on the rendered chats; its pre-tokenizer makes words, digits, newlines
and runs of other characters separate pieces, so a word is the same token in a question and in a
JSON value. Only the assistant's turns (and the EOS closing them) are learned. Deterministic: fixed
seeds, torch's deterministic algorithms and one thread (a thread count changes float sums; one
thread is also fastest on a busy machine). demo.py's `recipe_key` names what the weights depend on.
"""

from __future__ import annotations

import os
import random
import time

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen3Config
from transformers.utils.chat_template_utils import render_jinja_template

from minisgl.utils.logger import get_logger

from . import corpus
from .model import Recipe

logger = get_logger(__name__)

_PIECES = r"\p{L}+|\p{N}|\n|[^\p{L}\p{N}\n]+"
_TAGS = ["<tool_call>", "</tool_call>"]  # one token each, as in Qwen's tokenizers


def build_tokenizer(texts: list[str], vocab: int, special_tokens: list[str], template: str) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained on `texts`, EOS the third special token (<|im_end|>)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(_PIECES), behavior="isolated"),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=special_tokens, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=special_tokens[2], pad_token=special_tokens[0],
                                   bos_token=None, unk_token=None)
    fast.add_tokens(_TAGS)
    fast.chat_template = template
    return fast


def render(tokenizer: PreTrainedTokenizerFast, texts: list[str]) -> list[tuple[list[int], list[int]]]:
    """Each rendered chat as (token ids, labels): labels are the ids inside assistant turns (their
    EOS included), -100 elsewhere."""
    opening, eos = "<|im_start|>assistant\n", tokenizer.eos_token
    out = []
    for text in texts:
        spans, at = [], text.find(opening)
        while at >= 0:
            end = text.index(eos, at) + len(eos)
            spans.append((at + len(opening), end))
            at = text.find(opening, end)
        enc = tokenizer(text, return_offsets_mapping=True, add_special_tokens=False)
        labels = [t if any(s <= a < e for s, e in spans) else -100
                  for t, (a, _) in zip(enc["input_ids"], enc["offset_mapping"])]
        out.append((enc["input_ids"], labels))
    return out


def _batches(samples: list, batch: int, rng: random.Random) -> list[list[int]]:
    """Indices of samples of similar length together (little padding), the batches in a seeded order."""
    order = sorted(range(len(samples)), key=lambda i: (len(samples[i][0]), i))
    batches = [order[i:i + batch] for i in range(0, len(order), batch)]
    rng.shuffle(batches)
    return batches


def _train(model, samples: list, recipe: Recipe, pad: int) -> None:
    rng = random.Random(recipe.seed)
    optim = torch.optim.AdamW(model.parameters(), lr=recipe.lr, weight_decay=0.0, betas=(0.9, 0.98))
    sched = torch.optim.lr_scheduler.LambdaLR(
        optim, lambda s: min(1.0, (s + 1) / recipe.warmup) * max(0.05, 1 - s / recipe.steps))
    batches: list[list[int]] = []
    start = time.monotonic()
    model.train()
    for step in range(recipe.steps):
        if not batches:
            batches = _batches(samples, recipe.batch, rng)
        rows = [samples[i] for i in batches.pop()]
        width = max(len(ids) for ids, _ in rows)
        ids = torch.tensor([r[0] + [pad] * (width - len(r[0])) for r in rows])
        labels = torch.tensor([r[1] + [-100] * (width - len(r[1])) for r in rows])
        mask = torch.tensor([[1] * len(r[0]) + [0] * (width - len(r[0])) for r in rows])
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        sched.step()
        optim.zero_grad(set_to_none=True)
        if (step + 1) % recipe.log_every == 0 or step + 1 == recipe.steps:
            logger.info("training the demo model (first start only): step %d/%d, loss %.2f, %.0f s",
                        step + 1, recipe.steps, loss.item(), time.monotonic() - start)
    model.eval()


def train_demo(path: str, recipe: Recipe, template: str, special_tokens: list[str]) -> None:
    """Write a Qwen3 model trained as `recipe` says, its tokenizer and `template` to `path`."""
    chats = corpus.demo_chats(recipe.chats, recipe.seed)
    texts = [render_jinja_template([messages], tools=list(tools or ()), chat_template=template)[0][0]
             for messages, tools in chats]
    tokenizer = build_tokenizer(texts, recipe.vocab, special_tokens, template)
    samples = render(tokenizer, texts)
    config = Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=recipe.hidden_size, intermediate_size=recipe.intermediate_size,
        num_hidden_layers=recipe.num_hidden_layers, num_attention_heads=recipe.num_attention_heads,
        num_key_value_heads=recipe.num_key_value_heads, head_dim=recipe.head_dim, max_position_embeddings=4096,
        rms_norm_eps=1e-6, tie_word_embeddings=True, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, architectures=["Qwen3ForCausalLM"])
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    try:
        torch.manual_seed(recipe.seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        _train(model, samples, recipe, tokenizer.pad_token_id)
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)
    os.makedirs(path, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
