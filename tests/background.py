"""Commands a test checks the result of that can start with the session: run at the lowest CPU
priority from the session's start (tests/conftest.py), so they take what CPU the other tests leave,
and waited for by their test. A test whose command was not started (run alone) runs it itself."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_running: dict[tuple[str, ...], tuple[subprocess.Popen, object, object]] = {}


def start(argv: list[str]) -> None:
    out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")  # not pipes: no output stalls it
    proc = subprocess.Popen(["nice", "-n", "19", *argv], cwd=REPO, stdout=out, stderr=err, text=True)
    _running[tuple(argv)] = (proc, out, err)


def run(argv: list[str]) -> subprocess.CompletedProcess:
    """`argv`'s result, from the run started with the session, else from a run started now."""
    if tuple(argv) not in _running:
        start(argv)
    proc, out, err = _running.pop(tuple(argv))
    proc.wait()
    out.seek(0), err.seek(0)
    return subprocess.CompletedProcess(argv, proc.returncode, out.read(), err.read())
