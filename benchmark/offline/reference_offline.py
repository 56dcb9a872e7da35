"""The offline workload through Mini-SGLang's own offline `LLM` (the reference engine), for a
side-by-side number in the same device call. Measurement only: it runs from the git-ignored
checkout in .ref/mini-sglang, whose package is also named `minisgl`, so this script imports
nothing of ours; the workload comes from `bench.py --dump-workload`.

    (cd .ref/mini-sglang && PYTHONPATH=python python ../../benchmark/offline/reference_offline.py \\
        --model ../../.bench-models/qwen3-0.6b --workload /tmp/workload.json --out /tmp/ref.json)

Like bench.py: a two-request warm-up, then the very runs bench.py ran (its dump's `runs`: the
workload, then per measured run the same lengths with fresh ids, none found in the prefix cache);
the mean of the runs after the first is reported, and counts only from a machine that is not
compiling kernels (a fresh machine's first call is).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--workload", required=True, help="JSON written by bench.py --dump-workload")
    p.add_argument("--attn", default="fi", help="the reference's attention backend (serving.sh runs it with fi)")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    try:  # the reference's package (PYTHONPATH): minisgl/core.py upstream since, minisgl/core/params.py before
        from minisgl.core import SamplingParams
    except ImportError:
        from minisgl.core.params import SamplingParams
    from minisgl.llm import LLM

    with open(args.workload) as f:
        work = json.load(f)
    prompts = work["prompts"]
    params = [SamplingParams(temperature=work["temperature"], max_tokens=n, ignore_eos=True) for n in work["max_tokens"]]
    start = time.perf_counter()
    # Mini-SGLang's own config field names (this imports its minisgl, not ours), at the settings of
    # its own offline benchmark (benchmark/offline/bench.py there), which minisgl's run matches in
    # effect: a reference at its defaults (page_size 1, a smaller prefill budget) is not the
    # reference its authors measure.
    llm = LLM(args.model, dtype=torch.bfloat16, use_dummy_weight=True, attention_backend=args.attn,
              max_seq_len_override=4096, max_extend_tokens=16384, cuda_graph_max_bs=256, page_size=256)
    init_s = time.perf_counter() - start
    llm.generate(prompts[:2], params[:2])  # warm-up
    runs = []
    for run_prompts in work.get("runs") or [prompts, prompts]:  # (a dump from before bench.py's runs)
        start = time.perf_counter()
        outs = llm.generate(run_prompts, params)
        seconds = time.perf_counter() - start
        tokens = sum(len(o["token_ids"]) for o in outs)
        runs.append({"requests": len(prompts), "output_tokens": tokens, "seconds": seconds,
                     "tokens_per_s": tokens / seconds})
    measured = [r["tokens_per_s"] for r in runs[1:]]
    result = {"benchmark": "offline-reference", "engine": "mini-sglang", "model": args.model, "init_s": init_s,
              "runs": runs, "tokens_per_s": sum(measured) / len(measured)}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(f"mini-sglang: {runs[1]['output_tokens']} tokens a run, {result['tokens_per_s']:.1f} tok/s (mean of "
          f"{len(measured)} after the first); start-up {init_s:.1f} s")


if __name__ == "__main__":
    main()
