"""No process a test starts outlives the test session, however the session ends.

A pytest plugin (tests/conftest.py loads it): when the session finishes, normally or by Ctrl-C
(pytest finishes the session on KeyboardInterrupt too), and again at interpreter exit, every
process descended from this one is killed, with the process group of each that leads its own
(a server and its workers). A session killed outright cannot run this; the children that
`ServerProcess` and `start_in_own_group` start then get SIGTERM from the kernel as their parent
dies (minisgl.utils.process.end_with)."""

from __future__ import annotations

import atexit
import os
import signal
import subprocess

import psutil

from minisgl.utils.process import child_of_this_process


def start_in_own_group(argv: list[str], **popen_kwargs) -> subprocess.Popen:
    """A command in its own session (so its whole group can be ended at once) that also ends when
    this process dies."""
    return subprocess.Popen(argv, start_new_session=True, preexec_fn=child_of_this_process(), **popen_kwargs)


def end_group(proc: subprocess.Popen) -> None:
    """Kill a process started by start_in_own_group and everything in its group; reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def kill_descendants() -> None:
    try:
        descendants = psutil.Process().children(recursive=True)
    except psutil.Error:
        return
    # multiprocessing's resource tracker ends by itself once this process exits; killed, it is
    # relaunched at exit to complain that it died.
    descendants = [p for p in descendants if not _is_resource_tracker(p)]
    own_group = os.getpgid(0)
    groups = set()
    for proc in descendants:
        try:
            groups.add(os.getpgid(proc.pid))
        except ProcessLookupError:
            pass
    for group in groups - {own_group}:
        try:
            os.killpg(group, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    for proc in descendants:
        try:
            proc.kill()
        except psutil.Error:
            pass


def _is_resource_tracker(proc: psutil.Process) -> bool:
    try:
        return any("multiprocessing.resource_tracker" in part for part in proc.cmdline())
    except psutil.Error:
        return False


def pytest_sessionfinish(session, exitstatus) -> None:
    kill_descendants()


atexit.register(kill_descendants)
