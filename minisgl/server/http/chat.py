"""POST /v1/chat/completions: a chat's messages through the chat template, n choices of output
read back by the chat output format (reasoning, content, tool calls)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from .chat_protocol import ChatCompletionRequest, ChatCompletionResponse
from .deps import ApiDeps
from .generation import serve_generation
from .protocol import generation_responses
from .response_shapes import ChatShape


def router(deps: ApiDeps) -> APIRouter:
    api = APIRouter()

    @api.post("/v1/chat/completions", tags=["openai"], response_model=None,
              responses=generation_responses(ChatCompletionResponse))
    async def chat(body: ChatCompletionRequest, request: Request):
        admitted = deps.admit_chat(body.model, lambda: body)
        return await serve_generation(ChatShape(admitted.output), admitted, deps.client, request)

    return api
