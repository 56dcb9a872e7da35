"""/v1/responses: OpenAI's Responses API, stateless (nothing is stored, so nothing can be referred
back to). A request becomes the chat request it means (instructions as the first system message,
input items as chat messages, flat function tools as chat tools, text.format as response_format)
and is served by the chat endpoint's own path: its limits, metrics, drain behaviour, Generation
(abort on disconnect) and output format (tool-call and reasoning parsers). The output is read
back into Responses output items (reasoning, message, function_call), whole or as the Responses
stream events."""

from __future__ import annotations

import copy
import itertools
import time
import uuid
from collections.abc import AsyncIterator
from typing import Annotated, Any, ClassVar, Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError, model_validator

from minisgl.message import Reply

from .frontend import UNAVAILABLE
from .openai_api import Generation, _collect, _finish, _sse, chat_jobs, unavailable
from .parsers import ChatOutputFormat
from .protocol import (INT32_MAX, ChatCompletionRequest, JsonObjectFormat, KnownFieldsOnly, TextFormat,
                       error_response, generation_responses)

# Responses fields this server does not implement, with the values that ask for nothing; every
# other undeclared field is refused too (KnownFieldsOnly), unless --allow-unknown-fields.
RESPONSES_REFUSED_UNLESS: dict[str, tuple] = {
    "store": (None, False),  # nothing is kept: a stored response could never be retrieved
    "previous_response_id": (None,), "conversation": (None,), "background": (None, False),
    "include": (None, []), "prompt": (None,), "truncation": (None, "disabled"), "reasoning": (None,),
    "top_logprobs": (None, 0), "max_tool_calls": (None,), "service_tier": (None, "auto", "default"),
    "stream_options": (None,), "prompt_cache_retention": (None,), "context_management": (None,),
}


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


# -- request -----------------------------------------------------------------------------------


class InputText(_Strict):
    type: Literal["input_text"]
    text: str


class OutputText(_Strict):
    """An earlier answer's text, as clients send output items back; its annotations and logprobs
    describe the output and are not model input."""

    type: Literal["output_text"]
    text: str
    annotations: list = []
    logprobs: list | None = None


def _text_or(listed: Any) -> Any:
    """A string or a list: a bad list is reported for what it is, not also as "not a string"."""
    return Annotated[Annotated[str, Tag("text")] | Annotated[listed, Tag("list")],
                     Discriminator(lambda v: "text" if isinstance(v, str) else "list")]


ItemStatus = Literal["in_progress", "completed", "incomplete"] | None


class MessageItem(_Strict):
    type: Literal["message"] = "message"
    role: Literal["user", "system", "developer", "assistant"]
    content: _text_or(list[Annotated[InputText | OutputText, Field(discriminator="type")]])
    id: str | None = None  # an output item sent back keeps its id and status: not model input
    status: ItemStatus = None

    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)


class FunctionCallItem(_Strict):
    """A tool call the model made in an earlier turn."""

    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str
    id: str | None = None
    status: ItemStatus = None


class FunctionCallOutputItem(_Strict):
    """The result of a tool call, sent back by the client."""

    type: Literal["function_call_output"]
    call_id: str
    output: _text_or(list[InputText])
    id: str | None = None
    status: ItemStatus = None


class ReasoningText(_Strict):
    type: Literal["reasoning_text", "summary_text"]
    text: str


class ReasoningItem(_Strict):
    """An earlier turn's reasoning (output with --reasoning-parser), sent back."""

    type: Literal["reasoning"]
    summary: list[ReasoningText] = []
    content: list[ReasoningText] | None = None
    id: str | None = None
    status: ItemStatus = None


def _item_type(value: Any) -> str | None:
    kind = value.get("type", "message") if isinstance(value, dict) else getattr(value, "type", None)
    return kind if isinstance(kind, str) else None


InputItem = Annotated[Annotated[MessageItem, Tag("message")] | Annotated[FunctionCallItem, Tag("function_call")]
                      | Annotated[FunctionCallOutputItem, Tag("function_call_output")]
                      | Annotated[ReasoningItem, Tag("reasoning")], Discriminator(_item_type)]


