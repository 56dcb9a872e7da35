"""Online serving benchmark: streaming requests through the `openai` client at Poisson arrival rates.

    # start the server, sweep three rates, stop it (server flags after --):
    python benchmark/online/bench.py --launch --rates 4,16,64 -- --model .bench-models/qwen3-0.6b --dummy-weight
    # against a running server; `inf` sends every request at once:
    python benchmark/online/bench.py --base-url http://127.0.0.1:1919 --rates 2,8,32,inf --num-requests 128
    # replay a JSONL trace ({"arrival_s": 0.4, "input_len": 512, "output_len": 128} per line):
    python benchmark/online/bench.py --launch --trace trace.jsonl

Every request streams with `ignore_eos`, so its output length is exactly its max_tokens; lengths
follow the offline workload (random in [min(100, max), max]; fixed when max <= 100) and prompts are
random token ids (fresh for each rate, so the prefix cache does not carry over). Reports TTFT, ITL
(between streamed chunks), TPOT and end-to-end latency (mean/p50/p90/p99) and request and
output-token throughput per rate, counted from the stream's usage; writes JSON and a PNG beside it.
Exits 1 if any request failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
from urllib.parse import urlparse

from minisgl.benchmark.online import (
    BenchRequest, fmt, format_table, latency_plot, load_trace, parse_rates, poisson_arrivals,
    random_ids, rate_label, run_requests, summarize,
)
from minisgl.benchmark.report import device_name, write_json
from minisgl.utils.net import free_port
from minisgl.utils.server_process import ServerProcess
from minisgl.benchmark.workload import offline_workload

LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """Benchmark flags, and the server flags after `--` (for --launch)."""
    server_args: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, server_args = argv[:i], argv[i + 1:]
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base-url", default="http://127.0.0.1:1919", help="server to drive (without /v1)")
    p.add_argument("--launch", action="store_true",
                   help="start `python -m minisgl` with the flags after -- on a free loopback port, stop it at the end")
    p.add_argument("--ready-timeout", type=float, default=900, help="seconds to wait for a launched server")
    p.add_argument("--api", choices=["completions", "chat"], default="completions",
                   help="completions: token-id prompts of exact length; chat: word prompts of about that length")
    p.add_argument("--model", help="model name in requests (default: the server's first /v1/models entry)")
    p.add_argument("--api-key", help="bearer key (default: $MINISGL_API_KEY or the launched server's --api-key)")
    p.add_argument("--vocab-size", type=int, help="prompt token ids stay below it (default: from the model config)")
    p.add_argument("--rates", default="2,8,32", help="comma-separated Poisson rates in requests/s; inf = all at once")
    p.add_argument("--trace", help="JSONL trace (arrival_s|timestamp[ms], input_len, output_len) instead of --rates")
    p.add_argument("--trace-speedup", type=float, default=1.0, help="divide the trace's arrival times by this")
    p.add_argument("--num-requests", type=int, default=256, help="requests per rate (trace: the first N)")
    p.add_argument("--max-input-len", type=int, default=1024)
    p.add_argument("--max-output-len", type=int, default=1024)
    p.add_argument("--max-concurrency", type=int, default=None, help="cap on requests in flight (default: none)")
    p.add_argument("--temperature", type=float, default=0.6)
    p.add_argument("--request-timeout", type=float, default=600, help="seconds per request before it counts as failed")
    p.add_argument("--warmup", type=int, default=2, help="short unmeasured requests before the first rate")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-progress", action="store_true", help="no tqdm progress bar")
    p.add_argument("--out", default="results/online.json", help="JSON path; the PNG goes beside it")
    args = p.parse_args(argv)
    if server_args and not args.launch:
        p.error("server flags after -- need --launch")
    for name in ("num_requests", "max_input_len", "max_output_len", "warmup"):
        if getattr(args, name) < (0 if name == "warmup" else 1):
            p.error(f"--{name.replace('_', '-')} is too small")
    return args, server_args


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
    print(f"launching: {sys.executable} -m minisgl {' '.join(flags)}  (log: {log_path})")
    srv = ServerProcess(flags, f"http://{host}:{server.port}", log_path)
    try:
        srv.wait_ready(args.ready_timeout)
    except BaseException:
        srv.stop()
        raise
    return srv


def vocab_size(args: argparse.Namespace, root: str | None) -> int:
    """Prompt ids must be valid tokens: read vocab_size from the served model's config."""
    if args.vocab_size:
        return args.vocab_size
    if not root or root == "minisgl-demo":  # the server's built-in demo model
        from minisgl.models.demo import demo_model_dir

        root = demo_model_dir()
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
    """(label, rate or None, requests, extra JSON fields) for each run."""
    if args.trace:
        reqs, clipped = load_trace(args.trace, args.num_requests, args.max_input_len, args.max_output_len, vocab,
                                   args.seed, args.trace_speedup)
        span = reqs[-1].arrival_s
        offered = len(reqs) / span if span > 0 else None
        return [("trace", offered, reqs, {"trace": args.trace, "clipped": clipped, "span_s": span})]
    lengths = offline_workload(args.num_requests, args.max_input_len, args.max_output_len, vocab, args.seed)
    runs = []
    for i, rate in enumerate(parse_rates(args.rates)):
        rng = random.Random(args.seed * 1000 + i + 1)  # fresh ids per rate: no prefix-cache hits across rates
        arrivals = poisson_arrivals(len(lengths), rate, args.seed + i)
        reqs = [BenchRequest(random_ids(rng, len(w.prompt_ids), vocab), w.max_tokens, t)
                for w, t in zip(lengths, arrivals)]
        runs.append((rate_label(rate), None if rate == float("inf") else rate, reqs, {}))
    return runs


