"""The ASGI middleware around the app, on a real Starlette app served in-process: a quiet event
stream gets keep-alive comments (so proxies with idle timeouts keep it open), other responses are
passed through untouched."""

from __future__ import annotations

import asyncio

import httpx
from starlette.applications import Starlette
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from minisgl.server.http.middleware import SseKeepAlive


async def _slow_events(request):
    async def events():
        yield b"data: first\n\n"
        await asyncio.sleep(1.0)  # a long scheduler step: nothing to send
        yield b"data: second\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")


async def _slow_json(request):
    await asyncio.sleep(0.6)
    return JSONResponse({"ok": True})


APP = SseKeepAlive(Starlette(routes=[Route("/events", _slow_events), Route("/json", _slow_json)]), interval=0.2)


def _get(path: str) -> httpx.Response:
    async def main():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=APP), base_url="http://test") as client:
            return await client.get(path)

    return asyncio.run(main())


def test_a_silent_event_stream_gets_keep_alive_comments_between_its_events():
    body = _get("/events").text
    first, rest = body.split("data: first\n\n")
    assert first == ""
    between, last = rest.split("data: second\n\n")
    assert last == ""
    assert between and between.replace(": keep-alive\n\n", "") == ""  # only whole comment lines, at least one


def test_other_responses_are_not_touched():
    resp = _get("/json")
    assert resp.json() == {"ok": True} and "keep-alive" not in resp.text
