"""Reading model output back into OpenAI fields: reasoning split from the answer, tool calls
parsed from Hermes/Qwen and Llama-3 JSON text; streamed piece by piece the result is the same
as read whole, whatever the split points."""

from __future__ import annotations

import json

import pytest

from minisgl.server.parsers import ChatOutputFormat

HERMES = ('<think>\nThe user wants weather.\n</think>\n\nLet me check.<tool_call>\n'
          '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}\n</tool_call>\n'
          '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>')
LLAMA = '{"name": "get_weather", "parameters": {"city": "Oslo"}}; {"name": "get_time", "parameters": {}}'


def _stream(fmt: ChatOutputFormat, text: str, step: int, finish: str = "stop"):
    reader, deltas = fmt.reader(), []
    for i in range(0, len(text), step):
        deltas += reader.feed(text[i : i + step])
    last, reason = reader.finish(finish)
    deltas += last
    joined = lambda key: "".join(d.get(key) or "" for d in deltas)  # noqa: E731
    return joined("reasoning_content"), joined("content"), joined_calls(deltas), reason


def joined_calls(deltas: list[dict]) -> list[dict]:
    """A stream's tool calls as a client joins them: by index, the first delta's id, type and name,
    every delta's arguments text in order."""
    calls: dict[int, dict] = {}
    for piece in (c for d in deltas for c in d.get("tool_calls", [])):
        if piece["index"] not in calls:
            assert piece.keys() == {"index", "id", "type", "function"}, piece  # a call's first delta names it
            calls[piece["index"]] = {"id": piece["id"], "type": piece["type"],
                                     "function": {"name": piece["function"]["name"], "arguments": ""}}
        else:
            assert piece.keys() == {"index", "function"} and piece["function"].keys() == {"arguments"}, piece
        calls[piece["index"]]["function"]["arguments"] += piece["function"]["arguments"]
    assert list(calls) == list(range(len(calls)))
    return list(calls.values())


def _calls(calls):
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


def test_hermes_with_reasoning_whole():
    fmt = ChatOutputFormat(reasoning_parser="qwen3", tool_parser="hermes")
    message, reason = fmt.reader().message(HERMES, "stop")
    assert message["reasoning_content"] == "The user wants weather."
    assert message["content"] == "Let me check."
    assert _calls(message["tool_calls"]) == [("get_weather", {"city": "Paris", "unit": "c"}), ("get_time", {})]
    assert all(c["id"].startswith("call_") and c["type"] == "function" for c in message["tool_calls"])
    assert reason == "tool_calls"


@pytest.mark.parametrize("step", [1, 2, 3, 7, 1000])
def test_hermes_with_reasoning_streamed_equals_whole(step):
    fmt = ChatOutputFormat(reasoning_parser="qwen3", tool_parser="hermes")
    reasoning, content, calls, reason = _stream(fmt, HERMES, step)
    assert reasoning.strip() == "The user wants weather."
    assert content == "Let me check."
    assert _calls(calls) == [("get_weather", {"city": "Paris", "unit": "c"}), ("get_time", {})]
    assert len(calls) == 2 and reason == "tool_calls"


@pytest.mark.parametrize("fmt, text", [
    (ChatOutputFormat(tool_parser="hermes"), HERMES.split("</think>\n\n")[1]),
    (ChatOutputFormat(tool_parser="llama3_json"), LLAMA.replace("Oslo", "Paris", 1)),
    (ChatOutputFormat(forced_tool="get_weather"), '{"city": "Paris"}'),
    (ChatOutputFormat(forced_list=True), '[{"name": "get_weather", "parameters": {"city": "Paris"}}]'),
])
def test_a_calls_arguments_stream_in_pieces_as_written(fmt, text):
    """Its first delta carries the id, type and name, each later one only arguments text (checked
    by joined_calls); joined they are the arguments exactly as the model wrote them."""
    reader, deltas = fmt.reader(), []
    for i in range(0, len(text), 4):
        deltas += reader.feed(text[i : i + 4])
    deltas += reader.finish("stop")[0]
    first = [c for d in deltas for c in d.get("tool_calls", []) if c["index"] == 0]
    assert len(first) > 3 and first[0]["function"]["arguments"] == ""
    arguments = joined_calls(deltas)[0]["function"]["arguments"]
    assert arguments in text and json.loads(arguments)["city"] == "Paris"


@pytest.mark.parametrize("step", [1, 4, 1000])
def test_llama3_json_calls(step):
    fmt = ChatOutputFormat(tool_parser="llama3_json")
    message, reason = fmt.reader().message(LLAMA, "stop")
    assert message["content"] is None and reason == "tool_calls"
    assert _calls(message["tool_calls"]) == [("get_weather", {"city": "Oslo"}), ("get_time", {})]
    _, content, calls, _ = _stream(fmt, "<|python_tag|>" + LLAMA, step)
    assert content == "" and _calls(calls) == _calls(message["tool_calls"])


@pytest.mark.parametrize("fmt", [ChatOutputFormat(tool_parser="hermes"), ChatOutputFormat(tool_parser="llama3_json")])
@pytest.mark.parametrize("text", ["Plain answer, no tools.", "Use {braces} and <tool_ in text",
                                  '<tool_call>\n{"name": "f", "arguments": {"a": </tool_call>'])
def test_text_that_is_not_a_call_stays_content(fmt, text):
    message, reason = fmt.reader().message(text, "stop")
    assert message["content"] == text and "tool_calls" not in message and reason == "stop"
    _, content, calls, reason = _stream(fmt, text, 3)
    if text.startswith("<tool_call>") and fmt.tool_parser == "hermes":
        # Streamed, the call was shown once its arguments began, before they went wrong: it stays
        # a call (as vLLM streams it), its arguments as written; never call syntax as content.
        assert content == "" and [c["function"]["name"] for c in calls] == ["f"]
        assert calls[0]["function"]["arguments"] == '{"a": </tool_call>'
    else:
        assert content == text and calls == [] and reason == "stop"


def test_answer_without_think_is_all_content_and_unfinished_reasoning_is_reasoning():
    fmt = ChatOutputFormat(reasoning_parser="qwen3")
    message, _ = fmt.reader().message("Just the answer.", "stop")
    assert message == {"role": "assistant", "content": "Just the answer.", "reasoning_content": None}
    assert _stream(fmt, "<think>cut off by max_tok", 2, "length")[:2] == ("cut off by max_tok", "")
    message, reason = fmt.reader().message("<think>cut off by max_tok", "length")
    assert message["reasoning_content"] == "cut off by max_tok" and reason == "length"


def test_forced_calls_read_the_grammar_shaped_json():
    named = ChatOutputFormat(forced_tool="get_weather")
    message, reason = named.reader().message('{"city": "Rome"}', "stop")
    assert _calls(message["tool_calls"]) == [("get_weather", {"city": "Rome"})] and reason == "stop"
    required = ChatOutputFormat(forced_list=True)
    text = '[{"name": "get_time", "parameters": {}}, {"name": "get_weather", "parameters": {"city": "Rome"}}]'
    message, reason = required.reader().message(text, "stop")
    assert _calls(message["tool_calls"]) == [("get_time", {}), ("get_weather", {"city": "Rome"})]
    assert reason == "tool_calls"
    assert _calls(_stream(required, text, 5)[2]) == _calls(message["tool_calls"])
