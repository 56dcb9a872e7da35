"""The request bodies of Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens),
and the chat completion request each one means: system prompt, turns, tool_use / tool_result
blocks as assistant tool calls and tool messages, stop_sequences as stop, tool_choice any as
required. As everywhere on this server, a field it does not implement is refused (400 naming it),
never ignored: images, documents, thinking and server tools among them."""

from __future__ import annotations

import json
from typing import Annotated, Literal

from pydantic import Field, model_validator

from .chat_protocol import ChatCompletionRequest
from .protocol import StrictBody


class TextBlock(StrictBody):
    type: Literal["text"]
    text: str
    cache_control: dict | None = None  # a prompt-caching hint: the prefix cache needs none


class ToolUseBlock(StrictBody):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict
    cache_control: dict | None = None


class ToolResultBlock(StrictBody):
    type: Literal["tool_result"]
    tool_use_id: str
    content: str | list[TextBlock] = ""
    is_error: bool | None = None
    cache_control: dict | None = None

    def text(self) -> str:
        body = self.content if isinstance(self.content, str) else "".join(b.text for b in self.content)
        return f"Error: {body}" if self.is_error else body


Block = Annotated[TextBlock | ToolUseBlock | ToolResultBlock, Field(discriminator="type")]


class Message(StrictBody):
    role: Literal["user", "assistant"]
    content: str | list[Block]


class Tool(StrictBody):
    name: str = Field(min_length=1, max_length=128)
    description: str | None = None
    input_schema: dict
    type: Literal["custom"] | None = None  # the SDK's name for a client tool; server tools are not served
    cache_control: dict | None = None


class ToolChoice(StrictBody):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None

    @model_validator(mode="after")
    def _a_tool_is_named(self):
        if (self.type == "tool") != (self.name is not None):
            raise ValueError("type tool names one tool (name), and only it takes a name")
        return self


class Metadata(StrictBody):
    user_id: str | None = None


class CountTokensRequest(StrictBody):
    model: str | None = None
    messages: list[Message] = Field(min_length=1)
    system: str | list[TextBlock] | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None

    def chat_messages(self) -> list[dict]:
        """The turns as chat messages: tool_use blocks become the assistant's tool calls, each
        tool_result block a tool message (before the rest of its user turn)."""
        system = self.system if isinstance(self.system, str) or self.system is None \
            else "".join(b.text for b in self.system)
        out: list[dict] = [] if system is None else [{"role": "system", "content": system}]
        for m in self.messages:
            if isinstance(m.content, str):
                out.append({"role": m.role, "content": m.content})
                continue
            text = "".join(b.text for b in m.content if isinstance(b, TextBlock))
            if m.role == "assistant":
                calls = [{"id": b.id, "type": "function", "function": {"name": b.name, "arguments": json.dumps(b.input)}}
                         for b in m.content if isinstance(b, ToolUseBlock)]
                out.append({"role": "assistant", "content": text, **({"tool_calls": calls} if calls else {})})
                continue
            out += [{"role": "tool", "tool_call_id": b.tool_use_id, "content": b.text()}
                    for b in m.content if isinstance(b, ToolResultBlock)]
            if text or not any(isinstance(b, ToolResultBlock) for b in m.content):
                out.append({"role": "user", "content": text})
        return out

    def chat_fields(self) -> dict:
        tools = [{"type": "function", "function": {"name": t.name, "parameters": t.input_schema,
                                                   **({"description": t.description} if t.description else {})}}
                 for t in self.tools or ()]
        choice, parallel = None, None
        if self.tool_choice is not None and tools:
            kind = self.tool_choice.type
            choice = {"auto": "auto", "any": "required", "none": "none"}.get(kind) or \
                {"type": "function", "function": {"name": self.tool_choice.name}}
            parallel = False if self.tool_choice.disable_parallel_tool_use else None
        return {"messages": self.chat_messages(), "tools": tools or None, "tool_choice": choice,
                "parallel_tool_calls": parallel}


class MessagesRequest(CountTokensRequest):
    max_tokens: int = Field(ge=1)
    stop_sequences: list[str] | None = None
    stream: bool | None = None
    temperature: float | None = Field(None, ge=0, le=1)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=1)
    metadata: Metadata | None = None
    service_tier: Literal["auto", "standard_only"] | None = None  # one tier here

    def chat_request(self) -> ChatCompletionRequest:
        """The chat completion request this one means."""
        body = {**self.chat_fields(), "max_tokens": self.max_tokens, "stop": self.stop_sequences,
                "temperature": self.temperature, "top_p": self.top_p, "top_k": self.top_k,
                "stream": bool(self.stream), "user": self.metadata.user_id if self.metadata else None}
        if self.model is not None:
            body["model"] = self.model
        return ChatCompletionRequest.model_validate({k: v for k, v in body.items() if v is not None})


__all__ = ["MessagesRequest", "CountTokensRequest"]
