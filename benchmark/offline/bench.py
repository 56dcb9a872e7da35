"""Offline throughput: the field's workload through `minisgl.LLM`, optionally against HF transformers.

    python benchmark/offline/bench.py --model ../shared/models/qwen3-0.6b --dummy-weight   # GPU, full workload
    python benchmark/offline/bench.py --num-requests 32 --max-input-len 256 --max-output-len 64 --compare-hf
    python benchmark/offline/bench.py --model ... --dummy-weight --workload serving --repeats 3   # serving.sh's

Throughput is output tokens over the wall time of the whole batch, after a warm-up; the workload
runs once unmeasured and then --repeats times in one process, each run with prompts of the same
lengths and fresh ids (a rerun of the same prompts would find them in the prefix cache and skip
their prefill), and the mean of the measured runs is reported with each one's value and their
spread. With --compare-hf, HF transformers' continuous batching (`generate_batch`) runs a subset
with a fixed output length, and minisgl runs the same subset in the same process: the ratio of the
two is printed. Writes JSON and a PNG.
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from minisgl.benchmark.flags import ENGINE_FLAGS, llm_kwargs
from minisgl.benchmark.repeats import repeat_summary
from minisgl.benchmark.report import bar_plot, device_name, write_json
from minisgl.benchmark.workload import add_workload_flags, fresh_ids, workload_requests, workload_settings
from minisgl.core.params import SamplingParams
from minisgl.demo.model import demo_model_dir
from minisgl.llm import LLM
from minisgl.server.args import add_flags


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="model dir or HF id (default: the built-in demo model)")
    add_flags(p, ENGINE_FLAGS)  # the server's flags, under the same names
    add_workload_flags(p)
    p.add_argument("--repeats", type=int, default=1, help="measured runs after the unmeasured one; the mean is "
                   "reported (benchmark/online/bench.py --offline-json reads it)")
    p.add_argument("--dump-workload", help="also write the workload (prompt ids, max_tokens) to this JSON "
                                           "(benchmark/offline/reference_offline.py replays it)")
    p.add_argument("--floor", action="store_true",
                   help="also report the decode floor: weights used + KV read per step at the measured copy rate")
    p.add_argument("--compare-hf", action="store_true", help="also run HF transformers generate_batch")
    p.add_argument("--hf-requests", type=int, default=16, help="requests in the HF comparison subset")
    p.add_argument("--hf-output-len", type=int, default=64, help="fixed output length in the HF comparison")
    p.add_argument("--out", default="results/offline.json", help="JSON path; the PNG goes beside it")
    args = p.parse_args()
    if args.repeats < 1:
        p.error("--repeats is too small")
    return args


def timed_generate(llm: LLM, prompts: list[list[int]], params: list[SamplingParams]) -> dict:
    start = time.perf_counter()
    outs = llm.generate(prompts, params)
    seconds = time.perf_counter() - start
    tokens = sum(len(o["token_ids"]) for o in outs)
    return {"requests": len(prompts), "output_tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds}


def hf_generate_batch(model_path: str, dummy: bool, dtype: torch.dtype, prompts, output_len: int, temperature: float):
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if dummy:
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_path), dtype=dtype).to(device)
    else:
        model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype).to(device)
    model.eval()
    gen = GenerationConfig(max_new_tokens=output_len, do_sample=True, temperature=temperature, eos_token_id=-1,
                           pad_token_id=0)
    model.generate_batch(prompts[:2], generation_config=gen)  # warm-up
    start = time.perf_counter()
    outs = model.generate_batch(prompts, generation_config=gen, progress_bar=True)
    seconds = time.perf_counter() - start
    tokens = sum(len(o.generated_tokens) for o in outs.values())
    return {"requests": len(prompts), "output_tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds}


def main() -> None:
    args = parse_args()
    model = args.model or demo_model_dir()
    bandwidth = None
    if args.floor:
        from minisgl.benchmark.floor import copy_bandwidth

        bandwidth = copy_bandwidth()
    start = time.perf_counter()
    llm = LLM(model, **llm_kwargs(args))
    startup = {"llm_init_s": time.perf_counter() - start, **llm.scheduler.engine.timings}
    vocab = llm.scheduler.engine.model_config.vocab_size
    prompts, params = workload_requests(args, vocab)
    # Every run's prompts: the workload's, then for each measured run the same lengths with fresh ids.
    run_prompts = [fresh_ids(prompts, seed=1 + k, vocab_size=vocab) if k else prompts for k in range(1 + args.repeats)]
    if args.dump_workload:  # the reference replays the very same runs (reference_offline.py)
        write_json(args.dump_workload, {"temperature": args.temperature, "prompts": prompts, "runs": run_prompts,
                                        "max_tokens": [p.max_tokens for p in params]})

    start = time.perf_counter()
    llm.generate(prompts[:2], params[:2], use_tqdm=False)  # warm-up
    startup["warmup_generate_s"] = time.perf_counter() - start
    runs = [timed_generate(llm, run, params) for run in run_prompts]  # the first unmeasured
    repeats = repeat_summary([r["tokens_per_s"] for r in runs[1:]])
    result = {
        "benchmark": "offline", "device": device_name(), "model": model, "dummy_weight": args.dummy_weight,
        "dtype": str(llm.scheduler.engine.dtype), "kv_cache_dtype": args.kv_cache_dtype,
        "quantization": args.quantization, "tp": args.tp, "workload": workload_settings(args),
        "runs": runs, "repeats": repeats, "tokens_per_s": repeats["mean"], "startup": startup,
        "memory": getattr(llm.scheduler.engine, "memory", None),
        "overlap": llm.scheduler.overlap, "attention": type(llm.scheduler.engine.attn_backend).__name__,
        "cuda_graphs": getattr(llm.scheduler.engine.graph_runner, "batch_sizes", None),
    }
    if bandwidth:
        from minisgl.benchmark.floor import decode_floor_s

        floor_s = decode_floor_s(llm.scheduler.engine, [len(p) for p in prompts], [p.max_tokens for p in params],
                                 bandwidth)
        result["floor"] = {"copy_bandwidth_bytes_per_s": bandwidth, "decode_floor_s": floor_s,
                           "tokens_per_s": runs[1]["output_tokens"] / floor_s,
                           "fraction": runs[1]["tokens_per_s"] * floor_s / runs[1]["output_tokens"]}
        print(f"floor: decode alone at {bandwidth / 1e12:.2f} TB/s reading the weights used + KV takes "
              f"{floor_s:.2f} s = {result['floor']['tokens_per_s']:.0f} tok/s; measured is "
              f"{result['floor']['fraction']:.0%} of it")
    result["custom_all_reduce"] = not args.disable_custom_all_reduce
    result["moe_backend"] = llm.scheduler.engine.ctx.moe_backend
    print("start-up: " + ", ".join(f"{k} {v:.2f}" for k, v in startup.items()))
    print(f"minisgl: {runs[1]['output_tokens']} tokens a run, {repeats['mean']:.1f} tok/s (mean of {repeats['runs']} "
          f"after the first; min {repeats['min']:.1f}, max {repeats['max']:.1f}, spread {100 * repeats['spread']:.2f}%) "
          f"on {result['device']}")
    labels, values = ["minisgl (workload)"], [repeats["mean"]]

    if args.compare_hf:
        subset = prompts[: args.hf_requests]
        fixed = [SamplingParams(temperature=args.temperature, max_tokens=args.hf_output_len, ignore_eos=True)] * len(subset)
        mine = timed_generate(llm, subset, fixed)
        llm.shutdown()
        hf = hf_generate_batch(model, args.dummy_weight, llm.scheduler.engine.dtype, subset, args.hf_output_len,
                               args.temperature)
        ratio = mine["tokens_per_s"] / hf["tokens_per_s"]
        result["hf_comparison"] = {"minisgl": mine, "hf_generate_batch": hf, "ratio": ratio}
        print(f"same {len(subset)} requests x {args.hf_output_len} tokens: minisgl {mine['tokens_per_s']:.1f} tok/s, "
              f"HF generate_batch {hf['tokens_per_s']:.1f} tok/s, ratio {ratio:.2f}x")
        labels += ["minisgl (subset)", "HF generate_batch"]
        values += [mine["tokens_per_s"], hf["tokens_per_s"]]
    else:
        llm.shutdown()

    write_json(args.out, result)
    png = os.path.splitext(args.out)[0] + ".png"
    bar_plot(png, f"Offline throughput on {result['device']}", labels, values, "output tokens / s")
    print(f"wrote {args.out} and {png}")


if __name__ == "__main__":
    main()
