"""Online serving benchmark: streaming requests at Poisson arrival rates, read as raw server-sent
events by several client processes (`minisgl.benchmark.sse_client`), so the client is not the limit.

    # start the server, sweep three rates, stop it (server flags after --):
    python benchmark/online/bench.py --launch --rates 4,16,64 -- --model .bench-models/qwen3-0.6b --dummy-weight
    # against a running server; `inf` sends every request at once:
    python benchmark/online/bench.py --base-url http://127.0.0.1:1919 --rates 2,8,32,inf --num-requests 128
    # two servers, the same requests, one table with both and the ratio (the second one may be
    # started by a shell command once the first is done, so they never share the device):
    python benchmark/online/bench.py --launch --compare-base-url http://127.0.0.1:1920 \
        --compare-launch "python -m other_server --port 1920" -- --model ...
    # replay a JSONL trace ({"arrival_s": 0.4, "input_len": 512, "output_len": 128} per line):
    python benchmark/online/bench.py --launch --trace trace.jsonl
    # each rate's burst 3 times, the long-output workload, the server against its offline engine
    # (benchmark/offline/bench.py --workload long --repeats 3 wrote offline.json):
    python benchmark/online/bench.py --launch --rates inf --workload long --repeats 3 --offline-json offline.json -- ...

Every request streams with `max_tokens` (and `max_completion_tokens` for chat) and `ignore_eos`, so
its output length is its max_tokens on a server that honours them; a shorter output is counted in
`short_outputs`. Lengths follow the offline workload (`--workload`: `serving` by default, 1,024
requests; `long` for long outputs; random in [min(100, max), max], fixed when max <= 100) and
prompts are random token ids (fresh for each run, so the prefix cache does not carry over). Before
the measured runs an unmeasured warm-up burst sends the first run's lengths at once, so the first
measured burst does not pay for the server's allocators growing. `--repeats N` runs each rate's
burst N times (the same lengths and arrival times, fresh ids) and reports each rate's mean, min,
max and spread ((max - min) / mean) of output throughput; ratios between servers, and against the
offline engine (`--offline-json`, at rate inf), are ratios of those means. Reports TTFT, ITL
(between streamed chunks), TPOT and end-to-end latency (mean/p50/p90/p99) and request and
output-token throughput per run; output tokens come from the stream's usage, or are counted per
text chunk when the server sends none. Writes JSON and a PNG beside it. Exits 1 if any request
failed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import sys
import time
from dataclasses import asdict, replace
from urllib.parse import urlparse

from minisgl.benchmark.online import (
    comparison_table,
    fmt,
    format_summary,
    format_table,
    latency_plot,
    load_trace,
    parse_rates,
    poisson_arrivals,
    random_ids,
    rate_label,
    split_server_flags,
    summarize,
    throughput_summary,
)
from minisgl.benchmark.repeats import ratio_of_means
from minisgl.benchmark.report import device_name, write_json
from minisgl.benchmark.server_process import ServerProcess
from minisgl.benchmark.sse_client import CHAT_WORDS, BenchRequest, Target, chat_words, run_requests
from minisgl.benchmark.workload import add_workload_flags, offline_workload, workload_settings, workload_size
from minisgl.utils.net import free_port

LOOPBACK = {"127.0.0.1", "localhost", "::1"}
MODEL_FREE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "model_free.py")


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """Benchmark flags, and the server flags after `--` (for --launch)."""
    argv, server_args = split_server_flags(argv)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base-url", default="http://127.0.0.1:1919", help="server to drive (without /v1)")
    p.add_argument("--launch", action="store_true",
                   help="start `python -m minisgl` with the flags after -- on a free loopback port, stop it at the end")
    p.add_argument("--model-free", action="store_true",
                   help="with --launch: the server's engine runs no model and emits random tokens as fast as the "
                   "CPU allows (model_free.py beside this script), to measure the serving path alone")
    p.add_argument("--ready-timeout", type=float, default=900, help="seconds to wait for a launched server")
    p.add_argument("--api", choices=["completions", "chat"], default="completions",
                   help="completions: token-id prompts of exact length; chat: word prompts of about that length")
    p.add_argument("--model", help="model name in requests (default: the server's first /v1/models entry)")
    p.add_argument("--spread-models", help="comma-separated model names (e.g. LoRA adapters) the requests go to in "
                   "turn, instead of --model; a second server must serve them too")
    p.add_argument("--api-key", help="bearer key (default: $MINISGL_API_KEY or the launched server's --api-key)")
    p.add_argument("--vocab-size", type=int, help="prompt token ids stay below it (default: from the model config)")
    p.add_argument("--rates", default="2,8,32", help="comma-separated Poisson rates in requests/s; inf = all at once")
    p.add_argument("--trace", help="JSONL trace (arrival_s|timestamp[ms], input_len, output_len) instead of --rates")
    p.add_argument("--trace-speedup", type=float, default=1.0, help="divide the trace's arrival times by this")
    add_workload_flags(p, default="serving")  # requests per rate (trace: the first N) and their lengths
    p.add_argument("--repeats", type=int, default=1,
                   help="run each rate's burst this many times (the same lengths and arrivals, fresh prompt ids) "
                   "and report each rate's mean, min, max and spread of output throughput")
    p.add_argument("--no-warmup-burst", action="store_true",
                   help="skip the unmeasured burst of the first run's lengths, sent at once before the measured runs")
    p.add_argument("--offline-json", help="the offline engine's result on the same workload (benchmark/offline/"
                   "bench.py --out): report the server's mean output throughput at rate inf over the engine's mean")
    p.add_argument("--max-concurrency", type=int, default=None, help="cap on requests in flight (default: none)")
    p.add_argument("--request-timeout", type=float, default=600, help="seconds per request before it counts as failed")
    p.add_argument("--warmup", type=int, default=2, help="short unmeasured requests before the first rate")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--client-processes", type=int, default=min(4, os.cpu_count() or 1),
                   help="client processes the requests are spread over (default: min(4, cores))")
    p.add_argument("--name", default="minisgl", help="the first server's name in tables")
    p.add_argument("--compare-base-url", help="a second server driven with the same requests after the first")
    p.add_argument("--compare-launch", help="shell command that starts the second server (stopped at the end); "
                   "it runs only after the first server is stopped")
    p.add_argument("--compare-name", default="other", help="the second server's name in tables")
    p.add_argument("--compare-model", help="model name for the second server (default: its first /v1/models entry)")
    p.add_argument("--no-progress", action="store_true", help="no tqdm progress bar")
    p.add_argument("--out", default="results/online.json", help="JSON path; the PNG goes beside it")
    args = p.parse_args(argv)
    if (server_args or args.model_free) and not args.launch:
        p.error("server flags after -- and --model-free need --launch")
    if args.compare_launch and not args.compare_base_url:
        p.error("--compare-launch needs --compare-base-url (where the launched server listens)")
    if args.client_processes < 1:
        p.error("--client-processes must be >= 1")
    vars(args).update(asdict(workload_size(args)))
    for name in ("num_requests", "max_input_len", "max_output_len", "warmup", "repeats"):
        if getattr(args, name) < (0 if name == "warmup" else 1):
            p.error(f"--{name.replace('_', '-')} is too small")
    if args.offline_json:
        problem = offline_problem(args)
        if problem:
            p.error(f"--offline-json: {problem}")
    return args, server_args


def offline_problem(args: argparse.Namespace) -> str | None:
    """Why --offline-json cannot be set beside this run (None if it can): the server is compared with
    the engine at rate inf, on the same workload."""
    if args.trace or float("inf") not in parse_rates(args.rates):
        return "needs rate inf in --rates (the server is compared with the engine on a burst sent at once)"
    if not os.path.isfile(args.offline_json):
        return f"no file {args.offline_json}"
    try:
        with open(args.offline_json) as f:
            offline = json.load(f)
    except ValueError as e:
        return f"{args.offline_json} is not JSON ({e})"
    if not isinstance(offline, dict) or offline.get("benchmark") != "offline" or "repeats" not in offline:
        return f"{args.offline_json} is not benchmark/offline/bench.py's result"
    ours = {k: getattr(args, k) for k in ("num_requests", "max_input_len", "max_output_len", "temperature")}
    theirs = {k: (offline.get("workload") or {}).get(k) for k in ours}
    if ours != theirs:
        return f"{args.offline_json} ran another workload: {theirs}, this run {ours}"
    return None


def versus_offline(path: str, summary: list[dict]) -> dict:
    """The server's mean output throughput at rate inf over the offline engine's mean, same requests."""
    with open(path) as f:
        offline = json.load(f)
    server = next(s for s in summary if s["rate"] == "inf")
    engine = offline["repeats"]
    return {"offline_json": path, "offline": engine, "server_rate_inf": server,
            "ratio": ratio_of_means(server, engine)}


def launch(args: argparse.Namespace, server_flags: list[str]) -> ServerProcess:
    from minisgl.server.args import parse_args as parse_server_args

    flags = list(server_flags)
    given = lambda flag: any(a == flag or a.startswith(flag + "=") for a in flags)  # noqa: E731
    if not given("--host"):
        flags += ["--host", "127.0.0.1"]
    if not given("--port"):
        flags += ["--port", str(free_port())]
    server = parse_server_args(flags)  # the server's own checks, before anything starts
    host = "127.0.0.1" if server.host in ("0.0.0.0", "::", "") else server.host
    args.api_key = args.api_key or server.api_key
    log_path = os.path.splitext(args.out)[0] + "-server.log"
    program = [MODEL_FREE] if args.model_free else ["-m", "minisgl"]
    command = [sys.executable, *program, *flags]
    print(f"launching: {shlex.join(command)}  (log: {log_path})", flush=True)
    srv = ServerProcess(command, f"http://{host}:{server.port}", log_path, command=True)
    try:
        srv.wait_ready(args.ready_timeout)
    except BaseException:
        srv.stop()
        raise
    return srv


def local_root(root: str | None) -> str | None:
    """The served model's folder: the demo's name (the server's built-in model, no --model) read as the
    demo's cache folder here, so that nothing asks the Hub for it (six retries, ~50 s offline)."""
    if root == "minisgl-demo":
        from minisgl.demo.model import demo_model_dir

        return demo_model_dir()
    return root


def vocab_size(args: argparse.Namespace, root: str | None) -> int:
    """Prompt ids must be valid tokens: read vocab_size from the served model's config."""
    if args.vocab_size:
        return args.vocab_size
    root = local_root(root or "minisgl-demo")
    config = os.path.join(root, "config.json")
    if os.path.isfile(config):
        with open(config) as f:
            cfg = json.load(f)
        return int(cfg.get("vocab_size") or cfg.get("text_config", {}).get("vocab_size"))
    try:
        from transformers import AutoConfig

        return int(AutoConfig.from_pretrained(root).vocab_size)
    except Exception as e:  # noqa: BLE001
        print(f"warning: no vocab size for {root!r} ({e}); prompt ids stay below 10001 (pass --vocab-size)")
        return 10001


def workloads(args: argparse.Namespace, vocab: int) -> list[tuple[str, float | None, list[BenchRequest], dict]]:
    """(label, rate or None, requests, extra JSON fields) for each run; with --spread-models, request i
    goes to the i-th of them in turn."""
    runs = _workloads(args, vocab)
    if not args.spread_models:
        return runs
    names = args.spread_models.split(",")
    return [(label, rate, [replace(r, model=names[i % len(names)]) for i, r in enumerate(reqs)], extra)
            for label, rate, reqs, extra in runs]


def _workloads(args: argparse.Namespace, vocab: int) -> list[tuple[str, float | None, list[BenchRequest], dict]]:
    if args.trace:
        runs = []
        for repeat in range(args.repeats):  # the same trace, fresh ids
            reqs, clipped = load_trace(args.trace, args.num_requests, args.max_input_len, args.max_output_len, vocab,
                                       args.seed * 1000 + repeat, args.trace_speedup)
            span = reqs[-1].arrival_s
            offered = len(reqs) / span if span > 0 else None
            runs.append(("trace", offered, reqs, {"repeat": repeat, "trace": args.trace, "clipped": clipped,
                                                  "span_s": span}))
        return runs
    lengths = offline_workload(args.num_requests, args.max_input_len, args.max_output_len, vocab, args.seed)
    runs = []
    rates = parse_rates(args.rates)
    for repeat in range(args.repeats):
        for j, rate in enumerate(rates):
            i = repeat * len(rates) + j
            rng = random.Random(args.seed * 1000 + i + 1)  # fresh ids per run: no prefix-cache hits across runs
            arrivals = poisson_arrivals(len(lengths), rate, args.seed + j)  # a rate's repeats: the same arrivals
            reqs = [BenchRequest(random_ids(rng, len(w.prompt_ids), vocab), w.max_tokens, t)
                    for w, t in zip(lengths, arrivals)]
            runs.append((rate_label(rate), None if rate == float("inf") else rate, reqs, {"repeat": repeat}))
    return runs


def warmup_burst(runs: list, vocab: int) -> list[BenchRequest]:
    """The first run's lengths, sent at once with ids of their own (they seed no run's prefix)."""
    rng = random.Random("warm-up burst")  # not an int: Random(-n) is Random(n), a run's own seed
    return [replace(r, prompt_ids=random_ids(rng, len(r.prompt_ids), vocab), arrival_s=0.0) for r in runs[0][2]]


def served_model(base_url: str, api_key: str | None, wanted: str | None) -> tuple[str, str | None]:
    """(model name for requests, its root path if the server says) from /v1/models."""
    import httpx

    headers = {"Authorization": f"Bearer {api_key or 'EMPTY'}"}
    models = httpx.get(base_url.rstrip("/") + "/v1/models", headers=headers, timeout=30).json().get("data") or []
    if not models and not wanted:
        raise RuntimeError(f"{base_url} lists no models; pass --model")
    model = wanted or models[0]["id"]
    return model, next((m.get("root") for m in models if m["id"] == model), None)


def drive(args: argparse.Namespace, base_url: str, model: str | None, runs: list | None = None) -> dict:
    """Warm up, then every run of `workloads` (or the given `runs`, to repeat another server's)."""
    model, root = served_model(base_url, args.api_key or os.environ.get("MINISGL_API_KEY"), model)
    root = local_root(root)
    vocab = vocab_size(args, root)
    target = Target(base_url, model, args.api, args.api_key or os.environ.get("MINISGL_API_KEY"), args.temperature,
                    args.request_timeout, chat_words(root) if args.api == "chat" else CHAT_WORDS)
    common = dict(processes=args.client_processes, progress=not args.no_progress)
    if args.warmup:
        rng = random.Random("warm-up requests")
        warm = [BenchRequest(random_ids(rng, min(16, args.max_input_len), vocab), min(8, args.max_output_len))
                for _ in range(args.warmup)]
        deadline = time.monotonic() + args.ready_timeout
        while True:  # a server may list its model before it can generate: retry until the deadline
            results, _, _ = run_requests(target, warm, desc="warm-up", **common)
            bad = [r.error for r in results if not r.ok]
            if not bad:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"warm-up requests failed: {bad[0]}")
            time.sleep(2)

    runs = runs if runs is not None else workloads(args, vocab)
    warm_burst = None
    if not args.no_warmup_burst:
        reqs = warmup_burst(runs, vocab)
        results, seconds, _ = run_requests(target, reqs, max_concurrency=args.max_concurrency,
                                           desc="warm-up burst", **common)
        warm_burst = summarize(results, seconds)
        print(f"warm-up burst (not measured): {warm_burst['completed']}/{warm_burst['requests']} done in "
              f"{seconds:.1f} s", flush=True)
    rows = []
    for label, rate, reqs, extra in runs:
        results, seconds, peak = run_requests(target, reqs, max_concurrency=args.max_concurrency,
                                              desc=f"rate {label}", **common)
        row = {"rate": label, "rate_rps": rate, **extra, "peak_in_flight": peak, **summarize(results, seconds)}
        rows.append(row)
        print(f"rate {label}: {row['completed']}/{row['requests']} done in {seconds:.1f} s, "
              f"{fmt(row['request_throughput'], 2)} req/s, {fmt(row['output_throughput'])} out tok/s, "
              f"TTFT p50/p99 {fmt(row['ttft_ms']['p50'])}/{fmt(row['ttft_ms']['p99'])} ms, "
              f"ITL p50 {fmt(row['itl_ms']['p50'])} ms"
              + (f", {row['short_outputs']} outputs shorter than asked" if row["short_outputs"] else "")
              + (f", {row['failed']} failed: {next(iter(row['errors']))}" if row["failed"] else ""), flush=True)
    return {"model": model, "model_root": root, "vocab_size": vocab, "warmup_burst": warm_burst, "results": rows,
            "summary": throughput_summary(rows), "runs": runs}