class FunctionTool(_Strict):
    """A function tool in the Responses' flat shape (name and parameters beside `type`)."""

    type: Literal["function"]
    name: str = Field(pattern=r"^[a-zA-Z0-9_.-]{1,64}$")
    description: str | None = None
    parameters: dict | None = None
    strict: bool | None = None


class BuiltInTool(BaseModel):
    """A hosted tool (web_search, file_search, ...): parsed only to be refused by its type."""

    model_config = ConfigDict(strict=True, extra="allow")
    type: str


def _tool_type(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return "function" if kind == "function" else "built_in"


ResponsesTool = Annotated[Annotated[FunctionTool, Tag("function")] | Annotated[BuiltInTool, Tag("built_in")],
                          Discriminator(_tool_type)]


class NamedFunction(_Strict):
    type: Literal["function"]
    name: str


class JsonSchemaTextFormat(_Strict):
    """Responses' json_schema format: the chat's json_schema object flattened into it."""

    model_config = ConfigDict(strict=True, extra="forbid", populate_by_name=True)
    type: Literal["json_schema"]
    name: str = Field(max_length=64)
    schema_: dict = Field(alias="schema")
    description: str | None = None
    strict: bool | None = None


class TextConfig(_Strict):
    format: Annotated[TextFormat | JsonObjectFormat | JsonSchemaTextFormat, Field(discriminator="type")] | None = None


class ResponsesRequest(KnownFieldsOnly):
    refused_unless: ClassVar[dict[str, tuple]] = RESPONSES_REFUSED_UNLESS

    model: str | None = Field(None, description="optional: the one model this server serves")
    input: _text_or(Annotated[list[InputItem], Field(min_length=1)]) = \
        Field(description="a user message, or messages, function calls and their outputs")
    instructions: str | None = Field(None, description="the first (system) message")
    max_output_tokens: int | None = Field(None, ge=1, le=INT32_MAX)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    stream: bool | None = False
    tools: Annotated[list[ResponsesTool], Field(max_length=128)] | None = \
        Field(None, description="function tools only")
    tool_choice: Literal["none", "auto", "required"] | NamedFunction | None = \
        Field(None, description="auto (default with tools) needs --tool-call-parser; required and a named function "
                                "are enforced by the grammar")
    parallel_tool_calls: bool | None = Field(None, description="with tool_choice required: false allows one call")
    text: TextConfig | None = Field(None, description="format: text, json_object or json_schema")
    metadata: dict[str, str] | None = Field(None, description="echoed, not used")
    user: str | None = Field(None, description="not used")
    safety_identifier: str | None = Field(None, description="not used")
    prompt_cache_key: str | None = Field(None, description="not used: the prefix cache needs no key")

    @model_validator(mode="after")
    def _tool_choice_fits_the_tools(self):
        names = {t.name for t in self.tools or () if isinstance(t, FunctionTool)}
        forced = self.tool_choice == "required" or isinstance(self.tool_choice, NamedFunction)
        if forced and not names:
            raise ValueError("tool_choice other than none/auto needs tools")
        if isinstance(self.tool_choice, NamedFunction) and self.tool_choice.name not in names:
            raise ValueError(f"tool_choice names {self.tool_choice.name!r}, which is not among the tools")
        if forced and self.text and self.text.format and self.text.format.type != "text":
            raise ValueError("tool_choice required or named cannot be combined with text.format json")
        return self

    def built_in_tool(self) -> str | None:
        """The type of the first hosted tool asked for (none is implemented), or None."""
        return next((t.type for t in self.tools or () if isinstance(t, BuiltInTool)), None)

    def chat_messages(self) -> list[dict]:
        """The input as chat messages: a function call joins the assistant message before it (the
        chat shape of "said this, then called that"), reasoning goes to the next assistant message."""
        messages = [] if self.instructions is None else [{"role": "system", "content": self.instructions}]
        items = [MessageItem(role="user", content=self.input)] if isinstance(self.input, str) else self.input
        reasoning: list[str] = []
        for item in items:
            if isinstance(item, ReasoningItem):
                reasoning += [p.text for p in item.content or item.summary]
                continue
            if isinstance(item, FunctionCallOutputItem):
                output = item.output if isinstance(item.output, str) else "".join(p.text for p in item.output)
                messages.append({"role": "tool", "tool_call_id": item.call_id, "content": output})
                continue
            if isinstance(item, MessageItem):
                messages.append({"role": item.role, "content": item.text()})
            else:  # a function call
                call = {"id": item.call_id, "type": "function",
                        "function": {"name": item.name, "arguments": item.arguments}}
                if not messages or messages[-1]["role"] != "assistant":
                    messages.append({"role": "assistant", "content": ""})
                messages[-1].setdefault("tool_calls", []).append(call)
            if messages[-1]["role"] == "assistant" and reasoning:
                messages[-1]["reasoning_content"], reasoning = "\n".join(reasoning), []
        return messages

    def chat_request(self) -> ChatCompletionRequest:
        """The chat completion request this one means."""
        fmt = self.text.format if self.text else None
        if isinstance(fmt, JsonSchemaTextFormat):
            spec = {"name": fmt.name, "schema": fmt.schema_, "description": fmt.description, "strict": fmt.strict}
            fmt = {"type": "json_schema", "json_schema": {k: v for k, v in spec.items() if v is not None}}
        elif fmt is not None:
            fmt = fmt.model_dump()
        tools = [{"type": "function", "function": t.model_dump(exclude={"type"}, exclude_none=True)}
                 for t in self.tools or ()]
        choice = self.tool_choice
        if isinstance(choice, NamedFunction):
            choice = {"type": "function", "function": {"name": choice.name}}
        body = {"messages": self.chat_messages(), "max_completion_tokens": self.max_output_tokens,
                "temperature": self.temperature, "top_p": self.top_p, "stream": bool(self.stream),
                "tools": tools or None, "tool_choice": choice, "parallel_tool_calls": self.parallel_tool_calls,
                "response_format": fmt, "user": self.user, "metadata": self.metadata}
        return ChatCompletionRequest.model_validate({k: v for k, v in body.items() if v is not None})

    def echo(self, chat: ChatCompletionRequest) -> dict:
        """The request settings a response object carries (the sampling ones as used)."""
        fmt = self.text.format.model_dump(by_alias=True, exclude_none=True) if self.text and self.text.format \
            else {"type": "text"}
        choice = self.tool_choice.model_dump() if isinstance(self.tool_choice, NamedFunction) else \
            self.tool_choice or "auto"
        return {"instructions": self.instructions, "max_output_tokens": self.max_output_tokens,
                "temperature": 1.0 if chat.temperature is None else chat.temperature,
                "top_p": 1.0 if chat.top_p is None else chat.top_p,
                "tools": [{"description": None, "parameters": None, "strict": None, **t.model_dump(exclude_none=True)}
                          for t in self.tools or ()],
                "tool_choice": choice, "parallel_tool_calls": self.parallel_tool_calls is not False,
                "text": {"format": fmt}, "metadata": self.metadata or {}, "user": self.user,
                "truncation": "disabled", "store": False, "background": False, "previous_response_id": None,
                "reasoning": None}


# -- response ----------------------------------------------------------------------------------


class ResponseUsage(BaseModel):
    input_tokens: int
    output_tokens: int
    total_tokens: int
    input_tokens_details: dict
    output_tokens_details: dict


class ResponseObject(BaseModel):
    """The response object (documented in the OpenAPI schema; the route builds it as a dict)."""

    id: str
    object: Literal["response"]
    created_at: int
    status: Literal["in_progress", "completed", "incomplete", "failed"]
    model: str
    output: list[dict]
    incomplete_details: dict | None = None
    error: dict | None = None
    usage: ResponseUsage | None = None


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


class OutputItems:
    """The output items of one generation, built from the chat output reader's deltas
    (reasoning_content, content, tool_calls). Each step returns the stream events it makes (without
    sequence numbers); a whole response just keeps `items`."""

    def __init__(self) -> None:
        self.items: list[dict] = []
        self.open: dict | None = None  # the message or reasoning item text is being added to

    def add(self, delta: dict) -> list[dict]:
        if "reasoning_content" in delta:
            return self._text("reasoning", delta["reasoning_content"])
        if "content" in delta:
            return self._text("message", delta["content"])
        events = self._close()
        for call in delta.get("tool_calls", ()):
            events += self._call(call["id"], call["function"]["name"], call["function"]["arguments"])
        return events

    def finish(self, status: str) -> list[dict]:
        """Close the last item; a response with no item at all gets an empty message."""
        events = [] if self.items else self._text("message", "")
        return events + self._close("completed" if status == "completed" else "incomplete")

    def _at(self, item: dict) -> dict:
        return {"item_id": item["id"], "output_index": self.items.index(item)}

    def _text(self, kind: str, text: str) -> list[dict]:
        events = []
        if self.open is None or self.open["type"] != kind:
            events = self._close() + self._open(kind)
        self.open["content"][0]["text"] += text
        if text:
            event = "response.output_text.delta" if kind == "message" else "response.reasoning_text.delta"
            events.append({"type": event, **self._at(self.open), "content_index": 0, "delta": text,
                           **({"logprobs": []} if kind == "message" else {})})
        return events

    def _open(self, kind: str) -> list[dict]:
        if kind == "message":
            item = {"id": _id("msg"), "type": "message", "role": "assistant", "status": "in_progress", "content": []}
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        else:
            item = {"id": _id("rs"), "type": "reasoning", "summary": [], "status": "in_progress", "content": []}
            part = {"type": "reasoning_text", "text": ""}
        self.items.append(item)
        self.open = item
        events = [{"type": "response.output_item.added", "output_index": len(self.items) - 1,
                   "item": copy.deepcopy(item)}]
        item["content"].append(part)
        return events + [{"type": "response.content_part.added", **self._at(item), "content_index": 0,
                          "part": dict(part)}]

    def _close(self, status: str = "completed") -> list[dict]:
        item, self.open = self.open, None
        if item is None:
            return []
        item["status"] = status
        part = item["content"][0]
        at = {**self._at(item), "content_index": 0}
        done = {"type": "response.output_text.done", **at, "text": part["text"], "logprobs": []} \
            if item["type"] == "message" else {"type": "response.reasoning_text.done", **at, "text": part["text"]}
        return [done, {"type": "response.content_part.done", **at, "part": dict(part)},
                {"type": "response.output_item.done", "output_index": at["output_index"], "item": copy.deepcopy(item)}]

    def _call(self, call_id: str, name: str, arguments: str) -> list[dict]:
        item = {"id": _id("fc"), "type": "function_call", "call_id": call_id, "name": name, "arguments": "",
                "status": "in_progress"}
        self.items.append(item)
        events = [{"type": "response.output_item.added", "output_index": len(self.items) - 1,
                   "item": dict(item)}]
        item.update(arguments=arguments, status="completed")
        return events + [{"type": "response.function_call_arguments.delta", **self._at(item), "delta": arguments},
                         {"type": "response.function_call_arguments.done", **self._at(item), "name": name,
                          "arguments": arguments},
                         {"type": "response.output_item.done", "output_index": self._at(item)["output_index"],
                          "item": dict(item)}]


def _usage(gen: Generation) -> dict:
    u = gen.usage()
    return {"input_tokens": u["prompt_tokens"], "output_tokens": u["completion_tokens"],
            "total_tokens": u["total_tokens"], "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0}}


def _status(finish: str | None) -> tuple[str, dict | None]:
    return ("incomplete", {"reason": "max_output_tokens"}) if finish == "length" else ("completed", None)


# Chat field names in the errors of the chat path, as the Responses request names them.
_RESPONSES_NAMES = {"max_tokens": "max_output_tokens", "response_format": "text.format", "messages": "input"}


def add_responses_route(app: FastAPI, args, client, check_serving, check_limits, defaults: dict,
                        dependencies) -> None:
    """POST /v1/responses; `check_serving`/`check_limits` and `client` (the ObservedClient) are the
    chat route's."""
    from .api_server import APIError

    @app.post("/v1/responses", dependencies=dependencies, tags=["openai"], response_model=None,
              responses=generation_responses(ResponseObject))
    async def responses(body: ResponsesRequest, request: Request):
        check_serving(body.model)
        if body.built_in_tool():
            raise APIError(400, f"tools: the built-in tool {body.built_in_tool()!r} is not supported; only function "
                                "tools are", param="tools", code="unsupported_parameter")
        unsupported = body.unsupported_field(args.allow_unknown_fields)
        if unsupported:
            raise APIError(400, f"{unsupported} is not supported by this server", param=unsupported,
                           code="unsupported_parameter")
        try:
            chat = body.chat_request().with_defaults(defaults)
        except ValidationError as e:  # the request validated, so its chat form should too: a clear 400 anyway
            raise APIError(400, f"input: {e.errors()[0]['msg']}", param="input") from None
        try:
            check_limits(chat, 1)
        except APIError as e:
            if e.param in _RESPONSES_NAMES:
                e.message, e.param = e.message.replace(e.param, _RESPONSES_NAMES[e.param]), _RESPONSES_NAMES[e.param]
            raise
        if chat.tool_mode == "auto" and not args.tool_call_parser:
            raise APIError(400, "tools with tool_choice auto (the default) need the server started with "
                                "--tool-call-parser; use tool_choice required or a named function",
                           param="tool_choice", code="unsupported_parameter")
        output = ChatOutputFormat.for_chat(chat, args.reasoning_parser, args.tool_call_parser)
        gen = Generation(client, chat_jobs(chat))
        try:
            firsts = await gen.first_replies()
        finally:
            gen.forget_unstarted()
        if isinstance(firsts, JSONResponse):
            return firsts
        base = {"id": _id("resp"), "object": "response", "created_at": int(time.time()), "model": args.model_name,
                **body.echo(chat)}
        if body.stream:
            return StreamingResponse(_events(gen, firsts, base, output), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        choices = await _collect(gen, firsts, request)
        if choices is None:  # the client went away (see serve_generation)
            return error_response(499, "the client closed the connection before the response", code="client_closed")
        choice = choices[0]
        if choice.finish_reason == UNAVAILABLE:
            return unavailable(choice.error)
        if choice.finish_reason == "error":
            return error_response(500, "generation failed", code="generation_error")
        reader, items = output.reader(), OutputItems()
        deltas = reader.feed(choice.text)
        last, finish = reader.finish(_finish(choice.finish_reason))
        status, incomplete = _status(finish)
        for delta in deltas + last:
            items.add(delta)
        items.finish(status)
        return JSONResponse({**base, "status": status, "incomplete_details": incomplete, "error": None,
                             "output": items.items, "usage": _usage(gen)})


async def _events(gen: Generation, firsts: list[Reply], base: dict, output: ChatOutputFormat) -> AsyncIterator[bytes]:
    """The Responses stream: created, in_progress, the items' events, then completed (with the
    whole response; status incomplete when cut by max_output_tokens, as vLLM and SGLang send it, so
    the SDK's stream helpers find the final response) or, on a server failure, error and failed."""
    numbers = itertools.count()
    reader, items = output.reader(), OutputItems()

    def event(e: dict) -> bytes:
        e["sequence_number"] = next(numbers)
        return b"event: " + e["type"].encode() + b"\n" + _sse(e)

    def response(status: str, **more) -> dict:
        return {**base, "status": status, "incomplete_details": None, "error": None, "output": [], "usage": None,
                **more}

    yield event({"type": "response.created", "response": response("in_progress")})
    yield event({"type": "response.in_progress", "response": response("in_progress")})
    failed: Reply | None = None
    async for _, reply in gen.replies(firsts):
        if reply.finish_reason in ("error", UNAVAILABLE):
            failed = reply
            continue
        deltas = reader.feed(reply.text) if reply.text else []
        finish = _finish(reply.finish_reason)
        if finish:
            last, finish = reader.finish(finish)
            deltas += last
        for delta in deltas:
            for e in items.add(delta):
                yield event(e)
        if finish:
            status, incomplete = _status(finish)
            for e in items.finish(status):
                yield event(e)
            yield event({"type": "response.completed",
                         "response": response(status, incomplete_details=incomplete, output=items.items,
                                              usage=_usage(gen))})
    if failed is not None:
        code = "service_unavailable" if failed.finish_reason == UNAVAILABLE else "generation_error"
        message = failed.error or "generation failed"
        yield event({"type": "error", "code": code, "message": message, "param": None})
        yield event({"type": "response.failed",
                     "response": response("failed", output=items.items,
                                          error={"code": "server_error", "message": message})})


__all__ = ["ResponsesRequest", "ResponseObject", "add_responses_route", "RESPONSES_REFUSED_UNLESS"]
