"""A server in production meets bad clients, bursts and dying processes: it loses nothing and
stays up. Every test here is bounded in requests and time and talks to loopback only."""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import signal
import subprocess
import time

import httpx
import openai
import psutil
import pytest
import torch
from transformers import AutoTokenizer

from minisgl.core.params import SamplingParams
from minisgl.llm import LLM
from tests.server.serving import ServerProcess, metric, wait_for

pytestmark = pytest.mark.slow  # starts the server or worker processes: out of the fast loop (tests/test_tiers.py)

MODEL = "m"
COMMON = ["--served-model-name", MODEL, "--dtype", "float32", "--page-size", "4"]


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir):
    return tiny_model_dir("Qwen3ForCausalLM")


@pytest.fixture(scope="module")
def server(model_dir):
    srv = ServerProcess("--model", model_dir, *COMMON, "--num-pages", "4096", "--max-seq-len", "256",
                        "--max-running-requests", "128").wait_ready()
    yield srv
    assert srv.stop() == 0


def idle(srv: ServerProcess) -> bool:
    return metric(srv, "minisgl_num_requests_running") == 0 and metric(srv, "minisgl_kv_cache_used_pages") == 0 \
        and metric(srv, "minisgl_num_requests_waiting") == 0


def test_schemathesis_finds_no_server_error_or_schema_violation_and_kills_no_worker(model_dir):
    """Every operation in the server's own OpenAPI schema, through schemathesis' coverage phase
    (each field's boundaries and wrong types) and its fuzzing phase (random valid and invalid
    bodies): no 5xx, no response outside the schema, and afterwards every worker alive and turning
    (/health 200) and nothing left running. Bounded in examples, so it takes a few minutes."""
    st = shutil.which("schemathesis") or pytest.fail("schemathesis is not installed (pip install -e .[test])")
    srv = ServerProcess("--model", model_dir, *COMMON, "--num-pages", "512", "--max-seq-len", "64",
                        "--max-new-tokens", "16").wait_ready()
    try:
        # positive_data_acceptance is left out: a schema-valid request may still be refused with a
        # 400 for reasons no static schema can state (prompt + max_tokens beyond the context). The
        # response-time check that --checks all adds (10 s) gets the request timeout instead: this is
        # not a speed test, and a loaded CI machine's first grammar compile may take longer.
        run = subprocess.run([st, "run", srv.url + "/openapi.json", "--phases", "coverage,fuzzing",
                              "--max-examples", "20", "--checks", "all", "--exclude-checks", "positive_data_acceptance",
                              "--max-response-time", "120", "--request-timeout", "120",
                              "--generation-deterministic", "--workers", "2", "--no-color"],
                             capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stdout[-5000:]
        assert "No issues found" in run.stdout
        assert "Coverage" in run.stdout and "Fuzzing" in run.stdout, run.stdout[-3000:]
        assert srv.proc.poll() is None, "the server died under fuzzing"
        assert httpx.get(srv.url + "/health", timeout=10).status_code == 200, "a worker died or hangs after fuzzing"
        wait_for(lambda: idle(srv), what="no running request and no held KV page after fuzzing")
    finally:
        srv.stop()


def test_256_concurrent_streaming_chats_with_random_lengths(server, model_dir):
    tok = AutoTokenizer.from_pretrained(model_dir)
    rng = random.Random(0)
    jobs = [([{"role": "user", "content": " ".join(rng.choice(["hello", "cache", "page", "tree", "fox"])
                                                      for _ in range(rng.randint(1, 40)))}], rng.randint(1, 48))
            for _ in range(256)]

    async def one(client, messages, max_tokens):
        stream = await client.chat.completions.create(model=MODEL, messages=messages, max_tokens=max_tokens,
                                                      temperature=0.8, stream=True, extra_body={"ignore_eos": True},
                                                      stream_options={"include_usage": True})
        text, usage = "", None
        async for chunk in stream:
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
            usage = chunk.usage or usage
        return usage

    async def main():
        client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="x", timeout=300, max_retries=0)
        return await asyncio.gather(*(one(client, m, n) for m, n in jobs))

    usages = asyncio.run(main())
    for (messages, max_tokens), usage in zip(jobs, usages):
        prompt = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        assert usage.completion_tokens == max_tokens
        assert usage.prompt_tokens == len(prompt["input_ids"] if hasattr(prompt, "keys") else prompt)
    wait_for(lambda: idle(server), what="running requests 0 and KV usage back to idle")
    assert metric(server, "minisgl_kv_cache_usage_ratio") == 0


