"""Traffic as default clients send it: no max_tokens, and two priority classes at saturation.

    python benchmark/online/real_clients.py --phases natural -- --model .bench-models/llama-3.1-8b --dummy-weight
    python benchmark/online/real_clients.py --phases priority -- --model ... --scheduling-policy priority
    python benchmark/online/real_clients.py --server-dir .base --phases natural -- --model ...  # an earlier tree

natural: the workload's prompts (<= --max-input-len tokens, as chat messages), sent at once on the
  chat API (the completions API's max_tokens defaults to 16, OpenAI's rule) at temperature 1 with a
  seed each and no max_tokens; each carries stop_token_ids whose share of the model's output is
  1 / --mean-len (measured first on 64 requests of 3 * --mean-len tokens: the ids of a benchmark model's
  synthetic tokenizer read back from the text), so its length ends naturally, geometric with mean
  about --mean-len. Then the same requests with
  max_tokens equal to the lengths they reached (ignore_eos, no stop ids). Each pair runs twice; the
  second is reported, and the ratio of the output throughputs, natural over given.
priority: --priority-requests requests at Poisson --priority-rate (inf: all at once), every other one
  priority 0 (high) or 1 (low), max_tokens from the workload: each class's TTFT and the ratio of
  their p90s (the server needs --scheduling-policy priority).

The server starts from this tree (`python -m minisgl`), or with --server-dir from that folder's
minisgl (git archive REV minisgl | tar x -C DIR). Writes JSON and a PNG.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
from collections import Counter

from minisgl.benchmark.online import percentiles, poisson_arrivals, split_server_flags, summarize
from minisgl.benchmark.report import bar_plot, device_name, write_json
from minisgl.benchmark.server_process import ServerProcess
from minisgl.benchmark.sse_client import BenchRequest, Target, chat_text, chat_words, run_requests
from minisgl.benchmark.workload import offline_workload
from minisgl.utils.net import free_port


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    argv, server_args = split_server_flags(argv)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--phases", default="natural,priority")
    p.add_argument("--server-dir", help="start the server from this folder's minisgl (an earlier tree)")
    p.add_argument("--num-requests", type=int, default=256)
    p.add_argument("--max-input-len", type=int, default=1024)
    p.add_argument("--mean-len", type=int, default=256, help="natural: the output length stop ids aim at")
    p.add_argument("--priority-requests", type=int, default=1024)
    p.add_argument("--priority-rate", type=float, default=float("inf"))
    p.add_argument("--max-output-len", type=int, default=256, help="priority: max_tokens drawn up to this")
    p.add_argument("--client-processes", type=int, default=4)
    p.add_argument("--ready-timeout", type=float, default=600)
    p.add_argument("--out", default="results/real_clients.json")
    args = p.parse_args(argv)
    if "--model" not in server_args:
        p.error("the server flags after -- must name --model")
    return args, server_args


def launch(args: argparse.Namespace, flags: list[str]) -> ServerProcess:
    port = free_port()
    log = os.path.splitext(args.out)[0] + "-server.log"
    command = [sys.executable, "-m", "minisgl", *flags, "--host", "127.0.0.1", "--port", str(port)]
    env = None
    if args.server_dir:  # its package first on the path, run from there so this tree's is not imported
        root = os.path.abspath(args.server_dir)
        env = {"PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
        command = ["bash", "-c", f"cd {root} && exec " + " ".join(command)]
    print("launching:", " ".join(command), flush=True)
    srv = ServerProcess(command, f"http://127.0.0.1:{port}", log, env=env, command=True)
    try:
        return srv.wait_ready(args.ready_timeout)
    except BaseException:
        srv.stop()
        raise


def served_model(url: str) -> str:
    import httpx

    return httpx.get(url + "/v1/models", timeout=10).json()["data"][0]["id"]


def burst(target: Target, reqs: list[BenchRequest], processes: int, name: str) -> dict:
    results, duration, peak = run_requests(target, reqs, processes, desc=name, progress=False)
    summary = summarize(results, duration)
    summary["peak_in_flight"] = peak
    summary["lengths"] = [r.output_tokens for r in results]
    summary["ttfts"] = [r.ttft for r in results]
    print(f"{name}: {summary['completed']}/{summary['requests']} ok, {summary['output_tokens']} tokens in "
          f"{duration:.2f} s = {summary['output_throughput']:.0f} tok/s, TTFT p50 {summary['ttft_ms']['p50']:.0f} ms"
          f" p90 {summary['ttft_ms']['p90']:.0f} ms", flush=True)
    if summary["failed"]:
        print("  errors:", summary["errors"], flush=True)
    return summary


def stop_ids(target: Target, work, mean_len: int, rng: random.Random) -> list[int]:
    """Token ids that make up about 1 / mean_len of what the model generates at temperature 1: the
    output of 64 requests read back as ids ("t<i>", benchmark/prepare_model.py's tokenizer), each
    3 * mean_len long, as long as 95% of the natural lengths (a dummy model's output drifts with its
    context, so a share measured on short outputs undercounts what long ones stop on), then
    ids drawn at random among those seen in half of them, each rarer than a tenth of the target,
    until their share in the other half reaches it."""
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    def sample(i: int) -> list[int]:
        body = {"model": target.model, "messages": [{"role": "user", "content": chat_text(work[i].prompt_ids, target.words)}],
                "max_tokens": 3 * mean_len, "ignore_eos": True, "temperature": 1.0, "seed": 10_000 + i}
        text = httpx.post(target.url(), json=body, timeout=600).json()["choices"][0]["message"]["content"]
        return [int(m) for m in re.findall(r"\bt(\d+)\b", text)]

    with ThreadPoolExecutor(16) as pool:
        outputs = list(pool.map(sample, range(min(64, len(work)))))
    # Ids are picked by their count in one half of the outputs and their share is read from the
    # other half: a token picked for being seen is overcounted in the sample it was seen in (a
    # near-uniform output over a large vocabulary sees most ids once), and the lengths ran 3x long.
    pick = Counter(t for ids in outputs[0::2] for t in ids)
    held = [t for ids in outputs[1::2] for t in ids]
    held_counts, picked = Counter(held), sum(pick.values())
    target_share, chosen, share = 1 / mean_len, [], 0.0
    for token in rng.sample(sorted(pick), len(pick)):
        if share >= target_share:
            break
        if pick[token] / picked <= target_share / 10:
            chosen.append(token)
            share += held_counts[token] / len(held)
    print(f"stop ids: {len(chosen)} of {len(pick)} seen in {picked} tokens, share {share:.4f} in {len(held)} others", flush=True)
    return chosen


def natural(args, target: Target, vocab: int) -> dict:
    rng = random.Random(1)
    work = offline_workload(args.num_requests, args.max_input_len, vocab_size=vocab)
    stops = stop_ids(target, work, args.mean_len, rng)
    free = [BenchRequest(w.prompt_ids, None, fields={"temperature": 1.0, "seed": i, "stop_token_ids": stops})
            for i, w in enumerate(work)]
    out = {}
    for run in (1, 2):
        out[f"natural_{run}"] = burst(target, free, args.client_processes, f"natural run {run}")
        lengths = out[f"natural_{run}"]["lengths"]
        given = [BenchRequest(w.prompt_ids, max(1, n), fields={"temperature": 1.0, "seed": i})
                 for i, (w, n) in enumerate(zip(work, lengths))]
        out[f"given_{run}"] = burst(target, given, args.client_processes, f"given run {run}")
    a, b = out["natural_2"]["output_throughput"], out["given_2"]["output_throughput"]
    lengths = out["natural_2"]["lengths"]
    out["mean_length"] = sum(lengths) / len(lengths)
    out["ratio_natural_over_given"] = a / b
    print(f"natural / given (second runs): {a:.0f} / {b:.0f} = {a / b:.3f}x; mean length {out['mean_length']:.0f}")
    return out


def priority(args, target: Target, vocab: int) -> dict:
    work = offline_workload(args.priority_requests, args.max_input_len, args.max_output_len, vocab_size=vocab, seed=2)
    arrivals = poisson_arrivals(len(work), args.priority_rate, seed=3)
    reqs = [BenchRequest(w.prompt_ids, w.max_tokens, arrival_s=t, fields={"priority": i % 2})
            for i, (w, t) in enumerate(zip(work, arrivals))]
    burst(target, reqs[:64], args.client_processes, "priority warm-up")
    whole = burst(target, reqs, args.client_processes, "priority classes")
    ttfts = whole.pop("ttfts")
    high = percentiles([t for i, t in enumerate(ttfts) if i % 2 == 0 and t is not None])
    low = percentiles([t for i, t in enumerate(ttfts) if i % 2 == 1 and t is not None])
    ratio = high["p90"] / low["p90"]
    print(f"TTFT p90 high {high['p90']:.0f} ms, low {low['p90']:.0f} ms: {ratio:.3f}x", flush=True)
    return {"run": whole, "ttft_high_ms": high, "ttft_low_ms": low, "p90_ratio_high_over_low": ratio}


def main() -> None:
    args, flags = parse_args(sys.argv[1:])
    model_dir = flags[flags.index("--model") + 1]
    with open(os.path.join(model_dir, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    srv = launch(args, flags)
    report = {"device": device_name(), "server_flags": flags, "server_dir": args.server_dir}
    try:
        target = Target(srv.url, served_model(srv.url), api="chat", timeout=1800, words=chat_words(model_dir))
        for phase in args.phases.split(","):
            report[phase] = {"natural": natural, "priority": priority}[phase](args, target, vocab)
    finally:
        srv.stop()
    for phase in report.values():  # per-request lists stay out of the JSON
        if isinstance(phase, dict):
            for run in phase.values():
                if isinstance(run, dict):
                    run.pop("ttfts", None)
                    run.pop("lengths", None)
    write_json(args.out, report)
    labels, values = [], []
    if "natural" in report:
        labels += ["natural (no max_tokens)", "given (max_tokens)"]
        values += [report["natural"]["natural_2"]["output_throughput"], report["natural"]["given_2"]["output_throughput"]]
    if labels:
        bar_plot(os.path.splitext(args.out)[0] + ".png", f"output tok/s, {device_name()}", labels, values, "tok/s")
    if "priority" in report:
        p = report["priority"]
        bar_plot(os.path.splitext(args.out)[0] + "-priority.png", "TTFT p90 by class (ms)", ["high (0)", "low (1)"],
                 [p["ttft_high_ms"]["p90"], p["ttft_low_ms"]["p90"]], "ms")


if __name__ == "__main__":
    main()
