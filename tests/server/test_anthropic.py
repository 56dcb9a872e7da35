"""Anthropic's Messages API on the real server, driven with the official `anthropic` SDK: create
and stream give the text /v1/chat/completions gives for the same chat (system prompt included),
stop sequences end it with stop_reason stop_sequence, a tool round trip runs (tool_use, then a
tool_result answered), usage and count_tokens count what the chat path counts."""

from __future__ import annotations

import json

import anthropic
import httpx
import jsonschema
import pytest

from tests.server.serving import tiny_qwen3_server
from tests.server.tool_chat import TEMPLATE, WEATHER

pytestmark = pytest.mark.slow  # starts the server or worker processes: out of the fast loop (tests/test_tiers.py)

MODEL = "tiny-qwen3"
GREEDY = {"extra_body": {"temperature": 0}}  # the SDK no longer offers sampling parameters; older ones sent them
# The arguments of test_litellm.py and test_tool_clients.py: the three modules share one server.
model_dir, server, client = tiny_qwen3_server(
    "--served-model-name", MODEL, "--dtype", "float32", "--page-size", "4", "--num-pages", "2048", "--max-seq-len",
    "1024", "--chat-template", TEMPLATE)
SYSTEM = "You answer in one short sentence."
USER = "What is a radix tree?"
TOOL = {"name": "get_weather", "description": WEATHER["function"]["description"],
        "input_schema": WEATHER["function"]["parameters"]}


@pytest.fixture(scope="module")
def claude(server):
    return anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0)


def chat_text(client, max_tokens: int, **kw) -> tuple[str, object]:
    resp = client.chat.completions.create(model=MODEL, max_tokens=max_tokens, temperature=0, **kw)
    return resp.choices[0].message.content, resp


def test_create_with_a_system_prompt_answers_as_the_chat_endpoint(claude, client):
    want, chat = chat_text(client, 24, messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}])
    msg = claude.messages.create(model=MODEL, max_tokens=24, **GREEDY, system=SYSTEM,
                                 messages=[{"role": "user", "content": USER}])
    assert msg.type == "message" and msg.role == "assistant" and msg.model == MODEL and msg.id.startswith("msg_")
    assert [b.type for b in msg.content] == ["text"] and msg.content[0].text == want
    assert msg.stop_reason == {"length": "max_tokens", "stop": "end_turn"}[chat.choices[0].finish_reason]
    assert msg.usage.output_tokens == chat.usage.completion_tokens
    assert msg.usage.input_tokens + msg.usage.cache_read_input_tokens == chat.usage.prompt_tokens
    assert msg.usage.cache_read_input_tokens > 0  # the chat request just ran the same prompt


def test_a_stream_gives_the_same_message_event_by_event(claude):
    kw = dict(model=MODEL, max_tokens=20, **GREEDY, messages=[{"role": "user", "content": USER}])
    whole = claude.messages.create(**kw)
    with claude.messages.stream(**kw) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert "".join(pieces) == whole.content[0].text == final.content[0].text
    assert (final.stop_reason, final.usage.output_tokens) == (whole.stop_reason, whole.usage.output_tokens)
    events = [e.type for e in claude.messages.create(stream=True, **kw)]
    assert events[0] == "message_start" and events[-2:] == ["message_delta", "message_stop"]
    assert events[1] == "content_block_start" and events[-3] == "content_block_stop"


def test_a_stop_sequence_ends_the_text_before_it(claude, client):
    text, _ = chat_text(client, 40, messages=[{"role": "user", "content": USER}], extra_body={"ignore_eos": True})
    stop = text[10:13]
    assert stop.strip() and stop not in text[:10], "pick a stop string that first occurs at 10"
    msg = claude.messages.create(model=MODEL, max_tokens=40, **GREEDY, stop_sequences=[stop, "never seen"],
                                 messages=[{"role": "user", "content": USER}])
    assert msg.stop_reason == "stop_sequence" and msg.stop_sequence == stop
    assert msg.content[0].text == text[:10]


def test_a_tool_round_trip(claude, server):
    ask = [{"role": "user", "content": "Weather in Paris?"}]
    first = claude.messages.create(model=MODEL, max_tokens=400, **GREEDY, tools=[TOOL],
                                   tool_choice={"type": "any", "disable_parallel_tool_use": True}, messages=ask)
    assert first.stop_reason == "tool_use"
    [use] = [b for b in first.content if b.type == "tool_use"]
    assert use.name == "get_weather" and use.id.startswith("toolu_")
    jsonschema.validate(use.input, TOOL["input_schema"])
    turns = ask + [{"role": "assistant", "content": first.content},
                   {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny, 21 C"}]}]
    second = claude.messages.create(model=MODEL, max_tokens=16, **GREEDY, tools=[TOOL], messages=turns)
    assert second.stop_reason in ("end_turn", "max_tokens", "tool_use") and second.content
    # The tool's result is in the prompt, as the chat endpoint renders a tool message.
    chat = [*ask, {"role": "assistant", "content": "", "tool_calls": [{"id": use.id, "type": "function", "function": {
        "name": use.name, "arguments": json.dumps(use.input)}}]}, {"role": "tool", "tool_call_id": use.id,
                                                                    "content": "sunny, 21 C"}]
    counted = httpx.post(server.url + "/tokenize", json={"messages": chat, "tools": [WEATHER]}, timeout=30).json()
    assert second.usage.input_tokens + second.usage.cache_read_input_tokens == counted["count"]
    assert claude.messages.count_tokens(model=MODEL, messages=turns, tools=[TOOL]).input_tokens == counted["count"]


def test_what_it_does_not_implement_is_refused_by_name(claude):
    with pytest.raises(anthropic.BadRequestError) as err:
        claude.messages.create(model=MODEL, max_tokens=8, messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "url", "url": "https://x/cat.png"}}]}])
    assert "messages.0.content.0" in str(err.value)
    with pytest.raises(anthropic.BadRequestError) as err:
        claude.messages.create(model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "hi"}],
                               thinking={"type": "enabled", "budget_tokens": 1024})
    assert "thinking" in str(err.value)


def test_a_request_the_chat_path_cannot_take_is_a_400_in_the_messages_apis_words(claude):
    """Valid as a Messages request, not as the chat it means: still the client's error, named as
    the client named it, never a 500."""
    with pytest.raises(anthropic.BadRequestError) as err:
        claude.messages.create(model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "hi"}],
                               stop_sequences=["a", "b", "c", "d", "e"])
    error = err.value.body["error"]  # the SDK keeps the whole body
    assert error["param"] == "stop_sequences" and "at most 4" in error["message"]
    with pytest.raises(anthropic.BadRequestError) as err:
        claude.messages.create(model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "hi"}], tools=[TOOL],
                               tool_choice={"type": "tool"})
    assert err.value.body["error"]["param"] == "tool_choice"
