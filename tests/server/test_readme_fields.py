"""The README's list of request fields is the truth: every field the request models declare and
every refused field is named there."""

from __future__ import annotations

import re
from pathlib import Path

from minisgl.server.protocol import REFUSED_UNLESS, ChatCompletionRequest, CompletionRequest

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def _section() -> str:
    match = re.search(r"^## Request fields\n(.*?)(?=^## |\Z)", README, re.S | re.M)
    assert match, 'README.md has no "## Request fields" section'
    return match.group(1)


def _named(text: str) -> set[str]:
    return set(re.findall(r"`([a-z_]+)`", text))


def test_every_implemented_field_is_listed():
    fields = set(ChatCompletionRequest.model_fields) | set(CompletionRequest.model_fields)
    missing = fields - _named(_section())
    assert not missing, f"README's Request fields does not name {sorted(missing)}"


def test_every_refused_field_is_listed_as_refused():
    refused = _section().split("Refused unless")[1]
    missing = set(REFUSED_UNLESS) - _named(refused)
    assert not missing, f"README does not list {sorted(missing)} as refused"
    implemented = _section().split("Refused unless")[0]
    assert not set(REFUSED_UNLESS) & _named(implemented) - {"json_schema"}, "a refused field is listed as implemented"
