"""Multi-LoRA throughput: the offline workload on the base model, then with its requests spread over
N random adapters (PEFT format, every q/k/v/o and gate/up/down projection, rank R) in one pool,
in one process and on one device, so the ratio compares like with like.

    python benchmark/offline/lora.py --model .bench-models/qwen3-8b --dummy-weight   # GPU
    python benchmark/offline/lora.py --num-requests 8 --max-input-len 64 --max-output-len 16 --device cpu

Each run counts its decode steps and those replayed from a CUDA graph (the LoRA slot mask is computed
inside the graphs): the graphs are used when both are about equal. Writes JSON.
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import time

import torch

from minisgl.benchmark.flags import ENGINE_FLAGS, llm_kwargs
from minisgl.benchmark.lora_adapters import random_adapters
from minisgl.benchmark.report import device_name, write_json
from minisgl.benchmark.workload import add_workload_flags, workload_requests, workload_settings
from minisgl.demo.model import demo_model_dir
from minisgl.llm import LLM
from minisgl.models import load_model_config
from minisgl.server.args import add_flags


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="model dir (default: the built-in demo model)")
    add_flags(p, ENGINE_FLAGS)
    p.add_argument("--num-adapters", type=int, default=8)
    p.add_argument("--lora-rank", type=int, default=16)
    add_workload_flags(p)
    p.add_argument("--out", default="results/lora.json")
    return p.parse_args()


def run(model: str, kwargs: dict, prompts, params, lora: list[str | None] | None) -> dict:
    start = time.perf_counter()
    llm = LLM(model, **kwargs)
    init_s = time.perf_counter() - start
    steps = {"decode": 0, "graph": 0}
    e, sched = llm.scheduler.engine, llm.scheduler
    launch = sched._launch

    def counted(batch, read_previous):
        steps["decode"] += batch.is_decode
        steps["graph"] += bool(e.graph_runner and e.graph_runner.can_run(batch))
        return launch(batch, read_previous)

    sched._launch = counted
    try:
        llm.generate(prompts[:2], params[:2], use_tqdm=False, lora=lora and lora[:2])  # warm-up
        runs = []
        for _ in range(2):
            steps.update(decode=0, graph=0)
            start = time.perf_counter()
            outs = llm.generate(prompts, params, use_tqdm=False, lora=lora)
            seconds = time.perf_counter() - start
            tokens = sum(len(o["token_ids"]) for o in outs)
            runs.append({"output_tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds, **steps})
    finally:
        llm.shutdown()
    return {"init_s": init_s, "runs": runs, "tokens_per_s": runs[1]["tokens_per_s"]}


def main() -> None:
    args = parse_args()
    model = args.model or demo_model_dir()
    kwargs = llm_kwargs(args)
    vocab = load_model_config(model).vocab_size
    prompts, params = workload_requests(args, vocab)
    with tempfile.TemporaryDirectory() as tmp:
        adapters = random_adapters(model, tmp, args.num_adapters, args.lora_rank)
        names = [f"a{i % args.num_adapters}" for i in range(len(prompts))]
        base = run(model, kwargs, prompts, params, None)
        # The first engine's KV cache and graphs go back to the device before the second sizes its
        # own (the scheduler's patched launch holds a reference cycle: collected here).
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        lora = run(model, {**kwargs, "lora_modules": adapters, "max_lora_rank": args.lora_rank}, prompts, params,
                   names)
    ratio = lora["tokens_per_s"] / base["tokens_per_s"]
    result = {"benchmark": "lora", "device": device_name(), "model": model, "num_adapters": args.num_adapters,
              "lora_rank": args.lora_rank, "workload": workload_settings(args),
              "base": base, "lora": lora, "ratio": ratio}
    for name, r in (("base", base), (f"{args.num_adapters} adapters of rank {args.lora_rank}", lora)):
        last = r["runs"][1]
        print(f"{name}: {last['output_tokens']} tokens in {last['seconds']:.2f} s = {last['tokens_per_s']:.1f} tok/s; "
              f"decode steps {last['decode']}, in CUDA graphs {last['graph']}")
    print(f"LoRA / base throughput: {ratio:.3f} on {result['device']}")
    write_json(args.out, result)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
