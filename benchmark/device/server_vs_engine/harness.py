"""What the server-against-engine drivers share (pairs.py, quads.py, spin.py, codec_ab.py): the offline
engine's process (offline_worker.py) and benchmark/online/bench.py's chat serving workload, run at rate
inf with fresh ids as bench.py's run i draws them."""

import importlib.util
import json
import os
import random
import subprocess
import sys
import time


def start_offline_worker(R, model, pages):
    """offline_worker.py as a child (its log and pid in R): the process, and a function that returns its
    next `@@ {json}` answer (its other output goes to the log)."""
    log = open(os.path.join(R, "offline-worker.log"), "w")
    worker = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(__file__), "offline_worker.py"), model,
                               str(pages)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
                              bufsize=1)
    open(os.path.join(R, "worker.pid"), "w").write(str(worker.pid))

    def reply():
        while True:
            line = worker.stdout.readline()
            if not line:
                raise RuntimeError(f"offline worker ended (rc {worker.poll()})")
            if line.startswith("@@ "):
                return json.loads(line[3:])
            log.write("[stdout] " + line)
            log.flush()

    return worker, reply


def load_online_bench():
    """benchmark/online/bench.py as a module (run from the repository root)."""
    spec = importlib.util.spec_from_file_location("online_bench", os.path.join("benchmark", "online", "bench.py"))
    ob = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ob)
    return ob


def serving_args(ob, url, R, repeats=1):
    """bench.py's flags for its chat serving workload at rate inf against `url`."""
    args, _ = ob.parse_args(["--api", "chat", "--rates", "inf", "--workload", "serving", "--repeats", str(repeats),
                             "--client-processes", "4", "--no-progress", "--base-url", url,
                             "--out", os.path.join(R, "unused.json")])
    return args


def chat_target(ob, args, url):
    """(the streaming client's target for the server at `url`, its vocabulary size)."""
    from minisgl.benchmark.sse_client import Target, chat_words

    model, root = ob.served_model(url, None, None)
    root = ob.local_root(root)
    vocab = ob.vocab_size(args, root)
    return Target(url, model, "chat", None, args.temperature, args.request_timeout, chat_words(root)), vocab


def fresh_requests(ob, args, runs, vocab):
    """A function of i: bench.py's run i at rate inf (fresh ids), as its workloads draw it."""
    from minisgl.benchmark.online import random_ids
    from minisgl.benchmark.workload import offline_workload

    lengths = offline_workload(args.num_requests, args.max_input_len, args.max_output_len, vocab, args.seed)
    assert len(lengths) == len(runs[0][2])

    def requests(i):
        rng = random.Random(args.seed * 1000 + i + 1)
        return [ob.BenchRequest(random_ids(rng, len(w.prompt_ids), vocab), w.max_tokens, r.arrival_s)
                for w, r in zip(lengths, runs[0][2])]

    return requests


def warm_requests(ob, vocab):
    """bench.py's two short warm-up requests."""
    from minisgl.benchmark.online import random_ids

    return [ob.BenchRequest(random_ids(random.Random("warm-up requests"), 16, vocab), 8) for _ in range(2)]


def driver_env(deadline, pages=32768):
    """(T0, DEADLINE, R, MODEL, PAGES) from the environment every driver reads: T0 (epoch of the call's
    start), DEADLINE (s after T0 by which everything is stopped; `deadline` unless set), R (results dir),
    MODEL and PAGES (the KV pages of each engine; `pages` unless set)."""
    return (float(os.environ["T0"]), float(os.environ.get("DEADLINE", deadline)), os.environ["R"],
            os.environ["MODEL"], int(os.environ.get("PAGES", pages)))


def clock(T0):
    """(el, log): seconds since T0 (the call's start), and a print of a line stamped with them."""

    def el():
        return time.time() - T0

    def log(msg):
        print(f"[{el():6.1f}s] {msg}", flush=True)

    return el, log


def start_engine_and_server(R, model, pages, log, port=1919):
    """The offline engine (start_offline_worker) and the server on `port`, started together and left up
    side by side: (worker, its reply function, the server's ServerProcess, its URL)."""
    from minisgl.benchmark.server_process import ServerProcess

    url = f"http://127.0.0.1:{port}"
    worker, reply = start_offline_worker(R, model, pages)
    cmd = [sys.executable, "-m", "minisgl", "--model", model, "--dummy-weight", "--num-pages", str(pages),
           "--host", "127.0.0.1", "--port", str(port)]
    srv = ServerProcess(cmd, url, os.path.join(R, "server.log"), command=True)
    open(os.path.join(R, "server.pid"), "w").write(str(srv.proc.pid))
    log(f"started offline worker pid {worker.pid} and server pid {srv.proc.pid}: {' '.join(cmd)}")
    return worker, reply, srv, url


def recorder(R):
    """A function that appends one JSON object a line to R/records.jsonl, flushed at once."""
    records = open(os.path.join(R, "records.jsonl"), "w")

    def record(obj):
        records.write(json.dumps(obj) + "\n")
        records.flush()

    return record


def stop_offline_worker(worker, log, timeout=15):
    """Ask the offline engine to quit; killed if it has not after `timeout` s or the pipe is gone."""
    try:
        worker.stdin.write("quit\n")
        worker.stdin.flush()
        worker.wait(timeout)
    except Exception as e:  # noqa: BLE001 - whatever went wrong, the engine must not outlive the call
        log(f"worker quit: {e!r}; killing pid {worker.pid}")
        worker.kill()


def stop_engine_and_server(worker, srv, log):
    """Stop the offline engine (stop_offline_worker) and the server; both exit codes logged."""
    stop_offline_worker(worker, log)
    code = srv.stop(timeout=15)
    log(f"server stopped (exit {code}), worker exit {worker.poll()}")
