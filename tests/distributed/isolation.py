"""Run a multi-process test case in a process session of its own, so that whatever it leaves
behind when it fails (follower ranks blocked in a collective, a half-built process group) dies
with it instead of breaking the next case.

`run_isolated(fn, *args)` calls fn(*args) in a fresh spawned process that starts a new session;
LLM(tp=...) inside it makes its own rendezvous file and process group. When fn returns, raises or
the process dies, every process of that session is killed; fn's result comes back, or
`CaseFailed` carries the case's traceback. `fn` must be importable (a module-level function).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import signal
import time
import traceback


class CaseFailed(AssertionError):
    pass


def _case_main(results: mp.Queue, fn, args) -> None:
    os.setsid()  # this process and everything it starts: one group to kill
    try:
        results.put(("ok", fn(*args)))
    except BaseException:
        results.put(("error", traceback.format_exc()))


def run_isolated(fn, *args, timeout: float = 600):
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    proc = ctx.Process(target=_case_main, args=(results, fn, args))
    proc.start()
    deadline = time.monotonic() + timeout
    outcome = None
    try:
        while outcome is None:
            try:
                outcome = results.get(timeout=0.5)
            except queue.Empty:
                if not proc.is_alive():
                    try:
                        outcome = results.get(timeout=2)
                    except queue.Empty:
                        outcome = ("error", f"the case's process died (exit code {proc.exitcode})")
                elif time.monotonic() > deadline:
                    outcome = ("error", f"the case ran past {timeout} s")
    finally:
        kill_session(proc.pid)
        proc.join(30)
    kind, value = outcome
    if kind == "error":
        raise CaseFailed(value)
    return value


def kill_session(sid: int) -> None:
    """SIGKILL every process in session `sid` (the case and its followers, wherever reparented)."""
    for pid in session_members(sid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 10
    while session_members(sid) and time.monotonic() < deadline:
        time.sleep(0.1)


def session_members(sid: int) -> list[int]:
    """Live (not zombie) processes of session `sid`, from /proc."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": state ppid pgrp session ...
        if fields[0] != "Z" and int(fields[3]) == sid:
            members.append(int(entry))
    return members


def failures_of_ranks(rank_main, world: int) -> list[str]:
    """Spawn `world` ranks running rank_main(rank, world, addr, failures) over one fresh rendezvous
    (rank_main importable; it puts "rank R: error" into `failures` before it raises). Returns what
    they put there: [] when every rank passed. Call it through run_isolated, so that ranks left in a
    collective by a failed peer die with the case."""
    import torch.multiprocessing as tmp

    from minisgl.utils.net import rendezvous_addr

    failures = tmp.get_context("spawn").SimpleQueue()
    try:
        tmp.spawn(rank_main, args=(world, rendezvous_addr(), failures), nprocs=world)
    except Exception:
        pass  # the ranks' own reports say what failed
    found = []
    while not failures.empty():
        found.append(failures.get())
    return found
