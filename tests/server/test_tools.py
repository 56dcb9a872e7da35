"""Tool calling and reasoning through the real server: the official `openai` client and
LangChain (`bind_tools`, `with_structured_output`) on a tiny random model, the server started
without --tool-call-parser (the parser comes from the chat template). Forced tool calls are
grammar-constrained, so their arguments always parse and match the tool's schema, also beside a
response_format and when max_tokens cuts them; free-form (auto) calls and <think> blocks are
produced with a guided_regex, so the Hermes, Llama-3 JSON and Qwen3 parsers are exercised on real
generated, detokenized, streamed text."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest
from transformers import AutoTokenizer

from tests.server.serving import ServerProcess, tiny_qwen3_server
from tests.server.tool_chat import CHAT, LLAMA3_TEMPLATE, TEMPLATE, TIME, WEATHER, streamed_calls

pytestmark = pytest.mark.slow  # starts the server or worker processes: out of the fast loop (tests/test_tiers.py)

MODEL = "tiny-qwen3"


model_dir, server, client = tiny_qwen3_server(
    "--served-model-name", MODEL, "--dtype", "float32", "--page-size", "4", "--num-pages", "2048", "--max-seq-len",
    "1024", "--chat-template", TEMPLATE, "--reasoning-parser", "qwen3")


def _check(call, tool) -> dict:
    assert call.type == "function" and call.id and call.function.name == tool["function"]["name"]
    args = json.loads(call.function.arguments)
    jsonschema.validate(args, tool["function"]["parameters"])
    return args


def test_named_tool_choice_always_gives_valid_arguments(client):
    for seed in range(4):
        resp = client.chat.completions.create(model=MODEL, messages=CHAT, tools=[WEATHER, TIME], temperature=1.0,
                                              seed=seed, max_tokens=80,
                                              tool_choice={"type": "function", "function": {"name": "get_time"}})
        message = resp.choices[0].message
        assert len(message.tool_calls) == 1 and resp.choices[0].finish_reason == "stop"
        _check(message.tool_calls[0], TIME)


def test_required_tool_choice_and_parallel_calls(client):
    tools = {"get_weather": WEATHER, "get_time": TIME}
    for seed, parallel in ((0, True), (1, False), (2, False)):
        resp = client.chat.completions.create(model=MODEL, messages=CHAT, tools=list(tools.values()),
                                              tool_choice="required", parallel_tool_calls=parallel, temperature=1.0,
                                              seed=seed, max_tokens=200)
        calls = resp.choices[0].message.tool_calls
        assert calls and resp.choices[0].finish_reason == "tool_calls", resp
        assert parallel or len(calls) == 1
        for call in calls:
            _check(call, tools[call.function.name])
    stream = client.chat.completions.create(model=MODEL, messages=CHAT, tools=[WEATHER], tool_choice="required",
                                            parallel_tool_calls=False, temperature=1.0, seed=5, max_tokens=200,
                                            stream=True)
    chunks = [c for c in stream if c.choices]
    deltas = [tc for c in chunks for tc in (c.choices[0].delta.tool_calls or [])]
    assert deltas and chunks[-1].choices[0].finish_reason == "tool_calls"
    args = json.loads("".join(d.function.arguments for d in deltas if d.index == 0))
    jsonschema.validate(args, WEATHER["function"]["parameters"])


HERMES_REGEX = (r'<think>[a-z ]{1,20}</think>[A-Z][a-z]{1,8}\.<tool_call>\n\{"name": "get_weather", '
                r'"arguments": \{"city": "(Paris|Oslo)", "days": [1-7]\}\}\n</tool_call>')


@pytest.mark.parametrize("stream", [False, True])
def test_auto_tool_calls_and_reasoning_are_parsed_from_generated_text(client, stream):
    kw = dict(model=MODEL, messages=CHAT, tools=[WEATHER], temperature=1.0, seed=3, max_tokens=200,
              extra_body={"guided_regex": HERMES_REGEX})
    if not stream:
        resp = client.chat.completions.create(**kw)
        message, finish = resp.choices[0].message, resp.choices[0].finish_reason
        reasoning, content, calls = message.reasoning_content, message.content, message.tool_calls
    else:
        chunks = [c for c in client.chat.completions.create(stream=True, **kw) if c.choices]
        reasoning = "".join(getattr(c.choices[0].delta, "reasoning_content", None) or "" for c in chunks)
        content = "".join(c.choices[0].delta.content or "" for c in chunks)
        calls = streamed_calls(chunks)
        finish = chunks[-1].choices[0].finish_reason
    assert reasoning and set(reasoning) <= set("abcdefghijklmnopqrstuvwxyz ")
    assert content and content.endswith(".") and "<" not in content
    assert len(calls) == 1 and finish == "tool_calls"
    _check(calls[0], WEATHER)


CALL_REGEX = (r'<tool_call>\n\{"name": "get_weather", "arguments": \{"city": "(Paris|Oslo)", "days": [1-7]\}\}'
              r'\n</tool_call>')


@pytest.mark.parametrize("tool_choice", ["auto", "required", {"type": "function", "function": {"name": "get_weather"}}])
def test_tool_call_arguments_stream_in_pieces_as_they_are_generated(client, tool_choice):
    """The call's first delta names it; its arguments follow in several deltas that join to JSON
    matching the tool's schema; no call syntax reaches the content deltas."""
    kw = dict(model=MODEL, messages=CHAT, tools=[WEATHER], tool_choice=tool_choice, parallel_tool_calls=False,
              temperature=1.0, seed=1, max_tokens=200)
    if tool_choice == "auto":  # the model's own syntax, generated
        kw["extra_body"] = {"guided_regex": CALL_REGEX}
    chunks = list(client.chat.completions.create(stream=True, **kw))
    pieces = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert len(pieces) > 3 and {p.index for p in pieces} == {0}
    (call,) = streamed_calls(chunks)
    _check(call, WEATHER)
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "<tool_call>" not in content and '"name"' not in content and "{" not in content
    assert chunks[-1].choices[0].finish_reason == ("stop" if isinstance(tool_choice, dict) else "tool_calls")


