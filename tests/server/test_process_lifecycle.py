"""The server as a process: auth, clean shutdown on SIGTERM, exiting when a worker dies, and the
interactive shell driven through a pseudo-terminal."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import time

import httpx
import openai
import pexpect
import psutil
import pytest

from tests.server.serving import ServerProcess, tiny_qwen3_server

pytestmark = pytest.mark.slow  # starts the server or worker processes: out of the fast loop (tests/test_tiers.py)

FAST = ["--num-pages", "256", "--max-seq-len", "256"]
# A keyless server in the state any other module's leaves it in: the one of test_models.py, test_request_errors.py
# and test_request_id.py (same arguments, one server; tests/server/serving.py). The
# tests that stop or kill theirs start their own.
model_dir, server, client = tiny_qwen3_server("--served-model-name", "org/tiny-qwen3", "tiny", "--dtype", "float32",
                                              "--num-pages", "256")


def test_api_key_guards_v1_but_not_probes(model_dir):
    srv = ServerProcess("--model", model_dir, *FAST, env={"MINISGL_API_KEY": "s3cret"}).wait_ready()
    try:
        body = {"model": model_dir, "prompt": "hi", "max_tokens": 2}
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
            resp = httpx.post(srv.url + "/v1/completions", json=body, headers=headers)
            assert resp.status_code == 401 and resp.json()["error"]["code"] == "invalid_api_key"
        assert httpx.get(srv.url + "/v1/models").status_code == 401
        ok = openai.OpenAI(base_url=srv.url + "/v1", api_key="s3cret").completions.create(**body)
        assert ok.usage.completion_tokens == 2
        assert httpx.get(srv.url + "/health").status_code == 200
        assert httpx.get(srv.url + "/ready").status_code == 200
    finally:
        assert srv.stop() == 0


def test_without_api_key_v1_is_open(server):
    assert httpx.get(server.url + "/v1/models").status_code == 200


def test_sigterm_exits_zero_with_no_child_left(model_dir):
    srv = ServerProcess("--model", model_dir, *FAST).wait_ready()
    children = psutil.Process(srv.proc.pid).children(recursive=True)
    assert len(children) >= 3  # tokenizer, detokenizer, scheduler (+ multiprocessing's helper)
    try:
        srv.proc.send_signal(signal.SIGTERM)
        assert srv.proc.wait(30) == 0
        gone, alive = psutil.wait_procs(children, timeout=10)
        assert not alive, f"children left behind: {alive}"
    finally:
        srv.stop()


def test_finished_requests_leave_nothing_in_flight_so_sigterm_exits_at_once(model_dir):
    """A request whose first reply is also its last (max_tokens 1) is closed when it ends, not at
    garbage collection: after hundreds of them an idle server's drain has nothing to wait for."""
    import asyncio

    srv = ServerProcess("--model", model_dir, *FAST, "--drain-timeout", "60").wait_ready()
    body = {"prompt": [5, 6, 7], "max_tokens": 1}  # model may be left out: one is served

    async def burst():
        async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=50)) as client:
            async def one(stream: bool):
                r = await client.post(srv.url + "/v1/completions", json={**body, "stream": stream})
                return r.status_code
            return await asyncio.gather(*(one(i % 2 == 0) for i in range(400)))

    try:
        assert asyncio.run(burst()) == [200] * 400  # the form: 200 streaming, 200 not
        start = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        assert srv.proc.wait(30) == 0
        assert time.monotonic() - start < 2.0
        assert "draining: 0 request(s) in flight" in srv.output()
    finally:
        srv.stop()


def test_killing_the_scheduler_makes_the_server_exit_nonzero(model_dir):
    srv = ServerProcess("--model", model_dir, *FAST).wait_ready()
    scheduler = srv.worker_pid("scheduler")
    children = psutil.Process(srv.proc.pid).children(recursive=True)
    os.kill(scheduler, signal.SIGKILL)
    start = time.monotonic()
    try:
        code = srv.proc.wait(15)
        assert code != 0
        assert time.monotonic() - start < 5
        assert "worker scheduler" in srv.output() and "died" in srv.output()
        _, alive = psutil.wait_procs(children, timeout=10)
        assert not alive
    finally:
        srv.stop()


def test_bad_flags_fail_with_a_message():
    import subprocess

    for argv, message in ((["--tp", "0"], "--tp must be >= 1"), (["--cache", "lru"], "invalid choice"),
                          (["--port", "99999"], "--port must be in 1..65535")):
        out = subprocess.run([sys.executable, "-m", "minisgl", *argv], capture_output=True, text=True, timeout=60)
        assert out.returncode == 2 and message in out.stderr


PROMPT = "\x1b[0m>"  # prompt_toolkit draws the "> " prompt after resetting attributes
LINE_ACCEPTED = "\x1b[?2004l"  # prompt_toolkit leaves bracketed-paste mode: the line is read, the terminal given back
ANSI = re.compile(r"\x1b\[[0-9;?]*[a-zA-Z]")


@contextlib.contextmanager
def greedy_shell(tiny_model_dir, max_tokens: int):
    """The shell in a pseudo-terminal, greedy, on weights whose greedy answer runs past 300 tokens
    without an end (sampled, an answer could be a lone end-of-text). The test talks to it; at the
    end /reset, then Ctrl-D must leave with status 0."""
    rambling = tiny_model_dir("Qwen3ForCausalLM", seed=5)
    child = pexpect.spawn(sys.executable, ["-m", "minisgl", "--shell", "--model", rambling, "--device", "cpu",
                                           "--shell-temperature", "0", "--shell-max-tokens", str(max_tokens),
                                           *FAST, "--max-seq-len", "1024"], encoding="utf-8", timeout=120,
                          dimensions=(40, 200))
    try:
        child.expect_exact("/reset clears the conversation")
        child.expect_exact(PROMPT)
        yield child
        child.sendline("/reset")
        child.expect_exact("(conversation cleared)")
        child.expect_exact(PROMPT)
        child.sendeof()
        child.expect(pexpect.EOF, timeout=30)
    finally:
        child.close()
    assert child.exitstatus == 0


def ask(child, line: str) -> None:
    child.sendline(line)
    child.expect_exact(line)
    # The line accepted (prompt_toolkit may redraw the prompt and the line before that).
    child.expect_exact(LINE_ACCEPTED)


def test_shell_streams_answers_and_resets(tiny_model_dir):
    with greedy_shell(tiny_model_dir, max_tokens=16) as child:
        ask(child, "Hello there")
        child.expect_exact(PROMPT, timeout=60)  # the answer streamed, then a new prompt
        answer = ANSI.sub("", child.before).strip()
        assert answer, "no answer was printed"


def test_shell_ctrl_c_stops_the_answer_not_the_shell(tiny_model_dir):
    """A long answer (--shell-max-tokens 900) is stopped by Ctrl-C: the request is aborted, the
    shell says so and asks again."""
    with greedy_shell(tiny_model_dir, max_tokens=900) as child:
        ask(child, "Tell me a long story")
        child.expect(r"[^\r\n]{20}", timeout=60)  # the answer is streaming
        child.sendintr()
        child.expect_exact("(answer cancelled)", timeout=30)
        child.expect_exact(PROMPT)
        assert child.isalive()


def test_shell_sampling_flags_are_checked_before_anything_starts():
    import subprocess

    for argv, message in ((["--shell-temperature", "-1"], "--shell-temperature must be in [0, 2]"),
                          (["--shell-max-tokens", "0"], "--shell-max-tokens must be >= 1")):
        out = subprocess.run([sys.executable, "-m", "minisgl", "--shell", *argv], capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 2 and message in out.stderr
