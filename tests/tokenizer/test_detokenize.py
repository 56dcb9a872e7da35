"""Incremental detokenization: streamed pieces concatenate to the one-shot decode, never show a
replacement character for a split multi-byte character, and cut stop strings out."""

from __future__ import annotations

import pytest

from minisgl.models.demo import build_tokenizer
from minisgl.tokenizer.detokenize import IncrementalDetokenizer


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def stream(tok, text: str, stop: list[str] = (), tail: list[int] = ()) -> list[str]:
    detok = IncrementalDetokenizer(tok.backend_tokenizer, list(stop), True, list(tail))
    pieces = [detok.add(t) for t in tok.encode(text)]
    return pieces + [detok.finish()]


@pytest.mark.parametrize("text", ["Hello, world!", "café naïve 東京 Привет 😀 emoji", "def main():\n    return 0"])
def test_stream_equals_one_shot_decode_without_replacement_chars(tok, text):
    ids = tok.encode(text)
    assert any(len(tok.decode([i])) == 0 or "\ufffd" in tok.decode([i]) for i in ids) or text.isascii()
    pieces = stream(tok, text)
    assert "".join(pieces) == tok.decode(ids) == text
    assert not any("\ufffd" in p for p in pieces)


def test_prompt_tail_gives_context_but_is_not_repeated(tok):
    prompt = tok.encode("The quick brown")
    assert "".join(stream(tok, " fox jumps", tail=prompt[-4:])) == " fox jumps"


def test_stop_string_is_cut_and_held_back_while_ambiguous(tok):
    pieces = stream(tok, "Hello world. Goodbye world.", stop=["Goodbye"])
    assert "".join(pieces) == "Hello world. "
    assert not any("Good" in p for p in pieces)


def test_text_that_only_looks_like_a_stop_string_is_released_at_the_end(tok):
    assert "".join(stream(tok, "ends with Goo", stop=["Goodbye"])) == "ends with Goo"


def test_trailing_incomplete_character_is_flushed_like_a_one_shot_decode(tok):
    ids = tok.encode("東")[:-1]  # the last byte of the character is missing
    detok = IncrementalDetokenizer(tok.backend_tokenizer, [], True, [])
    text = "".join(detok.add(i) for i in ids) + detok.finish()
    assert text == tok.decode(ids) and "\ufffd" in text
