"""The orchestrator's and Prometheus' routes: /health (liveness), /ready (readiness),
/health_generate (one token through the whole pipeline) and /metrics. Open without the API key,
as in vLLM and SGLang, so each is cheap whoever calls it: /health, /ready and /metrics read state
and, as every route the API key does not guard, are never counted toward the connection cap (GET or
HEAD); /health_generate generates at most once
per --health-generate-interval, its callers sharing the answer, and its request is not counted
toward --max-pending-requests, so a flood of it takes no client's slot."""

from __future__ import annotations

import asyncio
import math

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse, Response

from minisgl.core.params import SamplingParams

from ..args import LIVENESS_PATH, METRICS_PATH, READINESS_PATH
from ..runtime.frontend import UNAVAILABLE, FrontendClient
from .deps import ApiDeps

PLAIN_503 = {503: {"content": {"text/plain": {}}}}
PROBE_TIMEOUT_S = 20.0  # /health_generate's token must come back within this


class GenerationProbe:
    """One greedy token through tokenizer, scheduler and detokenizer, at most once per `interval`
    seconds: callers while one runs wait for it, callers within `interval` after it get its answer."""

    def __init__(self, frontend: FrontendClient, interval: float):
        self.frontend, self.interval = frontend, interval
        self.running: asyncio.Task | None = None
        self.answer: str | None = None  # None: the last probe passed; else why it failed
        self.answered_at = -math.inf

    async def check(self) -> str | None:
        """None when a token came through, else why not."""
        loop = asyncio.get_running_loop()
        if loop.time() - self.answered_at < self.interval:
            return self.answer
        if self.running is None:
            self.running = loop.create_task(self._probe())
        return await asyncio.shield(self.running)  # a caller that leaves does not cancel it for the others

    async def _probe(self) -> str | None:
        params = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)

        async def one_token():
            async for reply in self.frontend.generate(params, input_ids=[0], counted=False):
                if reply.finish_reason in ("error", UNAVAILABLE):
                    raise RuntimeError(reply.error)

        try:
            await asyncio.wait_for(one_token(), timeout=PROBE_TIMEOUT_S)
            self.answer = None
        except (asyncio.TimeoutError, RuntimeError) as e:
            self.answer = f"generation failed: {e!r}"
        finally:
            self.answered_at, self.running = asyncio.get_running_loop().time(), None
        return self.answer


def router(deps: ApiDeps) -> APIRouter:
    api = APIRouter()
    state = deps.state
    probe = GenerationProbe(deps.frontend, deps.args.health_generate_interval)

    @api.get(LIVENESS_PATH, tags=["probes"], response_class=PlainTextResponse, responses=PLAIN_503)
    async def health():
        ok = state.healthy
        if ok and deps.metrics.structured_output_down:
            # Still alive (the compile workers are retried by themselves, a restart would not help
            # sooner), but degraded: said for whoever reads it.
            return PlainTextResponse(f"ok; degraded: {deps.metrics.structured_output_down}")
        return PlainTextResponse("ok" if ok else "unhealthy", status_code=200 if ok else 503)

    @api.get(READINESS_PATH, tags=["probes"], response_class=PlainTextResponse, responses=PLAIN_503)
    async def ready():
        ok = state.can_serve
        reason = "ready" if ok else "draining" if state.draining else "loading" if not state.ready else "unhealthy"
        return PlainTextResponse(reason, status_code=200 if ok else 503)

    for path, probe_route in ((LIVENESS_PATH, health), (READINESS_PATH, ready)):  # HEAD: the same status, no body
        api.add_api_route(path, probe_route, methods=["HEAD"], include_in_schema=False)

    @api.get("/health_generate", tags=["probes"], response_class=PlainTextResponse, responses=PLAIN_503)
    async def health_generate():
        if not (state.ready and state.healthy):
            return PlainTextResponse("not ready", status_code=503)
        failed = await probe.check()
        return PlainTextResponse(failed, status_code=503) if failed else PlainTextResponse("ok")

    @api.get(METRICS_PATH, tags=["monitoring"], response_class=PlainTextResponse)
    async def prometheus_metrics():
        body, content_type = deps.metrics.exposition()
        return Response(body, media_type=content_type)

    return api
