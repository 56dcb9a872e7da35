"""/metrics, end to end: a real server driven with the openai client, scraped by `promtool check
metrics` and by a real Prometheus server, whose numbers must equal what the clients received; the
chart's alert rules and Grafana dashboard checked against both. ServerMetrics itself is also
tested in-process, for what a live server cannot show on demand (a scheduler restart)."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import httpx
import openai
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from transformers import AutoConfig

from minisgl.message import Reply, SchedulerStatsMsg
from minisgl.server.http.metrics import FINISHED_REASONS, PREFIX, ServerMetrics
from tests.server.serving import ServerProcess, free_port, tiny_qwen3_server

REPO = Path(__file__).resolve().parents[2]
FILES = REPO / "charts" / "minisgl-operator" / "files"
ALERTS, DASHBOARD = FILES / "alerts.yaml", FILES / "grafana-dashboard.json"
MODEL = "tiny-qwen3"
NUM_PAGES = 512
# At most 2 requests run at once, so a burst of requests queues in the scheduler.
SERVER_ARGS = ["--served-model-name", MODEL, "--dtype", "float32", "--page-size", "4", "--num-pages", str(NUM_PAGES),
               "--max-running-requests", "2", "--max-seq-len", "256"]
# The names the issue, vLLM-style dashboards and the operator's HPA (WAITING_REQUESTS_METRIC) rely on.
REQUIRED = {
    "minisgl_time_to_first_token_seconds": "histogram",
    "minisgl_inter_token_latency_seconds": "histogram",
    "minisgl_e2e_request_latency_seconds": "histogram",
    "minisgl_request_queue_time_seconds": "histogram",
    "minisgl_prompt_tokens": "counter",
    "minisgl_generation_tokens": "counter",
    "minisgl_request_success": "counter",
    "minisgl_prefix_cache_queries": "counter",
    "minisgl_prefix_cache_hits": "counter",
    "minisgl_num_preemptions": "counter",
    "minisgl_spec_decode_num_draft_tokens": "counter",
    "minisgl_spec_decode_num_accepted_tokens": "counter",
    "minisgl_spec_decode_draft_acceptance_rate": "gauge",
    "minisgl_request_prompt_tokens": "histogram",
    "minisgl_request_generation_tokens": "histogram",
    "minisgl_request_decode_time_seconds": "histogram",
    "minisgl_num_requests_running": "gauge",
    "minisgl_num_requests_waiting": "gauge",
    "minisgl_kv_cache_usage_ratio": "gauge",
    "minisgl_kv_cache_pages": "gauge",
    "minisgl_model_info": "gauge",  # prometheus_client's Info: `# TYPE ..._info gauge` in the text format
    "minisgl_cache_config_info": "gauge",  # the endpoint picker's prefix scorer reads its labels
}
METRIC_NAME = re.compile(r"\bminisgl_[a-z0-9_]+")


def tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} is missing: run tests/tools/observability.sh (Debian's prometheus package)"
    return path


def parse(text: str) -> dict[str, list]:
    """Family name -> its samples, from an exposition."""
    return {f.name: f for f in text_string_to_metric_families(text)}


def value(families: dict, sample_name: str, **labels: str) -> float:
    family = re.sub(r"_(total|count|sum|bucket)$", "", sample_name)
    found = [s.value for s in families[family].samples if s.name == sample_name and labels.items() <= s.labels.items()]
    assert len(found) == 1, f"{sample_name}{labels}: {found}"
    return found[0]


def scrape(server: ServerProcess) -> str:
    resp = httpx.get(server.url + "/metrics", timeout=10)
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain")
    return resp.text


def sample_names(text: str) -> set[str]:
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


def dashboard_queries() -> list[str]:
    def targets(panels):
        for p in panels:
            yield from (t["expr"] for t in p.get("targets", []))
            yield from targets(p.get("panels", []))  # panels inside rows

    dash = json.loads(DASHBOARD.read_text())
    variables = [v["definition"] for v in dash["templating"]["list"] if v["type"] == "query"]
    return list(targets(dash["panels"])) + variables


def rule_queries() -> list[str]:
    return [r["expr"] for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]]


# -- a live server ------------------------------------------------------------------------------


class Prometheus:
    """A real Prometheus on a loopback port, scraping `target` every second, with the chart's rules."""

    def __init__(self, tmp: Path, target: str):
        self.url = f"http://127.0.0.1:{free_port()}"
        config = tmp / "prometheus.yml"
        config.write_text(yaml.safe_dump({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(ALERTS)],
            "scrape_configs": [{"job_name": "minisgl", "static_configs": [{"targets": [target]}]}],
        }))
        self.log = (tmp / "prometheus.log").open("w+")
        self.proc = subprocess.Popen(
            [tool("prometheus"), f"--config.file={config}", f"--storage.tsdb.path={tmp / 'data'}",
             f"--web.listen-address={self.url.removeprefix('http://')}", "--log.level=warn"],
            stdout=self.log, stderr=subprocess.STDOUT)
        self.wait(lambda: httpx.get(self.url + "/-/ready", timeout=1).status_code == 200, "Prometheus ready")
        self.wait(lambda: [t["health"] for t in self.api("targets")["activeTargets"]] == ["up"], "target up")

    def api(self, path: str, **params) -> dict:
        body = httpx.get(f"{self.url}/api/v1/{path}", params=params, timeout=10).json()
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict]:
        return self.api("query", query=expr)["result"]

    def scalar(self, expr: str) -> float | None:
        result = self.query(expr)
        return float(result[0]["value"][1]) if result else None

    def wait(self, ready, what: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.log.seek(0)
                raise RuntimeError(f"prometheus exited {self.proc.returncode}:\n{self.log.read()}")
            try:
                if ready():
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        raise TimeoutError(f"waited {timeout}s for {what}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def prometheus_fixture():
    """A module-scoped fixture `prometheus`: a real Prometheus scraping the module's `server`.
    A test module takes it as `prometheus = prometheus_fixture()`."""

    @pytest.fixture(scope="module")
    def prometheus(server, tmp_path_factory):
        prom = Prometheus(tmp_path_factory.mktemp("prometheus"), server.url.removeprefix("http://"))
        yield prom
        prom.stop()

    return prometheus


model_dir, server, client = tiny_qwen3_server(*SERVER_ARGS)
prometheus = prometheus_fixture()


SHARED = "You are a helpful assistant. Answer in one short sentence, and never use more words than needed. "


@pytest.fixture(scope="module")
def traffic(server, prometheus):
    """N requests of every kind, 8 at once on a server that runs 2 at a time: completions and chat,
    streamed and not, sharing a long prompt prefix. Returns (N, tokens the clients received)."""
    client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="unused")
    common = {"model": MODEL, "temperature": 0, "extra_body": {"ignore_eos": True}}

    async def completion(i: int) -> int:
        resp = await client.completions.create(prompt=SHARED + f"Question {i}: why?", max_tokens=16 + i, **common)
        return resp.usage.completion_tokens

    async def streamed_chat(i: int) -> int:
        stream = await client.chat.completions.create(
            messages=[{"role": "user", "content": SHARED + f"Question {i}."}], max_tokens=16 + i, stream=True,
            stream_options={"include_usage": True}, **common)
        return [c async for c in stream][-1].usage.completion_tokens

    async def run() -> list[int]:
        jobs = [completion(i) if i % 2 else streamed_chat(i) for i in range(8)]
        tokens = await asyncio.gather(*jobs)
        tokens.append(await completion(8))  # once the prefix is cached for sure
        return tokens

    tokens = asyncio.run(run())
    assert all(t > 0 for t in tokens)
    return len(tokens), sum(tokens)


# -- the tests ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_prometheus_reports_exactly_what_the_clients_received(traffic, prometheus):
    n, tokens = traffic
    prometheus.wait(lambda: prometheus.scalar("sum(minisgl_generation_tokens_total)") == tokens
                    and prometheus.scalar("sum(minisgl_time_to_first_token_seconds_count)") == n,
                    f"{tokens} generation tokens and {n} first tokens in Prometheus")
    assert prometheus.scalar('sum(minisgl_request_success_total{finished_reason="length"})') == n
    assert prometheus.scalar("sum(minisgl_e2e_request_latency_seconds_count)") == n
    # One gap between consecutive tokens of each request.
    assert prometheus.scalar("sum(minisgl_inter_token_latency_seconds_count)") == tokens - n
    prometheus.wait(lambda: prometheus.scalar("sum(minisgl_request_queue_time_seconds_count)") == n,
                    "a queue time for every request")


@pytest.mark.slow
def test_promtool_finds_no_problem_in_a_scrape_after_traffic(server, traffic):
    text = scrape(server)
    out = subprocess.run([tool("promtool"), "check", "metrics"], input=text, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and not (out.stdout + out.stderr).strip(), out.stdout + out.stderr


@pytest.mark.slow
def test_names_types_and_labels_follow_prometheus_conventions(server, traffic):
    families = parse(scrape(server))
    for name, kind in REQUIRED.items():
        assert families[name].type == kind, name
    for family in families.values():
        if not family.name.startswith(PREFIX):
            assert family.name.startswith(("process_", "python_")), family.name  # the client library's own
            continue
        assert family.documentation, f"{family.name} has no help text"
        assert ("_seconds" in family.name) <= (family.type == "histogram"), f"{family.name}: time in seconds"
        if family.type == "histogram":  # of seconds or of tokens per request
            assert family.name.endswith(("_seconds", "_tokens")), family.name
        for s in family.samples:
            # Bounded labels only: the model, a finish reason, a histogram bucket, a loaded LoRA
            # adapter's name; the info metric carries the configuration, one series per server.
            allowed = (set(s.labels) if family.name.endswith("_info")
                       else {"model_name", "finished_reason", "le", "lora_name"})
            assert set(s.labels) <= allowed and s.labels["model_name"] == MODEL, s
            if family.type == "counter":
                assert s.name == family.name + "_total"
    reasons = {s.labels["finished_reason"] for s in families["minisgl_request_success"].samples}
    assert reasons == set(FINISHED_REASONS)


@pytest.mark.slow
def test_scheduler_values_reach_the_api_process(server, traffic, tiny_model_dir):
    n, _ = traffic
    families = parse(scrape(server))
    assert value(families, "minisgl_kv_cache_pages") == NUM_PAGES
    assert value(families, "minisgl_num_requests_running") == 0  # all done
    assert value(families, "minisgl_num_requests_waiting") == 0
    assert value(families, "minisgl_kv_cache_used_pages") == 0
    assert value(families, "minisgl_kv_cache_usage_ratio") == 0
    assert value(families, "minisgl_request_queue_time_seconds_count") == n
    # 8 arrived together and at most 2 ran at once: 6 waited for others to generate 16+ tokens.
    quick = value(families, "minisgl_request_queue_time_seconds_bucket", le="0.005")
    assert quick <= n - 6, "requests that had to wait for others show no queue time"
    # Every prompt was looked up in the prefix cache; later ones found the shared part.
    prompt = value(families, "minisgl_prompt_tokens_total")
    assert value(families, "minisgl_prefix_cache_queries_total") == prompt
    assert 0 < value(families, "minisgl_prefix_cache_hits_total") < prompt
    info = next(s.labels for s in families["minisgl_model_info"].samples)
    assert info["model_name"] == MODEL and info["tp"] == "1" and info["dtype"] == "float32"
    # The model was loaded from a local directory: /metrics names it by its served name, not its path.
    assert info["model"] == MODEL and tiny_model_dir("Qwen3ForCausalLM") not in scrape(server)
    assert info["attention_backend"] == "TorchNative" and info["device"] == "cpu" and info["version"]
    cache = next(s.labels for s in families["minisgl_cache_config_info"].samples)
    assert cache == {"model_name": MODEL, "page_size": "4", "num_pages": str(NUM_PAGES)}
    assert value(families, "minisgl_server_ready") == 1


@pytest.mark.slow
def test_load_shows_in_the_gauges_while_requests_run(server, traffic):
    """6 long requests on a server that runs 2 at a time: 2 running, the rest waiting, KV pages in use."""
    body = {"model": MODEL, "prompt": "a long story", "max_tokens": 240, "ignore_eos": True, "stream": True}

    async def run() -> dict[str, float]:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as http:
            async def request():
                async with http.stream("POST", "/v1/completions", json=body) as resp:
                    async for _ in resp.aiter_lines():
                        pass

            tasks = [asyncio.create_task(request()) for _ in range(6)]
            try:
                deadline, seen = time.monotonic() + 30, {}
                while time.monotonic() < deadline:
                    families = parse((await http.get("/metrics")).text)
                    seen = {k: value(families, "minisgl_" + k) for k in
                            ("num_requests_running", "num_requests_waiting", "kv_cache_usage_ratio", "kv_cache_used_pages")}
                    if seen["num_requests_running"] == 2 and seen["num_requests_waiting"] >= 2:
                        break
                    await asyncio.sleep(0.05)
                return seen
            finally:
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

    seen = asyncio.run(run())
    assert seen["num_requests_running"] == 2 and seen["num_requests_waiting"] >= 2, seen
    assert 0 < seen["kv_cache_usage_ratio"] <= 1, seen
    assert seen["kv_cache_used_pages"] == seen["kv_cache_usage_ratio"] * NUM_PAGES, seen


@pytest.mark.slow
def test_alert_rules_pass_promtool_and_load_into_prometheus(prometheus, traffic):
    out = subprocess.run([tool("promtool"), "check", "rules", str(ALERTS)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    prometheus.wait(lambda: all(r.get("lastEvaluation", "").startswith("2") and r["health"] == "ok"
                                for g in prometheus.api("rules")["groups"] for r in g["rules"]),
                    "every alert rule evaluated without error")
    rules = [r for g in prometheus.api("rules")["groups"] for r in g["rules"]]
    assert {r["name"] for r in rules} >= {"MinisglServerDown", "MinisglServerNotReady", "MinisglRequestsQueueing"}
    # A healthy server raises no availability alert. The latency alerts (queue time) follow how fast
    # this machine served the traffic fixture's requests: on 2 busy cores its queue-time p90 passed
    # the threshold; their thresholds are checked on synthetic series in test_alert_rules_fire_as_specified.
    availability = {"MinisglServerDown", "MinisglServerNotReady"}
    assert all(r["state"] == "inactive" for r in rules if r["name"] in availability), rules


@pytest.mark.slow
def test_every_metric_in_the_dashboard_and_rules_exists_in_a_real_scrape(server, traffic):
    exported = sample_names(scrape(server))
    for source, queries in (("dashboard", dashboard_queries()), ("alert rules", rule_queries())):
        used = {name for q in queries for name in METRIC_NAME.findall(q)}
        assert used, source
        assert used <= exported, f"{source} uses metrics the server does not export: {sorted(used - exported)}"


def test_dashboard_shows_what_operators_watch():
    queries = dashboard_queries()
    wanted = {
        "token throughput": r"rate\(minisgl_generation_tokens_total",
        "TTFT percentiles": r"histogram_quantile\(0\.99, .*minisgl_time_to_first_token_seconds_bucket",
        "ITL percentiles": r"histogram_quantile\(0\.99, .*minisgl_inter_token_latency_seconds_bucket",
        "running requests": r"minisgl_num_requests_running",
        "waiting requests": r"minisgl_num_requests_waiting",
        "KV cache usage": r"minisgl_kv_cache_usage_ratio",
        "prefix-cache hit rate": r"minisgl_prefix_cache_hits_total.*/.*minisgl_prefix_cache_queries_total",
    }
    for what, pattern in wanted.items():
        assert any(re.search(pattern, q, re.S) for q in queries), f"the dashboard shows no {what}"


@pytest.mark.slow
def test_every_dashboard_query_returns_data_in_prometheus(prometheus, traffic):
    # Grafana's variables, as Grafana would fill them in.
    fill = {"$__rate_interval": "1m", "$model_name": MODEL}
    for query in dashboard_queries():
        if query.startswith("label_values("):
            metric, label = re.fullmatch(r"label_values\((\w+), (\w+)\)", query).groups()
            assert MODEL in prometheus.api(f"label/{label}/values", **{"match[]": metric})
            continue
        for var, val in fill.items():
            query = query.replace(var, val)
        assert prometheus.query(query), f"no data for {query}"


def test_alert_rules_fire_as_specified():
    """promtool's rule unit tests: synthetic series in, the alerts that must (and must not) fire out."""
    tests = {"rule_files": [str(ALERTS)], "evaluation_interval": "1m", "tests": [
        {  # a server that was up and stopped answering; another target that never was minisgl
            "interval": "1m",
            "input_series": [
                {"series": 'up{job="minisgl", instance="a:1919"}', "values": "1 1 1 0x10"},
                {"series": 'minisgl_server_ready{job="minisgl", instance="a:1919", model_name="m"}', "values": "1 1 1"},
                {"series": 'up{job="node", instance="n:9100"}', "values": "0x13"},
            ],
            "alert_rule_test": [
                {"eval_time": "4m", "alertname": "MinisglServerDown", "exp_alerts": []},  # not for 3m yet
                {"eval_time": "7m", "alertname": "MinisglServerDown", "exp_alerts": [
                    {"exp_labels": {"severity": "critical", "job": "minisgl", "instance": "a:1919"},
                     "exp_annotations": {
                         "summary": "minisgl server a:1919 is down",
                         "description": "Prometheus could not scrape a:1919 (job minisgl) for 3 minutes."}}]},
            ],
        },
        {  # loading for 20 minutes; a queue of 12 for 20 minutes; a queue of 3
            "interval": "1m",
            "input_series": [
                {"series": 'minisgl_server_ready{instance="a", model_name="m"}', "values": "0x20"},
                {"series": 'minisgl_server_ready{instance="b", model_name="m"}', "values": "1x20"},
                {"series": 'minisgl_num_requests_waiting{instance="a", model_name="m"}', "values": "12x20"},
                {"series": 'minisgl_num_requests_waiting{instance="b", model_name="m"}', "values": "3x20"},
            ],
            "alert_rule_test": [
                {"eval_time": "10m", "alertname": "MinisglServerNotReady", "exp_alerts": []},
                {"eval_time": "20m", "alertname": "MinisglServerNotReady", "exp_alerts": [
                    {"exp_labels": {"severity": "warning", "instance": "a", "model_name": "m"},
                     "exp_annotations": {
                         "summary": "minisgl server a (m) is not ready",
                         "description": "a has reported not ready (loading or draining) for 15 minutes."}}]},
                {"eval_time": "20m", "alertname": "MinisglRequestsQueueing", "exp_alerts": [
                    {"exp_labels": {"severity": "warning", "instance": "a", "model_name": "m"},
                     "exp_annotations": {
                         "summary": "Requests are queueing on a (m)",
                         "description": "12.0 requests waited for admission on average over the last 5 minutes."}}]},
            ],
        },
        {  # every request waits 30 s before admission, for 20 minutes
            "interval": "1m",
            "input_series": [
                {"series": f'minisgl_request_queue_time_seconds_bucket{{instance="a", model_name="m", le="{le}"}}',
                 "values": "0+0x20" if le in ("10.0", "15.0", "20.0") else "0+6x20"}
                for le in ("10.0", "15.0", "20.0", "30.0", "+Inf")
            ],
            "alert_rule_test": [
                {"eval_time": "5m", "alertname": "MinisglQueueTimeHigh", "exp_alerts": []},  # not for 10m yet
                {"eval_time": "20m", "alertname": "MinisglQueueTimeHigh", "exp_alerts": [
                    {"exp_labels": {"severity": "warning", "model_name": "m"},
                     "exp_annotations": {
                         "summary": "Requests for m wait long before admission",
                         # all between 20 and 30 s: p90 interpolates to 29 s
                         "description": "The 90th percentile queue time is 29s."}}]},
            ],
        },
    ]}
    out = subprocess.run([tool("promtool"), "test", "rules", "/dev/stdin"], input=yaml.safe_dump(tests),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.slow
def test_finish_reasons_are_counted_as_clients_saw_them(server, traffic, tiny_model_dir):
    def counts() -> dict[str, float]:
        families = parse(scrape(server))
        return {r: value(families, "minisgl_request_success_total", finished_reason=r) for r in FINISHED_REASONS}

    before = counts()
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused")
    # error: rejected by the scheduler (longer than --max-seq-len)
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=MODEL, prompt=[7] * 250, max_tokens=50)
    # stop: every token id is a stop token, so the first one ends it
    vocab = AutoConfig.from_pretrained(tiny_model_dir("Qwen3ForCausalLM")).vocab_size
    stopped = client.completions.create(model=MODEL, prompt="stop", max_tokens=5,
                                        extra_body={"stop_token_ids": list(range(vocab))})
    assert stopped.choices[0].finish_reason == "stop"
    # abort: a streaming client that goes away after the first token
    stream = client.completions.create(model=MODEL, prompt="go on", max_tokens=200, stream=True,
                                       extra_body={"ignore_eos": True})
    next(iter(stream))
    stream.close()

    deadline = time.monotonic() + 10
    while counts()["abort"] == before["abort"] and time.monotonic() < deadline:
        time.sleep(0.1)
    after = counts()
    assert after["error"] - before["error"] == 1
    assert after["abort"] - before["abort"] == 1
    assert after["stop"] - before["stop"] == 1
    assert after["length"] == before["length"]


# -- ServerMetrics in-process ---------------------------------------------------------------------


async def replies(*tokens_and_reasons: tuple[int, str | None], closed: list | None = None):
    try:
        for tokens, reason in tokens_and_reasons:
            await asyncio.sleep(0.01)
            yield Reply(uid=1, text="x", completion_tokens=tokens, finish_reason=reason, prompt_tokens=7)
    finally:
        if closed is not None:
            closed.append(True)


def families_of(m: ServerMetrics) -> dict:
    body, _ = m.exposition()
    return parse(body.decode())


def test_observe_times_and_counts_a_request():
    m = ServerMetrics("m", "org/m")

    async def consume():
        return [r.completion_tokens async for r in m.observe(replies((1, None), (2, None), (4, None), (5, "length")))]

    assert asyncio.run(consume()) == [1, 2, 4, 5]
    f = families_of(m)
    assert value(f, "minisgl_generation_tokens_total") == 5
    assert value(f, "minisgl_prompt_tokens_total") == 7
    assert value(f, "minisgl_time_to_first_token_seconds_count") == 1
    assert value(f, "minisgl_inter_token_latency_seconds_count") == 4  # 2 tokens in one reply: 2 gaps
    assert value(f, "minisgl_e2e_request_latency_seconds_count") == 1
    assert value(f, "minisgl_request_success_total", finished_reason="length") == 1


def test_a_client_that_leaves_early_aborts_the_request_and_counts_as_abort():
    m = ServerMetrics("m", "org/m")
    closed: list = []

    async def leave_after_first():
        stream = m.observe(replies((1, None), (2, None), (3, "length"), closed=closed))
        await anext(stream)
        await stream.aclose()

    asyncio.run(leave_after_first())
    f = families_of(m)
    assert closed == [True], "the request's own stream was not closed, so it was never aborted"
    assert value(f, "minisgl_request_success_total", finished_reason="abort") == 1
    assert value(f, "minisgl_request_success_total", finished_reason="length") == 0
    assert value(f, "minisgl_generation_tokens_total") == 1


def test_scheduler_stats_are_applied_once_and_survive_a_scheduler_restart():
    m = ServerMetrics("m", "org/m")
    m.apply(SchedulerStatsMsg(pid=100, num_running=3, num_waiting=5, used_pages=25, num_pages=100,
                              prefix_queried_tokens=40, prefix_hit_tokens=16, queue_times=[0.5, 2.0],
                              info={"dtype": "bfloat16", "attention_backend": "fa,fi"}))
    m.apply(SchedulerStatsMsg(pid=100, num_running=1, num_waiting=0, used_pages=10, num_pages=100,
                              prefix_queried_tokens=10, prefix_hit_tokens=0, queue_times=[0.1]))
    f = families_of(m)
    assert value(f, "minisgl_prefix_cache_queries_total") == 50  # increments add up, none twice
    assert value(f, "minisgl_prefix_cache_hits_total") == 16
    assert value(f, "minisgl_request_queue_time_seconds_count") == 3
    assert value(f, "minisgl_num_requests_running") == 1 and value(f, "minisgl_num_requests_waiting") == 0
    assert value(f, "minisgl_kv_cache_usage_ratio") == 0.1
    # A new scheduler process (a restart): its counters start at zero, ours keep growing; its gauges win.
    m.apply(SchedulerStatsMsg(pid=200, num_running=0, num_waiting=2, used_pages=0, num_pages=80,
                              prefix_queried_tokens=8, prefix_hit_tokens=0))
    f = families_of(m)
    assert value(f, "minisgl_prefix_cache_queries_total") == 58
    assert value(f, "minisgl_num_requests_waiting") == 2 and value(f, "minisgl_kv_cache_pages") == 80
    info = next(s.labels for s in f["minisgl_model_info"].samples)
    assert info == {"model_name": "m", "model": "org/m", "tp": "1", "version": info["version"], "dtype": "bfloat16",
                    "attention_backend": "fa,fi"}


def test_speculative_decoding_counts_drafted_and_accepted_tokens_and_their_rate():
    m = ServerMetrics("m", "org/m")
    f = families_of(m)
    assert value(f, "minisgl_spec_decode_draft_acceptance_rate") == 0  # no draft yet
    m.apply(SchedulerStatsMsg(pid=1, num_running=1, num_waiting=0, used_pages=1, num_pages=10, draft_tokens=8,
                              accepted_draft_tokens=6))
    m.apply(SchedulerStatsMsg(pid=1, num_running=1, num_waiting=0, used_pages=1, num_pages=10, draft_tokens=4,
                              accepted_draft_tokens=0))
    f = families_of(m)
    assert value(f, "minisgl_spec_decode_num_draft_tokens_total") == 12
    assert value(f, "minisgl_spec_decode_num_accepted_tokens_total") == 6
    assert value(f, "minisgl_spec_decode_draft_acceptance_rate") == 0.5
