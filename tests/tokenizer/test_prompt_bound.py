"""The byte-size bound that refuses an over-long prompt before tokenizing it must never refuse a
prompt that fits: tokens >= bytes / bound for any text, also text built from the longest tokens."""

from __future__ import annotations

import random

import pytest
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

from minisgl.models.tiny import build_tokenizer
from minisgl.tokenizer.prompt_bound import SHRINK, PromptLimit, bytes_per_token_bound


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def texts(tok) -> list[str]:
    """Adversarial for the bound: the longest tokens repeated (the most bytes per token), special
    tokens written out, multi-byte and rare characters, plain prose."""
    vocab = tok.backend_tokenizer.get_vocab(with_added_tokens=True)
    longest = sorted(vocab, key=lambda t: -len(t.encode()))[:20]
    decoded = [tok.decode([vocab[t]]) for t in longest]
    rng = random.Random(0)
    return ["".join(rng.choice(decoded) for _ in range(300)), decoded[0] * 500,
            "".join(tok.all_special_tokens) * 50, "東京 Привет 😀 ñ ﬀ Ａ" * 40, "the quick brown fox " * 100, " " * 999]


def test_no_text_has_fewer_tokens_than_its_bytes_over_the_bound(tok):
    bound = bytes_per_token_bound(tok.backend_tokenizer)
    assert bound is not None
    for text in texts(tok):
        tokens = len(tok.encode(text, add_special_tokens=False))
        assert tokens >= len(text.encode()) / bound, (text[:40], tokens, bound)


def test_a_prompt_that_fits_passes_and_one_proven_too_long_is_refused_by_bytes(tok):
    limit = PromptLimit(100, tok.backend_tokenizer)
    for text in texts(tok):
        ids = tok.encode(text, add_special_tokens=False)
        fitting = tok.decode(ids[:100])
        if len(tok.encode(fitting, add_special_tokens=False)) <= 100:
            assert limit.check_bytes(fitting) is None
    problem = limit.check_bytes("x" * (8 << 20))
    assert problem.startswith("prompt: 8388608 bytes is more than 100 tokens")
    assert limit.check_tokens(101).startswith("prompt: 101 tokens") and limit.check_tokens(100) is None


def _bpe(normalizer=None, pre_tokenizer=None) -> Tokenizer:
    t = Tokenizer(models.BPE(vocab={"a": 0, "b": 1, "ab": 2, "[UNK]": 3}, merges=[("a", "b")], unk_token="[UNK]"))
    if normalizer is not None:
        t.normalizer = normalizer
    if pre_tokenizer is not None:
        t.pre_tokenizer = pre_tokenizer
    return t


def test_tokenizers_that_may_drop_text_get_no_byte_bound():
    """Whitespace-removing splits, BERT's clean-up, size-reducing replacements and WordPiece (one
    unknown token for a whole word) could make a long text few tokens: always tokenized."""
    assert bytes_per_token_bound(_bpe(pre_tokenizer=pre_tokenizers.WhitespaceSplit())) is None
    assert bytes_per_token_bound(_bpe(normalizer=normalizers.BertNormalizer())) is None
    assert bytes_per_token_bound(_bpe(normalizer=normalizers.Replace("  ", " "))) is None
    wordpiece = Tokenizer(models.WordPiece(vocab={"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    assert bytes_per_token_bound(wordpiece) is None
    # Size-keeping ones are bounded: Unicode normal forms may shrink text up to SHRINK times.
    assert bytes_per_token_bound(_bpe()) == 5  # '[UNK]' is the longest token
    assert bytes_per_token_bound(_bpe(normalizer=normalizers.NFKC())) == 5 * SHRINK
    spm = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    assert bytes_per_token_bound(_bpe(normalizer=spm)) == 5 * SHRINK
    assert PromptLimit(None, _bpe()).check_bytes("x" * 10**6) is None  # no limit: nothing to refuse
