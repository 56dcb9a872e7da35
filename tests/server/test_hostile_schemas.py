"""Hostile schemas against the real server on a tiny model (loopback only): a crafted schema that
would compile for minutes is a 400 naming the field and --grammar-compile-timeout once its budget is
spent, and holds up no other request meanwhile; a client that leaves while its grammar compiles
gets that compile killed (not left to run to the budget)."""

from __future__ import annotations

import json
import threading
import time

import httpx
import psutil
import pytest

from tests.constrained.helpers import SLOW_SCHEMA
from tests.server.serving import ServerProcess, wait_for

pytestmark = pytest.mark.slow  # starts the server or worker processes: out of the fast loop (tests/test_tiers.py)

# seconds: SLOW_SCHEMA compiles for several times as long on a 2-core machine (benchmark/NOTES.md), a
# simple constraint in milliseconds.
BUDGET = 10
READY = "grammar compile worker ready"
KILLED_AT_BUDGET = "compile budget: its worker was killed"


@pytest.fixture(scope="module")
def server(tiny_model_dir):
    srv = ServerProcess("--model", tiny_model_dir("Qwen3ForCausalLM"), "--num-pages", "256",
                        "--grammar-compile-timeout", str(BUDGET), "--grammar-compile-workers", "2",
                        "--max-grammar-depth", "1000").wait_ready()
    yield srv
    assert srv.stop() == 0


def chat(server, timeout: float = 600, **fields) -> httpx.Response:
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, **fields}
    return httpx.post(server.url + "/v1/chat/completions", json=body, timeout=timeout)


def compile_workers(server) -> set[int]:
    return {p.pid for p in psutil.Process(server.proc.pid).children(recursive=True)
            if "minisgl.constrained.worker" in p.cmdline()}


def wait_for_ready_workers(server, count: int) -> None:
    """Until `count` compile workers have become ready since the server started (a busy machine
    takes many seconds to start one)."""
    wait_for(lambda: server.output().count(READY) >= count, 600, f"{count} compile workers ready")


def test_a_schema_over_the_budget_is_a_400_naming_it_and_holds_up_no_other_request(server):
    assert chat(server, guided_regex="[a-z]{3}").status_code == 200  # starts the compile workers
    wait_for_ready_workers(server, 2)
    slow = {}
    schema = {"type": "json_schema", "json_schema": {"name": "deep", "schema": json.loads(SLOW_SCHEMA)}}
    thread = threading.Thread(target=lambda: slow.update(resp=chat(server, response_format=schema)))
    thread.start()
    time.sleep(0.5)  # the slow one compiling first
    assert chat(server, guided_regex="[a-z]{3}").status_code == 200
    assert chat(server).status_code == 200
    assert thread.is_alive()  # both served while the slow schema compiles
    thread.join(BUDGET + 120)  # a hang guard: the budget ends it
    error = slow["resp"].json()["error"]
    assert slow["resp"].status_code == 400 and error["code"] == "invalid_request"
    assert "response_format" in error["message"]
    assert f"budget of {BUDGET} s (--grammar-compile-timeout)" in error["message"]


def test_a_client_that_leaves_while_its_grammar_compiles_gets_the_compile_killed(server):
    assert chat(server, guided_regex="[a-z]{4}").status_code == 200
    wait_for_ready_workers(server, 3)  # the worker the budget killed has been replaced
    workers, timeouts = compile_workers(server), server.output().count(KILLED_AT_BUDGET)
    sent = time.monotonic()
    with pytest.raises(httpx.TimeoutException):
        chat(server, timeout=2, guided_json=json.loads(SLOW_SCHEMA))  # the client leaves
    wait_for(lambda: len(workers - compile_workers(server)) == 1, 120, "the compile's worker killed")
    # Killed because its client left, not by the budget (which would have logged so).
    assert server.output().count(KILLED_AT_BUDGET) == timeouts, time.monotonic() - sent
    assert chat(server, guided_regex="[a-z]{5}").status_code == 200  # a fresh worker serves on
