"""/v1/responses: OpenAI's Responses API, stateless (nothing is stored, so nothing can be referred
back to). The request (responses_protocol.py) becomes the chat request it means and is served by
the chat endpoint's own path (chat.py): its limits, metrics, drain behaviour, Generation (abort on
disconnect) and output format (tool-call and reasoning parsers). The output is read back into
Responses output items (reasoning, message, function_call), whole or as the Responses stream
events."""

from __future__ import annotations

import copy
import itertools
import time
import uuid
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from pydantic import ValidationError

from minisgl.message import Reply
from minisgl.utils.logger import get_logger

from ..parsers import ChatOutputFormat
from ..runtime.frontend import UNAVAILABLE
from .chat_protocol import ChatCompletionRequest
from .deps import ApiDeps, check_utf8
from .generation import Choice, Generation, serve_one_choice, sse, stream_failure
from .protocol import APIError, generation_responses
from .response_shapes import openai_finish_reason
from .responses_protocol import ResponseObject, ResponsesRequest

logger = get_logger(__name__)


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


class OutputItems:
    """The output items of one generation: its text read by the chat output format (reasoning,
    content, tool calls) and built into reasoning, message and function_call items. Each step
    returns the stream events it makes (without sequence numbers); a whole response just keeps
    `items`."""

    def __init__(self, output: ChatOutputFormat) -> None:
        self.reader = output.reader()
        self.items: list[dict] = []
        self.open: dict | None = None  # the message, reasoning or function_call item being written
        self.status: str | None = None  # completed or incomplete, once the output has ended

    def read(self, text: str, finish_reason: str | None) -> list[dict]:
        """The events of the next piece of output and, with the generation's finish reason, of
        its end (then `status` is set)."""
        deltas, finish = self.reader.read(text, openai_finish_reason(finish_reason))
        events = [e for delta in deltas for e in self._add(delta)]
        if finish:
            self.status = "incomplete" if finish == "length" else "completed"
            events += ([] if self.items else self._text("message", "")) + self._close(self.status)
        return events

    def response_fields(self) -> dict:
        """What the output says in the response object."""
        incomplete = {"reason": "max_output_tokens"} if self.status == "incomplete" else None
        return {"status": self.status, "incomplete_details": incomplete, "output": self.items}

    def _add(self, delta: dict) -> list[dict]:
        if "reasoning_content" in delta:
            return self._text("reasoning", delta["reasoning_content"])
        if "content" in delta:
            return self._text("message", delta["content"])
        events = []
        for call in delta.get("tool_calls", ()):  # a call's start (its id), or more of its arguments
            if "id" in call:
                events += self._close() + self._call(call["id"], call["function"]["name"])
            events += self._arguments(call["function"]["arguments"])
        return events

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
        if item["type"] == "function_call":
            return [{"type": "response.function_call_arguments.done", **self._at(item), "name": item["name"],
                     "arguments": item["arguments"]},
                    {"type": "response.output_item.done", "output_index": self._at(item)["output_index"],
                     "item": dict(item)}]
        part = item["content"][0]
        at = {**self._at(item), "content_index": 0}
        done = {"type": "response.output_text.done", **at, "text": part["text"], "logprobs": []} \
            if item["type"] == "message" else {"type": "response.reasoning_text.done", **at, "text": part["text"]}
        return [done, {"type": "response.content_part.done", **at, "part": dict(part)},
                {"type": "response.output_item.done", "output_index": at["output_index"], "item": copy.deepcopy(item)}]

    def _call(self, call_id: str, name: str) -> list[dict]:
        item = {"id": _id("fc"), "type": "function_call", "call_id": call_id, "name": name, "arguments": "",
                "status": "in_progress"}
        self.items.append(item)
        self.open = item
        return [{"type": "response.output_item.added", "output_index": len(self.items) - 1, "item": dict(item)}]

    def _arguments(self, piece: str) -> list[dict]:
        if not piece:
            return []
        self.open["arguments"] += piece
        return [{"type": "response.function_call_arguments.delta", **self._at(self.open), "delta": piece}]


