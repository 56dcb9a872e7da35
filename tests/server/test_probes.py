"""The probes Kubernetes acts on, on a real server process: /ready takes the pod out of traffic
while the model loads and while it drains after SIGTERM; /health restarts it when a worker is gone
(and stays 200 while loading or draining, or a slow start would be killed); /health_generate
pushes one token through every process. None of them, nor /metrics, needs the API key."""

from __future__ import annotations

import os
import signal
import threading
import time

import httpx
import openai
import pytest

from tests.server.serving import ServerProcess, wait_for

pytestmark = pytest.mark.slow  # starts the server or worker processes: out of the fast loop (tests/test_tiers.py)

MODEL = "tiny-qwen3"
ARGS = ["--served-model-name", MODEL, "--num-pages", "1024", "--max-seq-len", "1024", "--page-size", "4"]


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir):
    return tiny_model_dir("Qwen3ForCausalLM")


def first_answer(srv: ServerProcess, path: str, timeout: float = 60) -> httpx.Response:
    """The first HTTP answer on `path`, polling from the moment the process starts."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert srv.proc.poll() is None, srv.output()
        try:
            return httpx.get(srv.url + path, timeout=5)
        except httpx.TransportError:
            time.sleep(0.02)
    raise TimeoutError(f"no answer on {path} in {timeout}s")


def metric(http: httpx.Client, name: str) -> str:
    """The value of an unlabelled-but-for-the-model series in a scrape, as written."""
    line = next(row for row in http.get("/metrics").text.splitlines() if row.startswith(name + "{"))
    return line.rsplit(" ", 1)[1]


def test_probe_states_from_start_through_drain(model_dir):
    # At debug level the tokenizer logs each request it passes to the scheduler (sent_to_scheduler).
    srv = ServerProcess("--model", model_dir, *ARGS, "--max-running-requests", "1", "--drain-timeout", "120",
                        env={"MINISGL_API_KEY": "k", "MINISGL_LOG_LEVEL": "debug"})
    # One connection pool for every probe: a new httpx client per call builds an SSL context,
    # which on a loaded two-core machine has taken seconds.
    http = httpx.Client(base_url=srv.url, timeout=30)
    try:
        # Loading: not ready, yet alive (a liveness failure here would restart a slow start forever).
        # The scheduler loads as soon as the launcher logs it (the model checked) and reports ready
        # only after the launcher listens, so held still from that line on it is still loading
        # when the probes are read (a tiny model loads in well under a second: it must be held).
        wait_for(lambda: "started worker scheduler" in srv.output(), 60, "the model's check", poll_s=0.01)
        with srv.stopped("scheduler"):
            loading = first_answer(srv, "/ready")
            assert (loading.status_code, loading.text) == (503, "loading")
            assert http.get("/health").status_code == 200
            assert metric(http, "minisgl_server_ready") == "0.0"
        srv.wait_ready()

        # Serving: every probe and /metrics answer without the key that /v1 requires.
        assert http.get("/v1/models").status_code == 401
        assert (http.get("/ready").status_code, http.get("/ready").text) == (200, "ready")
        assert http.get("/health").status_code == 200
        generated = http.get("/health_generate")
        assert (generated.status_code, generated.text) == (200, "ok")
        assert http.get("/metrics").status_code == 200 and metric(http, "minisgl_server_ready") == "1.0"

        # Draining: SIGTERM with three requests in flight, none of them started. The scheduler is held
        # still (SIGSTOP) from before they are sent until after the probes are read, so nothing can
        # end before SIGTERM or before the probes are read, however slow this machine is (letting it
        # run in short slices was not enough: a loaded machine stretched a slice to the whole work).
        # The tokenizer's debug log says when all three are in the scheduler's queue. After
        # SIGCONT it runs them one at a time (--max-running-requests 1), two queued behind the
        # first, all during the drain.
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="k", timeout=120)
        results: list = []
        lengths = [120, 50, 50]
        held = len(lengths)

        def request(tokens: int) -> None:
            results.append(client.completions.create(model=MODEL, prompt="tell me everything", max_tokens=tokens,
                                                     extra_body={"ignore_eos": True}))

        threads = [threading.Thread(target=request, args=(n,)) for n in lengths]
        before = srv.sent_to_scheduler()  # /health_generate's request
        with srv.stopped("scheduler"):
            for t in threads:
                t.start()
            wait_for(lambda: srv.sent_to_scheduler() == before + held, 60, "the tokenizer to pass the requests on")
            srv.proc.send_signal(signal.SIGTERM)
            wait_for(lambda: http.get("/ready").text == "draining", what="/ready to say draining")
            draining = http.get("/ready")
            assert (draining.status_code, draining.text) == (503, "draining")
            assert http.get("/health").status_code == 200  # alive while it finishes its work
            assert metric(http, "minisgl_server_ready") == "0.0"
            refused = http.post("/v1/completions", headers={"Authorization": "Bearer k"},
                                json={"model": MODEL, "prompt": "one more", "max_tokens": 2})
            assert refused.status_code == 503
            assert all(t.is_alive() for t in threads)

        for t in threads:
            t.join(120)
        # Every request in flight at SIGTERM was finished, none cut, and then the server exited cleanly.
        assert [r.choices[0].finish_reason for r in results] == ["length"] * held
        assert sorted(r.usage.completion_tokens for r in results) == sorted(lengths)
        assert srv.proc.wait(30) == 0
    finally:
        http.close()
        srv.stop()


def test_health_fails_once_the_scheduler_is_killed(model_dir):
    srv = ServerProcess("--model", model_dir, *ARGS).wait_ready()
    try:
        assert httpx.get(srv.url + "/health").status_code == 200
        os.kill(srv.worker_pid("scheduler"), signal.SIGKILL)
        deadline = time.monotonic() + 5
        answers = []
        while time.monotonic() < deadline:
            try:
                answers.append(httpx.get(srv.url + "/health", timeout=1).status_code)
            except httpx.TransportError:
                answers.append("gone")  # the server exited: as good as a failed probe
            if answers[-1] != 200:
                break
            time.sleep(0.05)
        assert answers[-1] in (503, "gone"), answers
        assert srv.proc.wait(15) != 0
    finally:
        srv.stop()


def test_health_fails_while_the_scheduler_is_stuck_and_recovers_after(model_dir):
    """A step that never ends (a hung GPU or collective) leaves every process alive: the watchdog
    turns the scheduler's silence into a failing /health. SIGSTOP stands in for the hang."""
    srv = ServerProcess("--model", model_dir, *ARGS, "--watchdog-timeout", "3").wait_ready()
    try:
        time.sleep(4)  # idle for longer than the timeout: heartbeats keep it healthy
        assert httpx.get(srv.url + "/health").status_code == 200
        with srv.stopped("scheduler"):
            stopped = time.monotonic()
            wait_for(lambda: httpx.get(srv.url + "/health").status_code == 503, 20, "/health to fail")
            assert time.monotonic() - stopped >= 2  # not before the timeout (give or take a heartbeat)
            assert httpx.get(srv.url + "/ready").status_code == 503
        wait_for(lambda: httpx.get(srv.url + "/health").status_code == 200, 20, "/health to recover")
        assert "silent for" in srv.output()
    finally:
        assert srv.stop() == 0
