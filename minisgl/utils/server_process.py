"""`python -m minisgl ...` as a child process: started in its own session, logging to a file,
waited on until /ready, stopped with SIGTERM. The online benchmark and the server tests use it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time


class ServerProcess:
    def __init__(self, args: list[str], url: str, log_path: str, env: dict | None = None):
        self.url = url
        self.log_path = log_path
        os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "minisgl", *args], stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True,
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
                if httpx.get(self.url + "/ready", timeout=2).status_code == 200:
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
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)  # the server and its workers: our own session
                self.proc.wait()
        self.log.close()
        return self.proc.returncode
