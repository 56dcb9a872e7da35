"""A server started for a test or a benchmark never outlives the run that started it: not after a
Ctrl-C in the middle of the test session, not after the session is killed outright."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from tests.reaper import end_group, start_in_own_group

pytestmark = pytest.mark.slow  # starts the server or worker processes: out of the fast loop (tests/test_tiers.py)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A session whose one test starts the demo server, records the pids of the server and its
# workers, and then waits to be interrupted.
INNER_TEST = textwrap.dedent('''
    import faulthandler, json, os, signal, sys, time
    import psutil
    faulthandler.register(signal.SIGUSR1, file=sys.__stderr__, all_threads=True)  # where a stuck session is
    # Ctrl-C as at a terminal: a session started from a background job (nohup ... &) inherits SIGINT
    # ignored, and Python then never raises KeyboardInterrupt (the cause of a 120 s timeout here).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from minisgl.benchmark.server_process import ServerProcess
    from minisgl.utils.net import free_port

    def test_serves_until_interrupted(tmp_path):
        port = free_port()
        srv = ServerProcess(["--device", "cpu", "--num-pages", "64", "--max-seq-len", "64", "--port", str(port)],
                            f"http://127.0.0.1:{port}", str(tmp_path / "server.log")).wait_ready(300)
        pids = [srv.proc.pid] + [p.pid for p in psutil.Process(srv.proc.pid).children(recursive=True)]
        with open(os.environ["PIDS_FILE"], "w") as f:
            json.dump(pids, f)
        time.sleep(600)
''')


def alive(pids: list[int]) -> list[int]:
    """The pids still running (a zombie has ended: only its parent has not reaped it yet)."""
    living = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                living.append(pid)
        except psutil.NoSuchProcess:
            pass
    return living


def run_session_until_serving(tmp_path) -> tuple[subprocess.Popen, list[int]]:
    (tmp_path / "test_inner.py").write_text(INNER_TEST)
    pids_file = tmp_path / "pids.json"
    session = start_in_own_group(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "tests.reaper", "-p", "no:cacheprovider", "--rootdir",
         str(tmp_path), "-c", os.devnull, str(tmp_path / "test_inner.py")],
        cwd=REPO, env={**os.environ, "PIDS_FILE": str(pids_file), "PYTHONPATH": REPO},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    while not pids_file.exists() or not pids_file.read_text():
        assert session.poll() is None, f"the inner session ended early:\n{session.stdout.read()}"
        time.sleep(0.5)
    import json

    pids = json.loads(pids_file.read_text())
    assert len(alive(pids)) >= 4, "the server and its tokenizer, detokenizer and scheduler workers"
    return session, pids


def finish(session: subprocess.Popen, seconds: float) -> str:
    """The session's output once it has exited; if it has not within `seconds`, fail with the
    stacks of its threads (the inner test registers SIGUSR1 with faulthandler) and its output."""
    try:
        return session.communicate(timeout=seconds)[0]
    except subprocess.TimeoutExpired:
        running = session.poll() is None
        if running:
            os.kill(session.pid, signal.SIGUSR1)
            time.sleep(5)
        end_group(session)
        try:
            output = session.communicate(timeout=10)[0]  # (what the timed-out call had read, and the rest)
        except subprocess.TimeoutExpired:
            output = "(unread: another process holds its output pipe)"
        pytest.fail(f"the interrupted session {'is still running' if running else 'exited, its output pipe still held'}"
                    f" after {seconds:.0f} s; its stacks and output:\n{output}")


def wait_gone(pids: list[int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return alive(pids)


@pytest.mark.timeout(600)
def test_ctrl_c_in_a_test_session_takes_its_servers_down(tmp_path):
    session, pids = run_session_until_serving(tmp_path)
    try:
        os.killpg(session.pid, signal.SIGINT)  # what a terminal's Ctrl-C sends: the foreground group
        output = finish(session, 120)
        assert "KeyboardInterrupt" in output, output
        left = wait_gone(pids, 30)  # the reaper's SIGKILL is immediate; slack for a loaded machine
        assert left == [], f"still running after the interrupted session: {left}"
    finally:
        end_group(session)
        for pid in alive(pids):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.timeout(600)
def test_a_killed_test_session_takes_its_servers_down(tmp_path):
    """No finalizer runs in a session killed with SIGKILL: the kernel ends the server as its
    parent dies, and the workers follow their launcher."""
    session, pids = run_session_until_serving(tmp_path)
    try:
        os.kill(session.pid, signal.SIGKILL)  # the pytest process only, not its group
        session.wait()
        left = wait_gone(pids, 90)  # SIGTERM: the server drains (nothing in flight) and stops its workers
        assert left == [], f"still running after the killed session: {left}"
    finally:
        end_group(session)
        for pid in alive(pids):
            os.kill(pid, signal.SIGKILL)