def test_half_of_64_streams_cut_midway_the_rest_complete_and_no_page_leaks(server):
    async def one(i: int):
        body = {"model": MODEL, "prompt": [5 + i, 6, 7, 8], "max_tokens": 120, "stream": True, "ignore_eos": True,
                "stream_options": {"include_usage": True}}
        async with httpx.AsyncClient(timeout=120) as client:
            async with client.stream("POST", server.url + "/v1/completions", json=body) as resp:
                chunks, usage = 0, None
                async for line in resp.aiter_lines():
                    if line == "data: [DONE]":
                        return "done" if usage and usage["completion_tokens"] == 120 else f"usage {usage}"
                    if line.startswith("data: "):
                        chunks += 1
                        usage = json.loads(line[6:]).get("usage") or usage
                        if i % 2 and chunks == 5:
                            return "cut"
                return "truncated"

    async def main():
        return await asyncio.gather(*(one(i) for i in range(64)))

    results = asyncio.run(main())
    assert results.count("cut") == 32 and results.count("done") == 32
    wait_for(lambda: idle(server), what="aborted streams to give their pages back")
    assert metric(server, 'minisgl_request_success_total') >= 64


def test_tiny_kv_pool_makes_requests_queue_and_outputs_match_an_unpressured_run(model_dir):
    prompts = [[3 + i, 40, 41, 42, 43 + i] * 4 for i in range(24)]
    llm = LLM(model_dir, device="cpu", dtype=torch.float32, num_pages=2048, page_size=4)
    try:
        want = [o["text"] for o in llm.generate(prompts, SamplingParams(temperature=0, max_tokens=40, ignore_eos=True),
                                                use_tqdm=False)]
    finally:
        llm.shutdown()
    # 40 pages of 4 tokens: room for two 60-token requests at a time.
    srv = ServerProcess("--model", model_dir, *COMMON, "--num-pages", "40", "--max-seq-len", "64").wait_ready()
    try:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="x", timeout=300)

        async def main():
            aclient = openai.AsyncOpenAI(base_url=srv.url + "/v1", api_key="x", timeout=300)
            return await asyncio.gather(*(aclient.completions.create(model=MODEL, prompt=p, max_tokens=40, temperature=0,
                                                                     extra_body={"ignore_eos": True}) for p in prompts))

        got = [r.choices[0].text for r in asyncio.run(main())]
        assert got == want
        assert client.completions.create(model=MODEL, prompt="ok", max_tokens=2).usage.completion_tokens == 2
    finally:
        assert srv.stop() == 0


def test_limits_are_flags_with_clear_errors(model_dir):
    srv = ServerProcess("--model", model_dir, *COMMON, "--num-pages", "512", "--max-seq-len", "512",
                        "--max-request-bytes", "2000", "--max-n", "2", "--max-new-tokens", "400",
                        "--max-prompt-tokens", "20", "--max-pending-requests", "2").wait_ready()
    try:
        post = lambda body, **kw: httpx.post(srv.url + "/v1/completions", json=body, timeout=60, **kw)  # noqa: E731
        ok = {"model": MODEL, "prompt": [5, 6, 7], "max_tokens": 3}
        assert post({**ok, "prompt": "x" * 5000}).status_code == 413
        assert post({**ok, "n": 3}).json()["error"]["param"] == "n"
        assert post({**ok, "max_tokens": 401}).json()["error"]["param"] == "max_tokens"
        too_long = post({**ok, "prompt": list(range(3, 30))})
        assert too_long.status_code == 400 and "limit of 20" in too_long.json()["error"]["message"]
        assert post(ok).status_code == 200
        # A request that names no max_tokens gets the rest of the context, at most the limit.
        unnamed = post({**ok, "max_tokens": None, "ignore_eos": True}).json()
        assert unnamed["usage"]["completion_tokens"] == 400

        async def two_long_then_more():
            """Two long streams fill the limit; three more requests meanwhile. Returns the extra
            responses, the long streams' statuses, and whether the extras were all answered
            while both long streams were still open (else the round proves nothing)."""
            loop = asyncio.get_running_loop()
            async with httpx.AsyncClient(timeout=120) as client:
                long_body = {**ok, "max_tokens": 400, "ignore_eos": True, "stream": True}

                async def long_stream():
                    async with client.stream("POST", srv.url + "/v1/completions", json=long_body) as r:
                        async for _ in r.aiter_bytes():
                            pass
                        return r.status_code, loop.time()

                running = [asyncio.create_task(long_stream()) for _ in range(2)]
                for _ in range(300):  # until both are decoding, so the third one finds the limit reached
                    await asyncio.sleep(0.05)
                    if metric(srv, "minisgl_num_requests_running") == 2:
                        break
                extra = await asyncio.gather(*(client.post(srv.url + "/v1/completions", json=ok) for _ in range(3)))
                answered = loop.time()
                finished = await asyncio.gather(*running)
                return extra, [code for code, _ in finished], answered < min(end for _, end in finished)

        for _ in range(5):  # a round where a long stream ended first is inconclusive: try again
            extra, finished, overlapped = asyncio.run(two_long_then_more())
            if overlapped:
                break
        assert overlapped, "the long streams always ended before the extra requests were answered"
        assert all(r.status_code == 429 and r.headers["retry-after"] for r in extra)
        assert all(r.json()["error"]["code"] == "too_many_requests" for r in extra)
        assert finished == [200, 200]
        assert post(ok).status_code == 200  # the slots are free again
    finally:
        assert srv.stop() == 0
    assert "x" * 100 not in srv.output()  # prompts are not logged


