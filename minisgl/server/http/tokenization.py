"""/tokenize and /detokenize (vLLM's and SGLang's extension routes): the server's own tokenizer
and chat template, so a client can count tokens exactly as a request would be counted."""

from __future__ import annotations

import asyncio
import functools
from typing import Annotated

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from ..args import load_chat_template
from .deps import ApiDeps
from .protocol import APIError, ChatMessage, TokenId, Tool


class TokenizePrompt(BaseModel):
    """Text, tokenized as /v1/completions would."""

    model_config = ConfigDict(strict=True, extra="forbid")

    model: str | None = None
    prompt: str
    add_special_tokens: bool = True


class TokenizeChat(BaseModel):
    """A chat, rendered with the chat template as /v1/chat/completions would."""

    model_config = ConfigDict(strict=True, extra="forbid")

    model: str | None = None
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    add_generation_prompt: bool = True
    chat_template_kwargs: dict | None = None
    tools: list[Tool] | None = None


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    model: str | None = None
    tokens: list[TokenId]


def router(deps: ApiDeps) -> APIRouter:
    api = APIRouter()
    args = deps.args

    @functools.cache
    def tokenizer():
        from transformers import AutoTokenizer

        from minisgl.models.demo import demo_model_dir

        tok = AutoTokenizer.from_pretrained(args.model or demo_model_dir())
        template = load_chat_template(args.chat_template)
        if template:
            tok.chat_template = template
        return tok

    @api.post("/tokenize", tags=["extensions"])
    async def tokenize(body: TokenizePrompt | TokenizeChat):
        from minisgl.tokenizer.chat_template import render_chat

        deps.check_serving(body.model)
        tok = await asyncio.to_thread(tokenizer)  # loaded once, off the event loop
        if isinstance(body, TokenizePrompt):
            ids = tok.encode(body.prompt, add_special_tokens=body.add_special_tokens)
        else:
            options = {"add_generation_prompt": body.add_generation_prompt, "kwargs": body.chat_template_kwargs or {},
                       "tools": [t.model_dump(exclude_none=True) for t in body.tools] if body.tools else None}
            try:
                ids = render_chat(tok, [m.as_template_input() for m in body.messages], options)
            except Exception as e:  # noqa: BLE001 - a template that cannot render this chat is the request's problem
                raise APIError(400, f"cannot render the chat: {e}", param="messages") from None
        return {"tokens": ids, "count": len(ids)}

    @api.post("/detokenize", tags=["extensions"])
    async def detokenize(body: DetokenizeRequest):
        deps.check_serving(body.model)
        tok = await asyncio.to_thread(tokenizer)
        if any(t >= len(tok) for t in body.tokens):
            raise APIError(400, f"token ids must be below the vocabulary size {len(tok)}", param="tokens")
        return {"prompt": tok.decode(body.tokens)}

    return api
