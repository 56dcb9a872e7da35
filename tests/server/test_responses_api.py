"""/v1/responses through the real server with the official `openai` client: the same generation as
/v1/chat/completions for the same messages (text, tokens, usage), streamed as the events the SDK's
stream helpers consume, function tools forced by the grammar and their results sent back, JSON
schema output, and every field it does not implement refused by name."""

from __future__ import annotations

import json
import signal
import threading

import httpx
import jsonschema
import openai
import pytest
from openai.types.responses import Response
from prometheus_client.parser import text_string_to_metric_families

from minisgl.server.http.responses import OutputItems
from minisgl.server.parsers import ChatOutputFormat
from tests.server.serving import ServerProcess, metric, tiny_qwen3_server, wait_for
from tests.server.tool_chat import CHAT, TEMPLATE, TIME, WEATHER

pytestmark = pytest.mark.slow  # starts the server or worker processes: out of the fast loop (tests/test_tiers.py)

MODEL = "tiny-qwen3"
# The Responses API's flat function tool (name and parameters beside `type`).
WEATHER_TOOL = {"type": "function", **WEATHER["function"]}
TIME_TOOL = {"type": "function", **TIME["function"]}


model_dir, server, client = tiny_qwen3_server(
    "--served-model-name", MODEL, "--dtype", "float32", "--page-size", "4", "--num-pages", "2048", "--max-seq-len",
    "1024", "--chat-template", TEMPLATE, "--tool-call-parser", "hermes", "--reasoning-parser", "qwen3",
    "--max-new-tokens", "400")


def _chat(client, messages, **kw):
    return client.chat.completions.create(model=MODEL, messages=messages, temperature=0, **kw)


def test_greedy_output_and_usage_equal_the_chat_endpoints(client):
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is a radix tree?"}]
    chat = _chat(client, messages, max_completion_tokens=24)
    resp = client.responses.create(model=MODEL, input=messages, max_output_tokens=24, temperature=0)
    assert isinstance(resp, Response) and resp.object == "response" and resp.id.startswith("resp_")
    assert resp.output_text == chat.choices[0].message.content
    assert [item.type for item in resp.output] == ["message"] and resp.output[0].role == "assistant"
    assert resp.usage.input_tokens == chat.usage.prompt_tokens
    assert resp.usage.output_tokens == chat.usage.completion_tokens
    assert resp.usage.total_tokens == resp.usage.input_tokens + resp.usage.output_tokens
    assert resp.status == ("incomplete" if chat.choices[0].finish_reason == "length" else "completed")


def test_instructions_and_a_string_input_are_the_system_and_user_messages(client):
    chat = _chat(client, [{"role": "system", "content": "Answer in French."},
                          {"role": "user", "content": "Hello there"}], max_completion_tokens=12)
    resp = client.responses.create(model=MODEL, instructions="Answer in French.", input="Hello there",
                                   max_output_tokens=12, temperature=0)
    assert resp.usage.input_tokens == chat.usage.prompt_tokens
    assert resp.output_text == chat.choices[0].message.content
    assert resp.instructions == "Answer in French."
    parts = client.responses.create(model=MODEL, instructions="Answer in French.", max_output_tokens=12,
                                    temperature=0, input=[{"role": "user", "content": [
                                        {"type": "input_text", "text": "Hello "}, {"type": "input_text", "text": "there"}]}])
    assert parts.output_text == resp.output_text and parts.usage.input_tokens == resp.usage.input_tokens


def test_max_output_tokens_cuts_the_response_as_incomplete(client):
    chat = _chat(client, CHAT, max_completion_tokens=3)
    assert chat.choices[0].finish_reason == "length"  # the case under test: greedy output runs past 3 tokens
    resp = client.responses.create(model=MODEL, input=CHAT, max_output_tokens=3, temperature=0)
    assert resp.status == "incomplete" and resp.incomplete_details.reason == "max_output_tokens"
    assert resp.usage.output_tokens == 3 and resp.output[0].status == "incomplete"
    assert resp.max_output_tokens == 3
    with client.responses.stream(model=MODEL, input=CHAT, max_output_tokens=3, temperature=0) as stream:
        final = stream.get_final_response()
    assert final.status == "incomplete" and final.output_text == resp.output_text


def test_stream_events_are_in_order_and_deltas_join_to_the_whole_response(client):
    whole = client.responses.create(model=MODEL, input=CHAT, max_output_tokens=30, temperature=0)
    events = list(client.responses.create(model=MODEL, input=CHAT, max_output_tokens=30, temperature=0, stream=True))
    types = [e.type for e in events]
    assert types[:5] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added", "response.output_text.delta"]
    assert types[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed"]
    assert set(types[4:-4]) == {"response.output_text.delta"}
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    done = events[-1].response
    assert text == whole.output_text == done.output_text == events[-4].text
    assert done.usage.input_tokens == whole.usage.input_tokens
    assert done.usage.output_tokens == whole.usage.output_tokens
    assert done.id == events[0].response.id and done.status == whole.status
    # The SDK's own stream helper accumulates the same response.
    with client.responses.stream(model=MODEL, input=CHAT, max_output_tokens=30, temperature=0) as stream:
        assert stream.get_final_response().output_text == whole.output_text


def _function_calls(resp) -> list:
    return [item for item in resp.output if item.type == "function_call"]


@pytest.mark.parametrize("stream", [False, True])
def test_required_tool_choice_gives_function_call_items(client, stream):
    # parallel_tool_calls false: one call (a random model lists calls until cut off otherwise).
    kw = dict(model=MODEL, input=CHAT, tools=[WEATHER_TOOL, TIME_TOOL], tool_choice="required", temperature=1.0,
              parallel_tool_calls=False, max_output_tokens=200)
    if stream:
        with client.responses.stream(**kw) as s:
            resp = s.get_final_response()
    else:
        resp = client.responses.create(**kw)
    calls = _function_calls(resp)
    assert len(calls) == 1 and resp.status == "completed" and resp.parallel_tool_calls is False
    for call in calls:
        tool = {"get_weather": WEATHER_TOOL, "get_time": TIME_TOOL}[call.name]
        jsonschema.validate(json.loads(call.arguments), tool["parameters"])
        assert call.call_id.startswith("call_") and call.id.startswith("fc_") and call.status == "completed"
    named = client.responses.create(**{**kw, "tool_choice": {"type": "function", "name": "get_time"}})
    assert [c.name for c in _function_calls(named)] == ["get_time"]


@pytest.mark.parametrize("tool_choice", ["required", {"type": "function", "name": "get_weather"}])
def test_function_call_arguments_stream_as_delta_events_then_done(client, tool_choice):
    """The SDK parses every event; the arguments come in several delta events between the item's
    added and done, joined they are the done event's and the final item's arguments."""
    kw = dict(model=MODEL, input=CHAT, tools=[WEATHER_TOOL], tool_choice=tool_choice, temperature=0,
              parallel_tool_calls=False, max_output_tokens=200)
    with client.responses.stream(**kw) as s:
        events = list(s)
        final = s.get_final_response()
    raw = list(client.responses.create(stream=True, **kw))  # stream=True: each event parsed into its SDK type
    assert {"response.function_call_arguments.delta", "response.function_call_arguments.done"} <= {e.type for e in raw}
    kinds = [e.type for e in events]
    deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    (done,) = [e for e in events if e.type == "response.function_call_arguments.done"]
    (call,) = _function_calls(final)
    assert len(deltas) > 3 and "".join(deltas) == done.arguments == call.arguments
    jsonschema.validate(json.loads(call.arguments), WEATHER_TOOL["parameters"])
    first, last = kinds.index("response.function_call_arguments.delta"), len(kinds) - 1 - kinds[::-1].index(
        "response.function_call_arguments.delta")
    assert kinds[first - 1] == "response.output_item.added" and kinds[last + 1:] == [
        "response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    assert done.name == "get_weather" and done.item_id == call.id and call.status == "completed"


def test_a_function_call_output_sent_back_continues_the_conversation(client):
    first = client.responses.create(model=MODEL, input=CHAT, tools=[WEATHER_TOOL], temperature=0,
                                    tool_choice={"type": "function", "name": "get_weather"}, max_output_tokens=60)
    call = _function_calls(first)[0]
    turn = CHAT + first.output + [{"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 21 C"}]
    second = client.responses.create(model=MODEL, input=turn, tools=[WEATHER_TOOL], max_output_tokens=10,
                                     temperature=0)
    # The same conversation in the chat shape: the call in the assistant message, the result as a tool message.
    chat = _chat(client, CHAT + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call.call_id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}]},
        {"role": "tool", "tool_call_id": call.call_id, "content": "Sunny, 21 C"}],
        tools=[WEATHER], max_completion_tokens=10)
    assert second.usage.input_tokens == chat.usage.prompt_tokens > first.usage.input_tokens
    assert second.output_text == chat.choices[0].message.content


def test_text_format_json_schema_output_parses_against_the_schema(client):
    schema = {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]},
                                               "days": {"type": "integer", "minimum": 1, "maximum": 7}},
              "required": ["city", "days"], "additionalProperties": False}
    for seed_temperature in (0.0, 1.0):
        resp = client.responses.create(model=MODEL, input=CHAT, temperature=seed_temperature, max_output_tokens=60,
                                       text={"format": {"type": "json_schema", "name": "forecast", "schema": schema,
                                                        "strict": True}})
        jsonschema.validate(json.loads(resp.output_text), schema)
        assert resp.text.format.type == "json_schema" and resp.text.format.name == "forecast"
    loose = client.responses.create(model=MODEL, input=CHAT, max_output_tokens=60, text={"format": {"type": "json_object"}})
    assert isinstance(json.loads(loose.output_text), dict)


REFUSED = [("store", True), ("previous_response_id", "resp_123"), ("conversation", "conv_1"), ("background", True),
           ("include", ["reasoning.encrypted_content"]), ("prompt", {"id": "pmpt_1"}), ("truncation", "auto"),
           ("reasoning", {"effort": "low"}), ("top_logprobs", 2), ("max_tool_calls", 2), ("service_tier", "flex"),
           ("stream_options", {"include_obfuscation": False}), ("prompt_cache_retention", "24h"),
           ("context_management", [{"type": "compaction"}]), ("not_a_field", 1)]


@pytest.mark.parametrize("field,value", REFUSED)
def test_each_unimplemented_field_is_refused_by_name(client, field, value):
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=MODEL, input="hi", max_output_tokens=2, extra_body={field: value})
    assert e.value.status_code == 400 and e.value.body["param"] == field
    assert e.value.body["code"] == "unsupported_parameter" and field in e.value.body["message"]


@pytest.mark.parametrize("body,param", [
    ({"tools": [{"type": "web_search"}]}, "tools"),
    ({"text": {"format": {"type": "text"}, "verbosity": "low"}}, "text.verbosity"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "http://x/y.png"}]}]}, "input"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input"),
    ({"tool_choice": {"type": "function", "name": "nope"}, "tools": [WEATHER_TOOL]}, None),
])
def test_unsupported_tools_items_and_nested_fields_are_400(server, body, param):
    resp = httpx.post(server.url + "/v1/responses", json={"model": MODEL, "input": "hi", "max_output_tokens": 2,
                                                          **body}, timeout=30)
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["type"] == "invalid_request_error"
    if param:
        assert (error["param"] or "").startswith(param)


def test_the_chat_limits_apply_under_the_responses_names(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=MODEL, input="hi", max_output_tokens=401)
    assert e.value.body["param"] == "max_output_tokens" and "400" in e.value.body["message"]
    huge = {"type": "string", "enum": [f"value-{i}" for i in range(8000)]}
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=MODEL, input="hi", max_output_tokens=2, text={"format": {
            "type": "json_schema", "name": "big", "schema": {"type": "object", "properties": {"v": huge}}}})
    assert e.value.body["param"] == "text.format" and e.value.body["code"] == "request_too_large"
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=MODEL, input="hi", max_output_tokens=2,
                                tools=[{**WEATHER_TOOL, "parameters": {"type": "object", "properties": {"v": huge}}}])
    assert e.value.body["param"] == "tools"


