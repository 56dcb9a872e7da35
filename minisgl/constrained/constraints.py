"""What a constraint is (its kinds, the request fields they come from) and the checks made before
compiling one: torch-free, as the API process reads it (the request's cost, a tool call's depth)."""

from __future__ import annotations

import json
import re
from itertools import accumulate

# json_schema: no property or item beyond the schema's unless it allows them (xgrammar's strict_mode,
# vLLM's default), whether or not the request says `strict`: a weak model free to add keys adds them
# until max_tokens cuts the JSON.
CONSTRAINT_KINDS = ("json_object", "json_schema", "regex", "choice", "grammar", "tool_call_or_json",
                    "strict_tool_calls")
# The kinds whose spec is a JSON schema (or holds schemas): parsed and depth-bounded before compiling.
SCHEMA_KINDS = ("json_schema", "tool_call_or_json", "strict_tool_calls")
# The request fields each kind comes from, for the errors a client reads.
CONSTRAINT_FIELDS = {
    "json_object": "response_format",
    "json_schema": "response_format or guided_json (or the tools of a forced tool call)",
    "regex": "guided_regex",
    "choice": "guided_choice",
    "grammar": "guided_grammar",
    "tool_call_or_json": "tools or response_format",  # tools.call_or_answer
    "strict_tool_calls": "tools (strict)",  # tools.strict_calls
}


def constraint_problem(constraint: tuple[str, str] | None) -> str | None:
    """Why a constraint is malformed before compiling it, or None."""
    if constraint is None:
        return None
    if len(constraint) != 2 or constraint[0] not in CONSTRAINT_KINDS:
        return f"unknown constraint {constraint!r}"
    kind, spec = constraint
    if kind in SCHEMA_KINDS or kind == "choice":
        try:
            value = json.loads(spec)
        except ValueError as e:
            return f"the JSON schema is not valid JSON: {e}"
        except RecursionError:
            return f"{CONSTRAINT_FIELDS[kind]}: the JSON is nested too deeply to read"
        if kind == "choice" and not (isinstance(value, list) and value and all(isinstance(c, str) for c in value)):
            return "guided_choice must be a non-empty list of strings"
        if kind != "choice" and not isinstance(value, dict):
            return "a JSON schema must be an object"
    return None


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def json_depth(text: str) -> int:
    """How deeply the arrays and objects of a JSON text nest (without parsing it: no recursion)."""
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    return max(accumulate(1 if b in "[{" else -1 for b in brackets), default=0)


def bound_problem(constraint: tuple[str, str] | None, max_depth: int) -> str | None:
    """Why a constraint is refused before it is compiled, or None. A schema's compile time grows
    with how deeply its objects and arrays nest inline (much faster than with its size), so that
    is bounded up front; the compile time budget covers the rest."""
    if constraint is None or constraint[0] not in SCHEMA_KINDS:
        return None
    depth = json_depth(constraint[1])
    if depth > max_depth:
        return (f"{CONSTRAINT_FIELDS[constraint[0]]}: the schema nests {depth} levels deep, more than this "
                f"server's limit of {max_depth} (--max-grammar-depth)")
    return None
