"""Training the demo model: deterministic, keyed by what the weights depend on, learning only the
assistant's turns, with a tokenizer whose words are the same tokens wherever they stand."""

from __future__ import annotations

import dataclasses
import logging

import torch
from safetensors.torch import load_file
from transformers import AutoTokenizer

from minisgl.demo.model import DEMO_CHAT_TEMPLATE, SPECIAL_TOKENS, Recipe, recipe_key
from minisgl.demo.training import build_tokenizer, render, train_demo

SHORT = Recipe(chats=40, steps=3, vocab=320, log_every=1)


def test_the_key_changes_with_the_recipe_and_the_template_and_only_with_them():
    key = recipe_key(Recipe(), DEMO_CHAT_TEMPLATE)
    assert key == recipe_key(Recipe(), DEMO_CHAT_TEMPLATE)
    assert key != recipe_key(dataclasses.replace(Recipe(), steps=Recipe().steps + 1), DEMO_CHAT_TEMPLATE)
    assert key != recipe_key(Recipe(), DEMO_CHAT_TEMPLATE + " ")


def test_two_trainings_give_the_same_weights_log_each_step_and_leave_torchs_settings_as_they_were(tmp_path):
    lines = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())
    logger = logging.getLogger("minisgl.demo.training")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    threads = torch.get_num_threads()
    try:
        for name in ("a", "b"):
            train_demo(str(tmp_path / name), SHORT, DEMO_CHAT_TEMPLATE, SPECIAL_TOKENS)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    a, b = load_file(tmp_path / "a" / "model.safetensors"), load_file(tmp_path / "b" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert (tmp_path / "a" / "tokenizer.json").read_text() == (tmp_path / "b" / "tokenizer.json").read_text()
    assert sum("step 3/3" in line for line in lines) == 2 and len(lines) == 6
    assert torch.get_num_threads() == threads and not torch.are_deterministic_algorithms_enabled()
    tok = AutoTokenizer.from_pretrained(tmp_path / "a")
    assert tok.chat_template == DEMO_CHAT_TEMPLATE and tok.eos_token == "<|im_end|>"


def test_only_the_assistants_turns_and_their_eos_are_learned():
    text = "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"
    tok = build_tokenizer([text] * 4, 300, SPECIAL_TOKENS, DEMO_CHAT_TEMPLATE)
    ((ids, labels),) = render(tok, [text])
    assert len(ids) == len(labels)
    assert tok.decode([t for t in labels if t != -100]) == "Hello!<|im_end|>"


def test_a_word_is_the_same_token_in_a_question_and_in_a_call():
    texts = ['Weather in Paris?\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>']
    tok = build_tokenizer(texts * 4, 300, SPECIAL_TOKENS, DEMO_CHAT_TEMPLATE)
    pieces = tok.convert_ids_to_tokens(tok(texts[0]).input_ids)
    assert pieces.count("Paris") == 2 and pieces.count("<tool_call>") == 1 and pieces.count("Ċ") == 3
