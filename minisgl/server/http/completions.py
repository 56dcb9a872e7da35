"""POST /v1/completions: one prompt or a batch (text or token ids), n choices each."""

from __future__ import annotations

from fastapi import APIRouter, Request

from .deps import ApiDeps
from .generation import nth_choice, serve_generation, with_lora
from .protocol import APIError, CompletionRequest, CompletionResponse, generation_responses
from .response_shapes import CompletionShape


def completion_jobs(body: CompletionRequest) -> list:
    """The request's choices (prompts x n) as (prompt index, params, generate() kwargs)."""
    params, text_params = body.sampling_params(), body.text_params()
    return [(i, nth_choice(params, j), {**kw, "text_params": text_params})
            for i, kw in enumerate(body.prompts()) for j in range(body.n)]


def router(deps: ApiDeps) -> APIRouter:
    api = APIRouter()

    @api.post("/v1/completions", tags=["openai"], response_model=None,
              responses=generation_responses(CompletionResponse))
    async def completions(body: CompletionRequest, request: Request):
        lora = deps.check_serving(body.model)
        body = body.with_defaults(deps.sampling_defaults)
        if not body.prompts():
            raise APIError(400, "prompt must not be empty", param="prompt")
        deps.check_limits(body, len(body.prompts()) * body.n)
        return await serve_generation(CompletionShape(), body, with_lora(completion_jobs(body), lora),
                                      lora or deps.args.model_name, deps.client, request)

    return api
