"""Start the real server as a subprocess on a free loopback port, for the server tests."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import signal
import tempfile
import time

import httpx

from minisgl.benchmark.server_process import ServerProcess as _ServerProcess
from minisgl.utils.net import free_port


class ServerProcess(_ServerProcess):
    """The server on a free loopback port, on the CPU, logging to a temp file."""

    def __init__(self, *args: str, env: dict | None = None):
        self.port = free_port()
        log = tempfile.NamedTemporaryFile(prefix="minisgl-server-", suffix=".log", delete=False).name
        super().__init__(["--port", str(self.port), "--device", "cpu", *args], f"http://127.0.0.1:{self.port}",
                         log, env)

    def worker_pid(self, name: str) -> int:
        match = re.search(rf"started worker {name} \(pid (\d+)\)", self.output())
        assert match, f"no pid logged for worker {name}"
        return int(match.group(1))

    def sent_to_scheduler(self) -> int:
        """How many requests the tokenizer has passed to the scheduler so far: it logs each one at
        debug level (MINISGL_LOG_LEVEL=debug in `env`). With the scheduler stopped they wait in its
        queue, none started: requests certainly in flight, however slow this machine is."""
        return self.output().count("prompt tokens sent to the scheduler")

    def run_until(self, worker: str, condition, slice_s: float = 0.01, timeout: float = 60) -> None:
        """Within `stopped(worker)`: let the worker run in short slices (SIGCONT, a sleep, SIGSTOP)
        until `condition()` holds (it may wait a little itself), to catch a fast worker early on."""
        pid, deadline = self.worker_pid(worker), time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{worker} ran {timeout} s in slices and the condition never held")
            os.kill(pid, signal.SIGCONT)
            time.sleep(slice_s)
            os.kill(pid, signal.SIGSTOP)

    @contextlib.contextmanager
    def stopped(self, worker: str):
        """`worker` stopped (SIGSTOP: a hang, or time held still) for the block, continued after
        (SIGCONT) however the block ends."""
        pid = self.worker_pid(worker)
        os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(pid, signal.SIGCONT)


def metric(server: ServerProcess, name: str) -> float:
    """The value of one sample in the server's /metrics (summed over its label sets)."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(server.url + "/metrics", timeout=10).text
    values = [s.value for fam in text_string_to_metric_families(text) for s in fam.samples if s.name == name]
    assert values, f"{name} not in /metrics"
    return sum(values)


def wait_for(condition, timeout: float = 30, what: str = "condition", poll_s: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(poll_s)


# Servers of tiny_qwen3_server shared by the modules that ask for the same arguments: a start costs
# 10-30 s of a 2-core machine, so one start serves them all. `_users` counts, per argument set, the
# modules of this session whose selected tests take the server (tests/conftest.py counts them once
# collected); the last of them to finish stops it and checks its exit status, as a module's own would.
_fixtures: dict[object, tuple[str, ...]] = {}  # a module's `server` fixture -> its server arguments
_users: dict[tuple[str, ...], int] = {}
_running: dict[tuple[str, ...], ServerProcess] = {}  # model_dir is the session's one tiny Qwen3


def run_sharing_modules_together(items: list) -> None:
    """Reorder `items` (in place) so the modules sharing a server run one after another, where the
    first of them ran: one shared server is alive at a time, not one idling per group."""
    by_module: dict = {}
    for item in items:
        by_module.setdefault(getattr(item, "module", None) or item, []).append(item)  # an item of no module: alone
    ordered, placed = [], set()
    for module in by_module:
        if module in placed:
            continue
        args = _fixtures.get(getattr(module, "server", None))
        group = [module] if args is None else [m for m in by_module if _fixtures.get(getattr(m, "server", None)) == args]
        for member in group:
            placed.add(member)
            ordered += by_module[member]
    items[:] = ordered


def shared_server_group(item) -> str | None:
    """The name of the server `item`'s module shares with others (one pytest-xdist group), or None."""
    args = _fixtures.get(getattr(getattr(item, "module", None), "server", None))
    return None if args is None else "shared-server-" + hashlib.sha1(repr(args).encode()).hexdigest()[:8]


def count_shared_server_users(items) -> None:
    """Count, per argument set, the modules among the selected test `items` that take its server."""
    _users.clear()
    modules = {item.module for item in items if "server" in getattr(item, "fixturenames", ())}
    for module in modules:
        args = _fixtures.get(getattr(module, "server", None))
        if args is not None:
            _users[args] = _users.get(args, 0) + 1


def stop_shared_servers() -> None:
    """At the session's end: stop what a deselected module's count left running."""
    while _running:
        _running.popitem()[1].stop()


def tiny_qwen3_server(*server_args: str):
    """Module-scoped fixtures `model_dir`, `server` (the real server on a tiny random Qwen3 with
    `server_args`, stopped cleanly at the end) and `client` (the official openai client on it).
    A test module takes them as `model_dir, server, client = tiny_qwen3_server(...)`. Modules that
    pass the same arguments share one server, started by the first and stopped by the last: a test
    that needs a server state of its own (a killed worker, counters from zero) starts its own."""
    import openai
    import pytest

    @pytest.fixture(scope="module")
    def model_dir(tiny_model_dir):
        return tiny_model_dir("Qwen3ForCausalLM")

    @pytest.fixture(scope="module")
    def server(model_dir):
        srv = _running.get(server_args)
        if srv is None:
            srv = _running[server_args] = ServerProcess("--model", model_dir, *server_args).wait_ready()
        yield srv
        _users[server_args] = _users.get(server_args, 1) - 1
        if _users[server_args] <= 0:
            del _running[server_args]
            assert srv.stop() == 0

    @pytest.fixture(scope="module")
    def client(server):
        return openai.OpenAI(base_url=server.url + "/v1", api_key="unused")

    _fixtures[server] = server_args
    return model_dir, server, client
