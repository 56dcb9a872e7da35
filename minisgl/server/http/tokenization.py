"""/tokenize and /detokenize (vLLM's and SGLang's extension routes): the server's own tokenizer
and chat template, so a client can count tokens exactly as a request would be counted.

Both are bounded (--max-tokenize-bytes, --max-detokenize-tokens: a chat's size is its text as the
template renders it, tool-call arguments and tool definitions included) and run on one thread of
their own, one request at a time, their replies encoded there too: never on the event loop (a
multi-megabyte prompt there froze every route, the probes included), never in the loop's default
executor (which the supervisor uses). Each counts as in flight while it runs, as a generation does:
a drain waits for it, and one still running when the server ends what is left gets the same 503."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated

import orjson
from fastapi import APIRouter
from fastapi.responses import Response
from pydantic import Field

from ..args import load_chat_template
from .chat_protocol import ChatMessage, Tool
from .deps import ApiDeps, check_utf8
from .protocol import APIError, StrictBody, TokenId


class TokenizePrompt(StrictBody):
    """Text, tokenized as /v1/completions would."""

    model: str | None = None
    prompt: str
    add_special_tokens: bool = True


class TokenizeChat(StrictBody):
    """A chat, rendered with the chat template as /v1/chat/completions would."""

    model: str | None = None
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    add_generation_prompt: bool = True
    chat_template_kwargs: dict | None = None
    tools: list[Tool] | None = None


class DetokenizeRequest(StrictBody):
    model: str | None = None
    tokens: list[TokenId]


def router(deps: ApiDeps) -> APIRouter:
    api = APIRouter()
    args = deps.args
    executor = ThreadPoolExecutor(1, thread_name_prefix="tokenize")

    async def off_loop(fn, *fn_args):
        """fn(*fn_args) on the tokenize thread; a 503 once the server ends what is in flight."""
        work = asyncio.get_running_loop().run_in_executor(executor, fn, *fn_args)
        while not (await asyncio.wait([work], timeout=0.05))[0]:
            if deps.client.closed:  # the thread cannot be stopped; its result is dropped
                raise APIError(503, deps.client.closed, code="service_unavailable", headers={"Retry-After": "5"})
        return work.result()

    @contextlib.contextmanager
    def in_flight():
        """Counted with the generations in flight (FrontendClient.in_flight), which a drain waits for."""
        deps.client.created(1)
        try:
            yield
        finally:
            deps.client.created(-1)

    @functools.cache
    def tokenizer():
        from transformers import AutoTokenizer

        from minisgl.demo.model import demo_model_dir

        tok = AutoTokenizer.from_pretrained(args.model or demo_model_dir())
        template = load_chat_template(args.chat_template)
        if template:
            tok.chat_template = template
        return tok

    def json_reply(value) -> bytes:
        return orjson.dumps(value)

    @api.post("/tokenize", tags=["extensions"])
    async def tokenize(body: TokenizePrompt | TokenizeChat):
        deps.check_serving(body.model)
        with in_flight():
            return await _tokenize(body)

    async def _tokenize(body: TokenizePrompt | TokenizeChat):
        from minisgl.tokenizer.chat_template import encode_chat_text, render_chat_text
        from minisgl.tokenizer.prompt_bound import prompt_bytes

        tok = await off_loop(tokenizer)  # loaded once
        if isinstance(body, TokenizePrompt):
            param, text = "prompt", body.prompt
            encode = functools.partial(tok.encode, add_special_tokens=body.add_special_tokens)
        else:
            messages = [m.as_template_input() for m in body.messages]
            options = {"add_generation_prompt": body.add_generation_prompt, "kwargs": body.chat_template_kwargs or {},
                       "tools": [t.model_dump(exclude_none=True) for t in body.tools] if body.tools else None}
            try:
                text = await off_loop(render_chat_text, tok, messages, options)
            except APIError:
                raise
            except Exception as e:  # noqa: BLE001 - a template that cannot render this chat is the request's problem
                raise APIError(400, f"cannot render the chat: {e}", param="messages") from None
            param, encode = "messages", functools.partial(encode_chat_text, tok)
        check_utf8(param, text)
        size = prompt_bytes(text)
        if size > args.max_tokenize_bytes:
            raise APIError(400, f"{param} is {size} bytes; /tokenize takes at most {args.max_tokenize_bytes} "
                                "(--max-tokenize-bytes)", param=param, code="request_too_large")
        ids = await off_loop(encode, text)
        return Response(await off_loop(json_reply, {"tokens": ids, "count": len(ids)}), media_type="application/json")

    @api.post("/detokenize", tags=["extensions"])
    async def detokenize(body: DetokenizeRequest):
        deps.check_serving(body.model)
        if len(body.tokens) > args.max_detokenize_tokens:
            raise APIError(400, f"{len(body.tokens)} token ids; /detokenize takes at most {args.max_detokenize_tokens} "
                                "(--max-detokenize-tokens)", param="tokens", code="request_too_large")
        with in_flight():
            tok = await off_loop(tokenizer)
            if any(t >= len(tok) for t in body.tokens):
                raise APIError(400, f"token ids must be below the vocabulary size {len(tok)}", param="tokens")
            return {"prompt": await off_loop(tok.decode, body.tokens)}

    return api
