"""A Responses request read as the chat request it means: the item shapes the openai SDK and
agents send back become the chat messages /v1/chat/completions takes for the same conversation."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from minisgl.server.http.chat_protocol import ChatCompletionRequest
from minisgl.server.http.responses_protocol import ResponsesRequest

TOOL = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}


def test_output_items_sent_back_become_one_assistant_turn_with_its_reasoning_and_calls():
    request = ResponsesRequest.model_validate({"instructions": "Be brief.", "tools": [TOOL], "input": [
        {"role": "user", "content": "Weather?"},
        {"type": "reasoning", "id": "rs_1", "summary": [], "status": "completed",
         "content": [{"type": "reasoning_text", "text": "use the tool"}]},
        {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "Checking.", "annotations": [], "logprobs": []}]},
        {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather", "arguments": "{}",
         "status": "completed"},
        {"type": "function_call_output", "call_id": "call_1", "output": "Sunny"},
    ]})
    chat = request.chat_request()
    same = ChatCompletionRequest.model_validate({"messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "Checking.", "reasoning_content": "use the tool", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"}]})
    assert [m.as_template_input() for m in chat.messages] == [m.as_template_input() for m in same.messages]
    assert chat.tools[0].function.name == "get_weather" and chat.tool_mode == "auto"


def test_settings_map_to_their_chat_fields():
    chat = ResponsesRequest.model_validate({
        "input": "hi", "max_output_tokens": 7, "temperature": 0.5, "top_p": 0.9, "tools": [TOOL],
        "tool_choice": {"type": "function", "name": "get_weather"}, "parallel_tool_calls": False,
    }).chat_request()
    assert (chat.max_completion_tokens, chat.temperature, chat.top_p) == (7, 0.5, 0.9)
    assert chat.tool_mode == "named" and chat.tool_choice.function.name == "get_weather"
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    formatted = ResponsesRequest.model_validate({"input": "hi", "text": {"format": {
        "type": "json_schema", "name": "thing", "schema": schema, "strict": True}}}).chat_request()
    assert formatted.constraint() == ChatCompletionRequest.model_validate({
        "messages": [{"role": "user", "content": "hi"}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "thing", "schema": schema, "strict": True}},
    }).constraint()


@pytest.mark.parametrize("body", [
    {"input": "hi", "tool_choice": "required"},  # no tools to call
    {"input": "hi", "tools": [TOOL], "tool_choice": {"type": "function", "name": "other"}},
    {"input": []},
    {"input": [{"role": "tool", "content": "x"}]},  # tool results are function_call_output items
])
def test_contradictory_or_malformed_requests_do_not_validate(body):
    with pytest.raises(ValidationError):
        ResponsesRequest.model_validate(body)


def test_forced_tools_beside_a_text_format_are_the_chat_request_they_mean():
    body = {"input": "hi", "tools": [TOOL], "tool_choice": "required", "text": {"format": {"type": "json_object"}}}
    chat = ResponsesRequest.model_validate(body).chat_request()
    assert chat.tool_mode == "required" and chat.answer_constraint() == ("json_object", "")


def test_unimplemented_fields_and_hosted_tools_are_named():
    assert ResponsesRequest.model_validate({"input": "x", "store": True}).unsupported_field() == "store"
    assert ResponsesRequest.model_validate({"input": "x", "store": False}).unsupported_field() is None
    assert ResponsesRequest.model_validate({"input": "x", "truncation": "auto"}).unsupported_field() == "truncation"
    assert ResponsesRequest.model_validate({"input": "x", "tools": [{"type": "file_search"}]}).built_in_tool() == \
        "file_search"
