"""Chaos on a real server: every worker process (each tokenizer, the detokenizer, the scheduler,
a second tensor-parallel rank) hung with SIGSTOP or killed with SIGKILL.

A hung worker turns /health (and /ready) red within --watchdog-timeout and green again when it
continues. A killed one makes the server end every request in flight with a 503 (a stream: an
error event, then [DONE]), refuse new work with 503, and exit non-zero at once with no process of
its group left."""

from __future__ import annotations

import contextlib
import os
import signal
import time

import httpx
import pytest

from tests.server.in_flight import InFlight, assert_ended_by_the_server, finished_whole, group_processes
from tests.server.serving import ServerProcess, metric, wait_for

pytestmark = pytest.mark.slow  # starts the server or worker processes: out of the fast loop (tests/test_tiers.py)

ARGS = ["--num-pages", "512", "--max-seq-len", "1024", "--tokenizer-workers", "2", "--dtype", "float32"]
WORKERS = ["tokenizer", "tokenizer-1", "detokenizer", "scheduler", "scheduler-rank1"]
WATCHDOG_S = 2.0


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir):
    return tiny_model_dir("Qwen3ForCausalLM")


def status(srv: ServerProcess, path: str) -> int:
    return httpx.get(srv.url + path, timeout=5).status_code


def test_a_stopped_worker_turns_health_red_within_the_watchdog_timeout_and_green_when_it_continues(model_dir):
    srv = ServerProcess("--model", model_dir, *ARGS, "--tp", "2", "--watchdog-timeout", str(WATCHDOG_S)).wait_ready(180)
    try:
        time.sleep(WATCHDOG_S + 1)  # idle for longer than the timeout: idle workers still beat
        assert status(srv, "/health") == 200
        for worker in WORKERS:
            with srv.stopped(worker):
                stopped = time.monotonic()
                # Within the timeout, give or take one look of the watch (0.25 s) and a busy CPU.
                wait_for(lambda: status(srv, "/health") == 503, WATCHDOG_S + 3, f"/health to fail with {worker} stopped")
                assert time.monotonic() - stopped >= WATCHDOG_S - 0.5, f"{worker}: red before the timeout"
                ready = httpx.get(srv.url + "/ready", timeout=5)
                assert (ready.status_code, ready.text) == (503, "unhealthy")
                # The log names the stopped worker while it is stopped. (A stopped rank-0 scheduler
                # also silences rank 1, which waits for its next batch; when rank 0 was stopped
                # just before sending one, rank 1's last beat is the older, so /health can turn
                # red on rank 1 alone a moment before rank 0 crosses the timeout too.)
                wait_for(lambda: f"worker {worker} has been silent for" in srv.output(), WATCHDOG_S + 3,
                         f"the log to name {worker} as silent")
            wait_for(lambda: status(srv, "/health") == 200, 20, f"/health to recover after {worker} continued")
            assert status(srv, "/ready") == 200
    finally:
        assert srv.stop() == 0


@pytest.mark.parametrize("worker", ["tokenizer-1", "detokenizer", "scheduler", "scheduler-rank1"])
def test_a_killed_worker_ends_requests_in_flight_refuses_new_work_and_the_server_exits_nonzero(model_dir, worker):
    tp = ["--tp", "2"] if worker == "scheduler-rank1" else []
    srv = ServerProcess("--model", model_dir, *ARGS, *tp, "--max-running-requests", "1").wait_ready(180)
    group = srv.proc.pid  # the server runs in a session (and process group) of its own
    try:
        work = InFlight(srv.url, n=8)  # one runs at a time: most are still queued at the kill
        work.wait_queued(srv, metric, wait_for)
        # The (rank-0) scheduler, unless it is the one killed, stands still until the server has
        # seen the death, so the queue cannot run out first (the tiny model is quick).
        with contextlib.nullcontext() if worker == "scheduler" else srv.stopped("scheduler"):
            os.kill(srv.worker_pid(worker), signal.SIGKILL)
            killed = time.monotonic()
            wait_for(lambda: f"worker {worker} (exit code -9)" in srv.output(), 5, f"{worker}'s death to be seen")
        answers = []
        while srv.proc.poll() is None:  # new work until the server is gone
            try:
                answers.append(httpx.post(srv.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 4},
                                          timeout=10))
            except httpx.TransportError:
                break
        code = srv.proc.wait(15)
        assert code != 0
        assert time.monotonic() - killed < 5, "the server did not exit promptly"
        # On a fast machine some finish before the death is seen (they are whole); every other
        # one must be ended by the server, never cut.
        ended = [o for o in work.join() if not finished_whole(o)]
        assert ended, "no request was left when the worker died: the test proves nothing"
        for outcome in ended:
            assert_ended_by_the_server(outcome)
        refused = [a for a in answers if a.status_code != 200]  # a 200 can only be one finished before the death was seen
        assert all(a.status_code == 503 and a.json()["error"]["code"] == "service_unavailable" for a in refused), \
            [(a.status_code, a.text[:200]) for a in refused]
        wait_for(lambda: not group_processes(group), 5, "every process of the group to exit")
        log = srv.output()
        died = [line for line in log.splitlines() if "died" in line]
        assert died and f"worker {worker} (exit code -9)" in died[0], died  # the killed one named first
        # No traceback from the HTTP side (a worker whose peer rank died may report its own failure).
        assert "Exception in ASGI application" not in log and "ERROR:    " not in log, log[-3000:]
    finally:
        srv.stop()
