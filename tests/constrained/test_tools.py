"""The grammar of forced tool calls (minisgl.constrained.tools), compiled as the server compiles
it and matched character by character: a list of calls of the given tools, each call's
arguments in its tool's schema (its own `$ref`s resolved), at most one call when asked, and beside
an answer format either that list or an answer in the format, nothing else; with tool_choice auto
and strict functions, free text in which any call is held to the tools."""

from __future__ import annotations

import json

import pytest

from minisgl.constrained.tools import call_or_answer, forced_calls_schema, strict_calls

# Arguments with a nested model behind a $ref, as pydantic writes them.
WEATHER = {"type": "object", "properties": {"where": {"$ref": "#/$defs/Place"}, "days": {"type": "integer"}},
           "required": ["where", "days"], "$defs": {"Place": {"type": "object", "properties": {
               "city": {"type": "string", "enum": ["Paris", "Oslo"]}}, "required": ["city"]}}}
TIME = {"type": "object", "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}}, "required": ["zone"]}
ANSWER = {"type": "object", "properties": {"ok": {"$ref": "#/$defs/Flag"}}, "required": ["ok"],
          "$defs": {"Flag": {"type": "boolean"}}}


@pytest.fixture
def accepts(accepts_constraint):
    return lambda schema, text: accepts_constraint(("json_schema", json.dumps(schema)), text)


def _call(name: str, arguments: dict) -> dict:
    return {"name": name, "parameters": arguments}


PARIS = _call("get_weather", {"where": {"city": "Paris"}, "days": 2})
UTC = _call("get_time", {"zone": "UTC"})


def _text(value) -> str:
    return json.dumps(value)  # the grammar's compact JSON: ", " and ": " separators


def test_calls_of_the_tools_in_their_schemas_and_nothing_else(accepts):
    schema = forced_calls_schema({"get_weather": WEATHER, "get_time": TIME})
    assert accepts(schema, _text([PARIS])) and accepts(schema, _text([UTC, PARIS]))
    assert not accepts(schema, "[]")  # at least one call
    assert not accepts(schema, _text([_call("get_news", {})]))  # not a tool
    assert not accepts(schema, _text([_call("get_time", {"zone": "PST"})]))  # not in the schema
    assert not accepts(schema, _text([_call("get_weather", {"where": {"city": "Rome"}, "days": 2})]))  # via $ref
    assert not accepts(schema, _text({"ok": True}))  # no answer without an answer format


def test_one_call_at_most_when_parallel_calls_are_off(accepts):
    schema = forced_calls_schema({"get_weather": WEATHER, "get_time": TIME}, one_call=True)
    assert accepts(schema, _text([UTC])) and not accepts(schema, _text([UTC, PARIS]))


def test_beside_an_answer_format_calls_or_an_answer(accepts):
    schema = forced_calls_schema({"get_weather": WEATHER, "get_time": TIME}, answer=ANSWER)
    assert accepts(schema, _text([PARIS])) and accepts(schema, _text({"ok": False}))
    assert not accepts(schema, _text({"ok": "yes"}))  # the answer's own $ref holds
    assert not accepts(schema, _text({"ok": True, "why": "x"}))  # no key the answer does not list
    assert not accepts(schema, _text([{"ok": True}]))


@pytest.mark.parametrize("syntax, call", [
    ("hermes", '<tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC"}}\n</tool_call>'),
    ("llama3_json", '{"name": "get_time", "parameters": {"zone": "UTC"}}'),
])
def test_tool_choice_auto_beside_an_answer_format_a_call_in_the_models_syntax_or_an_answer(accepts_constraint,
                                                                                          syntax, call):
    constraint = call_or_answer({"get_weather": WEATHER, "get_time": TIME}, ANSWER, syntax)
    assert accepts_constraint(constraint, call) and accepts_constraint(constraint, _text({"ok": True}))
    assert not accepts_constraint(constraint, call.replace("UTC", "PST"))  # the tool's schema holds
    assert not accepts_constraint(constraint, _text({"ok": True, "why": "x"}))  # and the answer's
    assert not accepts_constraint(constraint, call + call)  # one call
    assert not accepts_constraint(constraint, "Sure.")


# tool_choice auto with strict functions (tools.strict_calls): free text, and a call, once begun in the
# model's syntax, names a tool and gives arguments in a strict one's schema (any object for the others).
def _hermes(name: str, arguments: dict) -> str:
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": arguments})}\n</tool_call>'


def test_strict_auto_calls_hold_names_and_strict_schemas_and_leave_text_free(accepts_constraint):
    hermes = strict_calls({"get_weather": WEATHER, "get_time": TIME}, {"get_weather"}, "hermes")

    def accepts(text: str) -> bool:
        return accepts_constraint(hermes, text)

    assert accepts("It is sunny, I think.") and accepts("")
    paris = _hermes("get_weather", {"where": {"city": "Paris"}, "days": 2})
    assert accepts(paris) and accepts(f"Let me look. {paris}") and accepts(paris + paris)
    assert not accepts(_hermes("get_weather", {"where": {"city": "Rome"}, "days": 2}))  # not in its enum
    assert not accepts(_hermes("get_weather", {"days": 2}))  # a required argument missing
    assert not accepts(_hermes("get_news", {}))  # not a tool
    assert accepts(_hermes("get_time", {"anything": [1, 2]}))  # not strict: any object
    assert not accepts('<tool_call>\n{"name": "get_time", "arguments": 3}')  # an object, strict or not

    llama = strict_calls({"get_time": TIME}, {"get_time"}, "llama3_json")
    assert accepts_constraint(llama, json.dumps({"name": "get_time", "parameters": {"zone": "UTC"}}))
    assert not accepts_constraint(llama, json.dumps({"name": "get_time", "parameters": {"zone": "PST"}}))
