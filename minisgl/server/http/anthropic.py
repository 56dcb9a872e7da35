"""Anthropic's Messages API: POST /v1/messages (whole or streamed) and /v1/messages/count_tokens,
for clients written against Anthropic (its SDK, Claude-style agents). Like the Responses API, a
request becomes the chat request it means (anthropic_protocol.py) and runs the chat endpoint's own
path: limits, metrics, abort on disconnect, the chat template and the tool-call and reasoning
parsers. Its output is read back into Anthropic content blocks (text, tool_use, thinking) and,
streamed, into Anthropic's events (message_start, content_block_start/delta/stop, message_delta,
message_stop). Errors keep this server's OpenAI error body; the SDK raises on the status."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import cast

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from minisgl.message import Reply

from ..parsers import ChatOutputFormat
from ..runtime.frontend import UNAVAILABLE, FrontendClient
from .anthropic_protocol import CountTokensRequest, MessagesRequest
from .chat_protocol import ChatCompletionRequest
from .deps import Admitted, ApiDeps
from .generation import Choice, Generation, serve_one_choice, sse, start_generation, stream_failure
from .protocol import APIError, generation_responses
from .request_errors import describe
from .response_shapes import openai_finish_reason

# Chat field names in the errors of the chat path, as the Messages request names them.
_MESSAGES_NAMES = {"stop": "stop_sequences", "max_tokens": "max_tokens", "tool_choice": "tool_choice"}


def _stop_reason(finish: str | None, stop: str | None) -> tuple[str, str | None]:
    """Anthropic's stop_reason and stop_sequence for an OpenAI finish reason."""
    if finish == "tool_calls":
        return "tool_use", None
    if finish == "length":
        return "max_tokens", None
    return ("stop_sequence", stop) if stop else ("end_turn", None)


def _input(arguments: str) -> dict:
    try:
        value = json.loads(arguments)
    except ValueError:  # cut by max_tokens (stop_reason max_tokens says so)
        return {}
    return value if isinstance(value, dict) else {}


def _usage(gen: Generation) -> dict:
    u = gen.usage()
    cached = u["prompt_tokens_details"]["cached_tokens"]
    return {"input_tokens": u["prompt_tokens"] - cached, "cache_read_input_tokens": cached,
            "cache_creation_input_tokens": 0, "output_tokens": u["completion_tokens"]}


class Blocks:
    """The content blocks of one generation, built from the chat output reader's deltas; each step
    returns the stream events it makes."""

    def __init__(self, output: ChatOutputFormat) -> None:
        self.reader = output.reader()
        self.blocks: list[dict] = []
        self.open: dict | None = None
        self.arguments = ""  # of the open tool_use block

    def read(self, text: str, finish_reason: str | None) -> tuple[list[dict], str | None]:
        deltas, finish = self.reader.read(text, finish_reason)
        events = [e for delta in deltas for e in self._add(delta)]
        if finish is not None:
            events += self._close()
        return events, finish

    def _add(self, delta: dict) -> list[dict]:
        if delta.get("reasoning_content"):
            return self._text("thinking", delta["reasoning_content"])
        if delta.get("content"):
            return self._text("text", delta["content"])
        events = []
        for call in delta.get("tool_calls", ()):
            if "id" in call:
                events += self._close() + self._start({"type": "tool_use", "id": call["id"].replace("call_", "toolu_"),
                                                       "name": call["function"]["name"], "input": {}})
            piece = call["function"].get("arguments") or ""
            if piece:
                self.arguments += piece
                events.append(self._delta({"type": "input_json_delta", "partial_json": piece}))
        return events

    def _text(self, kind: str, text: str) -> list[dict]:
        events = []
        if self.open is None or self.open["type"] != kind:
            events = self._close() + self._start({"type": kind, kind: "", **({"signature": ""} if kind == "thinking"
                                                                              else {})})
        block = self.open
        assert block is not None  # opened above, or still open
        block[kind] += text
        delta = {"type": "text_delta", "text": text} if kind == "text" else {"type": "thinking_delta", "thinking": text}
        return events + [self._delta(delta)]

    def _start(self, block: dict) -> list[dict]:
        self.blocks.append(block)
        self.open, self.arguments = block, ""
        shown = {**block, **({"text": ""} if block["type"] == "text" else {})}
        if block["type"] == "thinking":
            shown["thinking"] = ""
        return [{"type": "content_block_start", "index": len(self.blocks) - 1, "content_block": shown}]

    def _delta(self, delta: dict) -> dict:
        return {"type": "content_block_delta", "index": len(self.blocks) - 1, "delta": delta}

    def _close(self) -> list[dict]:
        block, self.open = self.open, None
        if block is None:
            return []
        if block["type"] == "tool_use":
            block["input"] = _input(self.arguments)
        return [{"type": "content_block_stop", "index": self.blocks.index(block)}]


