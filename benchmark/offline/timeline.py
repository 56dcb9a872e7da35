"""Where an offline run's wall time goes, step by step: the field's workload through `minisgl.LLM`,
each step's phase, batch, tokens and time, against the bytes a decode step must read.

    python benchmark/offline/timeline.py --model .bench-models/qwen3-0.6b --dummy-weight --kv-cache-dtype fp8_e4m3

The workload runs once to warm up, then again with every step timed: a step's time is from the
previous step's tokens reaching the host to its own (under overlap scheduling that is the GPU's
time for it, or the host's when the host is the slower). Decode steps are grouped by batch size,
each group against its floor (weights + KV read at the copy rate measured in the same process).
Writes JSON and a PNG (ms per step against batch size, and the run's steps in order).
"""

from __future__ import annotations

import argparse
import os
import time

from minisgl.benchmark.flags import ENGINE_FLAGS, llm_kwargs
from minisgl.benchmark.report import device_name, write_json
from minisgl.benchmark.workload import add_workload_flags, workload_requests
from minisgl.demo.model import demo_model_dir
from minisgl.llm import LLM
from minisgl.server.args import add_flags

BUCKETS = [(1, 16), (17, 64), (65, 128), (129, 192), (193, 256), (257, 1 << 20)]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="model dir or HF id (default: the built-in demo model)")
    add_flags(p, ENGINE_FLAGS)
    add_workload_flags(p)
    p.add_argument("--out", default="results/timeline.json", help="JSON path; the PNG goes beside it")
    return p.parse_args()


class StepClock:
    """Times the scheduler's steps from the outside: each launched batch's shape is noted at launch,
    and its time taken when its tokens reach the host, from the previous batch's (the first from
    `start()`)."""

    def __init__(self, scheduler):
        self.steps: list[dict] = []
        self.last_done = 0.0
        self._shapes: dict[int, dict] = {}
        launch, process = scheduler._launch, scheduler._process

        def timed_launch(batch, read_previous):
            shape = {"phase": batch.phase, "batch": len(batch.reqs), "tokens": sum(r.extend_len for r in batch.reqs),
                     "context": sum(r.device_len for r in batch.reqs)}
            flight = launch(batch, read_previous)
            self._shapes[id(flight)] = shape
            return flight

        def timed_process(done):
            done.out.copy_done_event.synchronize()
            now = time.perf_counter()
            shape = self._shapes.pop(id(done), None)  # None: launched before the clock was set
            if shape is not None:
                self.steps.append({**shape, "seconds": now - self.last_done})
            self.last_done = now
            return process(done)

        scheduler._launch, scheduler._process = timed_launch, timed_process

    def start(self) -> None:
        self.last_done = time.perf_counter()


def summarize(steps: list[dict], weight_bytes: float, kv_token_bytes: int, bandwidth: float | None) -> dict:
    total = sum(s["seconds"] for s in steps)
    out = {"steps": len(steps), "seconds": total, "phases": {}, "decode_by_batch": []}
    for phase in ("prefill", "decode"):
        mine = [s for s in steps if s["phase"] == phase]
        out["phases"][phase] = {"steps": len(mine), "seconds": sum(s["seconds"] for s in mine),
                                "tokens": sum(s["tokens"] for s in mine)}
    for lo, hi in BUCKETS:
        mine = [s for s in steps if s["phase"] == "decode" and lo <= s["batch"] <= hi]
        if not mine:
            continue
        seconds = sum(s["seconds"] for s in mine)
        kv = kv_token_bytes * sum(s["context"] for s in mine)
        row = {"batch": f"{lo}-{hi}", "steps": len(mine), "seconds": seconds, "ms_per_step": 1e3 * seconds / len(mine),
               "kv_gb": kv / 1e9, "kv_tb_per_s": kv / seconds / 1e12}
        if bandwidth:
            floor = (weight_bytes * len(mine) + kv) / bandwidth
            row.update(floor_s=floor, over_floor_s=seconds - floor)
        out["decode_by_batch"].append(row)
    return out


def print_summary(summary: dict) -> None:
    print(f"timed steps: {summary['steps']}, {summary['seconds']:.2f} s")
    for phase, p in summary["phases"].items():
        print(f"  {phase}: {p['steps']} steps, {p['seconds']:.3f} s, {p['tokens']} tokens")
    print("| decode batch | steps | s | ms/step | KV GB | KV TB/s | floor s | over floor s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in summary["decode_by_batch"]:
        print(f"| {r['batch']} | {r['steps']} | {r['seconds']:.3f} | {r['ms_per_step']:.2f} | {r['kv_gb']:.1f} | "
              f"{r['kv_tb_per_s']:.2f} | {r.get('floor_s', float('nan')):.3f} | {r.get('over_floor_s', float('nan')):.3f} |")


def plot(path: str, title: str, steps: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4))
    for phase, color in (("decode", "#4C72B0"), ("prefill", "#DD8452")):
        mine = [s for s in steps if s["phase"] == phase]
        left.scatter([s["batch"] for s in mine], [1e3 * s["seconds"] for s in mine], s=4, color=color, label=phase)
        right.scatter([i for i, s in enumerate(steps) if s["phase"] == phase],
                      [1e3 * s["seconds"] for s in mine], s=4, color=color, label=phase)
    left.set(xlabel="requests in the batch", ylabel="ms per step", title=title)
    right.set(xlabel="step", ylabel="ms per step", title="the run's steps in order")
    left.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    args = parse_args()
    model = args.model or demo_model_dir()
    llm = LLM(model, **llm_kwargs(args))
    engine = llm.scheduler.engine
    bandwidth = None
    if engine.device.type == "cuda":
        from minisgl.benchmark.floor import copy_bandwidth

        bandwidth = copy_bandwidth()
    from minisgl.benchmark.floor import kv_bytes_per_token

    prompts, params = workload_requests(args, engine.model_config.vocab_size)
    llm.generate(prompts, params, use_tqdm=False)  # warm-up: the whole workload once
    clock = StepClock(llm.scheduler)
    start = time.perf_counter()
    clock.start()
    outs = llm.generate(prompts, params, use_tqdm=False)
    seconds = time.perf_counter() - start
    llm.shutdown()
    tokens = sum(len(o["token_ids"]) for o in outs)
    summary = summarize(clock.steps, float(engine.weight_bytes), kv_bytes_per_token(engine), bandwidth)
    print(f"minisgl: {tokens} tokens in {seconds:.2f} s = {tokens / seconds:.1f} tok/s (second run), "
          f"KV cache {args.kv_cache_dtype} on {device_name()}")
    print_summary(summary)
    result = {"benchmark": "timeline", "device": device_name(), "model": model, "kv_cache_dtype": args.kv_cache_dtype,
              "output_tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds,
              "copy_bandwidth_bytes_per_s": bandwidth, "summary": summary, "steps": clock.steps}
    write_json(args.out, result)
    png = os.path.splitext(args.out)[0] + ".png"
    plot(png, f"{os.path.basename(model.rstrip('/'))}, KV {args.kv_cache_dtype}, {device_name()}", clock.steps)
    print(f"wrote {args.out} and {png}")


if __name__ == "__main__":
    main()
