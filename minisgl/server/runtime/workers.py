"""The server's worker processes: started, the model checked by the schedulers, stopped.

Children: tokenizer, detokenizer and the scheduler (rank 0, with its engine), plus one engine
process per further tensor-parallel rank. The API process (minisgl.server.launch) runs the HTTP
server and watches them all (supervisor.py):

* a child that dies ends every request in flight with a 503 (or a stream error event), new ones
  are refused with 503, and the server exits non-zero with every child gone (a container restarts);
* a child that stops turning (its heartbeat silent past --watchdog-timeout: stopped, deadlocked, a
  GPU step that never ends) turns /health and /ready red until it turns again;
* SIGTERM (or Ctrl-C) stops taking requests (503) and lets those in flight finish for at most
  --drain-timeout; then the rest are aborted (their KV pages freed), each stream still gets a final
  error event and [DONE], each waiting client a 503, and the server exits 0 with every child gone.
  A second signal exits at once, non-zero.

Start-up runs in parallel: the launcher starts the children before it imports anything heavy (see
`start_workers` for how each kind starts), while it imports the HTTP side. The model's
check (`check_model`) runs in each scheduler child, which imports what it needs anyway; the first
local rank's verdict goes to the launcher, which refuses a model that cannot be served with the
check's message alone (no child's traceback), or starts listening. The schedulers load the model as
soon as it is checked, while the launcher and the tokenizers start, but report ready only once the
launcher listens (`Workers.proceed`): the probes answer ("loading") before the engine can be ready.
"""

from __future__ import annotations

import multiprocessing as mp
import multiprocessing.forkserver
import os
import queue
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from multiprocessing.synchronize import Event
from typing import TYPE_CHECKING

from minisgl.utils.liveness import Heartbeats, WorkerLink
from minisgl.utils.logger import get_logger

from ..args import ServerArgs, load_chat_template
from .nodes import NodePlacement

if TYPE_CHECKING:  # this module is imported before torch: the launcher spawns the workers first
    from minisgl.scheduler import SchedulerConfig

logger = get_logger(__name__)
# "stats": scheduler -> API process, the numbers /metrics exports (minisgl.server.metrics).
# Tokenizer i listens on tokenizer_name(i).
ADDRESS_NAMES = ["scheduler", "detokenizer", "api", "stats"]


def scheduler_config(args: ServerArgs, model_path: str, rank: int = 0,
                     distributed_addr: str = "tcp://127.0.0.1:23333") -> SchedulerConfig:
    """The scheduler's config from the flags. A config field takes the value of the flag of the same
    name (so a new setting needs no line here); only the computed fields are written out."""
    from minisgl.distributed import DistributedInfo
    from minisgl.engine.config import resolve_dtype
    from minisgl.scheduler import SchedulerConfig

    computed = dict(
        model_path=model_path,
        tp_info=DistributedInfo(rank, args.tp),
        distributed_addr=distributed_addr,
        dtype=resolve_dtype(args.dtype),
        # The custom all-reduce maps peers' memory through CUDA IPC: one node only. Across nodes
        # every all-reduce is NCCL's (the probe would fail there too, but only after trying).
        disable_custom_all_reduce=args.disable_custom_all_reduce or NodePlacement.of(args).nnodes > 1,
    )
    flags = {f.name for f in fields(args)}
    copied = {f.name: getattr(args, f.name) for f in fields(SchedulerConfig)
              if f.name in flags and f.name not in computed}
    return SchedulerConfig(**copied, **computed)


def resolve_model(args: ServerArgs) -> tuple[ServerArgs, str]:
    """The model directory to load: --model, or with none the built-in demo on the CPU. Checked by
    `check_model`, which the launcher runs while the workers import."""
    if args.model:
        path = args.model
        if path.startswith((".", "/", "~")) and not os.path.isdir(os.path.expanduser(path)):
            raise ValueError(f"model directory {path} does not exist")
        if not os.path.isdir(path):
            from .hub import check_hub_model

            check_hub_model(path)
        return args, path
    from minisgl.demo.model import demo_model_dir

    logger.warning("no --model given: serving the built-in DEMO model (tiny, trained at its first start on "
                   "synthetic chats, on the CPU): it answers briefly, writes JSON and calls tools, but its words "
                   "mean little. Pass --model to serve a real model.")
    if args.device == "auto":
        args = type(args)(**{**args.__dict__, "device": "cpu"})
    return args, demo_model_dir()


def check_runtime_flags(args: ServerArgs) -> None:
    """Flags whose check needs torch, which args.py may not import (it is standard library only, for
    the operator): a CUDA device. Raise ValueError."""
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA GPU is available here (use --device cpu or auto)")


