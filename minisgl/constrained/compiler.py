"""Compiling constraints off the scheduler: worker processes, a time budget, cancellation, a cache.

A compile runs in a worker process (worker.py), so a crafted schema that would compile for minutes
costs the scheduler nothing: at its budget the worker is killed, the request gets a 400 naming the
budget's flag, and a fresh worker takes its place. Up to `workers` compiles run at once, so one
slow schema never holds up the others, and compiles waiting for a worker take turns between
clients (fair_queue.py), so one client's flood of slow schemas delays its own; a compile whose
every request was aborted is cancelled the same way. The pool's thread starts the workers at the
first constrained request (servers that never see one never pay for them) and keeps them warm
after. Compiled grammars are cached by their text,
bounded by count and by their size in memory: counted as their serialized size, which follows what
a deserialized grammar holds (worker.held_bytes), and a grammar larger than the whole budget is
refused when it compiles, so no request makes the scheduler hold more.

A worker that dies before it is ready (killed, or failing to start) takes structured output down
only for a while: requests meanwhile get the reason, and a new worker is tried after a backoff
that doubles with each failure in a row (RESTART_BACKOFF_S up to RESTART_BACKOFF_MAX_S), so a
transient failure heals itself and a permanent one does not spin.
"""

from __future__ import annotations

import itertools
import math
import os
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as wait_ready

from minisgl.utils.logger import get_logger

from .fair_queue import FairQueue
from .grammar import CONSTRAINT_FIELDS, Grammar, tokens_without_control_bytes
from .worker import held_bytes

logger = get_logger(__name__)

Key = tuple[str, str]  # (kind, spec): SamplingParams.constraint


class CompilerUnavailable(ValueError):
    """No compile worker is up (one died before it was ready; a new one is tried after a backoff):
    the server's state, not the request's fault, so its request gets 503, not 400."""


@dataclass(frozen=True)
class CompileLimits:
    """What compiling clients' constraints may cost (SchedulerConfig's fields of the same meaning)."""

    timeout: float | None  # seconds one compile may run; None: no budget of its own
    workers: int  # compiles running at once, one process each
    cache_bytes: int  # compiled grammars kept, by their size in memory


@dataclass(eq=False)
class _Job:
    key: Key
    future: Future
    id: int
    deadline: float = math.inf  # set when a worker takes it
    cancelled: bool = False


@dataclass(eq=False)
class _Worker:
    proc: subprocess.Popen
    conn: Connection
    ready: bool = False
    job: _Job | None = None