def test_neutral_values_are_accepted_and_the_server_keeps_serving(client):
    resp = client.responses.create(model=MODEL, input="hi", max_output_tokens=2, store=False, truncation="disabled",
                                   include=[], metadata={"k": "v"}, user="u1", parallel_tool_calls=True)
    assert resp.metadata == {"k": "v"} and resp.store is False and resp.user == "u1"
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model=MODEL, input="hi", max_output_tokens=2, store=True)
    assert client.responses.create(model=MODEL, input="hi", max_output_tokens=2).status in ("completed", "incomplete")


def _finished(server) -> dict[str, float]:
    """minisgl_request_success_total by finished_reason."""
    text = httpx.get(server.url + "/metrics", timeout=10).text
    return {s.labels["finished_reason"]: s.value for f in text_string_to_metric_families(text) for s in f.samples
            if s.name == "minisgl_request_success_total"}


def _leave_a_stream_at_its_first_delta(server) -> None:
    """Stream a 300-token response and leave at its first text delta. The scheduler runs in short
    slices until then and is held while the client leaves, so the request is normally far from
    its end; but a slice is only as short as this process is quick to stop it again, and on a
    loaded machine the tiny model can run all 300 tokens in one."""
    first_delta, leave = threading.Event(), threading.Event()

    def stream() -> None:
        with httpx.stream("POST", server.url + "/v1/responses", timeout=60,
                          json={"model": MODEL, "input": CHAT, "max_output_tokens": 300, "temperature": 0,
                                "stream": True}) as resp:
            for line in resp.iter_lines():
                if "response.output_text.delta" in line:
                    first_delta.set()
                    leave.wait(60)
                    return  # leaving the block closes the connection

    reader = threading.Thread(target=stream)
    with server.stopped("scheduler"):
        reader.start()
        server.run_until("scheduler", lambda: first_delta.wait(0.2))
        leave.set()
        reader.join(60)


def test_a_client_leaving_a_stream_aborts_its_request(client, server):
    whole = client.responses.create(model=MODEL, input=CHAT, max_output_tokens=300, temperature=0)
    assert whole.status == "incomplete"  # the stream below would run 300 tokens if nobody aborted it
    for _ in range(5):
        before = _finished(server)
        _leave_a_stream_at_its_first_delta(server)
        changed = lambda: {k: v - before[k] for k, v in _finished(server).items() if v != before[k]}  # noqa: E731
        wait_for(changed, what="the request counted as ended")
        ended = changed()
        if ended == {"abort": 1.0}:
            break
        # It reached its end before the client left (see above): nothing was left to abort. Again.
        assert ended == {"length": 1.0}, ended
    else:
        pytest.fail("the request ran to its end before the client left, five times")
    wait_for(lambda: metric(server, "minisgl_num_requests_running") == 0
             and metric(server, "minisgl_kv_cache_used_pages") == 0, what="its KV cache freed")


