"""The online benchmark's client: streaming OpenAI requests read as raw server-sent events, spread
over several processes, so the client is never what limits a measurement.

No SDK objects per chunk: each `data:` line is parsed once with orjson and only the text, the
usage and an error are read from it. Requests are dealt round-robin to `processes` worker
processes (each its own event loop and aiohttp session); they start together at one monotonic
instant (CLOCK_MONOTONIC is system-wide on Linux, so offsets agree across processes) and send
each request at its arrival offset. `benchmark/online/client_ceiling.py` measures how many
events per second this client can take in, against a server that streams canned chunks.

Output tokens are counted from the final usage chunk when the server sends one, otherwise one per
chunk that carries text (`tokens_from` says which), and a request that came back with fewer tokens
than it asked for is counted as short.
"""

from __future__ import annotations

import asyncio
import gc
import multiprocessing as mp
import queue
import time
from dataclasses import dataclass, field

import orjson

from minisgl.utils.gc_freeze import freeze_startup_objects

# Words for chat prompts: about one token each in common tokenizers, so input lengths stay close.
CHAT_WORDS = tuple((
    "the of and to in is it that for on with as was at by be this from or have not are but what all "
    "were when we there can an your which their said if will each about how up out them then she many "
    "some so these would other into has more her two like him see time could no make than first been").split())


def chat_words(model_root: str | None, limit: int = 4096) -> tuple[str, ...]:
    """Words the served model's tokenizer reads as distinct single tokens, for chat prompts. The
    English words above are, in real tokenizers; the synthetic tokenizer of dummy-weight benchmark
    models (t<i>) reads them all as its unknown token, which would make every chat prompt the same
    and every later burst a prefix-cache hit, so there its own tokens are used."""
    if model_root is None:
        return CHAT_WORDS
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(model_root)
    except Exception:  # not a local model directory (a Hub id the client cannot read): the defaults
        return CHAT_WORDS
    if len({tuple(tok.encode(" " + w, add_special_tokens=False)) for w in CHAT_WORDS}) == len(CHAT_WORDS):
        return CHAT_WORDS
    words = (tok.decode([i]).strip() for i in range(1, min(tok.vocab_size, limit + 1)))
    own = tuple(w for w in words if w and len(tok.encode(" " + w, add_special_tokens=False)) == 1)
    return own or CHAT_WORDS


@dataclass
class BenchRequest:
    prompt_ids: list[int]
    max_tokens: int | None  # None: sent without max_tokens or ignore_eos, as default clients send
    arrival_s: float = 0.0  # offset from the start of the run
    model: str | None = None  # the request's own model field (one of several LoRA adapters); None: the target's
    fields: dict | None = None  # more body fields (seed, stop_token_ids, priority, ...)


@dataclass
class RequestResult:
    ok: bool
    prompt_len: int
    max_tokens: int | None
    start: float = 0.0  # time.monotonic()
    end: float = 0.0
    ttft: float | None = None
    itl: list[float] = field(default_factory=list)
    prompt_tokens: int = 0
    output_tokens: int = 0
    chunks: int = 0  # events that carried text
    tokens_from: str = "chunks"  # "usage" when the server reported usage
    error: str | None = None

    @property
    def latency(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class Target:
    """Where and how to send: one OpenAI-compatible server."""

    base_url: str  # without /v1
    model: str
    api: str = "completions"  # or "chat"
    api_key: str | None = None
    temperature: float | None = None
    timeout: float = 600.0
    words: tuple[str, ...] = CHAT_WORDS  # chat prompts are made of these (chat_words)

    def url(self) -> str:
        return self.base_url.rstrip("/") + ("/v1/chat/completions" if self.api == "chat" else "/v1/completions")

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key or 'EMPTY'}", "Content-Type": "application/json"}

    def body(self, req: BenchRequest) -> bytes:
        # max_tokens is honoured by every server; chat also gets its newer name. ignore_eos makes
        # the output length exactly max_tokens where the server supports it.
        body = {"model": req.model or self.model, "stream": True, "stream_options": {"include_usage": True}}
        if req.max_tokens is not None:
            body.update(max_tokens=req.max_tokens, ignore_eos=True)
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.api == "chat":
            body["messages"] = [{"role": "user", "content": chat_text(req.prompt_ids, self.words)}]
            if req.max_tokens is not None:
                body["max_completion_tokens"] = req.max_tokens
        else:
            body["prompt"] = req.prompt_ids
        body.update(req.fields or {})
        return orjson.dumps(body)


def chat_text(ids: list[int], words: tuple[str, ...] = CHAT_WORDS) -> str:
    """A user message of about len(ids) tokens, derived from the ids (for --api chat)."""
    return " ".join(words[i % len(words)] for i in ids)


# --------------------------------------------------------------------------------- one request

def _text_of(event: dict) -> str | None:
    choices = event.get("choices")
    if not choices:
        return None
    c = choices[0]
    delta = c.get("delta")
    return (delta.get("content") or delta.get("reasoning_content")) if delta is not None else c.get("text")


