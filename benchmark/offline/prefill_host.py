"""Prefill steps: how long the host takes to launch one, against when the device is done.

    python benchmark/offline/prefill_host.py --model .bench-models/qwen3-0.6b --dummy-weight --steps 40 --sample

Each step admits 4-14 prompts of 100-1,024 random tokens (the serving workload's prefills) into an
idle engine and runs one scheduler step, which launches the prefill's forward pass and returns.
"host" is the time until it returns, "wall" the time until the device is done; where the two are
close, the step is host-bound and its kernels wait on their launches. On a GPU the steps replay
piecewise CUDA graphs with `--piecewise-cuda-graph-max-tokens 8192`, else eagerly. With `--sample`,
a thread samples the main thread's Python stack every `--sample-ms` during the steps and prints the
functions the host's time went to, inclusive and by line (a C call shows as the line that made it).
Medians over the steps after `--skip`; writes JSON and a PNG.
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import statistics
import sys
import threading
import time

import torch

from minisgl.benchmark.flags import ENGINE_FLAGS, llm_kwargs
from minisgl.benchmark.report import bar_plot, device_name, write_json
from minisgl.core.params import SamplingParams
from minisgl.demo.model import demo_model_dir
from minisgl.llm import LLM
from minisgl.message import TokenizedRequestMsg
from minisgl.server.args import add_flags


class StackSampler:
    """Counts, every `interval_s` while `on`, the functions on the main thread's Python stack
    (`inclusive`) and the line it is at (`lines`)."""

    def __init__(self, interval_s: float):
        self.interval_s, self.on, self.samples = interval_s, False, 0
        self.inclusive: collections.Counter[str] = collections.Counter()
        self.lines: collections.Counter[str] = collections.Counter()
        self.main = threading.main_thread().ident
        sys.setswitchinterval(interval_s / 3)  # the main thread lets the sampler in between bytecodes
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            time.sleep(self.interval_s)
            frame = sys._current_frames().get(self.main) if self.on else None
            if frame is None:
                continue
            self.samples += 1
            self.lines[_where(frame, frame.f_lineno)] += 1
            seen = set()
            while frame is not None:
                name = _where(frame, frame.f_code.co_firstlineno)
                if name not in seen:
                    seen.add(name)
                    self.inclusive[name] += 1
                frame = frame.f_back

    def top(self, counter: collections.Counter, n: int) -> list[tuple[str, float]]:
        return [(name, count / max(1, self.samples)) for name, count in counter.most_common(n)]


def _where(frame, line: int) -> str:
    path = frame.f_code.co_filename
    return f"{frame.f_code.co_name} ({path.rsplit('site-packages/', 1)[-1].rsplit('minisgl/', 1)[-1]}:{line})"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="model dir or HF id (default: the built-in demo model)")
    add_flags(p, ENGINE_FLAGS)
    p.add_argument("--steps", type=int, default=40, help="prefill steps measured")
    p.add_argument("--skip", type=int, default=5, help="first steps left out (new shapes compiling)")
    p.add_argument("--sample", action="store_true", help="sample the host's Python stack during the steps")
    p.add_argument("--sample-ms", type=float, default=0.3)
    p.add_argument("--top", type=int, default=30, help="functions and lines printed")
    p.add_argument("--out", default="results/prefill_host.json", help="JSON path; the PNG goes beside it")
    args = p.parse_args()
    if args.steps < 1 or args.skip < 0:
        p.error("--steps must be >= 1 and --skip >= 0")

    llm = LLM(args.model or demo_model_dir(), **llm_kwargs(args))
    scheduler, step = llm.scheduler, llm.server.run_once
    cuda = scheduler.engine.device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    vocab, rng = scheduler.engine.model_config.vocab_size, random.Random(0)
    sampler = StackSampler(args.sample_ms / 1000) if args.sample else None
    steps, uid = [], 0
    for i in range(args.skip + args.steps):
        prompts = [[rng.randrange(vocab) for _ in range(rng.randint(100, 1024))] for _ in range(rng.randint(4, 14))]
        for prompt in prompts:
            uid += 1
            llm.inbox.put(TokenizedRequestMsg(uid, prompt, SamplingParams(max_tokens=1, ignore_eos=True)))
        sync()
        measured = i >= args.skip
        if sampler is not None:
            sampler.on = measured
        start = time.perf_counter()
        step()  # receives the prompts, launches their prefill
        host = time.perf_counter() - start
        sync()
        wall = time.perf_counter() - start
        if sampler is not None:
            sampler.on = False
        if measured:
            steps.append({"requests": len(prompts), "tokens": sum(map(len, prompts)), "host_ms": host * 1e3,
                          "wall_ms": wall * 1e3})
        while scheduler.has_work:
            step()
        print(f"step {i}: {len(prompts)} prompts, {sum(map(len, prompts))} tokens: host {host * 1e3:.2f} ms, "
              f"wall {wall * 1e3:.2f} ms{'' if measured else ' (skipped)'}", flush=True)
    llm.shutdown()

    host_ms = statistics.median(s["host_ms"] for s in steps)
    wall_ms = statistics.median(s["wall_ms"] for s in steps)
    print(f"prefill steps: host {host_ms:.2f} ms, wall {wall_ms:.2f} ms (medians of {len(steps)}, "
          f"{statistics.fmean(s['tokens'] for s in steps):.0f} tokens each on average) on {device_name()}")
    result = {"benchmark": "prefill_host", "device": device_name(), "model": args.model, "host_ms_median": host_ms,
              "wall_ms_median": wall_ms, "steps": steps}
    if sampler is not None:
        result["samples"] = sampler.samples
        result["inclusive"] = sampler.top(sampler.inclusive, args.top)
        result["lines"] = sampler.top(sampler.lines, args.top)
        for title, rows in (("inclusive", result["inclusive"]), ("by line", result["lines"])):
            print(f"\n== host samples, {title} ({sampler.samples} samples)")
            for name, share in rows:
                print(f"  {100 * share:5.1f}%  {name}")
    write_json(args.out, result)
    bar_plot(os.path.splitext(args.out)[0] + ".png", f"Prefill step ({device_name()})",
             ["host (launched)", "wall (device done)"], [host_ms, wall_ms], "ms (median)", fmt="%.2f")


if __name__ == "__main__":
    main()
