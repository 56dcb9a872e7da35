"""POST /v1/completions: one prompt or a batch (text or token ids), n choices each."""

from __future__ import annotations

from fastapi import APIRouter, Request

from .completions_protocol import CompletionRequest, CompletionResponse
from .deps import ApiDeps
from .generation import serve_generation
from .protocol import generation_responses
from .response_shapes import CompletionShape


def router(deps: ApiDeps) -> APIRouter:
    api = APIRouter()

    @api.post("/v1/completions", tags=["openai"], response_model=None,
              responses=generation_responses(CompletionResponse))
    async def completions(body: CompletionRequest, request: Request):
        admitted = deps.admit_completion(body)
        echo_texts = tuple(p.get("text") for p in body.prompts()) if body.echo else ()
        shape = CompletionShape(echo_texts, body.prompt_logprobs is not None, body.logprobs is not None,
                                body.prompt_only)
        return await serve_generation(shape, admitted, deps.client, request)

    return api