def _usage(gen: Generation) -> dict:
    u = gen.usage()
    return {"input_tokens": u["prompt_tokens"], "output_tokens": u["completion_tokens"],
            "total_tokens": u["total_tokens"], "input_tokens_details": u["prompt_tokens_details"],
            "output_tokens_details": {"reasoning_tokens": 0}}


# Chat field names in the errors of the chat path, as the Responses request names them.
_RESPONSES_NAMES = {"max_tokens": "max_output_tokens", "response_format": "text.format", "messages": "input"}


def router(deps: ApiDeps) -> APIRouter:
    api = APIRouter()

    @api.post("/v1/responses", tags=["openai"], response_model=None, responses=generation_responses(ResponseObject))
    async def responses(body: ResponsesRequest, request: Request):
        def chat() -> ChatCompletionRequest:
            check_utf8("user", body.user)
            check_utf8("metadata", body.metadata or {})  # both echoed back in the response
            if body.built_in_tool():
                raise APIError(400, f"tools: the built-in tool {body.built_in_tool()!r} is not supported; only "
                                    "function tools are", param="tools", code="unsupported_parameter")
            deps.check_unsupported(body)
            try:
                return body.chat_request()
            except ValidationError as e:  # the request validated, so its chat form should too: a clear 400 anyway
                raise APIError(400, f"input: {e.errors()[0]['msg']}", param="input") from None

        admitted = deps.admit_chat(body.model, chat, _RESPONSES_NAMES)
        output = admitted.output
        base = {"id": _id("resp"), "object": "response", "created_at": int(time.time()),
                "model": admitted.model, **body.echo(admitted.body)}

        def whole(gen: Generation, choice: Choice) -> dict:
            items = OutputItems(output)
            items.read(choice.text, choice.finish_reason)
            return {**base, **items.response_fields(), "error": None, "usage": _usage(gen)}

        return await serve_one_choice(deps.client, admitted.jobs, request, bool(body.stream),
                                      lambda gen, firsts: _events(gen, firsts, base, output), whole)

    return api


async def _events(gen: Generation, firsts: list[Reply], base: dict, output: ChatOutputFormat) -> AsyncIterator[bytes]:
    """The Responses stream: created, in_progress, the items' events, then completed (with the
    whole response; status incomplete when cut by max_output_tokens, as vLLM and SGLang send it, so
    the SDK's stream helpers find the final response) or, on a server failure, error and failed."""
    numbers = itertools.count()
    items = OutputItems(output)

    def event(e: dict) -> bytes:
        e["sequence_number"] = next(numbers)
        return b"event: " + e["type"].encode() + b"\n" + sse(e)

    def response(status: str, **more) -> dict:
        return {**base, "status": status, "incomplete_details": None, "error": None, "output": [], "usage": None,
                **more}

    yield event({"type": "response.created", "response": response("in_progress")})
    yield event({"type": "response.in_progress", "response": response("in_progress")})
    failed: Reply | None = None
    try:
        async for _, reply in gen.replies(firsts):
            if reply.finish_reason in ("error", UNAVAILABLE):
                failed = reply
                continue
            for e in items.read(reply.text, reply.finish_reason):
                yield event(e)
            if items.status is not None:
                yield event({"type": "response.completed", "response": {**response(items.status),
                                                                        **items.response_fields(),
                                                                        "usage": _usage(gen)}})
    except Exception as e:  # noqa: BLE001 - a bug mid-stream: the client still hears that the response failed
        logger.exception("a Responses stream failed")
        failed = Reply(0, "", 0, "error", f"internal error: {type(e).__name__}")
    if failed is not None:
        code, message = stream_failure(failed)
        yield event({"type": "error", "code": code, "message": message, "param": None})
        yield event({"type": "response.failed",
                     "response": response("failed", output=items.items,
                                          error={"code": "server_error", "message": message})})


__all__ = ["OutputItems", "router"]
