"""Long requests kept in flight against a real server while a test shuts it down or breaks it,
and what each client saw in the end; the processes left of a server's process group."""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field

import httpx
import psutil

LONG = {"prompt": "tell me everything", "max_tokens": 1000, "ignore_eos": True}


@dataclass
class Outcome:
    stream: bool
    status: int | None = None
    body: str = ""
    transport_error: str | None = None  # the connection was cut: what a server must never do

    def events(self) -> list:
        """A stream's `data:` payloads, JSON decoded ([DONE] as the string)."""
        return [payload if payload == "[DONE]" else json.loads(payload)
                for line in self.body.split("\n\n") if line.startswith("data: ")
                for payload in [line.removeprefix("data: ")]]

    def error(self) -> dict | None:
        """The OpenAI error object: a non-streaming error body, or a stream's error event."""
        if not self.stream or self.status != 200:
            return json.loads(self.body).get("error") if self.status != 200 else None
        return next((e["error"] for e in self.events() if isinstance(e, dict) and "error" in e), None)


@dataclass
class InFlight:
    """`n` long completions, alternately streaming and not, each in a thread of its own."""

    url: str
    n: int = 4
    outcomes: list[Outcome] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.outcomes = [Outcome(stream=i % 2 == 0) for i in range(self.n)]
        self.threads = [threading.Thread(target=self._run, args=(o,), daemon=True) for o in self.outcomes]
        for t in self.threads:
            t.start()

    def _run(self, outcome: Outcome) -> None:
        try:
            with httpx.stream("POST", self.url + "/v1/completions", json={**LONG, "stream": outcome.stream},
                              timeout=120) as resp:
                outcome.status = resp.status_code
                for text in resp.iter_text():
                    outcome.body += text
        except httpx.HTTPError as e:
            outcome.transport_error = repr(e)

    def wait_queued(self, srv, metric, wait_for, timeout: float = 30) -> None:
        """Until every request has reached the scheduler (running, waiting, or already answered):
        one still on its way when the test acts would be refused as new work instead of being one
        in flight."""
        def arrived() -> bool:
            answered = sum(not t.is_alive() for t in self.threads)
            held = metric(srv, "minisgl_num_requests_running") + metric(srv, "minisgl_num_requests_waiting")
            return held >= 1 and held + answered >= self.n

        wait_for(arrived, timeout, f"{self.n} requests at the scheduler")

    def join(self, timeout: float = 60) -> list[Outcome]:
        for t in self.threads:
            t.join(timeout)
        assert not any(t.is_alive() for t in self.threads), "a request never ended"
        return self.outcomes


def finished_whole(outcome: Outcome) -> bool:
    """A request that completed before the server stopped serving: a 200 with no error and its
    whole body (the stream's [DONE], the JSON's closing brace)."""
    if outcome.status != 200 or outcome.transport_error or outcome.error() is not None:
        return False
    return outcome.body.endswith("data: [DONE]\n\n") if outcome.stream else outcome.body.rstrip().endswith("}")


def assert_ended_by_the_server(outcome: Outcome) -> None:
    """A request the server could not finish: a 503 with an OpenAI error body (also a stream that
    had not started), or a started stream whose last events are an error event
    (service_unavailable) and [DONE]; never a cut connection."""
    assert outcome.transport_error is None, outcome.transport_error
    if outcome.stream and outcome.status == 200:
        events = outcome.events()
        assert outcome.status == 200 and events[-1] == "[DONE]", outcome.body[-300:]
        assert outcome.error() is not None and outcome.error()["code"] == "service_unavailable", events[-2:]
        assert outcome.error()["type"] == "server_error"
    else:
        assert outcome.status == 503, (outcome.status, outcome.body[:300])
        assert outcome.error()["code"] == "service_unavailable" and outcome.error()["message"]


def group_processes(pgid: int) -> list[psutil.Process]:
    """The live (not zombie) processes of process group `pgid`."""
    found = []
    for proc in psutil.process_iter(["status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (ProcessLookupError, psutil.Error):
            pass
    return found


def leave_early(url: str, streams: int = 3) -> None:
    """Clients that go away mid-answer: streams closed after their first event, and a
    non-streaming request given up after half a second. The server must take it in its stride."""
    for _ in range(streams):
        with httpx.stream("POST", url + "/v1/completions", json={**LONG, "stream": True}, timeout=60) as resp:
            assert next(resp.iter_lines()).startswith("data: ")
    try:
        httpx.post(url + "/v1/completions", json=LONG, timeout=0.5)
    except httpx.TimeoutException:
        pass
