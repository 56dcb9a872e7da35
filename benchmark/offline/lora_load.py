"""Decoding while LoRA adapters load: a batch decodes while adapters (PEFT format, every q/k/v/o and
gate/up/down projection, rank R) are loaded at runtime, first as the scheduler loads them
(Scheduler.update_lora: read in a thread, installed between two steps), then, for comparison, read
in the loop between two steps (LoraPool.load, as a runtime load ran before). One process, one device.

Reports the median time of a decode step before any load, and for each kind of load the longest
step (the stall a running request sees: for the in-loop kind, the load plus the step after it) and
how long the loads took. Writes JSON.

    python benchmark/offline/lora_load.py --model .bench-models/qwen3-8b --dummy-weight   # GPU
    python benchmark/offline/lora_load.py --device cpu --batch 4 --input-len 16 --output-len 200   # demo model
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time

from minisgl.benchmark.flags import ENGINE_FLAGS, llm_kwargs
from minisgl.benchmark.lora_adapters import random_adapters
from minisgl.benchmark.report import device_name, write_json
from minisgl.core.params import SamplingParams
from minisgl.demo.model import demo_model_dir
from minisgl.llm import LLM
from minisgl.scheduler import Scheduler
from minisgl.server.args import add_flags


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="model dir (default: the built-in demo model)")
    add_flags(p, ENGINE_FLAGS)
    p.add_argument("--loads", type=int, default=4, help="adapters loaded of each kind")
    p.add_argument("--lora-rank", type=int, default=16)
    p.add_argument("--batch", type=int, default=32, help="requests decoding meanwhile")
    p.add_argument("--input-len", type=int, default=256)
    p.add_argument("--output-len", type=int, default=4096, help="enough to decode through every load")
    p.add_argument("--out", default="results/lora_load.json")
    return p.parse_args()


class Loop:
    """Steps the scheduler, timing each step and keeping the outputs' finish reasons."""

    def __init__(self, scheduler: Scheduler):
        self.s = scheduler
        self.finished: dict[int, tuple[str, str | None]] = {}

    def step(self) -> float:
        start = time.perf_counter()
        for out in self.s.step():
            if out.finish_reason:
                self.finished[out.uid] = (out.finish_reason, out.error)
        return time.perf_counter() - start

    def decoding(self, batch: int) -> bool:
        return len(self.s.decode.running) == batch and not self.s.prefill.has_work


def main() -> None:
    args = parse_args()
    model = args.model or demo_model_dir()
    llm = LLM(model, **llm_kwargs(args), max_loras=2 * args.loads, max_lora_rank=args.lora_rank)
    s, loop = llm.scheduler, Loop(llm.scheduler)
    rng = random.Random(0)
    vocab = s.engine.model_config.vocab_size
    output_len = min(args.output_len, s.engine.max_seq_len - args.input_len)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            adapters = list(random_adapters(model, tmp, 2 * args.loads, args.lora_rank).items())
            for uid in range(args.batch):
                s.add_request(uid, [rng.randrange(vocab) for _ in range(args.input_len)],
                              SamplingParams(temperature=0, max_tokens=output_len, ignore_eos=True))
            while not loop.decoding(args.batch):
                loop.step()
            base = [loop.step() for _ in range(50)]

            off_loop = {"load_s": [], "steps": [], "max_step_s": 0.0}
            for i, (name, path) in enumerate(adapters[: args.loads]):
                uid = 1000 + i
                start = time.perf_counter()
                s.update_lora(uid, name, path)
                while uid not in loop.finished:
                    step = loop.step()
                    off_loop["max_step_s"] = max(off_loop["max_step_s"], step)
                    off_loop["steps"].append(step)
                off_loop["load_s"].append(time.perf_counter() - start)
                assert loop.finished[uid] == ("stop", None), loop.finished[uid]

            in_loop = {"load_s": [], "max_step_s": 0.0}
            for name, path in adapters[args.loads :]:
                start = time.perf_counter()
                s.engine.lora.load(name, path)
                load = time.perf_counter() - start
                in_loop["load_s"].append(load)
                in_loop["max_step_s"] = max(in_loop["max_step_s"], load + loop.step())
            still = len(s.decode.running)
    finally:
        llm.shutdown()
    if still != args.batch:
        raise SystemExit(f"only {still} of {args.batch} requests decoded through every load: raise --output-len")
    median = statistics.median(base)
    result = {"benchmark": "lora_load", "device": device_name(), "model": model, "lora_rank": args.lora_rank,
              "batch": args.batch, "input_len": args.input_len, "median_step_s": median,
              "off_loop": off_loop, "in_loop": in_loop}
    print(f"{device_name()}: batch {args.batch} decoding, median step {median * 1e3:.1f} ms")
    print(f"loaded off the loop: {args.loads} adapters of rank {args.lora_rank}, each in "
          f"{statistics.median(off_loop['load_s']) * 1e3:.0f} ms (median, {len(off_loop['steps'])} steps meanwhile); "
          f"longest step {off_loop['max_step_s'] * 1e3:.1f} ms")
    print(f"read in the loop: each in {statistics.median(in_loop['load_s']) * 1e3:.0f} ms (median); "
          f"longest step with the load {in_loop['max_step_s'] * 1e3:.1f} ms")
    write_json(args.out, result)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
