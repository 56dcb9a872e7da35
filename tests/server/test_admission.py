"""Real clients send no max_tokens: the server admits them on what they need now, not on the whole
context each could reach, so a pool of 32,768 tokens runs dozens of default streams at once on the
4,096-token demo model, where reserving the context ran 8; the request's priority field is served."""

from __future__ import annotations

import asyncio
import time

import httpx
import openai
import pytest

from tests.server.serving import ServerProcess, metric, wait_for

pytestmark = pytest.mark.slow  # starts the server: out of the fast loop


@pytest.fixture(scope="module")
def demo():
    srv = ServerProcess("--num-pages", "2048", "--scheduling-policy", "priority").wait_ready(300)
    yield srv
    assert srv.stop() == 0


def test_64_default_openai_streams_run_at_once_on_the_demo(demo):
    """The official openai client, no max_tokens: at least 48 of 64 streams are running within 10 s."""

    async def run() -> int:
        client = openai.AsyncOpenAI(base_url=demo.url + "/v1", api_key="unused", max_retries=0)
        started = asyncio.Event()
        streams = []

        async def one(i: int) -> None:
            stream = await client.chat.completions.create(  # ignore_eos: the demo answers in a few tokens
                model="minisgl-demo", messages=[{"role": "user", "content": f"story {i}"}], stream=True,
                extra_body={"ignore_eos": True})
            streams.append(stream)
            async for _ in stream:
                started.set()

        tasks = [asyncio.create_task(one(i)) for i in range(64)]
        try:
            deadline, most = time.monotonic() + 10, 0
            while time.monotonic() < deadline and most < 48:
                await asyncio.sleep(0.25)
                most = max(most, int(await asyncio.to_thread(metric, demo, "minisgl_num_requests_running")))
            return most
        finally:
            for t in tasks:
                t.cancel()  # the streams close: every request is aborted and its pages freed
            await asyncio.gather(*tasks, return_exceptions=True)
            await client.close()

    most = asyncio.run(run())
    assert most >= 48, f"only {most} of 64 default streams ran at once"
    wait_for(lambda: metric(demo, "minisgl_num_requests_running") == 0
             and metric(demo, "minisgl_kv_cache_used_pages") == 0, timeout=60, what="the aborted streams freed")


def test_priority_is_a_request_field(demo):
    client = openai.OpenAI(base_url=demo.url + "/v1", api_key="unused")
    reply = client.completions.create(model="minisgl-demo", prompt="hi", max_tokens=3, extra_body={"priority": -7})
    assert reply.choices[0].finish_reason in ("length", "stop")
    bad = httpx.post(demo.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 3, "priority": "high"})
    assert bad.status_code == 400 and "priority" in bad.text
    assert metric(demo, "minisgl_num_preemptions_total") == 0
