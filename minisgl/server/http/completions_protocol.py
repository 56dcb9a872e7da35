"""POST /v1/completions' request body (one prompt or a batch, text or token ids) and response body."""

from __future__ import annotations

from typing import Annotated, Literal, cast

from pydantic import BaseModel, Field

from minisgl.core.request_fields import MAX_LOGPROBS

from .generation_protocol import GenerationRequest
from .protocol import Text, TokenIds, Usage, token_limit


class CompletionRequest(GenerationRequest):
    prompt: Text | TokenIds | Annotated[list[Text], Field(min_length=1)] | Annotated[list[TokenIds], Field(min_length=1)] = \
        Field(description="text or token ids, one or a batch")
    max_tokens: int | None = token_limit(16)
    logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS,
                                 description="return each output token's log-probability and that many alternatives")

    def logprobs_k(self) -> int | None:
        return self.logprobs

    def max_new_tokens(self) -> int | None:
        return self.max_tokens

    def prompts(self) -> list[dict]:
        """Each prompt as generate() keyword arguments."""
        p = self.prompt
        if isinstance(p, str):
            return [{"text": p}]
        if p and all(isinstance(x, int) for x in p):
            return [{"input_ids": list(cast("list[int]", p))}]
        return [{"text": x} if isinstance(x, str) else {"input_ids": list(cast("list[int]", x))} for x in p]


class CompletionLogprobs(BaseModel):
    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]]
    text_offset: list[int]


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: Literal["stop", "length"] | None


class CompletionResponse(BaseModel):
    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage
