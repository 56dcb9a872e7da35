"""JSON schemas of forced tool calls (tool_choice required): what the grammar lets the model
write, alone or beside a response_format answer.

Calls are a JSON list of {"name", "parameters"} (the arguments object); with an answer format the
output is either that list or the answer, which a reader tells apart by its first character (a
list of calls, an answer object). Each embedded schema keeps its own `$ref`s working: it moves
under the root's `$defs` and its references are rewritten to point there.
"""

from __future__ import annotations

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


__all__ = ["forced_calls_schema"]
