"""The request bodies write their sampling fields out, and what they write is the table's: each field
minisgl.core.request_fields says the API takes as itself is on the body, in the table's order, in its
JSON form, with the table's bounds, description and a null default (null or absent: the field's own
default). A table entry without its line in the body, or a line that drifts from the entry, fails
here, naming the field."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, Field, create_model

from minisgl.core.request_fields import FIELDS
from minisgl.server.http.chat_protocol import ChatCompletionRequest
from minisgl.server.http.completions_protocol import CompletionRequest
from minisgl.server.http.generation_protocol import API_FIELDS, JSON_FORMS, KnownFieldsOnly, SamplingFields
from minisgl.server.http.protocol import TokenIdList
from minisgl.server.http.responses_protocol import ResponsesRequest, ResponsesSampling


def from_the_table(*names: str) -> type[BaseModel]:
    """The body the table alone implies, built at run time: the reference the written-out ones equal."""
    fields = {}
    for f in map(FIELDS.__getitem__, names):
        json_form = JSON_FORMS.get(f.name) or (TokenIdList if f.token_ids else f.api_type or f.type)
        bounds = f.api_range.bounds() if f.api_range else {}
        fields[f.name] = (json_form | None, Field(None, description=f.doc, **bounds))
    return create_model("FromTheTable", __base__=KnownFieldsOnly, **fields)


BODIES = [(SamplingFields, tuple(f.name for f in API_FIELDS)), (ResponsesSampling, ("temperature", "top_p"))]


@pytest.mark.parametrize("body, names", BODIES, ids=lambda x: getattr(x, "__name__", ""))
def test_the_written_out_fields_are_the_tables(body, names):
    reference = from_the_table(*names)
    assert list(body.model_fields) == list(names), "in the table's order, none missing, none extra"
    for name in names:
        written, declared = body.model_fields[name], reference.model_fields[name]
        assert written.annotation == declared.annotation, f"{name}: the JSON form is not the table's"
        assert (written.default, written.description, written.metadata) == \
            (declared.default, declared.description, declared.metadata), f"{name}: default, doc or bounds"
    assert body.model_json_schema()["properties"] == reference.model_json_schema()["properties"]


def test_the_endpoints_bodies_carry_the_written_out_fields():
    assert issubclass(ChatCompletionRequest, SamplingFields) and issubclass(CompletionRequest, SamplingFields)
    assert issubclass(ResponsesRequest, ResponsesSampling)


def test_a_bound_from_the_table_is_enforced_by_the_body_naming_the_field():
    """What the table says reaches a real request: temperature's API range is [0, 2]."""
    assert FIELDS["temperature"].api_range.describe() == "in [0, 2]"
    with pytest.raises(ValueError, match="temperature"):
        ChatCompletionRequest.model_validate({"messages": [{"role": "user", "content": "hi"}], "temperature": 2.5})
    request = ChatCompletionRequest.model_validate({"messages": [{"role": "user", "content": "hi"}], "top_k": 5})
    assert request.temperature is None and request.top_k == 5
