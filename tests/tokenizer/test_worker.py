"""The tokenizer worker's share of bounding a request's cost: the n choices of one request are
tokenized once, what only the detokenizer needs (stop strings) is not copied to the scheduler, and
the scheduler gets SamplingParams that passed their checks."""

from __future__ import annotations

import pytest

from minisgl.core import SamplingParams
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
    params = {"stop": ["q" * 1024] * 4, "template": {"kwargs": {}}, "skip_special_tokens": False, "max_tokens": 8,
              "stop_token_ids": [3]}
    assert scheduler_params(params) == SamplingParams(max_tokens=8, stop_token_ids=(3,))


def test_the_scheduler_gets_sampling_params_with_max_tokens_left_to_it():
    """max_tokens None (the client named none) stays None: only the scheduler knows the context left."""
    params = scheduler_params({"temperature": 0.5, "max_tokens": None, "min_tokens": 40, "logit_bias": [[3, -1]]})
    assert params == SamplingParams(temperature=0.5, max_tokens=None, min_tokens=40, logit_bias=((3, -1.0),))


@pytest.mark.parametrize("params, field", [({"max_tokens": 8, "min_tokens": 9}, "min_tokens"),
                                           ({"min_tokens": 2, "constraint": ["json_object", ""]}, "min_tokens"),
                                           ({"top_p": 0}, "top_p")])
def test_an_invalid_combination_is_a_value_error_naming_the_field(params, field):
    with pytest.raises(ValueError, match=field):
        scheduler_params(params)
