"""Chaos scenarios against a running server, sized by their arguments: CI runs them
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
    disconnects after a few events. Returns the outcome counts. A client that will leave asks for ten
    times `max_tokens`: a slow client gets several tokens in one event, and it must not reach the end
    before its cut."""
    async def main():
        limits = httpx.Limits(max_connections=concurrency)
        gate = asyncio.Semaphore(concurrency)
        async with httpx.AsyncClient(timeout=300, limits=limits) as client:
            async def one(i: int) -> str:
                cut_after = 3 + i % 5 if i % cancel_every == 0 else None
                body = {"prompt": [5 + i % 200, 6, 7, 8 + i % 50], "ignore_eos": True,
                        "max_tokens": max_tokens if cut_after is None else 10 * max_tokens}
                async with gate:
                    return await _stream(client, url, body, cut_after)
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


def deep_schema(depth: int) -> dict:
    """A JSON schema of objects nested `depth` deep (24 KB at 450)."""
    schema: dict = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    return schema


def hostile_mixed_load(url: str, api_key: str | None, seconds: float, idle_sockets: int, tokenize_bytes: int,
                       schema_depth: int, flood: int, probe_timeout: float = 1.0) -> dict:
    """The hostile mixed load, all at once for `seconds`: `idle_sockets` connections held open (each
    reopened when the server closes it), one /tokenize of `tokenize_bytes`, one chat constrained by
    a `schema_depth`-deep schema, and `flood` unauthenticated /health_generate loops. Meanwhile
    /health is asked every 0.2 s with a `probe_timeout` limit and authenticated chats are sent one
    after another. Returns what the probes and the clients saw."""
    host, port = url.removeprefix("http://").split(":")
    auth = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    out: dict = {"health": [], "chats": [], "tokenize": None, "deep_schema": None, "flood_answers": 0}
    stop = asyncio.Event()

    async def hold_sockets():
        socks: list[socket.socket] = []
        while not stop.is_set():
            socks = [s for s in socks if s.fileno() != -1 and not _closed(s)]
            while len(socks) < idle_sockets:
                socks.append(socket.create_connection((host, int(port)), timeout=5))
            await asyncio.sleep(0.5)
        for s in socks:
            s.close()

    async def probe(client: httpx.AsyncClient):
        while not stop.is_set():
            t = time.monotonic()
            try:
                status = (await client.get(url + "/health", timeout=probe_timeout)).status_code
            except httpx.HTTPError as e:
                status = type(e).__name__
            out["health"].append((status, time.monotonic() - t))
            await asyncio.sleep(0.2)

    async def paying_client(client: httpx.AsyncClient):
        while not stop.is_set():
            try:
                resp = await client.post(url + "/v1/chat/completions", json=chat, headers=auth, timeout=60)
                out["chats"].append(resp.status_code)
            except httpx.HTTPError as e:
                out["chats"].append(type(e).__name__)

    async def health_generate_flood(client: httpx.AsyncClient):
        while not stop.is_set():
            try:
                await client.get(url + "/health_generate", timeout=30)
                out["flood_answers"] += 1
            except httpx.HTTPError:
                pass

    async def one(client: httpx.AsyncClient, key: str, path: str, body: dict):
        await asyncio.sleep(2)  # into the attack: the idle sockets are open by then
        t = time.monotonic()
        try:
            resp = await client.post(url + path, json=body, headers=auth, timeout=300)
            out[key] = {"status": resp.status_code, "seconds": time.monotonic() - t,
                        "error": resp.json().get("error") if resp.status_code != 200 else None}
        except httpx.HTTPError as e:
            out[key] = {"status": type(e).__name__, "seconds": time.monotonic() - t}

    async def main():
        # Separate clients: the probe's and the paying client's connections are their own. The probe
        # opens a connection a probe, as the kubelet does: a kept-alive one idle past the server's grace
        # may be closed to make room for another just as the next probe goes out on it (a client retries
        # that; the kubelet never meets it).
        async with httpx.AsyncClient(limits=httpx.Limits(max_keepalive_connections=0)) as probes, \
                httpx.AsyncClient() as payer, \
                httpx.AsyncClient(limits=httpx.Limits(max_connections=flood + 4)) as hostile:
            tasks = [asyncio.create_task(c) for c in (
                hold_sockets(), probe(probes), paying_client(payer),
                one(hostile, "tokenize", "/tokenize", {"prompt": "ab " * (tokenize_bytes // 3)}),
                one(hostile, "deep_schema", "/v1/chat/completions", {**chat, "response_format": {
                    "type": "json_schema", "json_schema": {"name": "deep", "schema": deep_schema(schema_depth)}}}),
                *(health_generate_flood(hostile) for _ in range(flood)))]
            await asyncio.sleep(seconds)
            stop.set()
            await asyncio.wait(tasks, timeout=60)
            for t in tasks:
                t.cancel()

    asyncio.run(main())
    health = out.pop("health")
    chats = out.pop("chats")
    statuses = [str(s) for s, _ in health]
    out.update(health_probes=len(health), health_not_200=sum(s != 200 for s, _ in health),
               health_statuses={k: statuses.count(k) for k in sorted(set(statuses))},
               slowest_health_s=max((d for _, d in health), default=None),
               chats={k: list(map(str, chats)).count(k) for k in sorted(set(map(str, chats)))})
    return out


def _closed(sock: socket.socket) -> bool:
    """Whether the server has closed `sock` (then it is closed here too)."""
    sock.setblocking(False)
    try:
        closed = sock.recv(4096) == b""
    except BlockingIOError:
        closed = False
    except OSError:
        closed = True
    finally:
        if sock.fileno() != -1:
            sock.setblocking(True)
    if closed:
        sock.close()
    return closed
