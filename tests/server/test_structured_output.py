"""Structured output through the real server with the official `openai` client, on a tiny model
with random weights: the reply always parses into the requested schema."""

from __future__ import annotations

import json

import httpx
import jsonschema
import pytest
from pydantic import BaseModel, Field

from tests.server.serving import tiny_qwen3_server

pytestmark = pytest.mark.slow  # starts the server or worker processes: out of the fast loop (tests/test_tiers.py)

MODEL = "tiny-qwen3"
CHAT = [{"role": "user", "content": "Describe a fox as JSON."}]


class Animal(BaseModel):
    species: str = Field(pattern=r"^[a-z]{1,10}$")
    legs: int = Field(ge=0, le=8)
    wild: bool
    colors: list[str] = Field(max_length=2, json_schema_extra={"items": {"enum": ["red", "brown"]}})


# The arguments of test_usage.py and test_prompt_logprobs.py: the three modules share one server.
model_dir, server, client = tiny_qwen3_server("--served-model-name", MODEL, "--dtype", "float32", "--page-size", "4",
                                              "--num-pages", "2048", "--max-seq-len", "512")


def test_parse_with_a_pydantic_model_always_succeeds(client):
    """openai's own structured-output helper: strict json_schema, parsed into the model."""
    for seed in range(6):
        resp = client.chat.completions.parse(model=MODEL, messages=CHAT, response_format=Animal, temperature=1.0,
                                             seed=seed, max_tokens=200)
        choice = resp.choices[0]
        assert choice.finish_reason == "stop"
        assert isinstance(choice.message.parsed, Animal), choice.message.content


def test_json_schema_streamed_and_n_choices(client):
    schema = {"type": "object", "properties": {"answer": {"type": "string", "enum": ["yes", "no"]},
                                               "score": {"type": "integer", "minimum": 1, "maximum": 5}},
              "required": ["answer", "score"], "additionalProperties": False}
    fmt = {"type": "json_schema", "json_schema": {"name": "verdict", "schema": schema, "strict": True}}
    resp = client.chat.completions.create(model=MODEL, messages=CHAT, response_format=fmt, n=3, temperature=1.0,
                                          max_tokens=60)
    for choice in resp.choices:
        jsonschema.validate(json.loads(choice.message.content), schema)
    stream = client.chat.completions.create(model=MODEL, messages=CHAT, response_format=fmt, temperature=1.0,
                                            max_tokens=60, stream=True, seed=7)
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    jsonschema.validate(json.loads(text), schema)


def test_json_object_mode_and_vllm_guided_fields(client):
    resp = client.chat.completions.create(model=MODEL, messages=CHAT, response_format={"type": "json_object"},
                                          temperature=0, max_tokens=300)
    if resp.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(resp.choices[0].message.content), dict)
    else:  # a random model may keep nesting: what there is must still be a JSON object's start
        assert resp.choices[0].message.content.startswith("{")
    choice = client.completions.create(model=MODEL, prompt="Pick:", max_tokens=10, temperature=1.0,
                                       extra_body={"guided_choice": ["left", "right"]})
    assert choice.choices[0].text in ("left", "right")
    regex = client.completions.create(model=MODEL, prompt="Code:", max_tokens=10, temperature=1.0,
                                      extra_body={"guided_regex": r"[A-Z]{3}-\d{2}"})
    assert len(regex.choices[0].text) == 6 and regex.choices[0].text[3] == "-"
    guided = client.completions.create(model=MODEL, prompt="x", max_tokens=60, temperature=1.0,
                                       extra_body={"guided_json": {"type": "object", "properties": {"n": {"type": "integer"}},
                                                                   "required": ["n"], "additionalProperties": False}})
    assert isinstance(json.loads(guided.choices[0].text)["n"], int)


@pytest.mark.parametrize("body, param", [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}}}, None),
    ({"guided_regex": "(unclosed"}, None),
    ({"guided_json": "{not json"}, None),
    ({"guided_regex": "a", "guided_choice": ["a"]}, None),
    ({"response_format": {"type": "json_object"}, "min_tokens": 2}, None),
])
def test_bad_constraints_are_400_and_the_server_keeps_serving(server, client, body, param):
    resp = httpx.post(server.url + "/v1/chat/completions", json={"model": MODEL, "messages": CHAT, "max_tokens": 8, **body},
                      timeout=60)
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["message"]
    assert client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=2).choices[0].finish_reason
