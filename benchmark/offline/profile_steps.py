"""Where a step's time goes: kernel times by category for decode and prefill steps.

    python benchmark/offline/profile_steps.py --model ../shared/models/qwen3-0.6b --dummy-weight

Admits `--requests` prompts of `--prompt-len` tokens, runs until every request decodes, then
records `--steps` decode steps with torch.profiler (CUDA kernels, graph replays included) and,
separately, one prefill step of `--prefill-tokens` tokens. Prints, per step, the GPU time of
each kernel category, the GPU-busy share of the wall time, the top kernels and, for decode, where
the GPU ran no kernel (the idle time before each kernel: waits for the host or a launch); writes JSON.
With `--num-adapters N` the requests are spread over N random LoRA adapters of `--lora-rank`.
With `--tp N` the requests and steps go through the scheduler server, as in serving (rank 0
broadcasts each turn's messages to the other ranks, whose steps run beside its own); the kernels
profiled are rank 0's.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from dataclasses import asdict

import torch
from torch.profiler import ProfilerActivity, profile

from minisgl.benchmark.flags import llm_kwargs
from minisgl.benchmark.kernel_profile import idle_time, kernel_spans, kernel_table, show, show_idle
from minisgl.benchmark.lora_adapters import random_adapters
from minisgl.benchmark.report import device_name, write_json
from minisgl.core.params import SamplingParams
from minisgl.llm import LLM
from minisgl.message import AbortMsg, TokenizedRequestMsg
from minisgl.server.args import add_flags

# The server's flags, same names (minisgl.benchmark.flags).
SERVER_FLAGS = ("dummy_weight", "attn", "quantization", "kv_cache_dtype", "tp", "disable_custom_all_reduce",
                "piecewise_cuda_graph_max_tokens")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="../shared/models/qwen3-0.6b")
    add_flags(p, SERVER_FLAGS)
    p.add_argument("--requests", type=int, default=256)
    p.add_argument("--prompt-len", type=int, default=800)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--prefill-tokens", type=int, default=8192)
    p.add_argument("--num-adapters", type=int, default=0, help="spread the requests over this many LoRA adapters")
    p.add_argument("--lora-rank", type=int, default=16)
    p.add_argument("--cprofile", action="store_true", help="also print the host-side (Python) profile of decode steps")
    p.add_argument("--out", default="results/profile.json")
    args = p.parse_args()

    adapters = (random_adapters(args.model, tempfile.mkdtemp(), args.num_adapters, args.lora_rank)
                if args.num_adapters else None)
    names = list(adapters or [None])
    llm = LLM(args.model, dtype=torch.bfloat16, max_running_requests=args.requests, lora_modules=adapters,
              max_lora_rank=args.lora_rank, **llm_kwargs(args, SERVER_FLAGS))
    s = llm.scheduler
    vocab = s.engine.model_config.vocab_size
    rng = random.Random(0)
    llm.generate([[1, 2, 3]], SamplingParams(max_tokens=4), use_tqdm=False)  # warm-up

    def add(uid: int, ids: list[int], params: SamplingParams) -> None:
        llm.inbox.put(TokenizedRequestMsg(uid, ids, params))  # received (and broadcast to the other ranks) by the next step

    step = llm.server.run_once
    for uid in range(args.requests):
        params = SamplingParams(temperature=0.6, max_tokens=200, ignore_eos=True, lora=names[uid % len(names)])
        add(uid, [rng.randrange(vocab) for _ in range(args.prompt_len)], params)
    t0 = time.perf_counter()
    step()
    while s.prefill.has_work:
        step()
    print(f"prefilled {args.requests} x {args.prompt_len} tokens in {time.perf_counter() - t0:.2f} s", flush=True)
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    waited = [0.0]  # host time spent waiting for the GPU (events): the rest of the wall is host work
    sync = torch.cuda.Event.synchronize

    def timed_sync(event):
        t = time.perf_counter()
        sync(event)
        waited[0] += time.perf_counter() - t

    torch.cuda.Event.synchronize = timed_sync
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    torch.cuda.synchronize()
    decode_wall = (time.perf_counter() - start) * 1e6 / args.steps  # without the profiler
    torch.cuda.Event.synchronize = sync
    print(f"decode: host busy {decode_wall / 1e3 - waited[0] * 1e3 / args.steps:.2f} ms/step, waiting for the GPU "
          f"{waited[0] * 1e3 / args.steps:.2f} ms/step")
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(args.steps):
            step()
        torch.cuda.synchronize()
    decode = kernel_table(prof, args.steps)
    show(f"decode, batch {args.requests}, context ~{args.prompt_len + 10}", decode_wall, *decode)
    decode_idle = idle_time(kernel_spans(prof), args.steps)
    show_idle(decode_idle)
    if args.cprofile:
        import cProfile
        import pstats

        cp = cProfile.Profile()
        cp.enable()
        for _ in range(args.steps):
            step()
        torch.cuda.synchronize()
        cp.disable()
        print(f"\n== host profile of {args.steps} decode steps (tottime, ms per step)")
        stats = pstats.Stats(cp)
        rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:25]
        for (file, line, fn), (cc, nc, tt, ct, _) in rows:
            print(f"  {tt * 1e3 / args.steps:7.3f} tot {ct * 1e3 / args.steps:7.3f} cum  {nc // args.steps:6d}x  "
                  f"{fn} ({file.split('/')[-1]}:{line})")
    for uid in list(s.reqs):
        llm.inbox.put(AbortMsg(uid))
    while s.has_work:
        step()

    # One prefill step of fresh prompts (no decode batch alternating with it).
    n = max(1, args.prefill_tokens // args.prompt_len)
    for uid in range(n):
        add(10**6 + uid, [rng.randrange(vocab) for _ in range(args.prompt_len)],
            SamplingParams(temperature=0.6, max_tokens=1, ignore_eos=True, lora=names[uid % len(names)]))
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        start = time.perf_counter()
        step()  # launches the prefill batch
        torch.cuda.synchronize()
        prefill_wall = (time.perf_counter() - start) * 1e6
    prefill = kernel_table(prof, 1)
    show(f"prefill, {n} prompts x {args.prompt_len} tokens", prefill_wall, *prefill)
    while s.has_work:
        step()
    if args.cprofile:
        import cProfile
        import pstats

        for uid in range(n):
            add(2 * 10**6 + uid, [rng.randrange(vocab) for _ in range(args.prompt_len)],
                SamplingParams(temperature=0.6, max_tokens=1, ignore_eos=True))
        torch.cuda.synchronize()
        cp = cProfile.Profile()
        cp.enable()
        step()
        torch.cuda.synchronize()
        cp.disable()
        print("\n== host profile of the prefill step (tottime, ms)")
        stats = pstats.Stats(cp)
        for (file, line, fn), (cc, nc, tt, ct, _) in sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:22]:
            print(f"  {tt * 1e3:7.3f} tot {ct * 1e3:7.3f} cum {nc:6d}x  {fn} ({file.split('/')[-1]}:{line})")
    while s.has_work:
        step()
    llm.shutdown()
    write_json(args.out, {"benchmark": "profile", "device": device_name(), "model": args.model,
                          "decode": {"batch": args.requests, "wall_us_per_step": decode_wall, "categories_us": decode[0],
                                     "top": decode[1], "idle": asdict(decode_idle)},
                          "prefill": {"tokens": n * args.prompt_len, "wall_us": prefill_wall, "categories_us": prefill[0],
                                      "top": prefill[1]}})


if __name__ == "__main__":
    main()
