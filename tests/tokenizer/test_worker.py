"""The tokenizer worker's share of bounding a request's cost: the n choices of one request are
tokenized once, and what only the detokenizer needs (stop strings) is not copied to the scheduler."""

from __future__ import annotations

from minisgl.message import TokenizeMsg
from minisgl.models.demo import build_tokenizer
from minisgl.tokenizer.worker import RepeatedPrompt, scheduler_params


class CountingTokenizer:
    """The real tokenizer, counting how often it encodes."""

    def __init__(self):
        self.tok, self.calls = build_tokenizer(), 0

    def encode(self, text):
        self.calls += 1
        return self.tok.encode(text)


def test_the_choices_of_one_request_are_tokenized_once():
    tok, memo = CountingTokenizer(), RepeatedPrompt()
    params = {"stop": ["x"], "max_tokens": 4}
    choices = [TokenizeMsg(uid, params, "the same prompt", None, None) for uid in range(16)]
    ids = [memo.encode(tok, m) for m in choices]
    assert tok.calls == 1 and all(i == tok.tok.encode("the same prompt") for i in ids)
    assert memo.encode(tok, TokenizeMsg(99, params, "another prompt", None, None)) == tok.tok.encode("another prompt")
    assert memo.encode(tok, TokenizeMsg(100, params, None, [5, 6], None)) == [5, 6]  # ids need no tokenizer
    assert tok.calls == 2


def test_stop_strings_and_template_options_do_not_travel_to_the_scheduler():
    params = {"stop": ["q" * 1024] * 4, "template": {"kwargs": {}}, "max_tokens": 8, "stop_token_ids": [3]}
    assert scheduler_params(params) == {"max_tokens": 8, "stop_token_ids": [3]}
