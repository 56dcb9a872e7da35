"""The entry points `python -m minisgl` runs: serve over HTTP (node 0), run this node's engine
ranks (the other nodes of a multi-node server), or chat in the terminal (--shell). Each resolves
the model, starts the workers (runtime/workers.py) and ties them to what serves them: the HTTP app
(http/) under uvicorn, watched by the supervisor (runtime/supervisor.py), or the shell.

What a worker's death, a hang and SIGTERM do is runtime/supervisor.py's docstring.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import signal
import sys
import threading

from minisgl.utils.gc_freeze import freeze_startup_objects
from minisgl.utils.logger import get_logger

from .args import ServerArgs
from .runtime.nodes import NodePlacement
from .runtime.workers import launch_workers

logger = get_logger(__name__)


def serve(args: ServerArgs) -> int:
    """Run the HTTP server until SIGTERM/SIGINT or a child's death; return the exit code."""
    from .runtime.connections import connection_limit, raise_open_file_limit, uvicorn_http_protocol

    if not NodePlacement.of(args).is_head:
        return serve_engine_ranks(args)

    open_files = raise_open_file_limit()  # before the workers start: they inherit it
    args = dataclasses.replace(args, max_connections=connection_limit(args.max_connections, open_files))
    # The HTTP side imported while the schedulers import and check the model; max_seq_len comes
    # back resolved, for /v1/models.
    args, model_path, workers = launch_workers(args, meanwhile=_import_http)
    import uvicorn

    from .http.app import create_app
    from .http.metrics import ServerMetrics
    from .runtime.frontend import FrontendClient
    from .runtime.state import ServerState
    from .runtime.supervisor import Supervisor

    state = ServerState()
    client = FrontendClient(workers.addrs)
    metrics = ServerMetrics(args.model_name, args.model or model_path, args.tp, args.metrics_compat,
                            args.max_loras or len(args.lora_adapters))
    app = create_app(args, client, state, metrics)

    class Server(uvicorn.Server):
        # SIGTERM/SIGINT are ours (main() below: drain first). uvicorn >= 0.29 installs its own
        # handlers in capture_signals(), which would stop the server at once; older ones in
        # install_signal_handlers(). Neither may run.
        def install_signal_handlers(self) -> None:
            pass

        @contextlib.contextmanager
        def capture_signals(self):
            yield

    # No lifespan: the app has no start-up or shutdown hooks, and a forced exit (a second signal)
    # would cancel the lifespan task with a traceback in the log.
    server = Server(uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level,
                                   timeout_graceful_shutdown=5, access_log=False, lifespan="off",
                                   # The connection cap: runtime.connections and http.middleware.ConnectionCap
                                   # (the probes are answered beyond it).
                                   http=uvicorn_http_protocol(args.header_timeout, args.max_header_bytes, state,
                                                              args.max_connections)))
    supervisor = Supervisor(args, workers, state, client, server)

    def announce() -> None:
        freeze_startup_objects()
        logger.info("minisgl ready: serving %s as '%s' at http://%s:%d", model_path, args.model_name,
                    args.host, args.port)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, supervisor.on_signal, sig)
        watcher = loop.create_task(supervisor.watch(announce))
        stats = loop.create_task(metrics.follow_scheduler(workers.addrs["stats"]))
        listening = loop.create_task(proceed_once_listening())
        try:
            await server.serve()
        finally:
            supervisor.stopping.set()
            for task in (watcher, stats, listening):
                task.cancel()

    async def proceed_once_listening() -> None:
        # The probes answer from here on ("loading" until the engine is ready); then the model loads.
        while not server.started:
            await asyncio.sleep(0.01)
        workers.proceed()

    exit_code = 0
    try:
        _run_event_loop(main())
    except SystemExit as e:  # uvicorn exits this way when it cannot bind
        exit_code = e.code if isinstance(e.code, int) and e.code else 1
    finally:
        # After a worker's death the others may be blocked on it (a collective, a full socket)
        # and never act on SIGTERM: no long wait for them.
        workers.stop(grace=1.0 if supervisor.forced or supervisor.exit_code else 5.0)
    exit_code = exit_code or supervisor.exit_code
    if not server.started and exit_code == 0 and not supervisor.stopping.is_set():
        exit_code = 1
    return exit_code


def _import_http() -> None:
    """The HTTP side's modules, imported while the workers import theirs. No torch among them: it
    costs seconds of CPU, and the API process has no use for it."""
    import uvicorn  # noqa: F401

    from .http import app  # noqa: F401
    from .runtime import frontend, supervisor  # noqa: F401


def serve_engine_ranks(args: ServerArgs) -> int:
    """A node other than node 0: run this node's engine ranks until they end or SIGTERM/SIGINT.

    The ranks follow rank 0's scheduler through torch.distributed; when node 0 stops or fails,
    their next collective fails and they exit, and so does this node, non-zero (a LeaderWorkerSet
    then restarts the whole group)."""
    placement = NodePlacement.of(args)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    args, _, workers = launch_workers(args)
    workers.proceed()
    try:
        logger.info("node %d of %d: engine ranks %s, joining node 0 at %s", placement.node_rank, placement.nnodes,
                    list(placement.local_ranks), args.dist_init_addr)
        workers.wait_ready(stop.is_set)
        logger.info("node %d ready: its ranks joined the tensor-parallel group", placement.node_rank)
        while not stop.wait(0.25):
            dead = workers.dead()
            if dead:
                logger.error("engine %s exited (node 0 stopped or failed); exiting", dead)
                return 1
        return 0
    except RuntimeError as e:
        if stop.is_set():
            return 0
        logger.error("%s", e)
        return 1
    finally:
        workers.stop()


def _run_event_loop(coro) -> None:
    """uvloop when installed (the API process's per-token path is event-loop bound), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    uvloop.run(coro)


def run_shell(args: ServerArgs) -> int:
    from .runtime.frontend import FrontendClient
    from .shell import chat_shell

    args, _, workers = launch_workers(args)
    workers.proceed()
    try:
        print("loading the model ...", file=sys.stderr)
        workers.wait_ready()
        return asyncio.run(chat_shell(FrontendClient(workers.addrs), workers, args.shell_temperature,
                                      args.shell_max_tokens))
    except RuntimeError as e:
        logger.error("%s", e)
        return 1
    finally:
        workers.stop()
