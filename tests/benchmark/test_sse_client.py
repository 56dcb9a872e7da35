"""Chat prompts of the serving benchmarks are as varied as their token ids, whatever the served
model's tokenizer: otherwise every chat prompt is the same text and a second burst measures the
prefix cache, not the server."""

from __future__ import annotations

from transformers import AutoTokenizer

from minisgl.benchmark.sse_client import CHAT_WORDS, chat_text, chat_words
from minisgl.models.tiny import synthetic_tokenizer


def test_under_the_synthetic_tokenizer_chat_prompts_are_made_of_its_own_tokens(tmp_path):
    synthetic_tokenizer(1000).save_pretrained(tmp_path)
    tok = AutoTokenizer.from_pretrained(tmp_path)
    assert len({tuple(tok.encode(w, add_special_tokens=False)) for w in CHAT_WORDS}) == 1  # all its unknown token
    ids = tok.encode(chat_text(list(range(1, 300)), chat_words(str(tmp_path))), add_special_tokens=False)
    assert len(ids) == 299 and len(set(ids)) == 299


def test_without_a_readable_local_tokenizer_the_english_words_are_used(tmp_path):
    assert chat_words(None) == CHAT_WORDS
    assert chat_words(str(tmp_path / "absent")) == CHAT_WORDS
    assert chat_text([0, 1, len(CHAT_WORDS)]) == f"{CHAT_WORDS[0]} {CHAT_WORDS[1]} {CHAT_WORDS[0]}"
