"""One request's cost is bounded at the door: schemas and grammars have a size cap, an
over-long prompt is refused from its byte size before it is tokenized, and every refusal is an
OpenAI-style 400 naming what was too large. The real server on a tiny model."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from transformers import AutoTokenizer

from minisgl.server.http.request_cost import MAX_SCHEMA_BYTES
from tests.server.serving import tiny_qwen3_server

pytestmark = pytest.mark.slow  # starts the server or worker processes: out of the fast loop (tests/test_tiers.py)

MAX_PROMPT = 64
model_dir, server, client = tiny_qwen3_server(
    "--dtype", "float32", "--page-size", "4", "--num-pages", "1024", "--max-seq-len", "256",
    "--max-prompt-tokens", str(MAX_PROMPT), "--max-request-bytes", str(16 << 20))

BIG_SCHEMA = {"type": "object", "properties": {f"field_{i}": {"type": "string", "description": "x" * 60}
                                               for i in range(MAX_SCHEMA_BYTES // 64)}}


def post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(server.url + path, json=body, timeout=120)


def test_oversized_schemas_and_grammars_are_400_naming_the_field(server):
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    tool = {"type": "function", "function": {"name": "f", "parameters": BIG_SCHEMA}}
    cases = {
        "tools": {**chat, "tools": [tool], "tool_choice": "required"},
        "response_format": {**chat, "response_format": {"type": "json_schema",
                                                        "json_schema": {"name": "s", "schema": BIG_SCHEMA}}},
        "guided_json": {**chat, "guided_json": BIG_SCHEMA},
        "guided_regex": {**chat, "guided_regex": "a" * (MAX_SCHEMA_BYTES + 1)},
        "guided_choice": {**chat, "guided_choice": ["b" * 1000] * 70},
        "chat_template_kwargs": {**chat, "chat_template_kwargs": {"k": "v" * (20 << 10)}},
    }
    for field, body in cases.items():
        resp = post(server, "/v1/chat/completions", body)
        error = resp.json()["error"]
        assert resp.status_code == 400 and error["param"] == field and "bytes" in error["message"], (field, error)
        assert error["type"] == "invalid_request_error"
    assert post(server, "/v1/chat/completions", {**chat, "guided_choice": ["yes", "no"]}).status_code == 200


def test_an_8_mb_prompt_is_refused_from_its_size_without_being_tokenized(server):
    """The refusal names the byte size: the prompt was never tokenized (it took 7-10 s before,
    blocking every other request in the tokenizer). Small requests sent meanwhile are served."""
    huge = "hello " * (1_400_000)

    async def main():
        async with httpx.AsyncClient(base_url=server.url, timeout=120) as c:
            big = [c.post("/v1/completions", json={"prompt": huge, "max_tokens": 1}),
                   c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": huge}]})]
            small = [c.post("/v1/completions", json={"prompt": f"small {i}", "max_tokens": 2}) for i in range(4)]
            return await asyncio.gather(*big, *small)

    *big, = asyncio.run(main())
    for resp, size in zip(big[:2], ("8400000", "84000")):  # a chat's size is its text as the template renders it
        message = resp.json()["error"]["message"]
        assert resp.status_code == 400 and message.startswith(f"prompt: {size}"), message
        assert " bytes is more than 64 tokens" in message and len(message.split()[1]) == 7, message
    assert all(r.status_code == 200 for r in big[2:])


def test_a_prompt_just_over_the_token_limit_is_refused_by_its_token_count(server):
    resp = post(server, "/v1/completions", {"prompt": "hi " * 100, "max_tokens": 1})
    assert resp.status_code == 400
    assert resp.json()["error"]["message"].startswith("prompt: ") and "tokens, more than this server's limit of 64" \
        in resp.json()["error"]["message"]


def test_a_prompt_of_the_longest_tokens_at_the_limit_is_served(server, model_dir):
    """The byte bound never refuses a prompt that fits: the most bytes per token there can be."""
    tok = AutoTokenizer.from_pretrained(model_dir)
    vocab = tok.backend_tokenizer.get_vocab(with_added_tokens=False)
    longest = max(vocab, key=lambda t: len(tok.decode([vocab[t]]).encode()))
    text = tok.decode([vocab[longest]]) * MAX_PROMPT
    tokens = len(tok.encode(text))
    assert tokens <= MAX_PROMPT
    resp = post(server, "/v1/completions", {"prompt": text, "max_tokens": 1})
    assert resp.status_code == 200 and resp.json()["usage"]["prompt_tokens"] == tokens
