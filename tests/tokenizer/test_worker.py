"""The tokenizer worker's share of bounding a request's cost: the n choices of one request are
tokenized once. (What only the detokenizer needs, stop strings, never reaches the scheduler: it
travels apart, in TextParams; tests/server/test_jobs.py.)"""

from __future__ import annotations

from minisgl.core.params import SamplingParams
from minisgl.message import TextParams, TokenizeMsg
from minisgl.models.tiny import build_tokenizer
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


def test_a_chat_is_measured_as_its_template_renders_it_before_any_tokenizing():
    """Tool-call arguments (and everything else the template writes) count toward the prompt's
    size: 7 million characters of arguments are refused from the rendered text's bytes, never
    encoded (encoding them takes most of a minute), whatever the message contents' size."""
    import json
    import time

    import pytest
    from transformers import AutoTokenizer

    from minisgl.demo.model import demo_model_dir
    from minisgl.tokenizer.prompt_bound import PromptLimit, PromptTooLong

    class Counting:  # the demo model's tokenizer: its chat template writes tool calls, as Qwen's does
        def __init__(self):
            self.tok, self.calls = AutoTokenizer.from_pretrained(demo_model_dir()), 0
            self.chat_template = self.tok.chat_template

        def apply_chat_template(self, *args, **kwargs):
            return self.tok.apply_chat_template(*args, **kwargs)

        def encode(self, text, **kwargs):
            self.calls += 1
            return self.tok.encode(text, **kwargs)

    tok = Counting()
    limit = PromptLimit(1000, tok.tok.backend_tokenizer)
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": {"a": "x " * 3_500_000}}}
    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c", "content": "ok"}]
    start = time.monotonic()
    with pytest.raises(PromptTooLong, match=r"prompt: \d+ bytes is more than 1000 tokens"):
        RepeatedPrompt().encode(tok, TokenizeMsg(1, SamplingParams(max_tokens=4), TextParams(), None, None, chat), limit)
    assert tok.calls == 0 and time.monotonic() - start < 10
    # A chat within the limit gets exactly the ids apply_chat_template(tokenize=True) gives.
    call["function"]["arguments"] = {"a": json.dumps([1, 2])}
    ids = RepeatedPrompt().encode(tok, TokenizeMsg(2, SamplingParams(max_tokens=4), TextParams(), None, None, chat),
                                  limit)
    want = tok.tok.apply_chat_template(chat, tokenize=True, add_generation_prompt=True)
    assert ids == list(want["input_ids"] if hasattr(want, "keys") else want)
