"""Decode latency at small batch: time per output token against the weight-read floor.

    python benchmark/offline/latency.py --model ../shared/models/llama-3.1-8b --dummy-weight

Runs `--batch` requests of `--prompt-len` random tokens for `--decode-steps` greedy tokens each
(ignore_eos) through the scheduler, after a warm-up, and times every step. Time per output
token (TPOT) is the mean gap between consecutive tokens after the first; time to first token is
reported beside it. The floor is the bytes every decode step must read (weights, plus the KV
cache at the mean length) over the device-to-device copy bandwidth measured in the same run; for
a mixture of experts only the experts the batch is routed to (minisgl/benchmark/floor.py), and
with --tp the figures of one rank (its weight and KV shares).
With --compare-eager the same run repeats with CUDA graphs off. Writes JSON (and a PNG).
"""

from __future__ import annotations

import argparse
import gc
import itertools
import os
import random
import time

import torch

from minisgl.benchmark.flags import ENGINE_FLAGS, llm_kwargs
from minisgl.benchmark.floor import active_weight_bytes, copy_bandwidth, kv_bytes_per_token
from minisgl.benchmark.report import bar_plot, device_name, write_json
from minisgl.core.params import SamplingParams
from minisgl.llm import LLM
from minisgl.message import TokenizedRequestMsg
from minisgl.server.args import add_flags

# The batch sets max_running_requests (and the lengths max_seq_len).
LATENCY_FLAGS = tuple(name for name in ENGINE_FLAGS if name != "max_running_requests")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="../shared/models/llama-3.1-8b")
    # The server's flags, under the same names; decode latency is measured in bfloat16 by default.
    add_flags(p, LATENCY_FLAGS, dtype="bfloat16")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--decode-steps", type=int, default=256)
    p.add_argument("--compare-eager", action="store_true", help="repeat with CUDA graphs off")
    p.add_argument("--out", default="results/latency.json")
    return p.parse_args()


def measure(args, graphs: bool) -> dict:
    max_len = args.prompt_len + args.decode_steps + 16
    start = time.perf_counter()
    llm = LLM(args.model, **{**llm_kwargs(args, LATENCY_FLAGS), "max_running_requests": max(args.batch, 8),
                             "max_seq_len": max_len, "cuda_graph_max_bs": args.cuda_graph_max_bs if graphs else 0})
    init_s = time.perf_counter() - start
    s = llm.scheduler
    e = s.engine
    rng = random.Random(0)
    vocab = e.model_config.vocab_size
    prompts = [[rng.randrange(vocab) for _ in range(args.prompt_len)] for _ in range(args.batch)]
    params = SamplingParams(temperature=0, max_tokens=args.decode_steps, ignore_eos=True)
    llm.generate(prompts, SamplingParams(temperature=0, max_tokens=16, ignore_eos=True), use_tqdm=False)  # warm-up
    try:
        # Through the scheduler server, as LLM.generate goes, so tensor-parallel followers get the
        # requests too; a timestamp per step that produced tokens.
        first = 10**9
        for i, p in enumerate(prompts):
            llm.inbox.put(TokenizedRequestMsg(first + i, p, params))
        stamps: list[float] = []
        finished = 0
        begin = time.perf_counter()
        while finished < len(prompts):
            llm.server.run_once()
            outs, llm._outputs[:] = list(llm._outputs), []
            if any(o.token_id is not None for o in outs):
                stamps.append(time.perf_counter())
            finished += sum(1 for o in outs if o.finish_reason)
        gaps = [b - a for a, b in itertools.pairwise(stamps)]
        tpot = (stamps[-1] - stamps[0]) / (len(stamps) - 1)
        median = sorted(gaps)[len(gaps) // 2]
        # Where the mean leaves the median: the slowest steps, and how many took 1.5x the median.
        slowest = sorted(range(len(gaps)), key=gaps.__getitem__)[-5:][::-1]
        kv_token = kv_bytes_per_token(e)
        mean_len = args.prompt_len + args.decode_steps / 2
        return {"cuda_graphs": e.graph_runner is not None, "attention": type(e.attn_backend).__name__,
                "init_s": init_s, "ttft_s": stamps[0] - begin, "tpot_s": tpot,
                "tpot_median_s": median, "steps": len(stamps),
                "slowest_steps": [{"step": i + 1, "ms": gaps[i] * 1e3} for i in slowest],
                "steps_over_1_5x_median": sum(g > 1.5 * median for g in gaps),
                "weight_bytes": e.weight_bytes, "active_weight_bytes": active_weight_bytes(e, args.batch),
                "startup": e.timings, "kv_bytes_per_step": int(args.batch * mean_len * kv_token)}
    finally:
        llm.shutdown()
        del llm, s, e
        gc.collect()  # the engine's reference cycles hold the KV cache until collected
        torch.cuda.empty_cache()


def main() -> None:
    args = parse_args()
    bw = copy_bandwidth()
    runs = [measure(args, graphs=True)]
    if args.compare_eager:
        runs.append(measure(args, graphs=False))
    # Memory moves about the copy rate (bytes read + written) whatever the mix: reading is the floor.
    floor = (runs[0]["active_weight_bytes"] + runs[0]["kv_bytes_per_step"]) / bw
    for r in runs:
        r["floor_s"] = floor
        r["tpot_over_floor"] = r["tpot_s"] / floor
    result = {"benchmark": "latency", "device": device_name(), "model": args.model, "dummy_weight": args.dummy_weight,
              "quantization": args.quantization, "kv_cache_dtype": args.kv_cache_dtype, "tp": args.tp,
              "custom_all_reduce": not args.disable_custom_all_reduce,
              "batch": args.batch, "prompt_len": args.prompt_len, "decode_steps": args.decode_steps,
              "copy_bandwidth_bytes_per_s": bw, "runs": runs}
    for r in runs:
        print(f"{'graphs' if r['cuda_graphs'] else 'eager '}: TPOT {r['tpot_s'] * 1e3:.2f} ms (median "
              f"{r['tpot_median_s'] * 1e3:.2f}), TTFT {r['ttft_s'] * 1e3:.1f} ms, floor {floor * 1e3:.2f} ms "
              f"({r['active_weight_bytes'] / 1e9:.2f} GB weights read at {bw / 1e12:.2f} TB/s), "
              f"{r['tpot_over_floor']:.2f}x floor; start-up {r['init_s']:.1f} s")
        slow = ", ".join(f"#{x['step']} {x['ms']:.1f}" for x in r["slowest_steps"])
        print(f"  slowest steps (ms): {slow}; {r['steps_over_1_5x_median']} over 1.5x the median")
    write_json(args.out, result)
    png = os.path.splitext(args.out)[0] + ".png"
    labels = ["floor"] + [("graphs" if r["cuda_graphs"] else "eager") for r in runs]
    bar_plot(png, f"Batch-{args.batch} decode, {os.path.basename(args.model.rstrip('/'))}", labels,
             [floor * 1e3] + [r["tpot_s"] * 1e3 for r in runs], "ms per output token")
    print(f"wrote {args.out} and {png}")


if __name__ == "__main__":
    main()
