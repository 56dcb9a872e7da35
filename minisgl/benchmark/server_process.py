"""`python -m minisgl ...` (or any server command) as a child process: started in its own session,
logging to a file, waited on until its ready path answers 200, stopped with SIGTERM. It never
outlives the process that started it: the kernel sends it SIGTERM when that one dies, however it
dies (a benchmark killed, a test run interrupted; minisgl.utils.process.end_with), and its own
workers follow their launcher. The benchmarks launch servers with it; the server tests too."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from minisgl.utils.process import child_of_this_process


class ServerProcess:
    def __init__(self, args: list[str], url: str, log_path: str, env: dict | None = None, command: bool = False,
                 ready_paths: tuple[str, ...] = ("/ready",)):
        """`args`: minisgl's flags, or with `command` the whole command line of another server.
        Ready when the first of `ready_paths` that the server has (not 404) answers 200."""
        self.url, self.log_path, self.ready_paths, self.reap_group = url, log_path, ready_paths, command
        os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
        self.log = open(log_path, "w")
        argv = list(args) if command else [sys.executable, "-m", "minisgl", *args]
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
                                     preexec_fn=child_of_this_process(),
                                     env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})

    def output(self) -> str:
        with open(self.log_path) as f:
            return f.read()

    def log_tail(self, chars: int = 4000) -> str:
        return self.output()[-chars:]

    def wait_ready(self, timeout: float = 120) -> ServerProcess:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}; log tail:\n{self.log_tail()}")
            try:
                for path in self.ready_paths:
                    status = httpx.get(self.url + path, timeout=2).status_code
                    if status != 404:  # a server without this path: ask the next one
                        break
                if status == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"server not ready after {timeout:.0f} s; log tail:\n{self.log_tail()}")

    def stop(self, timeout: float = 60.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
                if self.reap_group:  # a launched command's leftover workers must not outlive it (GPU memory)
                    os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)  # the server and its workers: our own session
                self.proc.wait()
        self.log.close()
        return self.proc.returncode