def test_a_template_without_tools_refuses_auto_saying_why_and_bad_tool_choice_is_400(model_dir, client):
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=MODEL, messages=CHAT, tools=[WEATHER], max_tokens=2,
                                       tool_choice={"type": "function", "function": {"name": "nope"}})
    # The tiny model's own template renders no tools: no parser to pick.
    srv = ServerProcess("--model", model_dir, "--served-model-name", MODEL, "--num-pages", "256").wait_ready()
    try:
        plain = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused")
        with pytest.raises(openai.BadRequestError) as e:
            plain.chat.completions.create(model=MODEL, messages=CHAT, tools=[WEATHER], max_tokens=2)
        assert e.value.body["param"] == "tool_choice"
        assert "does not render tools" in e.value.body["message"] and "--tool-call-parser" in e.value.body["message"]
        # tool_choice none: the tools are simply not used; a forced choice needs no parser.
        assert plain.chat.completions.create(model=MODEL, messages=CHAT, tools=[WEATHER], tool_choice="none",
                                             max_tokens=2).choices[0].message.tool_calls is None
        forced = plain.chat.completions.create(model=MODEL, messages=CHAT, tools=[TIME], tool_choice="required",
                                               max_tokens=120, temperature=0)
        _check(forced.choices[0].message.tool_calls[0], TIME)
    finally:
        assert srv.stop() == 0
    assert "no tool-call parser: the model's chat template does not render tools" in srv.output()


LLAMA_REGEX = r'\{"name": "get_weather", "parameters": \{"city": "(Paris|Oslo)", "days": [1-7]\}\}'


def test_a_llama_template_gets_llama3_json_calls_read_without_flags(tiny_model_dir):
    srv = ServerProcess("--model", tiny_model_dir("LlamaForCausalLM"), "--served-model-name", MODEL, "--num-pages",
                        "512", "--chat-template", LLAMA3_TEMPLATE).wait_ready()
    try:
        llama = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused")
        kw = dict(model=MODEL, messages=CHAT, tools=[WEATHER], temperature=1.0, seed=2, max_tokens=120,
                  extra_body={"guided_regex": LLAMA_REGEX})
        choice = llama.chat.completions.create(**kw).choices[0]
        assert not choice.message.content and choice.finish_reason == "tool_calls"
        assert len(choice.message.tool_calls) == 1
        _check(choice.message.tool_calls[0], WEATHER)
        chunks = [c for c in llama.chat.completions.create(stream=True, **kw) if c.choices]
        calls = streamed_calls(chunks)
        assert "".join(c.choices[0].delta.content or "" for c in chunks) == "" and len(calls) == 1
        assert len([tc for c in chunks for tc in (c.choices[0].delta.tool_calls or [])]) > 3  # arguments in pieces
        assert chunks[-1].choices[0].finish_reason == "tool_calls"
        _check(calls[0], WEATHER)
    finally:
        assert srv.stop() == 0
    assert 'tool-call parser: llama3_json (the chat template writes "parameters"' in srv.output()


