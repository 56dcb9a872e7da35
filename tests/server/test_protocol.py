"""The request bodies take their sampling fields from minisgl.core.request_fields: each is declared
on the chat and completions bodies with the table's API bounds, and a field left unset reaches
SamplingParams as the table's default."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from minisgl.core.request_fields import FIELDS, REQUEST_FIELDS
from minisgl.server.http.chat_protocol import ChatCompletionRequest
from minisgl.server.http.completions_protocol import CompletionRequest
from minisgl.server.http.responses_protocol import ResponsesRequest

CHAT = {"messages": [{"role": "user", "content": "hi"}]}
API_FIELDS = [f for f in REQUEST_FIELDS if f.in_api]


@pytest.mark.parametrize("model, base", [(ChatCompletionRequest, CHAT), (CompletionRequest, {"prompt": "hi"})])
def test_every_api_field_is_declared_and_unset_means_the_tables_default(model, base):
    assert {f.name for f in API_FIELDS} <= set(model.model_fields)
    params = model.model_validate(base).sampling_params()
    for f in API_FIELDS:
        assert getattr(params, f.name) == f.default, f.name


@pytest.mark.parametrize("field", [f for f in API_FIELDS if f.api_range is not None], ids=lambda f: f.name)
def test_the_api_refuses_values_outside_the_tables_api_bounds(field):
    r = field.api_range
    above = (r.le if r.le is not None else r.lt) + 1 if (r.le is not None or r.lt is not None) else None
    below = r.ge - 1 if r.ge is not None else r.gt if r.gt is not None else None
    for bad in (x for x in (above, below) if x is not None):
        with pytest.raises(ValidationError, match=field.name):
            CompletionRequest.model_validate({"prompt": "hi", field.name: bad})


def test_the_responses_body_bounds_its_sampling_fields_as_the_chat_does():
    for name in ("temperature", "top_p"):
        bad = FIELDS[name].api_range.le + 1
        with pytest.raises(ValidationError, match=name):
            ResponsesRequest.model_validate({"input": "hi", name: bad})
    echo = ResponsesRequest.model_validate({"input": "hi"}).echo(ChatCompletionRequest.model_validate(CHAT))
    assert (echo["temperature"], echo["top_p"]) == (FIELDS["temperature"].default, FIELDS["top_p"].default)


@pytest.mark.parametrize("body, limit", [({"prompt": "x"}, 16), ({"prompt": "x", "max_tokens": 3}, 3),
                                         ({**CHAT}, None), ({**CHAT, "max_tokens": 4}, 4),
                                         ({**CHAT, "max_tokens": 4, "max_completion_tokens": 5}, 5)])
def test_each_body_says_how_many_tokens_a_choice_may_generate(body, limit):
    model = CompletionRequest if "prompt" in body else ChatCompletionRequest
    assert model.model_validate(body).sampling_params().max_tokens == limit
