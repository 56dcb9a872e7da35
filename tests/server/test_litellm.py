"""LiteLLM in front of minisgl, through both of its providers users pick for an OpenAI-compatible
server (`openai/` and `hosted_vllm/`): greedy chat, streaming with usage, forced tool calls,
JSON-schema output and text completions give what the official `openai` client gets from the same
server, and a refused field reaches the LiteLLM user as a BadRequestError naming it.

LiteLLM runs in a virtual environment of its own (tests/tools/litellm.sh: it pins openai 2.x), so
every LiteLLM call is made by one subprocess (tests/server/litellm_client.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import jsonschema
import pytest

from tests.server.serving import tiny_qwen3_server
from tests.server.tool_chat import CHAT, TEMPLATE
from tests.tool_venvs import tool_binary

pytestmark = pytest.mark.slow  # starts the server or worker processes: out of the fast loop (tests/test_tiers.py)

MODEL = "tiny-qwen3"
GREEDY = {"temperature": 0, "max_tokens": 12}
SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]},
                                           "days": {"type": "integer", "minimum": 1, "maximum": 7}},
          "required": ["city", "days"], "additionalProperties": False}
# LiteLLM's hosted_vllm provider drops `additionalProperties` from tool parameters, so the tools
# here do without it: both providers then send the very request the openai client sends.
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}}, "required": ["zone"]}}}
REQUESTS = {
    "chat": {"kind": "chat", "messages": CHAT, **GREEDY},
    "stream": {"kind": "stream", "messages": CHAT, **GREEDY},
    "tools": {"kind": "chat", "messages": CHAT, "tools": [WEATHER, TIME], "tool_choice": "required",
              "parallel_tool_calls": False, "temperature": 0, "max_tokens": 80},
    "json_schema": {"kind": "chat", "messages": CHAT, "temperature": 0, "max_tokens": 60,
                    "response_format": {"type": "json_schema", "json_schema": {"name": "weather", "schema": SCHEMA}}},
    "text": {"kind": "text", "prompt": "The capital of France is", **GREEDY},
    "refused": {"kind": "chat", "messages": CHAT, "max_tokens": 4, "reasoning_effort": "high"},
}


# The arguments of test_anthropic.py and test_tool_clients.py (one server for the three): TEMPLATE
# writes <tool_call>, so the server picks the hermes parser itself.
model_dir, server, client = tiny_qwen3_server(
    "--served-model-name", MODEL, "--dtype", "float32", "--page-size", "4", "--num-pages", "2048", "--max-seq-len",
    "1024", "--chat-template", TEMPLATE)


@pytest.fixture(scope="module")
def litellm_results(server) -> dict:
    script = Path(__file__).with_name("litellm_client.py")
    done = subprocess.run([str(tool_binary("litellm", "python")), str(script), server.url + "/v1", MODEL,
                           json.dumps(REQUESTS)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(params=["openai", "hosted_vllm"])
def through(request, litellm_results) -> dict:
    """The results of one LiteLLM provider."""
    return litellm_results[request.param]


def test_greedy_chat_equals_the_openai_client(through, client):
    want = client.chat.completions.create(model=MODEL, messages=CHAT, **GREEDY)
    got = through["chat"]
    assert got["content"] == want.choices[0].message.content and got["finish_reason"] == "length"
    assert got["usage"] == [want.usage.prompt_tokens, want.usage.completion_tokens]


def test_streamed_chat_joins_to_the_same_text_with_usage(through, client):
    want = client.chat.completions.create(model=MODEL, messages=CHAT, **GREEDY)
    assert through["stream"] == {"content": want.choices[0].message.content,
                                 "usage": [want.usage.prompt_tokens, want.usage.completion_tokens]}


def test_forced_tool_calls_arrive_parsed_and_valid(through, client):
    want = client.chat.completions.create(model=MODEL, messages=CHAT, tools=[WEATHER, TIME], tool_choice="required",
                                          parallel_tool_calls=False, temperature=0, max_tokens=80).choices[0].message
    got = through["tools"]
    assert got["finish_reason"] == "tool_calls" and got["tool_calls"]
    assert got["tool_calls"] == [{"name": c.function.name, "arguments": c.function.arguments} for c in want.tool_calls]
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER, TIME)}
    for call in got["tool_calls"]:
        jsonschema.validate(json.loads(call["arguments"]), schemas[call["name"]])


def test_json_schema_output_parses_against_the_schema(through):
    jsonschema.validate(json.loads(through["json_schema"]["content"]), SCHEMA)


def test_text_completion_equals_the_openai_client(through, client):
    want = client.completions.create(model=MODEL, prompt="The capital of France is", **GREEDY)
    assert through["text"] == {"text": want.choices[0].text,
                               "usage": [want.usage.prompt_tokens, want.usage.completion_tokens]}


def test_a_refused_field_reaches_the_litellm_user_by_name(through):
    assert "reasoning_effort" in through["refused"]["bad_request"]