def test_sigterm_under_load_finishes_in_flight_refuses_new_and_exits_zero(model_dir):
    srv = ServerProcess("--model", model_dir, *COMMON, "--num-pages", "2048", "--max-seq-len", "1024",
                        "--drain-timeout", "300", env={"MINISGL_LOG_LEVEL": "debug"}).wait_ready()
    tokens = 300

    async def long_request(client):
        return await client.post(srv.url + "/v1/completions", json={"model": MODEL, "prompt": [9, 9, 9],
                                 "max_tokens": tokens, "ignore_eos": True})

    async def main():
        async with httpx.AsyncClient(timeout=360) as client:
            # The scheduler stands still from before the 8 are sent until the late request is
            # refused, so the load cannot end first on a slow machine (free, the tiny model ends it
            # in a blink); at SIGTERM all 8 wait in its queue. Then the drain must run them to their end.
            with srv.stopped("scheduler"):
                in_flight = [asyncio.create_task(long_request(client)) for _ in range(8)]
                await asyncio.to_thread(wait_for, lambda: srv.sent_to_scheduler() == 8, 60, "8 requests sent")
                srv.proc.send_signal(signal.SIGTERM)
                await asyncio.sleep(0.2)
                late = await client.post(srv.url + "/v1/completions", json={"model": MODEL, "prompt": "hi"})
                assert not any(t.done() for t in in_flight)
            return await asyncio.gather(*in_flight), late

    children = psutil.Process(srv.proc.pid).children(recursive=True)
    try:
        finished, late = asyncio.run(main())
        assert late.status_code == 503 and late.headers["retry-after"]
        # Every request in flight at SIGTERM finishes whole.
        assert [(r.status_code, r.json()["usage"]["completion_tokens"]) for r in finished] == [(200, tokens)] * 8
        assert srv.proc.wait(60) == 0
    finally:
        srv.stop()
    _, alive = psutil.wait_procs(children, timeout=10)
    assert not alive


def test_sigkill_of_the_scheduler_fails_health_within_5s_and_leaves_no_orphans(model_dir):
    srv = ServerProcess("--model", model_dir, *COMMON, "--num-pages", "256", "--max-seq-len", "128").wait_ready()
    children = psutil.Process(srv.proc.pid).children(recursive=True)
    psutil.Process(srv.worker_pid("scheduler")).kill()
    start = time.monotonic()

    def health_failed() -> bool:
        try:
            return httpx.get(srv.url + "/health", timeout=1).status_code == 503
        except httpx.HTTPError:
            return True  # nobody listening any more

    try:
        wait_for(health_failed, timeout=5, what="/health to fail")
        assert time.monotonic() - start < 5
        assert srv.proc.wait(30) != 0
        _, alive = psutil.wait_procs(children, timeout=10)
        assert not alive, f"orphans: {alive}"
    finally:
        srv.stop()
