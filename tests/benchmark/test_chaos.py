"""The chaos scenarios (tests/chaos.py) at CI size, against the real server
on a tiny model: load with cancels, a soak with every process's RSS sampled, slowloris, an
8 GB request, and the hostile mixed load (idle sockets beyond the cap, a huge /tokenize, a
deep schema and an unauthenticated /health_generate flood at once). `benchmark/online/chaos.py`
runs the same scenarios big."""

from __future__ import annotations

import httpx
import pytest

from tests import chaos
from tests.server.serving import ServerProcess, tiny_qwen3_server, wait_for

pytestmark = pytest.mark.slow  # starts the server or worker processes: out of the fast loop (tests/test_tiers.py)

ARGS = ["--dtype", "float32", "--page-size", "4", "--num-pages", "4096", "--max-seq-len", "256",
        "--max-running-requests", "128", "--header-timeout", "2"]
MB = 2**20


model_dir, server, client = tiny_qwen3_server(*ARGS)


@pytest.fixture(scope="module")
def pids(server):
    return chaos.worker_pids(server.proc.pid, server.output())


def test_load_with_cancels_leaks_no_kv_page_and_the_server_still_answers(server):
    """Half of the streams are cut after 3-7 events, mid-decode in a batch with the others, and
    new ones are admitted as they go: two rounds of 24 at a time (benchmark/online/chaos.py runs it big)."""
    outcomes = chaos.load_with_cancels(server.url, streams=48, cancel_every=2, max_tokens=24, concurrency=24)
    assert outcomes == {"cut": 24, "done": 24}, outcomes
    wait_for(lambda: chaos.kv_pages_used(server.url) == 0, what="cancelled streams to give their KV pages back")
    ok = httpx.post(server.url + "/v1/completions", json={"prompt": "after the storm", "max_tokens": 4}, timeout=60)
    assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 4


def test_issue_21_request_is_refused_and_no_process_grows(server, pids):
    """Four 2,000,000-character stop strings on 16 prompts x n=16 (a 7.6 MB body) once raised the
    workers' RSS by 2-2.7 GB each: now a 400 naming `stop`, refused in the API process alone."""
    result = chaos.issue_21_request(server.url, pids)
    assert result["status"] == 400 and result["error"]["param"].startswith("stop"), result
    for name, grown in result["rss_growth_5s_later"].items():
        assert grown < (150 if name == "api" else 20) * MB, (name, grown / MB)


def test_largest_allowed_fan_out_is_not_copied_per_choice_into_every_process(server, pids):
    """The same request at the largest size allowed (stop strings of 1024 characters, 256
    choices) is served, and no worker holds per-choice copies of it afterwards."""
    result = chaos.issue_21_request(server.url, pids, stop_chars=1024)
    assert result["status"] == 200, result
    for name, grown in result["rss_growth_5s_later"].items():
        assert grown < 30 * MB, (name, grown / MB)


def test_soak_with_unique_prompts_levels_off_in_every_process(server, pids):
    """800 unique requests with every process's RSS sampled. The scheduler's prefix cache keeps
    host structures for its cached pages until the pool is full (bounded: see
    tests/kvcache/test_radix_cache.py for the bytes per token); no process may keep anything per
    request beyond that. At this size RSS moves by a few MB on its own, so the check is the
    second half's total growth, which a per-request copy of the parameters would blow through."""
    result = chaos.soak(server.url, pids, requests=800, concurrency=16, samples=16)
    assert result["failed"] == 0
    half = result["samples"][len(result["samples"]) // 2]
    last = result["samples"][-1]
    grown = {name: (last["rss"][name] - half["rss"][name]) / MB for name in pids}
    assert all(g < 16 for g in grown.values()), {k: f"{v:.1f} MB" for k, v in grown.items()}


def test_hostile_mixed_load_fails_no_probe_and_starves_no_paying_client(model_dir):
    """The hostile mixed load for 20 s on a server capped at 40 connections, with an API key: 70
    idle sockets (30 beyond the cap, reopened as they are cut), a 2 MB /tokenize (over
    --max-tokenize-bytes: refused), a 450-deep schema and 10 unauthenticated /health_generate
    loops. /health answers 200 every time and every authenticated chat is served."""
    srv = ServerProcess("--model", model_dir, *ARGS, "--max-connections", "40",
                        env={"MINISGL_API_KEY": "k"}).wait_ready()
    try:
        result = chaos.hostile_mixed_load(srv.url, "k", seconds=20, idle_sockets=70, tokenize_bytes=2 * MB,
                                          schema_depth=450, flood=10, probe_timeout=10)
        assert result["health_probes"] > 0 and result["health_not_200"] == 0, (result["health_statuses"], result)
        assert result["chats"] and set(result["chats"]) == {"200"}, result
        assert result["tokenize"]["status"] == 400, result
        assert result["flood_answers"] > 0, result
        assert srv.proc.poll() is None
    finally:
        assert srv.stop() == 0