def check_model(args: ServerArgs, model_path: str) -> int:
    """Problems visible before the model is loaded (the runtime flags, the architecture, the --tp
    split): raise ValueError. Else the context length (`context_length`)."""
    from minisgl.engine.config import resolve_device, validate_tp
    from minisgl.models import load_model_config

    check_runtime_flags(args)
    config = load_model_config(model_path)
    validate_tp(config, args.tp, resolve_device(args.device), NodePlacement.of(args).ranks_per_node)
    if args.max_seq_len and args.max_seq_len > config.max_position_embeddings:
        raise ValueError(f"--max-seq-len {args.max_seq_len} is above the model's context length of "
                         f"{config.max_position_embeddings} tokens")
    return context_of(args, config)


def context_length(args: ServerArgs, model_path: str) -> int:
    """Prompt plus output tokens a request may have: --max-seq-len, else the model's context length
    (what /v1/models reports as max_model_len)."""
    from minisgl.models import load_model_config

    return context_of(args, load_model_config(model_path))


def context_of(args: ServerArgs, config) -> int:
    """`context_length` of a model config already read."""
    return min(args.max_seq_len or config.max_position_embeddings, config.max_position_embeddings)


def prompt_token_limit(args: ServerArgs, model_path: str) -> int:
    """Most prompt tokens a request may have: --max-prompt-tokens, else the context length (the
    engine may allow less; the scheduler has the last word)."""
    context = context_length(args, model_path)
    return min(args.max_prompt_tokens or context, context)


