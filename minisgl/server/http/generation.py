"""Serving a generation request, the same way for /v1/chat/completions, /v1/completions and
/v1/responses: its choices run concurrently (Generation), their first replies decide the HTTP
status, then the replies become one JSON response or server-sent events. What the chat and
completions spell differently is their shape's (response_shapes.py)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass, field

import orjson
from fastapi import Request
from fastapi.responses import JSONResponse, StreamingResponse

from minisgl.message import Reply

from ..runtime.frontend import UNAVAILABLE, FrontendClient
from .deps import Admitted
from .jobs import Job, with_client
from .protocol import error_body, error_response
from .response_shapes import ResponseShape


@dataclass
class Choice:
    index: int
    prompt_index: int
    text: str = ""
    completion_tokens: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0  # of prompt_tokens, those the prefix cache held
    stop: str | None = None  # the stop string that ended it
    finish_reason: str | None = None
    error: str | None = None  # why it failed, with finish_reason error or unavailable
    logprobs: list = field(default_factory=list)  # Reply.logprobs entries of every token so far
    prompt_logprobs: list | None = None  # Reply.prompt_logprobs, when the request scores its prompt


@dataclass
class Generation:
    """Every choice of one API request (prompts x n), generated concurrently."""

    client: FrontendClient
    jobs: list[Job]
    choices: list[Choice] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.choices = [Choice(i, job.prompt_index) for i, job in enumerate(self.jobs)]
        # Counted as in flight from now on, so the pending-request limit sees them before they start.
        self.unstarted = len(self.jobs)
        self.client.created(self.unstarted)
        self.streams = [self._counted(self.client.generate(job.params, **job.generate_kwargs())) for job in self.jobs]

    async def _counted(self, stream: AsyncIterator[Reply]) -> AsyncIterator[Reply]:
        self.unstarted -= 1
        self.client.created(-1)  # the stream registers its queue in this same step, at its first anext
        async with aclosing(stream):  # its own cleanup (abort) runs when this one closes, not at GC
            async for reply in stream:
                yield reply

    def forget_unstarted(self) -> None:
        """Streams that never ran (the request failed or was cancelled first) stop counting."""
        self.client.created(-self.unstarted)
        self.unstarted = 0

    async def first_replies(self) -> list[Reply] | JSONResponse:
        """Wait for each choice's first reply; an error there becomes the HTTP error response."""
        firsts = await asyncio.gather(*(anext(s) for s in self.streams))
        ended = next((r for r in firsts if r.finish_reason == UNAVAILABLE), None)
        bad = next((r for r in firsts if r.finish_reason == "error"), None)
        if ended is not None or bad is not None:
            await self.close()
        if ended is not None:
            return unavailable(ended.error)
        if bad is not None:
            lora = next((job.params.lora for job in self.jobs if job.params.lora), None)
            if lora is not None and (bad.error or "").startswith(f"unknown LoRA adapter {lora!r}"):
                # Unloaded between the API's check and the scheduler's: as unknown as one never loaded.
                return error_response(404, f"the model '{lora}' does not exist (its LoRA adapter was unloaded)",
                                      param="model", code="model_not_found")
            return error_response(400, bad.error or "request failed", code="invalid_request")
        return firsts

    def _take(self, i: int, reply: Reply) -> Choice:
        choice = self.choices[i]
        choice.text += reply.text
        choice.completion_tokens = reply.completion_tokens
        choice.prompt_tokens = reply.prompt_tokens or choice.prompt_tokens
        choice.cached_tokens = reply.cached_tokens or choice.cached_tokens
        choice.stop = reply.stop or choice.stop
        choice.finish_reason = reply.finish_reason
        choice.error = reply.error or choice.error
        if reply.logprobs:
            choice.logprobs += reply.logprobs
        if reply.prompt_logprobs is not None:
            choice.prompt_logprobs = reply.prompt_logprobs
        return choice

    async def replies(self, firsts: list[Reply]) -> AsyncIterator[tuple[Choice, Reply]]:
        """All replies of all choices, in arrival order. Every stream is closed at the end, also one
        whose first reply was its last (left suspended, it would count as in flight until garbage
        collection: a drain would wait for it)."""
        if len(self.streams) == 1:  # the common case: no tasks, no queue between stream and client
            try:
                yield self._take(0, firsts[0]), firsts[0]
                if firsts[0].finish_reason is None:
                    async for reply in self.streams[0]:
                        yield self._take(0, reply), reply
            finally:
                await self.close()
            return
        queue: asyncio.Queue = asyncio.Queue()

        async def pump(i: int) -> None:
            try:
                await queue.put((i, firsts[i]))
                if firsts[i].finish_reason is None:
                    async for r in self.streams[i]:
                        await queue.put((i, r))
            finally:
                await queue.put((i, None))

        tasks = [asyncio.create_task(pump(i)) for i in range(len(self.streams))]
        try:
            open_streams = len(tasks)
            while open_streams:
                i, reply = await queue.get()
                if reply is None:
                    open_streams -= 1
                    continue
                yield self._take(i, reply), reply
        finally:
            for t in tasks:
                t.cancel()  # a disconnect lands here: each stream's own cleanup aborts its request
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.close()

    async def close(self) -> None:
        for s in self.streams:
            await s.aclose()

    def usage(self) -> dict:
        prompts = {c.prompt_index: c.prompt_tokens for c in self.choices}
        # A prompt counts once however many choices it has; of it, what the least lucky choice found cached.
        cached = {i: min(c.cached_tokens for c in self.choices if c.prompt_index == i) for i in prompts}
        prompt, completion = sum(prompts.values()), sum(c.completion_tokens for c in self.choices)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
                "prompt_tokens_details": {"cached_tokens": sum(cached.values())}}