def test_reasoning_text_and_tool_calls_become_items_whole_and_streamed():
    """The generated text of a reasoning model calling a tool, read by the server's reasoning and
    Hermes parsers, becomes reasoning, message and function_call items; its stream events, fed to
    the SDK's own stream accumulator, give the same items."""
    text = ('<think>\nthe user wants weather\n</think>\n\nLet me look.<tool_call>\n'
            '{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n</tool_call>')
    fmt = ChatOutputFormat(reasoning_parser="qwen3", tool_parser="hermes")

    def run(pieces: list[str]) -> tuple[OutputItems, list[dict]]:
        items = OutputItems(fmt)
        events = [e for piece in pieces for e in items.read(piece, None)]
        return items, events + items.read("", "stop")

    whole, _ = run([text])
    streamed, events = run([text[i:i + 3] for i in range(0, len(text), 3)])
    base = {"id": "resp_1", "object": "response", "created_at": 0, "model": MODEL, "tools": [],
            "tool_choice": "auto", "parallel_tool_calls": True}
    response = Response.model_validate({**base, "status": "completed", "output": whole.items})
    assert [i.type for i in response.output] == ["reasoning", "message", "function_call"]
    assert response.output[0].content[0].text == "the user wants weather"
    assert response.output_text == "Let me look."
    assert json.loads(response.output[2].arguments) == {"city": "Paris", "days": 2}

    lifecycle = [{"type": "response.created", "response": {**base, "status": "in_progress", "output": []}}]
    lifecycle += events + [{"type": "response.completed",
                            "response": {**base, "status": "completed", "output": streamed.items}}]
    sse = "".join(f"event: {e['type']}\ndata: {json.dumps({**e, 'sequence_number': n})}\n\n"
                  for n, e in enumerate(lifecycle))
    # The SDK's stream helper reads these events as they would come from the server.
    transport = httpx.MockTransport(lambda _: httpx.Response(200, text=sse,
                                                             headers={"content-type": "text/event-stream"}))
    sdk = openai.OpenAI(base_url="http://events/v1", api_key="unused", http_client=httpx.Client(transport=transport))
    with sdk.responses.stream(model=MODEL, input="hi") as stream:
        final = stream.get_final_response()
    assert [i.type for i in final.output] == ["reasoning", "message", "function_call"]
    assert final.output_text == response.output_text
    assert final.output[2].arguments == response.output[2].arguments


def test_a_stream_the_server_cannot_finish_ends_with_error_and_failed_events(model_dir):
    """Draining past --drain-timeout ends a stream as the chat endpoint does: an error event
    (service_unavailable), then response.failed; the client never sees a cut connection."""
    srv = ServerProcess("--model", model_dir, "--served-model-name", MODEL,
                        "--chat-template", TEMPLATE, "--num-pages", "512", "--max-seq-len", "1024",
                        "--drain-timeout", "0.5").wait_ready()
    try:
        events = []
        with httpx.stream("POST", srv.url + "/v1/responses", timeout=60,
                          json={"model": MODEL, "input": CHAT, "max_output_tokens": 900, "temperature": 0,
                                "stream": True}) as resp:
            for line in resp.iter_lines():
                if line.startswith("data: "):
                    events.append(json.loads(line.removeprefix("data: ")))
                    if events[-1]["type"] == "response.output_text.delta" and len(events) == 5:
                        srv.proc.send_signal(signal.SIGTERM)
        assert srv.proc.wait(15) == 0
        assert [e["type"] for e in events[-2:]] == ["error", "response.failed"], events[-3:]
        assert events[-2]["code"] == "service_unavailable" and events[-2]["message"]
        assert events[-1]["response"]["status"] == "failed"
        assert [e["sequence_number"] for e in events] == list(range(len(events)))
        Response.model_validate(events[-1]["response"])
        assert "Traceback" not in srv.output()
    finally:
        srv.stop()


def test_langchain_on_the_responses_api(server, client):
    """LangChain's ChatOpenAI with use_responses_api: text, streaming and a forced tool call."""
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(model=MODEL, base_url=server.url + "/v1", api_key="unused", use_responses_api=True,
                     temperature=0, max_tokens=60)
    want = client.responses.create(model=MODEL, input="Hello", max_output_tokens=60, temperature=0)
    message = llm.invoke("Hello")
    assert message.text == want.output_text and message.usage_metadata["input_tokens"] == want.usage.input_tokens
    assert "".join(chunk.text for chunk in llm.stream("Hello")) == want.output_text
    called = llm.bind_tools([WEATHER], tool_choice="get_weather").invoke("Weather in Paris?")
    assert [c["name"] for c in called.tool_calls] == ["get_weather"]
    jsonschema.validate(called.tool_calls[0]["args"], WEATHER["function"]["parameters"])
