"""The orchestrator's and Prometheus' routes: /health (liveness), /ready (readiness),
/health_generate (one token through the whole pipeline) and /metrics. Open without the API key."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse, Response

from minisgl.core import SamplingParams

from ..args import LIVENESS_PATH, METRICS_PATH, READINESS_PATH
from ..runtime.frontend import UNAVAILABLE
from .deps import ApiDeps

PLAIN_503 = {503: {"content": {"text/plain": {}}}}


def router(deps: ApiDeps) -> APIRouter:
    api = APIRouter()
    state = deps.state

    @api.get(LIVENESS_PATH, tags=["probes"], response_class=PlainTextResponse, responses=PLAIN_503)
    async def health():
        ok = state.healthy
        return PlainTextResponse("ok" if ok else "unhealthy", status_code=200 if ok else 503)

    @api.get(READINESS_PATH, tags=["probes"], response_class=PlainTextResponse, responses=PLAIN_503)
    async def ready():
        ok = state.can_serve
        reason = "ready" if ok else "draining" if state.draining else "loading" if not state.ready else "unhealthy"
        return PlainTextResponse(reason, status_code=200 if ok else 503)

    @api.get("/health_generate", tags=["probes"], response_class=PlainTextResponse, responses=PLAIN_503)
    async def health_generate():
        if not (state.ready and state.healthy):
            return PlainTextResponse("not ready", status_code=503)
        params = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)

        async def one_token():
            async for reply in deps.frontend.generate(params, input_ids=[0]):
                if reply.finish_reason in ("error", UNAVAILABLE):
                    raise RuntimeError(reply.error)

        try:
            await asyncio.wait_for(one_token(), timeout=20)
        except (asyncio.TimeoutError, RuntimeError) as e:
            return PlainTextResponse(f"generation failed: {e!r}", status_code=503)
        return PlainTextResponse("ok")

    @api.get(METRICS_PATH, tags=["monitoring"], response_class=PlainTextResponse)
    async def prometheus_metrics():
        body, content_type = deps.metrics.exposition()
        return Response(body, media_type=content_type)

    return api
