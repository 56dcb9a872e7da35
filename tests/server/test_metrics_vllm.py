"""--metrics-compat vllm, end to end: a real server driven with the openai client and scraped by a
real Prometheus answers every query of vLLM's published example Grafana dashboard (its queries
are kept in data/vllm_grafana_queries.json, with their source) and exports the vLLM series that
dashboards, KEDA scalers and gateways read, with vLLM's names and labels, equal to minisgl's own."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from pathlib import Path

import httpx
import openai
import pytest

from minisgl.server.http.metrics_vllm import RENAMES
from tests.server.serving import ServerProcess, tiny_qwen3_server
from tests.server.test_metrics import parse, prometheus_fixture, scrape, tool, value

pytestmark = pytest.mark.slow  # starts the server or worker processes: out of the fast loop (tests/test_tiers.py)

MODEL = "tiny-qwen3"
# 280 tokens: two requests of 241 outgrow it together (a preemption) unless the second starts more
# than 200 decode steps after the first (at 400 tokens a lag of 82 steps, which a loaded CI runner's
# two HTTP requests can take, left both whole without one).
NUM_PAGES = 70
VLLM_QUERIES = json.loads((Path(__file__).parent / "data" / "vllm_grafana_queries.json").read_text())["queries"]
# The series the issue names, as vLLM spells their samples, and their type there.
VLLM_SERIES = {
    "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:kv_cache_usage_perc": "gauge",
    "vllm:num_preemptions": "counter",
    "vllm:prompt_tokens": "counter",
    "vllm:generation_tokens": "counter",
    "vllm:time_to_first_token_seconds": "histogram",
    "vllm:time_per_output_token_seconds": "histogram",
    "vllm:inter_token_latency_seconds": "histogram",
    "vllm:e2e_request_latency_seconds": "histogram",
    "vllm:request_success": "counter",
    "vllm:lora_requests_info": "gauge",
    "vllm:cache_config_info": "gauge",
}


model_dir, server, client = tiny_qwen3_server(
    "--served-model-name", MODEL, "--dtype", "float32", "--page-size", "4", "--num-pages", str(NUM_PAGES),
    "--max-running-requests", "2", "--max-seq-len", "256", "--decode-reserve-tokens", "16", "--metrics-compat", "vllm")
prometheus = prometheus_fixture()


@pytest.fixture(scope="module")
def traffic(server, prometheus):
    """6 requests, 3 at a time on a server that runs 2: chat and completions, streamed and not.
    Returns (requests, tokens the clients received)."""
    client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="unused")
    common = {"model": MODEL, "temperature": 0, "max_tokens": 12, "extra_body": {"ignore_eos": True}}

    async def one(i: int) -> int:
        if i % 2:
            return (await client.completions.create(prompt=f"Question {i}: why?", **common)).usage.completion_tokens
        stream = await client.chat.completions.create(messages=[{"role": "user", "content": f"Question {i}."}],
                                                      stream=True, stream_options={"include_usage": True}, **common)
        return [c async for c in stream][-1].usage.completion_tokens

    async def run() -> list[int]:
        done: list[int] = []
        for wave in range(2):
            done += await asyncio.gather(*(one(3 * wave + i) for i in range(3)))
        return done

    tokens = asyncio.run(run())
    assert all(t == 12 for t in tokens), tokens
    prometheus.wait(lambda: prometheus.scalar("sum(vllm:generation_tokens_total)") == sum(tokens),
                    "the traffic's tokens in Prometheus")
    return len(tokens), sum(tokens)


def test_every_query_of_vllms_grafana_dashboard_returns_data(prometheus, traffic):
    assert len(VLLM_QUERIES) == 28
    fill = {"$__rate_interval": "1m", "$model_name": MODEL}
    for query in VLLM_QUERIES:
        if query.startswith("label_values("):  # the dashboard's model_name variable, as Grafana asks for it
            selector, label = re.fullmatch(r"label_values\((.+),(\w+)\)", query).groups()
            assert prometheus.api(f"label/{label}/values", **{"match[]": selector}) == [MODEL]
            continue
        for var, val in fill.items():
            query = query.replace(var, val)
        result = prometheus.query(query)
        assert result, f"no data for {query}"
        if "histogram_quantile" not in query:  # a quantile of an idle minute is NaN; the rest are numbers
            assert all(float(r["value"][1]) >= 0 for r in result), (query, result)


def test_vllm_series_equal_minisgls_own(prometheus, traffic):
    n, tokens = traffic
    assert prometheus.scalar(f'sum(vllm:generation_tokens_total{{model_name="{MODEL}"}})') == tokens
    assert prometheus.scalar('sum(vllm:request_success_total{finished_reason="length"})') == n
    assert prometheus.scalar("sum(vllm:e2e_request_latency_seconds_count)") == n
    assert prometheus.scalar("sum(vllm:time_per_output_token_seconds_count)") == tokens - n
    assert prometheus.scalar("sum(vllm:request_generation_tokens_sum)") == tokens
    assert prometheus.scalar("sum(vllm:request_decode_time_seconds_count)") == n


def test_each_vllm_series_is_its_minisgl_series_renamed(server, traffic):
    families = parse(scrape(server))
    for vllm_name, ours in RENAMES.items():
        theirs, mine = families["vllm:" + vllm_name], families["minisgl_" + ours]
        assert theirs.type == mine.type, vllm_name
        assert [(s.name.removeprefix("vllm:" + vllm_name), s.labels, s.value) for s in theirs.samples] == \
            [(s.name.removeprefix("minisgl_" + ours), s.labels, s.value) for s in mine.samples], vllm_name

def test_the_series_autoscalers_and_gateways_read_have_vllms_names_and_labels(server, traffic):
    families = parse(scrape(server))
    for name, kind in VLLM_SERIES.items():
        assert families[name].type == kind, name
    assert value(families, "vllm:num_requests_running", model_name=MODEL) == 0
    assert value(families, "vllm:kv_cache_usage_perc", model_name=MODEL) == 0
    assert value(families, "vllm:num_preemptions_total", model_name=MODEL) == 0
    cache = next(s.labels for s in families["vllm:cache_config_info"].samples)
    assert cache["block_size"] == "4" and cache["num_gpu_blocks"] == str(NUM_PAGES)
    lora = next(s.labels for s in families["vllm:lora_requests_info"].samples)
    assert set(lora) == {"max_lora", "running_lora_adapters", "waiting_lora_adapters"}
    reasons = {s.labels["finished_reason"] for s in families["vllm:request_success"].samples}
    assert {"stop", "length", "abort"} <= reasons


def test_promtool_objects_only_to_the_colon_in_vllms_names(server, traffic):
    """vLLM's names carry a colon, which promtool's lint reserves for recording rules; anything
    else it finds would be a real fault."""
    out = subprocess.run([tool("promtool"), "check", "metrics"], input=scrape(server), capture_output=True, text=True,
                         timeout=60)
    problems = [line for line in (out.stdout + out.stderr).splitlines()
                if line.strip() and not re.fullmatch(r"vllm:\w+ metric names should not contain ':'", line)]
    assert not problems, problems


def test_a_preemption_counts_in_vllm_num_preemptions_total(server, prometheus, traffic):
    """Two requests of 240 tokens, each admitted with 16 reserved, outgrow the 280-token pool
    together: the scheduler preempts one (and resumes it), and vLLM's counter says so."""
    body = {"model": MODEL, "prompt": "x", "max_tokens": 240, "ignore_eos": True}

    async def run() -> list[int]:
        async with httpx.AsyncClient(base_url=server.url, timeout=300) as http:
            replies = await asyncio.gather(*(http.post("/v1/completions", json=body) for _ in range(2)))
        return [r.json()["usage"]["completion_tokens"] for r in replies]

    assert asyncio.run(run()) == [240, 240]  # both whole: a preempted request resumes
    prometheus.wait(lambda: (prometheus.scalar("sum(vllm:num_preemptions_total)") or 0) > 0, "a preemption counted")
    assert prometheus.scalar("sum(vllm:num_preemptions_total)") == prometheus.scalar("sum(minisgl_num_preemptions_total)")


def test_without_the_flag_no_vllm_series_is_exported(tiny_model_dir):
    srv = ServerProcess("--model", tiny_model_dir("Qwen3ForCausalLM"), "--dtype", "float32", "--num-pages", "64",
                        "--max-seq-len", "64").wait_ready()
    try:
        assert "vllm:" not in httpx.get(srv.url + "/metrics", timeout=10).text
    finally:
        assert srv.stop() == 0
