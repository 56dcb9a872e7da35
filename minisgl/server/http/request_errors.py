"""A request body's validation errors in words a newcomer reads: the field, what is wrong, the
limit and what was sent. Pydantic names the branches of a union in its error locations
(`stop.constrained-str`, `messages.0.content.list[TextPart]`); here they fold into the field, and of
a union's errors the one of the branch the value was meant for speaks (a list of 5 stop strings is
a list that is too long, not a string that is not one)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .deps import clipped

# Pydantic's names of plain types as union branches, and what a person calls them.
KINDS = {"str": "a string", "constrained-str": "a string", "int": "an integer", "constrained-int": "an integer",
         "float": "a number", "bool": "true or false", "list": "a list", "dict": "an object", "none": "null"}
NOT_TEXT = ("image_url", "input_image", "image", "input_audio", "audio", "file", "input_file", "video_url")


def is_branch(part) -> bool:
    """A union branch's name in a location, not a field: field names are lower-case words."""
    return isinstance(part, str) and (part in KINDS or part[:1].isupper() or any(c in part for c in "[]-"))


def branch_kind(part: str) -> str:
    if part in KINDS:
        return KINDS[part]
    if part.startswith("list["):
        return "a list"
    if part.startswith("literal["):
        return "one of " + part.removeprefix("literal[").removesuffix("]").replace(",", ", ")
    return "an object"


def sent(value) -> str:
    """What the client sent, briefly."""
    if isinstance(value, list):
        return f"a list of {len(value)}"
    if isinstance(value, dict):
        return "an object"
    return clipped(json.dumps(value, ensure_ascii=False, default=str))


def field(loc) -> list:
    return [p for p in loc if p != "body" and not is_branch(p)]


def describe(errors: Sequence[Mapping[str, Any]]) -> tuple[str, str | None, str]:
    """(message, param, code) for the first problem of a request body: code unsupported_parameter
    for a field the server does not know (in a nested object too), else invalid_request."""
    message, param, *code = _describe(errors)
    return message, param, code[0] if code else "invalid_request"


def _describe(errors: Sequence[Mapping[str, Any]]) -> tuple:
    if not errors:
        return "invalid request", None
    first = errors[0]
    loc = [p for p in first.get("loc", ()) if p != "body"]
    kind = first.get("type", "")
    if kind == "json_invalid":
        error = (first.get("ctx") or {}).get("error", "JSON decode error")
        return f"the request body is not valid JSON: {error} at character {loc[0] if loc else 0}", None
    if not loc:
        if kind == "missing":
            return "the request has no body: send a JSON object (Content-Type: application/json)", None
        if kind.endswith("_type"):
            return f"the request body must be a JSON object; got {sent(first.get('input'))}", None
        return first.get("msg", "invalid request").removeprefix("Value error, "), None  # a check across fields
    path = field(loc)
    same = [e for e in errors if field(e.get("loc", ()))[: len(path)] == path]
    name = ".".join(map(str, path))
    for e in same:  # a content part this text-only server cannot take
        if e.get("loc", ())[-1:] == ("type",) and e.get("input") in NOT_TEXT:
            part = ".".join(map(str, field(e["loc"])[:-1]))
            return (f"{part}: {e['input']!r} content parts are not supported: this server takes text only "
                    "(a string, or parts of type 'text')"), part
    meant = [e for e in same if not e.get("type", "").endswith("_type")]
    if not meant:  # no branch took the value's type: name the types it may have
        kinds = list(dict.fromkeys(branch_kind(e["loc"][-1]) if is_branch(e["loc"][-1]) else _plain(e) for e in same))
        return f"{name}: must be {' or '.join(kinds)}; got {sent(first.get('input'))}", name
    e = meant[0]
    where = ".".join(map(str, field(e["loc"]))) or name
    ctx = e.get("ctx") or {}
    if e["type"] == "too_long":
        return f"{where}: at most {ctx.get('max_length')} items; got {ctx.get('actual_length')}", where
    if e["type"] == "too_short":
        return f"{where}: at least {ctx.get('min_length')} items; got {ctx.get('actual_length')}", where
    if e["type"] == "missing":
        return f"{where}: required, and missing", where
    if e["type"] == "extra_forbidden":
        return f"{where}: not a field this server knows", where, "unsupported_parameter"
    message = e.get("msg", "invalid value")
    if e["type"] == "value_error":  # a check of the field's own, which says what is wrong itself
        return f"{where}: {message.removeprefix('Value error, ')}", where
    return f"{where}: {message[0].lower() + message[1:]}; got {sent(e.get('input'))}", where


def _plain(error: Mapping[str, Any]) -> str:
    """What a type error of a single-type field expects, from pydantic's error type (`int_type`)."""
    return KINDS.get(error.get("type", "").removesuffix("_type").replace("string", "str").replace("model", "dict")
                     .replace("dict_attributes", "dict"), "another type")


__all__ = ["describe"]
