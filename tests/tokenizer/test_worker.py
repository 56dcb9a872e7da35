"""The tokenizer worker's share of bounding a request's cost: the n choices of one request are
tokenized once. (What only the detokenizer needs, stop strings, never reaches the scheduler: it
travels apart, in TextParams; tests/server/test_openai_jobs.py.)"""

from __future__ import annotations

from minisgl.core import SamplingParams
from minisgl.message import TextParams, TokenizeMsg
from minisgl.models.demo import build_tokenizer
from minisgl.tokenizer.worker import RepeatedPrompt


class CountingTokenizer:
    """The real tokenizer, counting how often it encodes."""

    def __init__(self):
        self.tok, self.calls = build_tokenizer(), 0

    def encode(self, text):
        self.calls += 1
        return self.tok.encode(text)


def test_the_choices_of_one_request_are_tokenized_once():
    tok, memo = CountingTokenizer(), RepeatedPrompt()
    params, text_params = SamplingParams(max_tokens=4), TextParams(stop=["x"])
    choices = [TokenizeMsg(uid, params, text_params, "the same prompt") for uid in range(16)]
    ids = [memo.encode(tok, m) for m in choices]
    assert tok.calls == 1 and all(i == tok.tok.encode("the same prompt") for i in ids)
    assert memo.encode(tok, TokenizeMsg(99, params, text_params, "another prompt")) == tok.tok.encode("another prompt")
    assert memo.encode(tok, TokenizeMsg(100, params, text_params, None, [5, 6])) == [5, 6]  # ids need no tokenizer
    assert tok.calls == 2
