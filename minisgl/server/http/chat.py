"""POST /v1/chat/completions: a chat's messages through the chat template, n choices of output
read back by the chat output format (reasoning, content, tool calls)."""

from __future__ import annotations

from dataclasses import replace

from fastapi import APIRouter, Request

from ..parsers import TOOL_PARSERS, ChatOutputFormat
from .deps import ApiDeps
from .generation import nth_choice, serve_generation, with_lora
from .protocol import APIError, ChatCompletionRequest, ChatCompletionResponse, generation_responses
from .response_shapes import ChatShape


def chat_jobs(body: ChatCompletionRequest, output: ChatOutputFormat) -> list:
    """The request's choices as (prompt index, params, generate() kwargs); `output`: how they are
    read back (its tool parser's syntax may bind a call beside an answer format)."""
    params = body.sampling_params()
    either = body.call_or_answer(output.tool_parser and TOOL_PARSERS[output.tool_parser].syntax)
    if either is not None:
        try:
            params = replace(params, constraint=either)
        except ValueError as e:  # a field that cannot go with it (min_tokens, allowed_token_ids)
            raise APIError(400, str(e), code="invalid_request") from None
    kw = {"messages": [m.as_template_input() for m in body.messages],
          "text_params": body.text_params(body.template_options())}
    return [(0, nth_choice(params, j), kw) for j in range(body.n)]


def router(deps: ApiDeps) -> APIRouter:
    api = APIRouter()

    @api.post("/v1/chat/completions", tags=["openai"], response_model=None,
              responses=generation_responses(ChatCompletionResponse))
    async def chat(body: ChatCompletionRequest, request: Request):
        lora = deps.check_serving(body.model)
        body = body.with_defaults(deps.sampling_defaults)
        deps.check_limits(body, body.n)
        output = deps.chat_output(body)
        jobs = with_lora(chat_jobs(body, output), lora)
        return await serve_generation(ChatShape(output), body, jobs, lora or deps.args.model_name, deps.client,
                                      request)

    return api
