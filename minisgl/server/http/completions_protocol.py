"""POST /v1/completions' request body (one prompt or a batch, text or token ids) and response body."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any, ClassVar, Literal, cast

from pydantic import BaseModel, Field, model_validator

from minisgl.core.params import SamplingParams
from minisgl.core.request_fields import INT32_MAX, MAX_LOGPROBS

from .generation_protocol import REFUSED_UNLESS, GenerationRequest
from .protocol import Text, TokenIds, Usage


class CompletionRequest(GenerationRequest):
    prompt: Text | TokenIds | Annotated[list[Text], Field(min_length=1)] | Annotated[list[TokenIds], Field(min_length=1)] = \
        Field(description="text or token ids, one or a batch")
    # 0 (OpenAI's legacy scoring form, older lm-evaluation-harness): with echo, the prompt alone.
    max_tokens: int | None = Field(16, ge=0, le=INT32_MAX, description="most tokens generated; 0 with echo: "
                                   "none, the prompt (and its logprobs) alone")
    logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS,
                                 description="return each output token's log-probability and that many alternatives")
    echo: bool | None = Field(False, description="the prompt before the completion: in the text and, with logprobs, its "
                                          "tokens' logprobs too (the first token's null)")
    prompt_logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS,
                                        description="extension (vLLM): each prompt token's logprob and that many "
                                                    "alternatives, as the choice's prompt_logprobs (the first null)")
    refused_unless: ClassVar[dict[str, tuple]] = {k: v for k, v in REFUSED_UNLESS.items()
                                                  if k not in ("echo", "prompt_logprobs")}

    @model_validator(mode="after")
    def _scoring_only(self):
        if self.max_tokens == 0 and not self.echo:
            raise ValueError("max_tokens 0 generates nothing: it is for echo (scoring the prompt); send at least 1")
        if self.max_tokens == 0 and self.stream:
            raise ValueError("max_tokens 0 (the echoed prompt alone) is answered whole: send stream false")
        return self

    @property
    def prompt_only(self) -> bool:
        """Echo of the prompt alone: one token is generated (the pipeline's least) and left out."""
        return self.max_tokens == 0

    def logprobs_k(self) -> int | None:
        return self.logprobs

    def prompt_logprobs_k(self) -> int | None:
        """How many alternatives per prompt token the scheduler computes (None: it scores no prompt):
        prompt_logprobs's, echo's with logprobs, or none for echo of prompt ids (their text is wanted)."""
        wanted = [k for k in (self.prompt_logprobs, self.logprobs if self.echo else None) if k is not None]
        if wanted:
            return max(wanted)
        return 0 if self.echo and any("input_ids" in p for p in self.prompts()) else None

    def sampling_params(self) -> SamplingParams:
        params = super().sampling_params()
        k = self.prompt_logprobs_k()
        return params if k is None else replace(params, prompt_logprobs=k)

    def max_new_tokens(self) -> int | None:
        return 1 if self.prompt_only else self.max_tokens

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
    token_logprobs: list[float | None]  # None: an echoed prompt's first token
    top_logprobs: list[dict[str, float] | None]
    text_offset: list[int]


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: Literal["stop", "length"] | None
    # vLLM's: per prompt token, {token id: {logprob, decoded_token}} for it and its alternatives (the first None).
    prompt_logprobs: list[dict[str, Any] | None] | None = None


class CompletionResponse(BaseModel):
    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage
