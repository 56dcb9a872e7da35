"""docs/serving.md's list of request fields is the truth: every field the request models declare and
every refused field is named there."""

from __future__ import annotations

import re
from pathlib import Path

from minisgl.server.http.chat_protocol import ChatCompletionRequest
from minisgl.server.http.completions_protocol import CompletionRequest
from minisgl.server.http.generation_protocol import REFUSED_UNLESS
from minisgl.server.http.responses_protocol import RESPONSES_REFUSED_UNLESS, ResponsesRequest

SERVING_DOC = (Path(__file__).resolve().parents[2] / "docs" / "serving.md").read_text()


def _section() -> str:
    match = re.search(r"^## Request fields\n(.*?)(?=^## |\Z)", SERVING_DOC, re.S | re.M)
    assert match, 'docs/serving.md has no "## Request fields" section'
    return match.group(1)


def _named(text: str) -> set[str]:
    return set(re.findall(r"`([a-z_]+)`", text))


def test_every_implemented_field_is_listed():
    fields = set(ChatCompletionRequest.model_fields) | set(CompletionRequest.model_fields)
    missing = fields - _named(_section())
    assert not missing, f"docs/serving.md's Request fields does not name {sorted(missing)}"


def test_every_refused_field_is_listed_as_refused():
    refused = _section().split("Refused unless")[1]
    missing = set(REFUSED_UNLESS) - _named(refused)
    assert not missing, f"docs/serving.md does not list {sorted(missing)} as refused"
    implemented = _section().split("Refused unless")[0]
    # echo and prompt_logprobs: refused by chat, implemented by completions (its body declares them).
    refused_by_all = set(REFUSED_UNLESS) - set(CompletionRequest.model_fields)
    assert not refused_by_all & _named(implemented) - {"json_schema"}, "a refused field is listed as implemented"


def test_responses_fields_and_refusals_are_listed():
    match = re.search(r"^`POST /v1/responses`(.*?)(?:\n\n|\Z)", _section(), re.S | re.M)
    assert match, "docs/serving.md's Request fields has no /v1/responses paragraph"
    implemented, refused = match.group(1).split("Nothing is stored")
    missing = set(ResponsesRequest.model_fields) - _named(implemented)
    assert not missing, f"the /v1/responses paragraph does not name {sorted(missing)}"
    missing = set(RESPONSES_REFUSED_UNLESS) - _named(refused)
    assert not missing, f"the /v1/responses paragraph does not list {sorted(missing)} as refused"
