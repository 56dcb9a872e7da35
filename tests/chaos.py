"""Chaos scenarios against a running server (issue 21), sized by their arguments: CI runs them
small (tests/benchmark/test_chaos.py, tests/server/test_connections.py), `benchmark/online/chaos.py`
runs them big. Test support, so it lives under tests/, not in the package.

Each returns plain numbers (JSON-ready): what the clients saw, and the resident memory of every
server process sampled along the way, so a leak shows as growth per request.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import time
from collections.abc import Callable

import httpx
import psutil


def worker_pids(server_pid: int, log: str) -> dict[str, int]:
    """The server's processes by name: 'api' and each worker the launcher logged starting."""
    pids = {"api": server_pid}
    pids.update({name: int(pid) for name, pid in re.findall(r"started worker (\S+) \(pid (\d+)\)", log)})
    return pids


def rss(pids: dict[str, int]) -> dict[str, int]:
    """Resident set size of each process, in bytes."""
    return {name: psutil.Process(pid).memory_info().rss for name, pid in pids.items()}


def kv_pages_used(url: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(url + "/metrics", timeout=10).text
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == "minisgl_kv_cache_used_pages")


async def _stream(client: httpx.AsyncClient, url: str, body: dict, cut_after: int | None) -> str:
    """One streamed completion: 'done' at [DONE], 'cut' when the client leaves after `cut_after`
    events, else what went wrong."""
    try:
        async with client.stream("POST", url + "/v1/completions", json={**body, "stream": True}) as resp:
            if resp.status_code != 200:
                return f"status {resp.status_code}"
            events = 0
            async for line in resp.aiter_lines():
                if line == "data: [DONE]":
                    return "done"
                if line.startswith("data: "):
                    events += 1
                    if cut_after is not None and events >= cut_after:
                        return "cut"
            return "truncated"
    except httpx.HTTPError as e:
        return f"error {type(e).__name__}"


def load_with_cancels(url: str, streams: int, cancel_every: int = 2, max_tokens: int = 64,
                      concurrency: int = 256) -> dict:
    """`streams` streamed completions, `concurrency` at a time; every `cancel_every`-th client
    disconnects after a few events. Returns the outcome counts."""
    async def main():
        limits = httpx.Limits(max_connections=concurrency)
        gate = asyncio.Semaphore(concurrency)
        async with httpx.AsyncClient(timeout=300, limits=limits) as client:
            async def one(i: int) -> str:
                body = {"prompt": [5 + i % 200, 6, 7, 8 + i % 50], "max_tokens": max_tokens, "ignore_eos": True}
                async with gate:
                    return await _stream(client, url, body, 3 + i % 5 if i % cancel_every == 0 else None)
            return await asyncio.gather(*(one(i) for i in range(streams)))

    outcomes = asyncio.run(main())
    return {k: outcomes.count(k) for k in sorted(set(outcomes))}


def soak(url: str, pids: dict[str, int], requests: int, concurrency: int = 16, samples: int = 20,
         prompt: Callable[[int], str] = lambda i: f"request {i}: tell me about number {i * 7919}",
         progress: Callable[[str], None] | None = None) -> dict:
    """`requests` completions with unique prompts, `concurrency` at a time; every process's RSS
    sampled `samples` times. Returns {"samples": [{"done": n, "rss": {name: bytes}}], "failed": n}."""
    every = max(1, requests // samples)
    out = {"samples": [{"done": 0, "rss": rss(pids)}], "failed": 0}

    async def main():
        done = 0
        gate = asyncio.Semaphore(concurrency)
        async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=concurrency)) as client:
            async def one(i: int) -> None:
                nonlocal done
                async with gate:
                    resp = await client.post(url + "/v1/completions",
                                             json={"prompt": prompt(i), "max_tokens": 4, "temperature": 0})
                out["failed"] += resp.status_code != 200
                done += 1
                if done % every == 0:
                    out["samples"].append({"done": done, "rss": rss(pids)})
                    if progress:
                        progress(f"soak: {done}/{requests} requests, RSS MB "
                                 + ", ".join(f"{k} {v / 2**20:.0f}" for k, v in out["samples"][-1]["rss"].items()))
            await asyncio.gather(*(one(i) for i in range(requests)))

    asyncio.run(main())
    return out


def growth_per_request(samples: list[dict], name: str, skip: float = 0.5) -> float:
    """Bytes of RSS per request of process `name`, fitted (least squares) over the samples after
    the first `skip` fraction (warm-up: caches, allocator pools and pages touched once)."""
    points = [(s["done"], s["rss"][name]) for s in samples]
    points = points[int(len(points) * skip):]
    n = len(points)
    mx, my = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    var = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / var if var else 0.0


def slowloris(url: str, connections: int, seconds: float, byte_every_s: float = 0.5) -> dict:
    """`connections` clients each send a request head one byte every `byte_every_s`, for up to
    `seconds`; /health is timed meanwhile. Returns how many the server cut and when, and the
    slowest /health answer."""
    host, port = url.removeprefix("http://").split(":")
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 10_000
    socks = [socket.create_connection((host, int(port)), timeout=10) for _ in range(connections)]
    start, cut_at, sent, slowest_health, health_failures = time.monotonic(), {}, 0, 0.0, 0
    while time.monotonic() - start < seconds and len(cut_at) < connections:
        for i, s in enumerate(socks):
            if i in cut_at:
                continue
            try:
                s.send(head[sent:sent + 1])
                s.setblocking(False)
                try:
                    closed = s.recv(4096) == b""
                except BlockingIOError:
                    closed = False
                finally:
                    s.setblocking(True)
            except OSError:  # reset or broken pipe: the server closed it
                closed = True
            if closed:
                cut_at[i] = time.monotonic() - start
        t = time.monotonic()
        try:
            health_failures += httpx.get(url + "/health", timeout=10).status_code != 200
        except httpx.HTTPError:
            health_failures += 1
        slowest_health = max(slowest_health, time.monotonic() - t)
        sent += 1
        time.sleep(byte_every_s)
    for s in socks:
        s.close()
    return {"connections": connections, "cut": len(cut_at), "cut_after_s": sorted(cut_at.values()),
            "slowest_health_s": slowest_health, "health_failures": health_failures}


def issue_21_request(url: str, pids: dict[str, int], stop_chars: int = 2_000_000) -> dict:
    """The issue's reproduction: 16 prompts x n=16 with four long stop strings (7.6 MB at the
    issue's 2,000,000 characters). Returns the status, the error, and each process's RSS growth
    right after and 5 s later."""
    body = {"prompt": ["hi"] * 16, "n": 16, "max_tokens": 8, "stop": ["q" * stop_chars] * 4}
    before = rss(pids)
    resp = httpx.post(url + "/v1/completions", content=json.dumps(body), timeout=300,
                      headers={"Content-Type": "application/json"})
    after = rss(pids)
    time.sleep(5)
    later = rss(pids)
    return {"status": resp.status_code, "error": resp.json().get("error") if resp.status_code != 200 else None,
            "rss_growth": {k: after[k] - before[k] for k in pids},
            "rss_growth_5s_later": {k: later[k] - before[k] for k in pids}}
