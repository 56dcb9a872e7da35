"""Work a test checks the result of that can start with the session (the type check, the container
images): started once, by the session's main process (pytest-xdist's controller when the tests run
in workers; tests/conftest.py), at the lowest CPU priority, so it takes what CPU the tests leave. The
test that checks it waits for it in whichever process that test runs: the two meet in a folder of the
session (`SESSION_DIR`, which the workers inherit), where a job leaves `<name>.started`, then its
result or its error. A test whose job was not started (the test run alone) runs the work itself."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SESSION_DIR = "MINISGL_TEST_SESSION_DIR"


def open_session() -> None:
    """The session's folder, made by its main process before any worker starts."""
    os.environ[SESSION_DIR] = tempfile.mkdtemp(prefix="minisgl-test-session-")


def close_session() -> None:
    """The session's folder removed, by its main process at the end."""
    shutil.rmtree(os.environ.pop(SESSION_DIR, ""), ignore_errors=True)


def _folder() -> Path:
    return Path(os.environ[SESSION_DIR])


def _started(name: str) -> bool:
    return SESSION_DIR in os.environ and (_folder() / f"{name}.started").exists()


def start_command(name: str, argv: list[str]) -> None:
    """Run `argv` from the repository root at the lowest CPU priority; `run_command` gets its result."""
    def run() -> str:
        done = subprocess.run(["nice", "-n", "19", *argv], cwd=REPO, capture_output=True, text=True)
        return json.dumps([done.returncode, done.stdout, done.stderr])

    start_calls({name: run})


def run_command(name: str, argv: list[str]) -> subprocess.CompletedProcess:
    """`argv`'s result, from the run the session started, else from a run started now."""
    result = wait_call(name)
    if result is None:
        return subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
    return subprocess.CompletedProcess(argv, *json.loads(result))


def start_calls(calls: dict[str, Callable[[], str]]) -> None:
    """Run `calls` one after another in a thread of this process (which lives to the session's end);
    each one's returned text, or its error, lands in the session's folder."""
    folder = _folder()
    for name in calls:
        (folder / f"{name}.started").touch()

    def run() -> None:
        for name, call in calls.items():
            try:
                (folder / f"{name}.result.tmp").write_text(call())
                os.replace(folder / f"{name}.result.tmp", folder / f"{name}.result")
            except BaseException:  # the test that waits for it reports it
                (folder / f"{name}.error.tmp").write_text(traceback.format_exc())
                os.replace(folder / f"{name}.error.tmp", folder / f"{name}.error")

    threading.Thread(target=run, name="background-calls", daemon=True).start()


def wait_call(name: str, meanwhile: Callable[[], None] = lambda: None) -> str | None:
    """The text the session's call `name` returned (None if the session did not start it); raises
    RuntimeError with its traceback if it failed. `meanwhile` runs every second while it waits."""
    if not _started(name):
        return None
    result, error = _folder() / f"{name}.result", _folder() / f"{name}.error"
    while not result.exists() and not error.exists():
        meanwhile()
        time.sleep(1)
    meanwhile()
    if error.exists():
        raise RuntimeError(f"the session's background {name} failed:\n{error.read_text()}")
    return result.read_text()