def unavailable(reason: str | None) -> JSONResponse:
    """The server ended the request (draining, a worker died): a retryable server error."""
    return error_response(503, reason or "the server cannot finish this request", code="service_unavailable",
                          headers={"Retry-After": "5"})


def stream_failure(reply: Reply) -> tuple[str, str]:
    """The code and message that end a stream the server could not finish (the reply ended in
    error, or unavailable: draining, a worker gone)."""
    code = "service_unavailable" if reply.finish_reason == UNAVAILABLE else "generation_error"
    return code, reply.error or "generation failed"


def _error_event(reply: Reply) -> bytes:
    """The event that ends a stream the server could not finish; `[DONE]` still follows it."""
    code, message = stream_failure(reply)
    return sse(error_body(message, "server_error", code=code))


def sse_response(events: AsyncIterator[bytes]) -> StreamingResponse:
    """Server-sent events, uncached and unbuffered by proxies (nginx's X-Accel-Buffering)."""
    return StreamingResponse(events, media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


# Characters JSON leaves raw that line-splitting SSE clients (httpx's aiter_lines, Python's
# str.splitlines) take for line ends (as UTF-8): escaped, they cannot cut an event in two.
_LINE_BREAKING = ((b"\xc2\x85", b"\\u0085"), (b"\xe2\x80\xa8", b"\\u2028"), (b"\xe2\x80\xa9", b"\\u2029"))


def sse(obj: dict | str) -> bytes:
    """One server-sent event. orjson is the hot path's encoder (about 10x the json module); text
    it refuses (a lone surrogate in an error message) falls back to ASCII-escaped JSON."""
    if isinstance(obj, str):
        return b"data: " + obj.encode() + b"\n\n"
    try:
        data = orjson.dumps(obj)
    except TypeError:
        data = json.dumps(obj).encode()
    for raw, escaped in _LINE_BREAKING:
        if raw in data:
            data = data.replace(raw, escaped)
    return b"data: " + data + b"\n\n"


async def _watch_disconnect(request: Request, work: asyncio.Task) -> bool:
    """Cancel `work` once the client has closed its connection; True if it did."""
    while not work.done():
        if await request.is_disconnected():
            work.cancel()
            return True
        await asyncio.sleep(0.5)
    return False


async def start_generation(client: FrontendClient, jobs: list[Job], request: Request
                           ) -> tuple[Generation, list[Reply] | JSONResponse]:
    """A Generation of `jobs` with every choice's first reply, or the error response that ended it.
    A client that leaves before its first replies (queued, or its grammar compiling) aborts its
    requests, so that work stops too. The jobs carry the client's address: its grammar compiles
    take turns with other clients' (minisgl.constrained.fair_queue)."""
    gen = Generation(client, with_client(jobs, request.client.host if request.client else ""))
    firsts = asyncio.create_task(gen.first_replies())
    watcher = asyncio.create_task(_watch_disconnect(request, firsts))
    try:
        return gen, await firsts
    except asyncio.CancelledError:
        if not (watcher.done() and not watcher.cancelled() and watcher.result()):
            raise  # this handler itself was cancelled (the server's exit), not left by its client
        await gen.close()
        return gen, _client_closed()
    finally:
        watcher.cancel()
        gen.forget_unstarted()


STREAM_HEAD_AFTER_S = 1.0  # a stream's first replies are awaited this long before its head is sent


async def stream_generation(client: FrontendClient, jobs: list[Job], request: Request,
                            events: Callable[[Generation, list[Reply]], AsyncIterator[bytes]]
                            ) -> StreamingResponse | JSONResponse:
    """A streamed generation's response. Its first replies are awaited for STREAM_HEAD_AFTER_S at
    most, so a request refused by then (a bad grammar, a full queue) still gets its HTTP error
    status; one still queued or compiling then gets its head (200) and, while it waits, the
    keep-alive comments of a silent stream (middleware.SseKeepAlive), never seconds of silence a
    client or proxy takes for a dead server; an error after that ends the stream as an event."""
    start = asyncio.create_task(start_generation(client, jobs, request))
    done, _ = await asyncio.wait({start}, timeout=STREAM_HEAD_AFTER_S)
    if done:
        gen, firsts = start.result()
        return firsts if isinstance(firsts, JSONResponse) else sse_response(events(gen, firsts))

    async def late() -> AsyncIterator[bytes]:
        gen, firsts = await start  # a client that leaves meanwhile cancels this, and the wait with it
        if isinstance(firsts, JSONResponse):
            if firsts.status_code == 499:
                return  # nobody is reading
            message = json.loads(firsts.body)["error"]["message"]
            reason = UNAVAILABLE if firsts.status_code == 503 else "error"
            firsts = [Reply(i, "", 0, reason, message) for i in range(len(gen.streams))]
        async for chunk in events(gen, firsts):
            yield chunk

    return sse_response(late())


def _client_closed() -> JSONResponse:
    # Nobody reads this: the client closed the connection. 499 (nginx's "client closed
    # request") only keeps logs and middleware from counting it as a bad request or a fault.
    return error_response(499, "the client closed the connection before the response", code="client_closed")


async def finished_choices(gen: Generation, firsts: list[Reply], request: Request) -> list[Choice] | JSONResponse:
    """Every choice run to its end, or the error response when one could not be: the client left
    (499), the server ended it (503) or it failed (500)."""
    choices = await _collect(gen, firsts, request)
    if choices is None:
        return _client_closed()
    ended = next((c for c in choices if c.finish_reason == UNAVAILABLE), None)
    if ended is not None:
        return unavailable(ended.error)
    if any(c.finish_reason == "error" for c in choices):
        return error_response(500, "generation failed", code="generation_error")
    return choices


async def _collect(gen: Generation, firsts: list[Reply], request: Request) -> list[Choice] | None:
    async def drain():
        async for _ in gen.replies(firsts):
            pass

    work = asyncio.create_task(drain())
    watcher = asyncio.create_task(_watch_disconnect(request, work))
    try:
        await work
    except asyncio.CancelledError:
        if watcher.done() and not watcher.cancelled() and watcher.result():
            return None
        raise  # this handler itself was cancelled (the server's exit), not left by its client
    finally:
        watcher.cancel()
    return gen.choices


async def serve_one_choice(client: FrontendClient, jobs: list[Job], request: Request, stream: bool,
                           events: Callable[[Generation, list[Reply]], AsyncIterator[bytes]],
                           whole: Callable[[Generation, Choice], dict]):
    """How the Responses and Messages APIs answer their one choice: with `stream`, server-sent
    `events` of their own API as the replies come, else the `whole` response once it has ended."""
    if stream:
        return await stream_generation(client, jobs, request, events)
    gen, firsts = await start_generation(client, jobs, request)
    if isinstance(firsts, JSONResponse):
        return firsts
    choices = await finished_choices(gen, firsts, request)
    if isinstance(choices, JSONResponse):
        return choices
    return JSONResponse(whole(gen, choices[0]))


async def serve_generation(shape: ResponseShape, admitted: Admitted, client: FrontendClient, request: Request):
    """Run the request's jobs (its choices) and answer in `shape`: one JSON response, or with
    body.stream server-sent events as the replies come."""
    body, model = admitted.body, admitted.model
    rid, created = shape.new_id(), int(time.time())

    if not body.stream:
        gen, firsts = await start_generation(client, admitted.jobs, request)
        if isinstance(firsts, JSONResponse):
            return firsts
        choices = await finished_choices(gen, firsts, request)
        if isinstance(choices, JSONResponse):
            return choices
        return JSONResponse(shape.body(rid, created, model, choices, gen.usage(), body.logprobs_k() is not None))

    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    chunk_base = {"id": rid, "object": shape.chunk_object, "created": created, "model": model}

    def chunk(choices: list[dict]) -> dict:
        return {**chunk_base, "choices": choices, **({"usage": None} if include_usage else {})}

    async def events(gen: Generation, firsts: list[Reply]) -> AsyncIterator[bytes]:
        streams = [shape.stream(c.index, c.prompt_index) for c in gen.choices]
        for stream in streams:
            for event in stream.opening():
                yield sse(chunk([event]))
        async for choice, reply in gen.replies(firsts):
            if reply.finish_reason in ("error", UNAVAILABLE):
                yield _error_event(reply)
                continue
            if not reply.text and not reply.logprobs and reply.prompt_logprobs is None and reply.finish_reason is None:
                continue
            for event in streams[choice.index].events(reply):
                yield sse(chunk([event]))
        if include_usage:
            yield sse({**chunk_base, "choices": [], "usage": gen.usage()})
        yield sse("[DONE]")

    return await stream_generation(client, admitted.jobs, request, events)