def launch_command(command: str, url: str, log_path: str, timeout: float) -> ServerProcess:
    print(f"launching: {command}  (log: {log_path})", flush=True)
    srv = ServerProcess(shlex.split(command), url, log_path, command=True,
                        ready_paths=("/ready", "/v1/models"))
    try:
        srv.wait_ready(timeout)
    except BaseException:
        srv.stop()
        raise
    return srv


def main(argv: list[str] | None = None) -> int:
    sys.stdout.reconfigure(line_buffering=True)  # progress shows as it happens, also through a pipe
    args, server_flags = parse_args(sys.argv[1:] if argv is None else argv)
    server = launch(args, server_flags) if args.launch else None
    base_url = server.url if server else args.base_url
    if urlparse(base_url).hostname not in LOOPBACK:
        print(f"note: {base_url} is not a loopback address")
    try:
        run = drive(args, base_url, args.model)
    finally:
        if server:
            code = server.stop()
            print(f"server stopped (exit {code})")
    other = None
    if args.compare_base_url:
        other_server = None
        if args.compare_launch:
            log = os.path.splitext(args.out)[0] + "-compare-server.log"
            other_server = launch_command(args.compare_launch, args.compare_base_url, log, args.ready_timeout)
        try:
            # The same requests (ids, lengths, arrival times); only the vocabulary check is the other's.
            other = drive(args, args.compare_base_url, args.compare_model, run["runs"])
        finally:
            if other_server:
                print(f"{args.compare_name} server stopped (exit {other_server.stop()})")
    names = (args.name, args.compare_name)
    result = {
        "benchmark": "online", "device": device_name(), "base_url": base_url, "launched": bool(server),
        "server_args": server_flags if server else None, "api": args.api, "client_processes": args.client_processes,
        "workload": {**workload_settings(args), **{k: getattr(args, k) for k in (
            "max_concurrency", "seed", "trace", "trace_speedup", "repeats")}},
        **{k: v for k, v in run.items() if k != "runs"},
    }
    if args.offline_json:
        result["vs_offline"] = versus_offline(args.offline_json, run["summary"])
    if other:
        result["compare"] = {"name": args.compare_name, "base_url": args.compare_base_url, "launch": args.compare_launch,
                             **{k: v for k, v in other.items() if k != "runs"}}
    write_json(args.out, result)
    png = os.path.splitext(args.out)[0] + ".png"
    title = f"Online serving: {run['model']} on {result['device']}" + (f", {names[0]} vs {names[1]}" if other else "")
    latency_plot(png, title, run["results"], other["results"] if other else None, names)
    print(format_table(run["results"]))
    print(f"\noutput throughput over {args.repeats} repeat(s) of each rate:\n" + format_summary(run["summary"]))
    if other:
        print(f"\n{names[1]}:\n" + format_table(other["results"]))
        print(f"\n{names[0]} vs {names[1]} (ratio = {names[0]} / {names[1]}, of the means over repeats):\n"
              + comparison_table(run["results"], other["results"], names))
    if args.offline_json:
        vs = result["vs_offline"]
        print(f"\nserver at rate inf {fmt(vs['server_rate_inf']['mean'])} out tok/s (mean of "
              f"{vs['server_rate_inf']['runs']}) / offline engine {fmt(vs['offline']['mean'])} (mean of "
              f"{vs['offline']['runs']}) = {fmt(vs['ratio'], 3)}")
    print("latencies in ms; ITL is between streamed chunks")
    print(f"wrote {args.out} and {png}")
    failed = any(r["failed"] for r in run["results"] + (other["results"] if other else []))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