@dataclass
class Workers:
    procs: list[mp.process.BaseProcess]
    addrs: dict[str, str]
    status: mp.Queue
    heartbeats: Heartbeats
    verdict: mp.Queue  # the first local scheduler's check of the model: its refusal, or the context length
    go: Event  # set by `proceed`: the schedulers, loaded, report ready
    forked: list[mp.process.BaseProcess]  # not started yet: `start_forked`

    def start(self, procs: list[mp.process.BaseProcess]) -> None:
        for p in procs:
            p.daemon = True
            p.start()  # logged once the model is checked: a refused model prints its reason alone
            self.procs.append(p)

    def start_forked(self) -> None:
        """Start the forkserver's children (blocks until the forkserver has imported)."""
        self.start(self.forked)
        for p in self.forked:
            logger.info("started worker %s (pid %d)", p.name, p.pid)
        self.forked = []

    def proceed(self) -> None:
        self.go.set()

    def wait_checked(self) -> int | None:
        """Block until the model is checked: its context length, or ValueError (refused); None if a
        child died before (that death is reported as any start-up failure is: `wait_ready`, the
        supervisor)."""
        while True:
            try:
                verdict = self.verdict.get(timeout=0.25)
                break
            except queue.Empty:
                if self.dead():
                    return None
        if isinstance(verdict, str):
            raise ValueError(verdict)
        for p in self.procs:
            logger.info("started worker %s (pid %d)", p.name, p.pid)
        return verdict

    def wait_ready(self, should_stop=lambda: False) -> None:
        """Block until every child reported start-up; raise if one failed or died."""
        pending = {p.name for p in self.procs}
        while pending:
            if should_stop():
                raise RuntimeError("stopped during start-up")
            try:
                kind, name, detail = self.status.get(timeout=0.5)
            except queue.Empty:
                dead = self.dead()
                if dead:
                    raise RuntimeError(f"worker {dead} exited during start-up")
                continue
            if kind == "error":
                raise RuntimeError(f"worker {name} failed to start:\n{detail}")
            pending.discard(name)
            logger.info("worker %s is ready", name)

    def dead(self) -> str | None:
        """The workers that have exited, killed ones first: a rank killed by a signal takes its
        peer ranks down with it, and the log should name the cause, not the echo."""
        gone = sorted((p for p in self.procs if not p.is_alive()), key=lambda p: (p.exitcode or 0) >= 0)
        return ", ".join(f"{p.name} (exit code {p.exitcode})" for p in gone) or None

    def silent_past(self, timeout: float) -> dict[str, float]:
        """Workers started but silent for longer than `timeout` s (hung), and for how long."""
        return self.heartbeats.silent_past(timeout)

    def stop(self, grace: float = 5.0) -> None:
        for p in self.procs:
            if p.is_alive():
                p.terminate()
        deadline = time.monotonic() + grace
        for p in self.procs:
            p.join(max(0.0, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join()
        # Closed and its feeder thread joined, the queue's semaphores are released before exit
        # (else multiprocessing's resource tracker warns of a leaked semaphore).
        for q in (self.status, self.verdict):
            q.close()
            q.join_thread()
        shutil.rmtree(os.path.dirname(self.addrs["api"].removeprefix("ipc://")), ignore_errors=True)


def launch_workers(args: ServerArgs, meanwhile: Callable[[], object] = lambda: None) -> tuple[ServerArgs, str, Workers]:
    """The model resolved, the workers started (`meanwhile()` run as they import) and the model
    checked by them: a ValueError, with every child stopped, if it cannot be served. The args come
    back with the model's path and its context length (max_seq_len) resolved. The schedulers then
    load the model, and wait for `Workers.proceed` to report ready."""
    args, model_path = resolve_model(args)
    workers = start_workers(args, model_path)
    try:
        meanwhile()
        # The schedulers' check, then the tokenizer side: the launcher's, the schedulers' and the
        # forkserver's imports run side by side, not in a row; the schedulers load once checked.
        # The check reads the model's context length, so the launcher need not (that import is torch's).
        checked = workers.wait_checked()
        args = replace(args, max_seq_len=checked or context_length(args, model_path))
        workers.start_forked()
    except BaseException:
        workers.stop(grace=1.0)
        raise
    return args, model_path, workers


# How the children start. The schedulers are spawned and import torch and the engine themselves from
# the first moment: that import, then the engine's load, is a start's longest path, and on a GPU
# node's many cores the ranks, the launcher and the forkserver import side by side. The tokenizers and
# the detokenizer fork from a forkserver that imports the tokenizer side (transformers) once, where
# spawn made each of them import it again (seconds of CPU apiece, all at once on a small machine). A
# forkserver that imported the engine too put every import in a row: on a one-H100 machine the first
# child started 13 s after the launcher (Qwen3-0.6B ready 23 s after start; benchmark/NOTES.md).
TOKENIZER_IMPORTS = ["minisgl.tokenizer.worker"]


def tokenizer_context() -> mp.context.BaseContext:
    """The forkserver's context, its imports begun (they run while the launcher goes on)."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(TOKENIZER_IMPORTS)
    mp.forkserver.ensure_running()
    return ctx


def start_workers(args: ServerArgs, model_path: str) -> Workers:
    """Start the schedulers, and the forkserver's imports for the tokenizer side; `Workers.start_forked`
    starts the tokenizers and the detokenizer (it waits for those imports)."""
    from minisgl.tokenizer.routing import tokenizer_name
    from minisgl.utils.net import ipc_addresses

    ctx = mp.get_context("spawn")
    placement = NodePlacement.of(args)
    # Only the head node talks to clients: the other nodes run their engine ranks alone.
    tokenizers = [tokenizer_name(i) for i in range(args.num_tokenizers)] if placement.is_head else []
    addrs = ipc_addresses(ADDRESS_NAMES + tokenizers)
    status = ctx.Queue()
    verdict, go = ctx.Queue(), ctx.Event()
    dist_addr = placement.rendezvous()  # rendezvous of the tensor-parallel ranks
    schedulers = {rank: "scheduler" if rank == 0 else f"scheduler-rank{rank}" for rank in placement.local_ranks}
    local = list(schedulers.values()) + tokenizers + (["detokenizer"] if placement.is_head else [])
    heartbeats = Heartbeats(local, ctx)

    def link(name: str) -> WorkerLink:
        return WorkerLink(name, status, heartbeats.of(name))

    procs = [
        ctx.Process(target=_scheduler_main, name=name,
                    args=(args, model_path, rank, dist_addr, addrs, link(name), verdict if i == 0 else None, go))
        for i, (rank, name) in enumerate(schedulers.items())
    ]
    forked = []
    if placement.is_head:
        fork = tokenizer_context()
        chat_template = load_chat_template(args.chat_template)  # read once, for every tokenizer
        forked = [
            fork.Process(target=_tokenizer_main, name=name,
                         args=(args, model_path, addrs, link(name), chat_template))
            for name in tokenizers
        ] + [
            fork.Process(target=_detokenizer_main, name="detokenizer",
                         args=(model_path, addrs, link("detokenizer"))),
        ]
    workers = Workers([], addrs, status, heartbeats, verdict, go, forked)
    workers.start(procs)
    return workers


# The children's entry points: the imports first (the launcher has none of them).


def _scheduler_main(args: ServerArgs, model_path: str, rank: int, dist_addr: str, addrs: dict[str, str],
                    link: WorkerLink, verdict: mp.Queue | None, go: Event) -> None:
    from minisgl.scheduler.process import run_scheduler

    try:
        context = check_model(args, model_path)
    except ValueError as e:  # every rank checks, and a refused one exits quietly: the launcher says why
        if verdict is not None:
            verdict.put(str(e))
        raise SystemExit(2) from None
    if verdict is not None:
        verdict.put(context)
    parent = os.getppid()

    def until_launcher_listens() -> None:
        while not go.wait(0.25):
            if os.getppid() != parent:  # the launcher is gone (killed) before it let us go on
                raise SystemExit(0)

    run_scheduler(scheduler_config(args, model_path, rank, dist_addr), addrs, link, until_launcher_listens)


def _tokenizer_main(args: ServerArgs, model_path: str, addrs: dict[str, str], link: WorkerLink,
                    chat_template: str | None) -> None:
    from minisgl.tokenizer.worker import run_tokenizer

    run_tokenizer(model_path, addrs, link, chat_template, prompt_token_limit(args, model_path))


def _detokenizer_main(model_path: str, addrs: dict[str, str], link: WorkerLink) -> None:
    from minisgl.tokenizer.worker import run_detokenizer

    run_detokenizer(model_path, addrs, link)