def router(deps: ApiDeps) -> APIRouter:
    api = APIRouter()

    def client() -> FrontendClient:
        return cast(FrontendClient, deps.client)  # the observed client forwards all of FrontendClient

    def admit(body: MessagesRequest) -> Admitted[ChatCompletionRequest]:
        def chat() -> ChatCompletionRequest:
            try:
                return body.chat_request()
            except ValidationError as e:  # valid as a Messages request, not as the chat it means: still the client's
                message, param, code = describe(e.errors())
                for ours, theirs in _MESSAGES_NAMES.items():
                    message = message.replace(f"{ours}:", f"{theirs}:", 1) if param == ours else message
                raise APIError(400, message, param=_MESSAGES_NAMES.get(param, param) if param else None,
                               code=code) from None

        return deps.admit_chat(body.model, chat, _MESSAGES_NAMES)

    @api.post("/v1/messages", tags=["openai"], response_model=None, responses=generation_responses())
    async def messages(body: MessagesRequest, request: Request):
        admitted = admit(body)
        output = admitted.output
        base = {"id": f"msg_{uuid.uuid4().hex}", "type": "message", "role": "assistant", "model": admitted.model}

        def whole(gen: Generation, choice: Choice) -> dict:
            blocks = Blocks(output)
            _, finish = blocks.read(choice.text, openai_finish_reason(choice.finish_reason))
            reason, sequence = _stop_reason(finish, choice.stop)
            return {**base, "content": blocks.blocks, "stop_reason": reason, "stop_sequence": sequence,
                    "usage": _usage(gen)}

        return await serve_one_choice(client(), admitted.jobs, request, bool(body.stream),
                                      lambda gen, firsts: _events(gen, firsts, base, output), whole)

    @api.post("/v1/messages/count_tokens", tags=["openai"], response_model=None)
    async def count_tokens(body: CountTokensRequest, request: Request):
        """The prompt's tokens exactly as a request would count them: its first step's count (one
        prefill, which the prefix cache then keeps for the request that follows)."""
        full = MessagesRequest.model_validate({**body.model_dump(exclude_none=True), "max_tokens": 1})
        gen, firsts = await start_generation(client(), admit(full).jobs, request)
        if isinstance(firsts, JSONResponse):
            return firsts
        await gen.close()
        return {"input_tokens": firsts[0].prompt_tokens}

    return api


async def _events(gen: Generation, firsts: list[Reply], base: dict, output: ChatOutputFormat) -> AsyncIterator[bytes]:
    blocks = Blocks(output)

    def event(e: dict) -> bytes:
        return b"event: " + e["type"].encode() + b"\n" + sse(e)

    prompt = firsts[0].prompt_tokens
    cached = firsts[0].cached_tokens
    yield event({"type": "message_start", "message": {
        **base, "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": prompt - cached, "cache_read_input_tokens": cached, "cache_creation_input_tokens": 0,
                  "output_tokens": 0}}})
    async for choice, reply in gen.replies(firsts):
        if reply.finish_reason in ("error", UNAVAILABLE):
            _, message = stream_failure(reply)
            kind = "overloaded_error" if reply.finish_reason == UNAVAILABLE else "api_error"
            yield event({"type": "error", "error": {"type": kind, "message": message}})
            return
        events, finish = blocks.read(reply.text, openai_finish_reason(reply.finish_reason))
        for e in events:
            yield event(e)
        if finish is not None:
            reason, sequence = _stop_reason(finish, choice.stop)
            yield event({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": sequence},
                         "usage": {"output_tokens": choice.completion_tokens}})
            yield event({"type": "message_stop"})


__all__ = ["router", "Blocks"]
