"""Messages travel between processes as msgpack arrays and come back as the same typed objects,
nested ones included; several replies of one request merge into one."""

from __future__ import annotations

from minisgl.core.params import SamplingParams
from minisgl.message import (
    AbortMsg,
    ExitMsg,
    Reply,
    ReplyBatchMsg,
    StepOutput,
    TextParams,
    TokenBatchMsg,
    TokenizedRequestMsg,
    TokenizeMsg,
    decode,
    encode,
    merge_by_request,
    merge_replies,
)


def test_a_batch_message_carries_typed_objects_both_ways():
    outs = [StepOutput(1, 42, None, None, 7), StepOutput(2, None, "error", "too long", 9, None, None),
            StepOutput(3, 5, "stop", None, 3, -0.25, [[5, -0.25], [6, -1.5]])]
    back = decode(encode(TokenBatchMsg(outs)))
    assert isinstance(back, TokenBatchMsg) and back.outputs == outs
    assert all(type(o) is StepOutput for o in back.outputs)


def test_messages_of_one_field_and_of_none_travel_too():
    assert decode(encode(AbortMsg(7))) == AbortMsg(7)
    assert decode(encode(ExitMsg())) == ExitMsg()


def test_a_request_carries_its_sampling_params_object_both_ways():
    params = SamplingParams(temperature=0.7, top_k=5, top_p=0.9, min_p=0.05, max_tokens=None, ignore_eos=True,
                            stop_token_ids=(3, 9), seed=2**63 - 1, logprobs=2, presence_penalty=-1.5,
                            frequency_penalty=0.25, repetition_penalty=1.3, logit_bias={7: -100, 12: 2.5},
                            min_tokens=4, constraint=None)
    constrained = SamplingParams(max_tokens=30, stop=("\u2028end",), constraint=("json_schema", '{"type": "object"}'))
    for p in (params, constrained, SamplingParams()):
        back = decode(encode(TokenizedRequestMsg(11, [1, 2, 3], p)))
        assert back == TokenizedRequestMsg(11, [1, 2, 3], p) and type(back.params) is SamplingParams
        # Hashable as built (tuples, not the lists msgpack hands back): the scheduler keys caches on them.
        assert hash(back.params) == hash(p) and back.params.logit_bias == p.logit_bias


def test_a_nested_sampling_params_travels_without_field_names():
    data = encode(TokenizedRequestMsg(1, [5], SamplingParams(repetition_penalty=1.1)))
    assert b"repetition_penalty" not in data and b"temperature" not in data


def test_a_tokenize_request_carries_typed_sampling_and_text_params_both_ways():
    """The API server sends SamplingParams and TextParams objects, not dicts: the tokenizer reads
    attributes and passes the SamplingParams on to the scheduler as they came."""
    params = SamplingParams(temperature=0.5, max_tokens=None, seed=2**63 - 1, logit_bias={3: -1.5},
                            stop_token_ids=(5, 9), constraint=("json_schema", '{"type": "object"}'))
    template = {"add_generation_prompt": False, "kwargs": {"enable_thinking": False},
                "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]}
    text_params = TextParams(["\u2028x", "q" * 1024], skip_special_tokens=False, template=template)
    msg = TokenizeMsg(7, params, text_params, messages=[{"role": "user", "content": "héllo 東京"}])
    back = decode(encode(msg))
    assert back == msg
    assert type(back.params) is SamplingParams and type(back.text_params) is TextParams
    assert hash(back.params) == hash(params)  # tuples again, as the scheduler keys on them
    data = encode(msg)
    assert b"skip_special_tokens" not in data and b"temperature" not in data


def test_text_params_default_to_no_stop_strings_special_tokens_skipped_and_no_template():
    back = decode(encode(TokenizeMsg(1, SamplingParams(), TextParams(), text="hi")))
    assert back.text_params == TextParams([], True, None) and back.text == "hi"


def test_the_wire_has_no_field_names():
    data = encode(ReplyBatchMsg([Reply(1, "text", 3)]))
    assert b"completion_tokens" not in data and b"uid" not in data


def test_replies_merge_text_logprobs_and_keep_the_last_end():
    a = Reply(4, "He", 1, None, None, 10, [["He", -0.1, []]])
    b = Reply(4, "llo", 2, None, None, 10, None)
    c = Reply(4, "!", 3, "length", None, 10, [["!", -2.0, []]])
    merged = merge_replies([a, b, c])
    assert merged == Reply(4, "Hello!", 3, "length", None, 10, [["He", -0.1, []], ["!", -2.0, []]])


def test_merge_by_request_keeps_request_order_and_lone_replies():
    r = [Reply(1, "a", 1), Reply(2, "x", 1), Reply(1, "b", 2), Reply(3, "q", 1, "stop")]
    merged = merge_by_request(r)
    assert [(m.uid, m.text, m.completion_tokens) for m in merged] == [(1, "ab", 2), (2, "x", 1), (3, "q", 1)]
    assert merged[2].finish_reason == "stop"
