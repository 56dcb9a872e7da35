"""JSON schemas of forced tool calls (tool_choice required): what the grammar lets the model
write, alone or beside a response_format answer; and tool_choice auto's call in the model's own
syntax or an answer in the format (`call_or_answer`).

Calls are a JSON list of {"name", "parameters"} (the arguments object); with an answer format the
output is either that list or the answer, which a reader tells apart by its first character (a
list of calls, an answer object). Each embedded schema keeps its own `$ref`s working: it moves
under the root's `$defs` and its references are rewritten to point there.
"""

from __future__ import annotations

import json
from typing import Any


def _rebased(schema: Any, base: str) -> Any:
    """`schema` with every local reference ("#...") made relative to `base` (a JSON pointer)."""
    if isinstance(schema, dict):
        return {k: (base + v[1:] if k == "$ref" and isinstance(v, str) and v.startswith("#") else _rebased(v, base))
                for k, v in schema.items()}
    if isinstance(schema, list):
        return [_rebased(v, base) for v in schema]
    return schema


def forced_calls_schema(tools: dict[str, dict], one_call: bool = False, answer: dict | None = None) -> dict:
    """The schema of a list of calls of `tools` (name -> parameters schema), at least one (at most
    one with `one_call`), or, with `answer` (a response_format schema), of either that list or
    an answer in it."""
    defs: dict[str, dict] = {}

    def embedded(key: str, schema: dict) -> dict:
        defs[key] = _rebased(schema, f"#/$defs/{key}")
        return {"$ref": f"#/$defs/{key}"}

    calls = [{"type": "object", "properties": {"name": {"type": "string", "enum": [name]},
                                               "parameters": embedded(f"tool{i}", schema)},
              "required": ["name", "parameters"], "additionalProperties": False}
             for i, (name, schema) in enumerate(tools.items())]
    listed: dict = {"type": "array", "items": calls[0] if len(calls) == 1 else {"anyOf": calls}, "minItems": 1}
    if one_call:
        listed["maxItems"] = 1
    if answer is not None:
        listed = {"anyOf": [listed, embedded("answer", answer)]}
    return {**listed, "$defs": defs}


# tool_choice auto beside an answer format: the model calls a tool in its own syntax or answers in
# the format (compiled by grammar.compile_constraint as the union of the two).
CALLS_OR_ANSWER = "tool_call_or_json"
# Each syntax's one call: the text around its JSON object, and the object's arguments key.
CALL_SYNTAX = {"hermes": ("<tool_call>\n", "\n</tool_call>", "arguments"), "llama3_json": ("", "", "parameters")}


def call_or_answer(tools: dict[str, dict], answer: dict, syntax: str) -> tuple[str, str]:
    """The constraint of an output that is one call of `tools` (name -> parameters schema) in
    `syntax` (a tool parser's, CALL_SYNTAX), or an answer in the `answer` schema."""
    before, after, key = CALL_SYNTAX[syntax]
    calls = [{"type": "object", "properties": {"name": {"type": "string", "enum": [name]},
                                               key: {"$ref": f"#/$defs/tool{i}"}},
              "required": ["name", key], "additionalProperties": False} for i, name in enumerate(tools)]
    defs = {f"tool{i}": _rebased(schema, f"#/$defs/tool{i}") for i, schema in enumerate(tools.values())}
    call = {**(calls[0] if len(calls) == 1 else {"anyOf": calls}), "$defs": defs}
    return CALLS_OR_ANSWER, json.dumps({"before": before, "call": call, "after": after, "answer": answer})


# tool_choice auto with strict functions: free text, but a call, once begun, in the syntax with a
# known name and arguments in its schema (compiled by grammar.compile_constraint as an xgrammar
# structural tag whose trigger is the call's opening).
STRICT_CALLS = "strict_tool_calls"


def strict_calls(tools: dict[str, dict], strict: set[str], syntax: str) -> tuple[str, str]:
    """The constraint of tool_choice auto where some function is `strict` (OpenAI: its arguments
    match its schema): the model writes what it likes, and a call in `syntax` (CALL_SYNTAX) that it
    begins names one of `tools` (name -> parameters schema) and gives arguments in the schema of a
    strict one (any object for the others)."""
    before, after, key = CALL_SYNTAX[syntax]
    trigger = before or '{"name": '
    tags = [{"type": "tag", "begin": f'{before}{{"name": {json.dumps(name)}, "{key}": ',
             "content": {"type": "json_schema", "json_schema": schema if name in strict else {"type": "object"}},
             "end": "}" + after} for name, schema in tools.items()]
    tag = {"type": "structural_tag", "format": {"type": "triggered_tags", "triggers": [trigger], "tags": tags,
                                                "at_least_one": False, "stop_after_first": False}}
    return STRICT_CALLS, json.dumps(tag)


__all__ = ["CALLS_OR_ANSWER", "CALL_SYNTAX", "STRICT_CALLS", "call_or_answer", "forced_calls_schema", "strict_calls"]