def test_tools_and_history_with_tool_calls_reach_the_template(client, model_dir):
    tok = AutoTokenizer.from_pretrained(model_dir)
    history = CHAT + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather",
                                                              "arguments": '{"city": "Paris", "days": 2}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 21 C"},
    ]
    resp = client.chat.completions.create(model=MODEL, messages=history, tools=[WEATHER], tool_choice="none",
                                          max_tokens=1, extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    # The reference renders the arguments as a mapping, as vLLM hands them to templates.
    expected = [dict(m) for m in history]
    expected[1] = {**expected[1], "tool_calls": [{**expected[1]["tool_calls"][0], "function": {
        "name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]}
    ids = tok.apply_chat_template(expected, tools=None, chat_template=TEMPLATE, add_generation_prompt=True,
                                  tokenize=True, enable_thinking=False)["input_ids"]
    assert resp.usage.prompt_tokens == len(ids)
    with_tools = client.chat.completions.create(model=MODEL, messages=CHAT, tools=[WEATHER], max_tokens=1,
                                                tool_choice={"type": "function", "function": {"name": "get_weather"}})
    ids = tok.apply_chat_template(CHAT, tools=[WEATHER], chat_template=TEMPLATE, add_generation_prompt=True,
                                  tokenize=True)["input_ids"]
    assert with_tools.usage.prompt_tokens == len(ids)


def test_langchain_bind_tools_and_with_structured_output(server):
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from pydantic import BaseModel, Field

    @tool
    def get_weather(city: str, days: int) -> str:
        """Weather of a city for some days."""
        return "sunny"

    llm = ChatOpenAI(base_url=server.url + "/v1", api_key="unused", model=MODEL, temperature=1.0, max_tokens=120,
                     seed=1)
    reply = llm.bind_tools([get_weather], tool_choice="get_weather").invoke("Weather in Paris for 2 days?")
    assert len(reply.tool_calls) == 1 and reply.tool_calls[0]["name"] == "get_weather"
    assert set(reply.tool_calls[0]["args"]) == {"city", "days"} and isinstance(reply.tool_calls[0]["args"]["days"], int)

    class Verdict(BaseModel):
        answer: str = Field(pattern=r"^(yes|no)$")
        confidence: int = Field(ge=0, le=9)

    for method in ("json_schema", "function_calling"):
        verdict = llm.with_structured_output(Verdict, method=method).invoke("Is the sky blue?")
        assert isinstance(verdict, Verdict) and verdict.answer in ("yes", "no")


VERDICT = {"type": "object", "properties": {"answer": {"type": "string", "enum": ["yes", "no"]},
                                            "sure": {"type": "boolean"}}, "required": ["answer", "sure"]}
VERDICT_FORMAT = {"type": "json_schema", "json_schema": {"name": "verdict", "schema": VERDICT}}


@pytest.mark.parametrize("stream", [False, True])
def test_required_beside_response_format_always_calls_a_tool(client, stream):
    """OpenAI's required guarantees a call in this turn; the response_format shapes the final answer,
    in a later turn. Sampled with seeds 0-5, as a client would send it."""
    kw = dict(model=MODEL, messages=CHAT, tools=[WEATHER, TIME], tool_choice="required", parallel_tool_calls=False,
              response_format=VERDICT_FORMAT, temperature=1.0, max_tokens=200)
    for seed in range(6):
        if not stream:
            choice = client.chat.completions.create(seed=seed, **kw).choices[0]
            content, calls, finish = choice.message.content, choice.message.tool_calls or [], choice.finish_reason
        else:
            chunks = [c for c in client.chat.completions.create(stream=True, seed=seed, **kw) if c.choices]
            content = "".join(c.choices[0].delta.content or "" for c in chunks)
            calls = streamed_calls(chunks)
            finish = chunks[-1].choices[0].finish_reason
        assert not content and len(calls) == 1 and finish == "tool_calls", (seed, content, finish)
        _check(calls[0], {"get_weather": WEATHER, "get_time": TIME}[calls[0].function.name])


def test_responses_text_format_beside_forced_tools(client):
    tools = [{"type": "function", **WEATHER["function"]}]
    text = {"format": {"type": "json_schema", "name": "verdict", "schema": VERDICT}}
    # required: a function call, whatever the format.
    resp = client.responses.create(model=MODEL, input="Weather in Paris?", tools=tools, tool_choice="required",
                                   text=text, temperature=0, max_output_tokens=200)
    assert resp.status == "completed" and resp.output and {i.type for i in resp.output} == {"function_call"}
    for item in resp.output:
        jsonschema.validate(json.loads(item.arguments), WEATHER["function"]["parameters"])
    # A named function is called (instructor's RESPONSES_TOOLS sends it with the format).
    resp = client.responses.create(model=MODEL, input="Weather in Paris?", tools=tools, text=text, temperature=0,
                                   tool_choice={"type": "function", "name": "get_weather"}, max_output_tokens=200)
    assert [i.type for i in resp.output] == ["function_call"] and resp.output[0].name == "get_weather"
    jsonschema.validate(json.loads(resp.output[0].arguments), WEATHER["function"]["parameters"])


def _calls(calls) -> list[tuple[str, str]]:
    return [(c.function.name, c.function.arguments) for c in calls]


def test_a_forced_call_cut_inside_its_name_is_still_the_call(client):
    """However short max_tokens is, a required call of one tool comes back as that tool's call
    (its arguments as far as written, often none yet) with finish_reason length, never an empty
    message a client would take for an answer."""
    for max_tokens in (1, 3, 6, 8, 12, 20):
        choice = client.chat.completions.create(model=MODEL, messages=CHAT, tools=[WEATHER], tool_choice="required",
                                                temperature=0, max_tokens=max_tokens).choices[0]
        assert choice.finish_reason == "length" and not choice.message.content, max_tokens
        [call] = choice.message.tool_calls
        assert call.function.name == "get_weather", max_tokens


def test_a_forced_call_cut_before_its_arguments_is_unfinished_to_langchain_and_openai(server, client):
    """Cut before its arguments begin, a required call carries their text so far ("{") with
    finish_reason length: LangChain files it under invalid_tool_calls (with arguments "" it made a
    whole call of args {}), and the openai client's arguments do not parse."""
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    @tool
    def get_weather(city: str, days: int) -> str:
        """Weather of a city for some days."""
        return "sunny"

    for max_tokens in (1, 3, 8):
        choice = client.chat.completions.create(model=MODEL, messages=CHAT, tools=[WEATHER], tool_choice="required",
                                                temperature=0, max_tokens=max_tokens).choices[0]
        [call] = choice.message.tool_calls
        assert choice.finish_reason == "length" and call.function.arguments.startswith("{"), max_tokens
        with pytest.raises(json.JSONDecodeError):
            json.loads(call.function.arguments)
        llm = ChatOpenAI(base_url=server.url + "/v1", api_key="unused", model=MODEL, temperature=0,
                         max_tokens=max_tokens)
        reply = llm.bind_tools([get_weather], tool_choice="any").invoke("Weather in Paris for 2 days?")
        assert reply.response_metadata["finish_reason"] == "length" and reply.tool_calls == [], max_tokens
        [invalid] = reply.invalid_tool_calls
        assert invalid["name"] == "get_weather" and invalid["args"].startswith("{"), max_tokens


def test_a_forced_call_cut_by_max_tokens_is_a_call_with_finish_length_never_content(client):
    kw = dict(model=MODEL, messages=CHAT, tools=[WEATHER, TIME], tool_choice="required", parallel_tool_calls=False,
              temperature=0)
    whole = client.chat.completions.create(max_tokens=300, **kw)
    assert whole.choices[0].finish_reason == "tool_calls"
    [(name, arguments)] = _calls(whole.choices[0].message.tool_calls)
    n = whole.usage.completion_tokens
    # Greedy: a smaller max_tokens cuts the same output short. Cut inside the arguments object.
    for cut in (n - 4, n - 8):
        choice = client.chat.completions.create(max_tokens=cut, **kw).choices[0]
        assert choice.finish_reason == "length" and choice.message.content is None
        [(cut_name, cut_arguments)] = _calls(choice.message.tool_calls)
        assert cut_name == name and arguments.startswith(cut_arguments) and cut_arguments != arguments
        chunks = [c for c in client.chat.completions.create(max_tokens=cut, stream=True, **kw) if c.choices]
        assert "".join(c.choices[0].delta.content or "" for c in chunks) == ""
        assert _calls(streamed_calls(chunks)) == [(name, cut_arguments)]
        assert chunks[-1].choices[0].finish_reason == "length"
    # A named call and the Responses API alike.
    named = dict(model=MODEL, messages=CHAT, tools=[TIME], temperature=0,
                 tool_choice={"type": "function", "function": {"name": "get_time"}})
    written = ('{"zone": "UTC"}', '{"zone": "CET"}')  # all the named call's arguments can be
    choice = client.chat.completions.create(max_tokens=3, **named).choices[0]
    assert choice.finish_reason == "length" and choice.message.content is None
    [(cut_name, cut_arguments)] = _calls(choice.message.tool_calls)
    assert cut_name == "get_time" and any(w.startswith(cut_arguments) and w != cut_arguments for w in written)
    resp = client.responses.create(model=MODEL, input="Time?", tools=[{"type": "function", **TIME["function"]}],
                                   tool_choice={"type": "function", "name": "get_time"}, temperature=0,
                                   max_output_tokens=3)
    assert resp.status == "incomplete" and [i.type for i in resp.output] == ["function_call"]
    assert resp.output[0].name == "get_time" and any(w.startswith(resp.output[0].arguments) for w in written)


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_auto_beside_a_response_format_gives_a_call_in_the_models_syntax_or_an_answer(client, model_dir, api):
    """tool_choice auto (the default) beside a JSON schema: the grammar allows a call in the
    template's Hermes syntax or an answer in the schema; a logit_bias on "<" (a call's first
    character; an answer starts with "{") steers the random model into each on the chat, and each
    is read."""
    angle = str(AutoTokenizer.from_pretrained(model_dir).convert_tokens_to_ids("<"))
    # Responses has no logit_bias: its one greedy output is either, read as a call or a message.
    for bias in (100, -100) if api == "chat" else (None,):
        if api == "chat":
            choice = client.chat.completions.create(model=MODEL, messages=CHAT, tools=[WEATHER], temperature=0,
                                                    response_format=VERDICT_FORMAT, max_tokens=200,
                                                    logit_bias={angle: bias}).choices[0]
            calls, content = choice.message.tool_calls or [], choice.message.content
        else:
            resp = client.responses.create(model=MODEL, input="Weather in Paris?", temperature=0,
                                           tools=[{"type": "function", **WEATHER["function"]}],
                                           text={"format": {"type": "json_schema", "name": "verdict",
                                                            "schema": VERDICT}},
                                           max_output_tokens=200)
            calls = [i for i in resp.output if i.type == "function_call"]
            content = resp.output_text
            bias = 1 if calls else -1
        if bias > 0:
            assert len(calls) == 1 and not content
            call = calls[0].function if api == "chat" else calls[0]
            assert call.name == "get_weather"
            jsonschema.validate(json.loads(call.arguments), WEATHER["function"]["parameters"])
        else:
            assert calls == []
            jsonschema.validate(json.loads(content), {**VERDICT, "additionalProperties": False})


def test_strict_functions_with_tool_choice_auto_are_compiled_for_the_calls_and_a_bad_schema_is_400(client):
    """OpenAI's strict: a call the model begins is held to the tools (the grammar itself:
    tests/constrained/test_tools.py); the text around calls stays free."""
    strict = {"type": "function", "function": {**WEATHER["function"], "strict": True}}
    resp = client.chat.completions.create(model=MODEL, messages=CHAT, tools=[strict, TIME], max_tokens=16,
                                          temperature=0)
    assert resp.choices[0].finish_reason in ("stop", "length") and resp.usage.completion_tokens > 0
    unreadable = {"type": "function", "function": {"name": "f", "strict": True, "parameters": {
        "type": "object", "properties": {"a": {"type": "string", "pattern": "(("}}, "required": ["a"]}}}
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=CHAT, tools=[unreadable], max_tokens=4)
    assert "tools (strict)" in e.value.body["message"], e.value.body
