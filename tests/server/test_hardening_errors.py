"""A client's own mistake, however it is built, is a 4xx naming it, never a 500 that fires
server-error alerts, and never a request-sized traceback in the log: contradictory fields,
schemas and tool-call arguments nested a thousand deep, and output steered to nest brackets for as
long as max_tokens lasts. Real server on a tiny model with the demo's tool-calling template."""

from __future__ import annotations

import os

import httpx
import pytest

from minisgl.demo.model import DEMO_CHAT_TEMPLATE
from tests.server.serving import ServerProcess, metric, wait_for

pytestmark = pytest.mark.slow  # starts the server or worker processes: out of the fast loop (tests/test_tiers.py)


@pytest.fixture(scope="module")
def server(tiny_model_dir, tmp_path_factory):
    template = tmp_path_factory.mktemp("template") / "chat_template.jinja"
    template.write_text(DEMO_CHAT_TEMPLATE)
    srv = ServerProcess("--model", tiny_model_dir("Qwen3ForCausalLM", max_position_embeddings=4096),
                        "--num-pages", "2048", "--max-seq-len", "4096", "--chat-template", str(template),
                        "--tool-call-parser", "hermes").wait_ready()
    yield srv
    assert srv.stop() == 0


def post(server, path: str, body: dict | str) -> httpx.Response:
    content = body if isinstance(body, str) else None
    return httpx.post(server.url + path, content=content, json=None if content else body, timeout=300,
                      headers={"Content-Type": "application/json"})


def errors(server) -> float:
    """Requests the server counted as failed by its own fault (finished_reason="error")."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(server.url + "/metrics", timeout=10).text
    return sum(s.value for fam in text_string_to_metric_families(text) for s in fam.samples
               if s.name == "minisgl_request_success_total" and s.labels.get("finished_reason") == "error")


def nested_schema(depth: int) -> str:
    return '{"type": "object", "properties": {"a": ' * depth + '{"type": "string"}' + "}}" * depth


def test_allowed_token_ids_with_structured_output_is_a_400_naming_both(server):
    before = errors(server)
    resp = post(server, "/v1/completions", {"prompt": "x", "allowed_token_ids": [93, 4],
                                            "response_format": {"type": "json_object"}, "max_tokens": 10})
    assert resp.status_code == 400, resp.text
    assert "allowed_token_ids cannot be combined with structured output" in resp.json()["error"]["message"]
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    chat = post(server, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "tools": tools,
                                                 "tool_choice": "required", "allowed_token_ids": [5], "max_tokens": 5})
    assert chat.status_code == 400 and "allowed_token_ids" in chat.json()["error"]["message"]
    assert errors(server) == before


@pytest.mark.parametrize("field, body", [
    ("guided_json", '{"prompt": "x", "max_tokens": 5, "guided_json": "' + "[" * 990 + "]" * 990 + '"}'),
    ("guided_json", '{"prompt": "x", "max_tokens": 5, "guided_json": ' + '"' + nested_schema(400).replace('"', '\\"')
     + '"}'),
    ("response_format", '{"prompt": "x", "max_tokens": 5, "response_format": {"type": "json_schema", "json_schema": '
     '{"name": "n", "schema": ' + nested_schema(300) + "}}}"),
], ids=["guided_json-brackets", "guided_json-schema", "response_format"])
def test_schemas_nested_beyond_the_bound_are_a_400_naming_the_field(server, field, body):
    resp = post(server, "/v1/completions", body)
    assert resp.status_code == 400, resp.text[:300]
    error = resp.json()["error"]
    assert error["param"] == field and "--max-grammar-depth" in error["message"]


def test_tool_parameters_nested_beyond_the_bound_are_a_400(server):
    tool = '{"type": "function", "function": {"name": "f", "parameters": ' + nested_schema(300) + "}}"
    body = '{"messages": [{"role": "user", "content": "hi"}], "tools": [' + tool + '], "tool_choice": "required", ' \
           '"max_tokens": 5}'
    resp = post(server, "/v1/chat/completions", body)
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "tools", resp.text[:300]


def answered_or_too_long(resp: httpx.Response) -> bool:
    return resp.status_code == 200 or (resp.status_code == 400 and "more than this server's limit of 4096"
                                       in resp.json()["error"]["message"])


@pytest.mark.parametrize("arguments", ["[" * 990 + "]" * 990, '{"a":' * 990 + "1" + "}" * 990],
                         ids=["array", "object"])
def test_tool_call_arguments_nested_a_thousand_deep_are_read_as_text(server, arguments):
    """A client's earlier tool call whose arguments nest deeper than any call is passed to the
    template as the string it is (chat and the Responses API alike): answered, or refused for the
    prompt's length once rendered, never a 500."""
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": arguments}}
    chat = post(server, "/v1/chat/completions", {"messages": [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c", "content": "ok"}], "max_tokens": 3})
    assert answered_or_too_long(chat), chat.text[:300]
    responses = post(server, "/v1/responses", {"input": [
        {"type": "message", "role": "user", "content": "hi"},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": arguments},
        {"type": "function_call_output", "call_id": "c", "output": "ok"}], "max_output_tokens": 3})
    assert answered_or_too_long(responses), responses.text[:300]


def test_output_steered_to_nest_brackets_is_answered_not_a_500(server):
    """The model forced (guided_regex, logit_bias) to open a tool call and then write '[' for 1,200
    tokens: the tool-call parser reads it without recursion (streamed output is read by the same
    parsers: tests/server/parsers/test_chat_output.py)."""
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    bracket = httpx.post(server.url + "/tokenize", json={"prompt": "[", "add_special_tokens": False}, timeout=30)
    (bracket_id,) = bracket.json()["tokens"]
    body = {"messages": [{"role": "user", "content": "hi"}], "tools": tools, "tool_choice": "auto",
            "guided_regex": '<tool_call>\\n\\{"name": "f", "arguments": \\{"a": \\[+',
            "logit_bias": {str(bracket_id): 100}, "max_tokens": 1200}
    before = errors(server)
    resp = post(server, "/v1/chat/completions", body)
    assert resp.status_code == 200, resp.text[:300]
    assert resp.json()["usage"]["completion_tokens"] == 1200
    assert errors(server) == before


def test_no_request_leaves_a_traceback_of_its_own_size_in_the_log(server):
    """After every test above (a module-scoped server: they ran first), the log holds no
    RecursionError and stays small."""
    assert "RecursionError" not in server.output()
    assert os.path.getsize(server.log_path) < 200_000, os.path.getsize(server.log_path)
    wait_for(lambda: metric(server, "minisgl_num_requests_running") == 0, 10, "no request running")
