"""Freed rows gathered into fewer prefills (--prefill-delay-steps): throughput and queueing of each
setting, interleaved in one engine process.

    python benchmark/offline/prefill_delay.py --model .bench-models/qwen3-0.6b --dummy-weight --delays 0,4,8,16

The serving workload (1,024 requests for 256 rows: rows free a few a step while the rest decode)
runs once unmeasured, then `--rounds` times per setting, the settings in turns (each round in
another order), every run with fresh prompt ids, so no setting gets a quieter stretch of this
host or a warmer prefix cache than another. For each run: output tokens a second, prefill and
decode steps, requests per prefill, and when each request was first prefilled (seconds after the
run's start: its wait in the queue, which a gathered prefill lengthens). Writes JSON and a PNG.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from minisgl.benchmark.flags import ENGINE_FLAGS, llm_kwargs
from minisgl.benchmark.repeats import repeat_summary
from minisgl.benchmark.report import bar_plot, device_name, write_json
from minisgl.benchmark.workload import add_workload_flags, fresh_ids, workload_requests, workload_settings
from minisgl.demo.model import demo_model_dir
from minisgl.llm import LLM
from minisgl.server.args import add_flags


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="model dir or HF id (default: the built-in demo model)")
    add_flags(p, ENGINE_FLAGS)
    add_workload_flags(p, default="serving")
    p.add_argument("--delays", default="0,4,8,16", help="the --prefill-delay-steps settings compared")
    p.add_argument("--rounds", type=int, default=4, help="measured runs per setting")
    p.add_argument("--out", default="results/prefill_delay.json", help="JSON path; the PNG goes beside it")
    args = p.parse_args()
    args.delays = [int(d) for d in args.delays.split(",")]
    if args.rounds < 1 or min(args.delays) < 0:
        p.error("--rounds must be >= 1 and every delay >= 0")
    if args.tp > 1:  # the setting is changed on rank 0's scheduler only: the ranks would schedule apart
        p.error("--tp must be 1")
    return args


def timed_run(llm: LLM, prompts: list[list[int]], params: list) -> dict:
    """One run, its steps counted from the outside (the scheduler's choice, unchanged)."""
    scheduler = llm.scheduler
    schedule = scheduler._schedule
    steps = {"prefill": 0, "decode": 0}
    prefill_rows: list[int] = []
    first_prefill: dict[int, float] = {}

    def watched():
        batch = schedule()
        if batch is not None:
            steps[batch.phase] = steps.get(batch.phase, 0) + 1
            if batch.phase == "prefill":
                prefill_rows.append(batch.size)
                now = time.perf_counter()
                for r in batch.reqs:
                    first_prefill.setdefault(r.uid, now)
        return batch

    scheduler._schedule = watched
    try:
        start = time.perf_counter()
        outs = llm.generate(prompts, params, use_tqdm=False)
        seconds = time.perf_counter() - start
    finally:
        del scheduler._schedule  # the method again
    waits = sorted(t - start for t in first_prefill.values())
    tokens = sum(len(o["token_ids"]) for o in outs)
    return {"output_tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds, **steps,
            "requests_per_prefill": statistics.fmean(prefill_rows),
            "queue_wait_s": {"mean": statistics.fmean(waits), "p50": waits[len(waits) // 2],
                             "p99": waits[int(len(waits) * 0.99)]}}


def main() -> None:
    args = parse_args()
    llm = LLM(args.model or demo_model_dir(), **llm_kwargs(args))
    vocab = llm.scheduler.engine.model_config.vocab_size
    prompts, params = workload_requests(args, vocab)
    llm.generate(prompts[:2], params[:2], use_tqdm=False)  # warm-up
    llm.generate(prompts, params, use_tqdm=False)  # the unmeasured run
    runs: dict[int, list[dict]] = {d: [] for d in args.delays}
    seed = 1
    for rnd in range(args.rounds):
        order = args.delays[rnd % len(args.delays):] + args.delays[: rnd % len(args.delays)]
        for delay in order if rnd % 2 == 0 else order[::-1]:
            llm.scheduler.prefill.delay_steps, llm.scheduler.prefill.deferred = delay, 0
            seed += 1
            run = {"round": rnd, "delay": delay, **timed_run(llm, fresh_ids(prompts, seed, vocab), params)}
            runs[delay].append(run)
            print(f"round {rnd} delay {delay:3d}: {run['tokens_per_s']:9,.0f} tok/s, {run['prefill']} prefills "
                  f"({run['requests_per_prefill']:.1f} requests each), {run['decode']} decodes, queue wait "
                  f"mean {run['queue_wait_s']['mean']:.2f} s", flush=True)
    llm.shutdown()
    base = repeat_summary([r["tokens_per_s"] for r in runs[args.delays[0]]])
    arms = {}
    for delay, rs in runs.items():
        summary = repeat_summary([r["tokens_per_s"] for r in rs])
        # each round's ratio to the first setting's run of the same round: the host's drift cancels
        paired = [r["tokens_per_s"] / b["tokens_per_s"] for r, b in zip(rs, runs[args.delays[0]])]
        arms[str(delay)] = {"tokens_per_s": summary, "over_first": summary["mean"] / base["mean"],
                            "paired_ratios": paired, "prefills": statistics.fmean(r["prefill"] for r in rs),
                            "queue_wait_mean_s": statistics.fmean(r["queue_wait_s"]["mean"] for r in rs)}
        print(f"delay {delay:3d}: {summary['mean']:9,.0f} tok/s (spread {100 * summary['spread']:.1f}%), "
              f"{arms[str(delay)]['over_first']:.3f}x delay {args.delays[0]}, paired median "
              f"{statistics.median(paired):.3f}, {arms[str(delay)]['prefills']:.0f} prefills a run")
    write_json(args.out, {"benchmark": "prefill_delay", "device": device_name(), "workload": workload_settings(args),
                          "delays": args.delays, "arms": arms, "runs": runs})
    bar_plot(os.path.splitext(args.out)[0] + ".png", f"Prefill delay steps ({device_name()})",
             [f"delay {d}" for d in args.delays], [arms[str(d)]["tokens_per_s"]["mean"] for d in args.delays],
             "output tokens / s")


if __name__ == "__main__":
    main()
