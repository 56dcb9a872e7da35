"""A JSON schema is enforced as vLLM enforces it (xgrammar's strict mode), whether the request
says `strict: true`, `strict: false`, nothing, or sends it as guided_json: the output has no
property or item the schema does not list, unless the schema itself allows them. A weak model
free to add keys adds them until max_tokens cuts the JSON, so outputs would not parse."""

from __future__ import annotations

import json

import pytest

from minisgl.server.http.chat_protocol import ChatCompletionRequest

SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]},
                                           "tags": {"type": "array", "prefixItems": [{"type": "integer"}]}},
          "required": ["city"]}


def _request(**fields) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({"messages": [{"role": "user", "content": "Weather?"}], **fields})


def _json_schema(schema: dict, strict: bool | None) -> dict:
    spec = {"name": "weather", "schema": schema, **({} if strict is None else {"strict": strict})}
    return {"response_format": {"type": "json_schema", "json_schema": spec}}


REQUESTS = {"strict": _json_schema(SCHEMA, True), "strict false": _json_schema(SCHEMA, False),
            "strict unset": _json_schema(SCHEMA, None), "guided_json": {"guided_json": SCHEMA},
            "guided_json text": {"guided_json": json.dumps(SCHEMA)}}


@pytest.fixture
def accepts(accepts_constraint):
    return lambda fields, text: accepts_constraint(_request(**fields).constraint(), text)


@pytest.mark.parametrize("how", REQUESTS)
def test_no_key_or_item_beyond_the_schema_however_it_is_sent(accepts, how):
    fields = REQUESTS[how]
    assert accepts(fields, '{"city": "Paris"}') and accepts(fields, '{"city": "Oslo", "tags": [3]}')
    assert not accepts(fields, '{"city": "Paris", "note": "x"}')
    assert not accepts(fields, '{"city": "Paris", "tags": [3, 4]}')


def test_what_the_schema_allows_explicitly_still_passes(accepts):
    open_schema = {**SCHEMA, "additionalProperties": True}
    for fields in (_json_schema(open_schema, False), {"guided_json": open_schema}):
        assert accepts(fields, '{"city": "Paris", "note": "x"}')
