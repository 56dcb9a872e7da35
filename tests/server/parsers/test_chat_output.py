"""Forced tool calls read back at their edges: a call cut off by max_tokens is still a call (its
arguments as far as written, finish_reason length), never call syntax as content."""

from __future__ import annotations

import pytest

from minisgl.server.parsers import ChatOutputFormat
from tests.server.test_parsers import _stream

REQUIRED = ChatOutputFormat(forced_list=True)
NAMED = ChatOutputFormat(forced_tool="get_time")
WHOLE = '[{"name": "get_time", "parameters": {"zone": "UTC"}}, {"name": "get_weather", "parameters": {"city": "Oslo"}}]'


def _pairs(calls: list[dict]) -> list[tuple[str, str]]:
    return [(c["function"]["name"], c["function"]["arguments"]) for c in calls]


@pytest.mark.parametrize("cut", range(len('[{"name": "get_time", "'), len(WHOLE)))
def test_a_list_of_calls_cut_anywhere_after_a_name_is_calls_with_finish_length(cut):
    text = WHOLE[:cut]
    message, reason = REQUIRED.reader().message(text, "length")
    assert reason == "length" and not message["content"]
    whole = _pairs(REQUIRED.reader().message(WHOLE, "stop")[0]["tool_calls"])
    got = _pairs(message.get("tool_calls", []))
    # Each call is the whole one's, the last one's arguments possibly a prefix of them.
    assert got and len(got) <= len(whole)
    for (name, arguments), (whole_name, whole_arguments) in zip(got, whole):
        assert name == whole_name and whole_arguments.startswith(arguments)
    _, content, calls, reason = _stream(REQUIRED, text, 3, "length")
    assert content == "" and _pairs(calls) == got and reason == "length"


def test_a_call_cut_before_its_arguments_has_their_opening_brace_so_clients_see_it_unfinished():
    """Arguments "" would read as a whole call of no arguments (LangChain: args {}); the grammar
    writes an object next, so "{" is the arguments so far, which no client takes for whole JSON."""
    message, reason = REQUIRED.reader().message('[{"name": "get_time", "parameter', "length")
    assert message["content"] is None and _pairs(message["tool_calls"]) == [("get_time", "{")] and reason == "length"
    _, content, calls, reason = _stream(REQUIRED, '[{"name": "get_time", "parameter', 3, "length")
    assert content == "" and _pairs(calls) == [("get_time", "{")] and reason == "length"


def test_a_list_cut_before_any_name_has_no_call_and_no_content():
    for text in ("[", '[{"na', '[{"name": "get_ti'):
        message, reason = REQUIRED.reader().message(text, "length")
        assert not message["content"] and "tool_calls" not in message and reason == "length"
        assert _stream(REQUIRED, text, 2, "length")[1:] == ("", [], "length")


@pytest.mark.parametrize("cut", range(1, len('[{"name": "get_time", "')))
def test_a_call_cut_inside_its_name_is_the_one_tool_it_can_still_become(cut):
    """The grammar lets the list hold only calls of the request's tools: once the name written so
    far fits one tool alone, the call is that tool's (arguments not begun: "{", finish_reason length); with
    one tool, from the list's first character."""
    text = WHOLE[:cut]
    two, one = (ChatOutputFormat(forced_list=True, tool_names=names) for names in (("get_time", "get_weather"),
                                                                                    ("get_time",)))
    for fmt, want in ((two, [("get_time", "{")] if '"get_t' in text else []), (one, [("get_time", "{")])):
        message, reason = fmt.reader().message(text, "length")
        assert _pairs(message.get("tool_calls", [])) == want and not message["content"] and reason == "length"
        _, content, calls, reason = _stream(fmt, text, 2, "length")
        assert content == "" and _pairs(calls) == want and reason == "length"


def test_a_named_call_cut_off_keeps_its_name_and_the_arguments_so_far():
    message, reason = NAMED.reader().message('{"zone": "U', "length")
    assert message["content"] is None and _pairs(message["tool_calls"]) == [("get_time", '{"zone": "U')]
    assert reason == "length"
    _, content, calls, reason = _stream(NAMED, '{"zone": "U', 4, "length")
    assert content == "" and _pairs(calls) == [("get_time", '{"zone": "U')] and reason == "length"


@pytest.mark.parametrize("fmt, text", [
    (ChatOutputFormat(tool_parser="hermes"), '<tool_call>\n{"name": "f", "arguments": {"a": ' + "[" * 5000),
    (ChatOutputFormat(tool_parser="hermes"), '<tool_call>\n{"name": "f", "arguments": "' + "[" * 5000 + '"}</tool_call>'),
    (ChatOutputFormat(tool_parser="llama3_json"), '{"name": "f", "parameters": ' + "[" * 5000 + "]" * 5000 + "}"),
    (REQUIRED, '[{"name": "f", "parameters": {"a": ' + "[" * 5000),
    (REQUIRED, "[" * 5000 + "]" * 5000),
    (NAMED, '{"a": ' + "[" * 5000 + "]" * 5000 + "}"),
], ids=["hermes-cut", "hermes-string-arguments", "llama3-closed", "required-cut", "required-closed", "named-closed"])
def test_output_nested_thousands_deep_is_read_without_recursion(fmt, text):
    """A model can be steered to write brackets for as long as max_tokens lets it: such output is
    read (as text, or as a call whose arguments are the text) whole and streamed, never a
    RecursionError."""
    message, reason = fmt.reader().message(text, "length")
    assert reason == "length" and message["role"] == "assistant"
    _stream(fmt, text, 7, "length")