async def send_request(session, target: Target, req: BenchRequest) -> RequestResult:
    """One streaming request; never raises (a failure is a result with ok=False)."""
    import aiohttp

    res = RequestResult(ok=False, prompt_len=len(req.prompt_ids), max_tokens=req.max_tokens)
    usage = None
    res.start = last = time.monotonic()
    try:
        async with session.post(target.url(), data=target.body(req), headers=target.headers(),
                                timeout=aiohttp.ClientTimeout(total=target.timeout)) as resp:
            if resp.status != 200:
                raise RuntimeError(f"HTTP {resp.status}: {(await resp.text())[:200]}")
            async for line in resp.content:
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    break
                event = orjson.loads(payload)
                if "error" in event:
                    raise RuntimeError(f"error event: {str(event['error'])[:200]}")
                if event.get("usage"):
                    usage = event["usage"]
                if _text_of(event):
                    now = time.monotonic()
                    if res.chunks == 0:
                        res.ttft = now - res.start
                    else:
                        res.itl.append(now - last)
                    last = now
                    res.chunks += 1
        res.ok = True
    except Exception as e:  # noqa: BLE001 - any failure is counted, the run goes on
        res.error = f"{type(e).__name__}: {str(e)[:200] or 'no message'}"
    res.end = time.monotonic()
    if usage:
        res.prompt_tokens, res.output_tokens, res.tokens_from = usage["prompt_tokens"], usage["completion_tokens"], "usage"
    else:
        res.prompt_tokens, res.output_tokens = len(req.prompt_ids), res.chunks
    if res.ok and res.ttft is None:  # no text at all: the first token came with the end
        res.ttft = res.latency
    return res


# ----------------------------------------------------------------------- one client process

async def _drive(target: Target, reqs: list[tuple[int, BenchRequest]], start_at: float, max_concurrency: int | None,
                 on_done) -> list[tuple[int, RequestResult]]:
    import aiohttp

    sem = asyncio.Semaphore(max_concurrency) if max_concurrency else None
    connector = aiohttp.TCPConnector(limit=0)  # no cap on connections: the arrival process decides

    async def one(i: int, req: BenchRequest) -> tuple[int, RequestResult]:
        delay = start_at + req.arrival_s - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        if sem:
            async with sem:
                res = await send_request(session, target, req)
        else:
            res = await send_request(session, target, req)
        on_done(res)
        return i, res

    async with aiohttp.ClientSession(connector=connector) as session:
        return list(await asyncio.gather(*(one(i, r) for i, r in reqs)))


def _use_uvloop() -> None:
    try:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass


def _client_process(target: Target, reqs: list[tuple[int, BenchRequest]], max_concurrency: int | None,
                    go, start_at, out) -> None:
    """One client process: report ready, wait for `go`, send its share from `start_at.value`."""
    _use_uvloop()
    # No garbage-collector pauses while measuring: a full collection of this process's objects
    # takes tens of milliseconds or more under load, which lands on every request in flight here as
    # server latency. Refcounting frees almost everything; the few cycles are collected after the run.
    freeze_startup_objects()
    gc.disable()
    out.put(("ready", None))
    go.wait()
    try:
        results = asyncio.run(_drive(target, reqs, start_at.value, max_concurrency,
                                     lambda r: out.put(("done", r.error))))
    finally:
        gc.enable()
    out.put(("results", results))


def run_requests(target: Target, reqs: list[BenchRequest], processes: int = 1, max_concurrency: int | None = None,
                 desc: str = "", progress: bool = True) -> tuple[list[RequestResult], float, int]:
    """Send each request at its arrival offset from `processes` client processes; returns
    (results in request order, wall seconds from the first send to the last completion, peak
    requests in flight). `max_concurrency` is split evenly between the processes."""
    from tqdm.auto import tqdm

    processes = max(1, min(processes, len(reqs)))
    ctx = mp.get_context("spawn")
    out, go, start_at = ctx.Queue(), ctx.Event(), ctx.Value("d", 0.0)
    per_proc = -(-max_concurrency // processes) if max_concurrency else None
    shares = [[(i, r) for i, r in enumerate(reqs) if i % processes == k] for k in range(processes)]
    procs = [ctx.Process(target=_client_process, args=(target, share, per_proc, go, start_at, out), daemon=True)
             for share in shares]
    for p in procs:
        p.start()
    bar = tqdm(total=len(reqs), desc=desc, unit="req", disable=not progress, dynamic_ncols=True)
    results: list[RequestResult | None] = [None] * len(reqs)
    try:
        ready = 0
        while ready < processes:
            kind, _ = _get(out, procs)
            ready += kind == "ready"
        start_at.value = time.monotonic() + 0.05  # every process starts its clock at this instant
        go.set()
        finished = 0
        while finished < processes:
            kind, value = _get(out, procs)
            if kind == "done":
                bar.update(1)
                if value:
                    bar.set_postfix_str(f"failed: {value[:60]}")
            elif kind == "results":
                finished += 1
                for i, r in value:
                    results[i] = r
    finally:
        bar.close()
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.kill()
    done = [r for r in results if r is not None]
    end = max((r.end for r in done), default=start_at.value)
    return done, end - start_at.value, peak_in_flight(done)


def _get(out: mp.Queue, procs: list) -> tuple[str, object]:
    while True:
        try:
            return out.get(timeout=1.0)
        except queue.Empty:
            dead = [p for p in procs if p.exitcode not in (None, 0)]
            if dead:
                raise RuntimeError(f"benchmark client process exited with {dead[0].exitcode}") from None


def peak_in_flight(results: list[RequestResult]) -> int:
    events = sorted([(r.start, 1) for r in results] + [(r.end, -1) for r in results])
    peak = cur = 0
    for _, step in events:
        cur += step
        peak = max(peak, cur)
    return peak
