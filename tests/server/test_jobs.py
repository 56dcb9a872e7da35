"""An OpenAI request becomes the pipeline's jobs (`Job`) as typed objects: per choice a SamplingParams for
the scheduler and a TextParams for the tokenizer and detokenizer (stop strings, special tokens, the
chat template's options), never dicts rebuilt at each hop. The SamplingParams are checked in the
API server: an impossible combination is the client's 400 naming the field, before anything is sent."""

from __future__ import annotations

import pytest

from minisgl.core.params import SamplingParams
from minisgl.message import TextParams
from minisgl.server.http.chat_protocol import ChatCompletionRequest
from minisgl.server.http.completions_protocol import CompletionRequest
from minisgl.server.http.jobs import Job, chat_jobs, completion_jobs, with_lora
from minisgl.server.http.protocol import APIError
from minisgl.server.parsers.chat_output import ChatOutputFormat

CHAT = [{"role": "user", "content": "hi"}]


def chat_jobs_of(body: ChatCompletionRequest) -> list:
    """chat_jobs on a server started with no parser flags (its output read back as plain text)."""
    return chat_jobs(body, ChatOutputFormat())


def test_stop_strings_and_template_options_travel_apart_from_the_sampling_params():
    body = ChatCompletionRequest(messages=CHAT, stop="END", skip_special_tokens=False, max_tokens=8, stop_token_ids=[3],
                                 logit_bias={"7": -100}, chat_template_kwargs={"enable_thinking": False})
    (job,) = chat_jobs_of(body)
    assert job.prompt_index == 0 and job.prompt == {"messages": CHAT}
    assert job.params == SamplingParams(max_tokens=8, stop_token_ids=(3,), logit_bias=((7, -100.0),))
    assert job.params.stop == ()  # the scheduler keeps its params for the request's life: no stop strings there
    assert job.text_params == TextParams(["END"], False, {"add_generation_prompt": True,
                                                            "kwargs": {"enable_thinking": False}, "tools": None})


def test_a_completion_without_text_options_gets_the_defaults_and_no_template():
    (job,) = completion_jobs(CompletionRequest(prompt=[5, 6], temperature=0))
    assert job.params == SamplingParams(temperature=0.0, max_tokens=16)
    assert job.generate_kwargs() == {"input_ids": [5, 6],
                                     "text_params": TextParams(stop=[], skip_special_tokens=True, template=None)}


def test_max_tokens_left_unset_in_a_chat_stays_none_for_the_scheduler():
    """Only the scheduler knows the context left: it resolves None (Scheduler.resolve)."""
    (job,) = chat_jobs_of(ChatCompletionRequest(messages=CHAT, min_tokens=40))
    assert job.params.max_tokens is None and job.params.min_tokens == 40


def test_each_of_n_choices_gets_its_own_seed_and_every_prompt_all_n():
    jobs = completion_jobs(CompletionRequest(prompt=["a", "b"], n=3, seed=10, stop=["x", "y"]))
    assert [(j.prompt_index, j.params.seed, j.prompt["text"]) for j in jobs] == \
        [(0, 10, "a"), (0, 11, "a"), (0, 12, "a"), (1, 10, "b"), (1, 11, "b"), (1, 12, "b")]
    assert all(type(j) is Job and type(j.params) is SamplingParams and j.text_params.stop == ["x", "y"] for j in jobs)
    assert {j.params.seed for j in completion_jobs(CompletionRequest(prompt="a", n=3))} == {None}


def test_a_lora_request_runs_every_choice_under_its_adapter_and_the_base_model_under_none():
    jobs = completion_jobs(CompletionRequest(prompt=["a", "b"], n=2, seed=1))
    assert with_lora(jobs, None) == jobs
    assert [(j.params.lora, j.params.seed) for j in with_lora(jobs, "sql")] == [("sql", 1), ("sql", 2)] * 2


@pytest.mark.parametrize("body, field", [({"max_tokens": 8, "min_tokens": 9}, "min_tokens"),
                                         ({"min_tokens": 2, "response_format": {"type": "json_object"}}, "min_tokens"),
                                         ({"guided_json": "{not json"}, "JSON")])
def test_an_impossible_combination_is_a_400_naming_the_field(body, field):
    with pytest.raises(APIError) as refused:
        chat_jobs_of(ChatCompletionRequest(messages=CHAT, **body))
    assert refused.value.status == 400 and refused.value.code == "invalid_request" and field in refused.value.message


STRICT = {"type": "function", "function": {"name": "get_time", "strict": True, "parameters": {
    "type": "object", "properties": {"zone": {"type": "string", "enum": ["UTC"]}}, "required": ["zone"]}}}
LOOSE = {"type": "function", "function": {"name": "get_news", "parameters": {"type": "object"}}}


def test_strict_functions_with_tool_choice_auto_hold_calls_in_the_parsers_syntax_or_are_refused():
    body = ChatCompletionRequest(messages=CHAT, tools=[STRICT, LOOSE])
    (job,) = chat_jobs(body, ChatOutputFormat.for_chat(body, None, "hermes"))
    assert job.params.constraint[0] == "strict_tool_calls" and '"enum": ["UTC"]' in job.params.constraint[1]
    # No strict function, or a forced call (the grammar holds it anyway): no such constraint.
    loose = ChatCompletionRequest(messages=CHAT, tools=[LOOSE])
    assert chat_jobs(loose, ChatOutputFormat.for_chat(loose, None, "hermes"))[0].params.constraint is None
    named = ChatCompletionRequest(messages=CHAT, tools=[STRICT], tool_choice={"type": "function",
                                                                                "function": {"name": "get_time"}})
    assert chat_jobs(named, ChatOutputFormat.for_chat(named, None, "hermes"))[0].params.constraint[0] == "json_schema"
    # A parser whose calls are not one JSON object cannot hold them: refused, not ignored.
    with pytest.raises(APIError) as e:
        chat_jobs(body, ChatOutputFormat.for_chat(body, None, "qwen3_coder"))
    assert e.value.status == 400 and e.value.param == "tools" and "qwen3_coder" in e.value.message
