"""Incremental detokenization: streamed pieces concatenate to the one-shot decode, never show a
replacement character for a split multi-byte character, and cut stop strings out."""

from __future__ import annotations

import pytest

from minisgl.models.tiny import build_tokenizer
from minisgl.tokenizer.incremental import IncrementalDetokenizer


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


def reference(tok, ids: list[int], stops: list[str]) -> str:
    """What the client must see: the one-shot decode, cut at the first character that completes a
    stop string, before the longest stop string ending there."""
    text = tok.decode(ids)
    for end in range(1, len(text) + 1):
        starts = [end - len(s) for s in stops if s and text[:end].endswith(s)]
        if starts:
            return text[: min(starts)]
    return text


@pytest.mark.parametrize("seed", range(40))
def test_streamed_text_with_stop_strings_equals_the_one_shot_decode_cut_at_the_first_stop(tok, seed):
    """Random texts and stop strings taken from them (overlapping, repeated characters, spanning
    tokens, several matching at once): the stream is always exactly the reference."""
    import random

    rng = random.Random(seed)
    alphabet = rng.choice(["ab", "abc ", "aab.東", "xyz, ñ"])
    text = "".join(rng.choice(alphabet) for _ in range(rng.randint(5, 80)))
    stops = []
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(text))
        stops.append(text[at : at + rng.randint(1, 12)] if rng.random() < 0.8 else "zz" + alphabet)
    ids = tok.encode(text)
    detok = IncrementalDetokenizer(tok.backend_tokenizer, stops, True, [])
    pieces = [detok.add(i) for i in ids] + [detok.finish()]
    assert "".join(pieces) == reference(tok, ids, stops), (text, stops)


def test_held_back_text_never_exceeds_the_longest_stop_string(tok):
    """Per-request state stays bounded however long the output: only text that may still turn out
    to be a stop string is held (four 1024-character stop strings once made every token
    rescan the whole text)."""
    stops = ["a" * 1023 + "b", "q" * 1024, "ab" * 512, "xyz"]
    ids = tok.encode("a" * 3000 + "x" * 50 + "a" * 2000)
    detok = IncrementalDetokenizer(tok.backend_tokenizer, stops, True, [])
    out = ""
    for i in ids:
        out += detok.add(i)
        assert len(detok.held) <= 1024 + 8
    out += detok.finish()
    assert out == tok.decode(ids)