async def drive(args: argparse.Namespace, base_url: str) -> dict:
    import openai

    client = openai.AsyncOpenAI(base_url=base_url.rstrip("/") + "/v1",
                                api_key=args.api_key or os.environ.get("MINISGL_API_KEY") or "EMPTY",
                                max_retries=0, timeout=args.request_timeout)
    try:
        models = (await client.models.list()).data
        if not models and not args.model:
            raise RuntimeError("the server lists no models; pass --model")
        model = args.model or models[0].id
        root = next((getattr(m, "root", None) for m in models if m.id == model), None)
        vocab = vocab_size(args, root)
        common = dict(api=args.api, temperature=args.temperature, timeout=args.request_timeout,
                      progress=not args.no_progress)

        if args.warmup:
            rng = random.Random(-1)
            warm = [BenchRequest(random_ids(rng, min(16, args.max_input_len), vocab), min(8, args.max_output_len))
                    for _ in range(args.warmup)]
            results, _, _ = await run_requests(client, model, warm, desc="warm-up", **common)
            bad = [r.error for r in results if not r.ok]
            if bad:
                raise RuntimeError(f"warm-up requests failed: {bad[0]}")

        rows = []
        for label, rate, reqs, extra in workloads(args, vocab):
            results, seconds, peak = await run_requests(client, model, reqs, max_concurrency=args.max_concurrency,
                                                        desc=f"rate {label}", **common)
            row = {"rate": label, "rate_rps": rate, **extra, "peak_in_flight": peak, **summarize(results, seconds)}
            rows.append(row)
            print(f"rate {label}: {row['completed']}/{row['requests']} done in {seconds:.1f} s, "
                  f"{fmt(row['request_throughput'], 2)} req/s, {fmt(row['output_throughput'])} out tok/s, "
                  f"TTFT p50 {fmt(row['ttft_ms']['p50'])} ms, ITL p50 {fmt(row['itl_ms']['p50'])} ms"
                  + (f", {row['failed']} failed: {next(iter(row['errors']))}" if row["failed"] else ""))
        return {"model": model, "model_root": root, "vocab_size": vocab, "results": rows}
    finally:
        await client.close()


def main(argv: list[str] | None = None) -> int:
    args, server_flags = parse_args(sys.argv[1:] if argv is None else argv)
    server = launch(args, server_flags) if args.launch else None
    base_url = server.url if server else args.base_url
    if urlparse(base_url).hostname not in LOOPBACK:
        print(f"note: {base_url} is not a loopback address")
    try:
        run = asyncio.run(drive(args, base_url))
    finally:
        if server:
            code = server.stop()
            print(f"server stopped (exit {code})")
    result = {
        "benchmark": "online", "device": device_name(), "base_url": base_url, "launched": bool(server),
        "server_args": server_flags if server else None, "api": args.api,
        "workload": {k: getattr(args, k) for k in ("num_requests", "max_input_len", "max_output_len", "temperature",
                                                   "max_concurrency", "seed", "trace", "trace_speedup")},
        **run,
    }
    write_json(args.out, result)
    png = os.path.splitext(args.out)[0] + ".png"
    latency_plot(png, f"Online serving: {run['model']} on {result['device']}", run["results"])
    print(format_table(run["results"]))
    print("latencies in ms; ITL is between streamed chunks")
    print(f"wrote {args.out} and {png}")
    return 1 if any(r["failed"] for r in run["results"]) else 0


if __name__ == "__main__":
    sys.exit(main())