class GrammarCompilerPool:
    CACHE_SIZE = 256  # compiled grammars kept at most, least recently used dropped first
    RESTART_BACKOFF_S = 1.0
    RESTART_BACKOFF_MAX_S = 60.0

    def __init__(self, model_path: str, vocab_size: int, stop_token_ids: list[int], limits: CompileLimits):
        self.model_path, self.vocab_size, self.stop_token_ids = model_path, vocab_size, stop_token_ids
        self.limits = limits
        self._lock = threading.Lock()  # guards the queue, jobs, cache and futures; workers are the thread's
        self._queue: FairQueue[_Job] = FairQueue()  # round robin between clients (fair_queue.py)
        self._jobs: dict[Key, _Job] = {}  # queued or compiling
        self._cache: OrderedDict[Key, tuple[Future, int]] = OrderedDict()  # done: the future and its bytes
        self._cache_bytes = 0
        self._workers: list[_Worker] = []
        self._ids = itertools.count()
        self._info = None  # xgrammar.TokenizerInfo, as the first worker built it
        self._info_json: str | None = None
        self._no_control = None
        self._broken: str | None = None  # why no worker can start: every request gets it
        self._down: str | None = None  # why no worker started lately: requests get it until a retry
        self._retry_at = 0.0  # time.monotonic() of the next start after a failed one
        self._start_failures = 0  # in a row
        self._closed = False
        self._thread: threading.Thread | None = None
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)

    @property
    def workers_ready(self) -> int:
        """Workers started and waiting for (or running) a compile."""
        return sum(w.ready for w in list(self._workers))

    @property
    def down(self) -> str | None:
        """Why structured output is unavailable now (no worker could start lately), or None."""
        return self._broken or self._down

    @property
    def cached_bytes(self) -> int:
        """What the cached grammars are counted as holding, within limits.cache_bytes."""
        return self._cache_bytes

    @property
    def compiling(self) -> int:
        """Workers running a compile now (a queued one waits for a free worker)."""
        return sum(w.job is not None for w in list(self._workers))

    def submit(self, constraint: Key, client: str = "") -> Future:
        """A future of the Grammar to start requests from; it raises ValueError when the constraint
        cannot be compiled (an invalid schema or regex, or one over the time budget). A compile
        waiting for a worker waits in `client`'s line: the clients' lines take turns."""
        key = (constraint[0], constraint[1])
        with self._lock:
            if self._closed:
                raise RuntimeError("the grammar compiler pool is shut down")
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                return cached[0]
            job = self._jobs.get(key)
            if job is not None:
                return job.future
            job = _Job(key, Future(), next(self._ids))
            if self._broken:
                job.future.set_exception(CompilerUnavailable(self._broken))
                return job.future
            self._jobs[key] = job
            self._queue.append(job, client)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="grammar-pool", daemon=True)
                self._thread.start()
        self._wake()
        return job.future

    def cancel(self, future: Future) -> None:
        """No request waits for `future` any more: a queued compile never starts, a running one's
        worker is killed (and replaced)."""
        with self._lock:
            job = next((j for j in self._jobs.values() if j.future is future), None)
            if job is None:
                return
            del self._jobs[job.key]
            job.cancelled = True
            future.cancel()
            if job in self._queue:
                self._queue.remove(job)
        self._wake()

    def shutdown(self) -> None:
        with self._lock:
            self._closed = True
            for job in self._jobs.values():
                job.cancelled = True
                job.future.cancel()
            self._jobs.clear()
            self._queue.clear()
        self._wake()
        if self._thread is not None:
            self._thread.join(timeout=10)
        for fd in (self._wake_r, self._wake_w):
            os.close(fd)

    # -- the pool's thread ----------------------------------------------------------------------

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except BlockingIOError:
            pass  # a wake-up is pending already

    def _run(self) -> None:
        try:
            while True:
                with self._lock:
                    if self._closed:
                        break
                    self._tend(time.monotonic())
                    conns = [w.conn for w in self._workers]
                    deadline = min((w.job.deadline for w in self._workers if w.job), default=math.inf)
                timeout = None if deadline == math.inf else max(0.0, deadline - time.monotonic())
                for ready in wait_ready([*conns, self._wake_r], timeout):
                    if ready == self._wake_r:
                        while _drain(self._wake_r):
                            pass
                    else:
                        self._receive(next(w for w in self._workers if w.conn is ready))
        except Exception as e:  # a bug here must not leave requests waiting forever
            logger.exception("the grammar compiler pool failed")
            with self._lock:
                self._broken = f"structured output is unavailable here: its compiler pool failed ({e})"
                for job in list(self._jobs.values()):
                    self._finish(job, error=self._broken, unavailable=True)
                self._queue.clear()
        finally:
            for w in self._workers:
                _kill(w)

    def _tend(self, now: float) -> None:
        """Stop the compiles that were cancelled or ran out of time, keep the workers up, hand out
        the queued compiles. Under the lock."""
        for w in list(self._workers):
            job = w.job
            if job is None:
                continue
            if job.cancelled:
                self._retire(w)
            elif now >= job.deadline:
                self._retire(w)
                kind = job.key[0]
                logger.warning("a %s constraint of %d bytes ran past the %g s compile budget: its worker was killed",
                               kind, len(job.key[1]), self.limits.timeout)
                self._finish(job, error=f"{CONSTRAINT_FIELDS[kind]}: the {kind} constraint did "
                                        f"not compile within this server's budget of {self.limits.timeout:g} s "
                                        f"(--grammar-compile-timeout); simplify it")
        if self._broken or (self._down and now < self._retry_at):
            while self._queue:
                self._finish(self._queue.popleft(), error=self._broken or self._down, unavailable=True)
            return
        # One worker first; the others once it is ready, with its tokenizer info (they skip loading the tokenizer).
        wanted = self.limits.workers if self._info_json is not None else 1
        while len(self._workers) < wanted:
            self._workers.append(self._start_worker())
        for w in self._workers:
            if w.ready and w.job is None and self._queue:
                job = w.job = self._queue.popleft()
                job.deadline = now + (self.limits.timeout if self.limits.timeout is not None else math.inf)
                _send(w, (job.id, *job.key))

    def _start_worker(self) -> _Worker:
        parent, child = Pipe()
        proc = subprocess.Popen(
            [sys.executable, "-m", "minisgl.constrained.worker", str(os.getpid()), str(child.fileno())],
            pass_fds=(child.fileno(),), env={**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"})
        child.close()
        return _Worker(proc, parent)

    def _retire(self, w: _Worker) -> None:
        _kill(w)
        self._workers.remove(w)

    def _receive(self, w: _Worker) -> None:
        """One message from a worker (worker.py lists them)."""
        try:
            msg = w.conn.recv()
        except (EOFError, OSError):
            msg = ("failed", f"it exited with status {w.proc.wait()}")
        if msg[0] == "started":
            _send(w, {"model_path": self.model_path, "vocab_size": self.vocab_size,
                         "stop_token_ids": self.stop_token_ids, "tokenizer_info": self._info_json,
                         "max_bytes": self.limits.cache_bytes})
        elif msg[0] == "ready":
            if self._info is None and msg[1] is not None:
                self._set_tokenizer_info(msg[1])
            w.ready = True
            with self._lock:
                self._down, self._start_failures = None, 0
            logger.info("grammar compile worker ready (pid %d)", w.proc.pid)
        elif msg[0] == "failed":
            with self._lock:
                self._retire(w)
                if w.job is not None:
                    kind = w.job.key[0]
                    logger.warning("a grammar compile worker failed on a %s constraint: %s", kind, msg[1])
                    self._finish(w.job, error=f"{CONSTRAINT_FIELDS[kind]}: the grammar compiler failed on this "
                                              f"{kind} constraint ({msg[1]})")
                elif not w.ready:
                    self._start_failures += 1
                    backoff = min(self.RESTART_BACKOFF_S * 2 ** (self._start_failures - 1), self.RESTART_BACKOFF_MAX_S)
                    self._retry_at = time.monotonic() + backoff
                    self._down = (f"structured output is unavailable for now: its compiler did not start ({msg[1]}); "
                                  f"retried in {backoff:g} s")
                    logger.error("%s", self._down)
        else:
            _, ok, payload = msg  # from the worker holding the job: its id is w.job.id
            job, w.job = w.job, None
            grammar = self._grammar(job.key, payload) if ok else None  # outside the lock: it may take a while
            with self._lock:
                if not job.cancelled:
                    self._finish(job, grammar, None if ok else payload,
                                 size=held_bytes(grammar.compiled, payload) if grammar else len(payload))

    def _finish(self, job: _Job, grammar: Grammar | None = None, error: str | None = None,
                unavailable: bool = False, size: int = 0) -> None:
        """Under the lock: the job's future gets its result; a compiled grammar or a compile error
        (the same next time) is cached, a time-out is not (the next try may be luckier).
        `unavailable`: the error is that no worker is up (CompilerUnavailable). `size`: what the
        grammar is counted as holding (worker.held_bytes), which the worker already kept under the
        cache's budget."""
        self._jobs.pop(job.key, None)
        if job.future.cancelled():
            return
        if grammar is not None:
            job.future.set_result(grammar)
            self._keep(job.key, job.future, size)
        else:
            job.future.set_exception((CompilerUnavailable if unavailable else ValueError)(error))
            if error.startswith("cannot compile"):
                self._keep(job.key, job.future, len(error))

    def _keep(self, key: Key, future: Future, size: int) -> None:
        if size > self.limits.cache_bytes:
            return
        self._cache[key] = (future, size)
        self._cache_bytes += size
        while len(self._cache) > self.CACHE_SIZE or self._cache_bytes > self.limits.cache_bytes:
            _, (_, dropped) = self._cache.popitem(last=False)
            self._cache_bytes -= dropped

    def _set_tokenizer_info(self, info_json: str) -> None:
        import xgrammar as xgr

        self._info = xgr.TokenizerInfo.deserialize_json(info_json)
        # xgrammar's JSON strings admit raw control characters, which JSON (RFC 8259) and
        # json.loads refuse; compact JSON never needs one outside a string, so they are masked.
        self._no_control = tokens_without_control_bytes(self._info.decoded_vocab, self.vocab_size)
        self._info_json = info_json

    def _grammar(self, key: Key, compiled_json: str) -> Grammar:
        import xgrammar as xgr

        compiled = xgr.CompiledGrammar.deserialize_json(compiled_json, self._info)
        return Grammar(compiled, self._no_control if key[0].startswith("json") else None)


def _drain(fd: int) -> bool:
    try:
        return bool(os.read(fd, 4096))
    except BlockingIOError:
        return False


def _send(w: _Worker, msg) -> None:
    try:
        w.conn.send(msg)
    except OSError:
        pass  # it died: its end of the connection reads as closed, and _receive says so


def _kill(w: _Worker) -> None:
    w.proc.kill()
    w.proc.wait()
    w.conn.close()
