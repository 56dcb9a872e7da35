"""What the sampling controls cost: the offline workload with none of them, then with each one on.

    python benchmark/offline/sampling_cost.py --model <qwen3-0.6b> --dummy-weight      # GPU
    python benchmark/offline/sampling_cost.py --num-requests 16 --max-output-len 16    # CPU smoke run

Penalties, logit_bias, min_tokens and grammar masks run outside the decode CUDA graph, on a copy
of the logits, and only in steps where some request of the batch asks for one of them
(minisgl/engine/logits.py). So the question is twofold: what a batch pays when none is in use
(compare the `none` runs with an older build's bench.py, which had no such controls, in the same
call: benchmark/device/sampling_cost.sh), and what each costs when every request or a tenth of
them uses it. One LLM, one process; the `none` variant runs first and last to show the noise.
Writes JSON and a PNG.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import replace

from minisgl.benchmark.flags import llm_kwargs
from minisgl.benchmark.report import bar_plot, device_name, write_json
from minisgl.benchmark.workload import add_workload_flags, workload_requests, workload_settings
from minisgl.core.params import SamplingParams
from minisgl.demo.model import demo_model_dir
from minisgl.llm import LLM
from minisgl.server.args import add_flags

# name -> (fields set on the requests it applies to, share of requests that get them)
VARIANTS: dict[str, tuple[dict, float]] = {
    "none": ({}, 0.0),
    "penalties (all)": ({"presence_penalty": 0.5, "frequency_penalty": 0.5, "repetition_penalty": 1.1}, 1.0),
    "penalties (1 in 10)": ({"presence_penalty": 0.5, "frequency_penalty": 0.5, "repetition_penalty": 1.1}, 0.1),
    "logit_bias 16 ids (all)": ({"logit_bias": tuple((t, -5.0) for t in range(1, 17))}, 1.0),
    "min_tokens 8 (all)": ({"min_tokens": 8}, 1.0),
    # A grammar that the benchmark models' synthetic tokenizers (benchmark/prepare_model.py: tokens
    # "t<id>") can spell (with no token allowed a request ends at once, with finish "error"). It
    # may end at any token, i.e. allow EOS, which ignore_eos does not cover here; with random
    # weights EOS is ~1 in 152K draws, so the token counts of the runs are compared too. Not a
    # counted repetition such as {5000,}: xgrammar 0.2.8's accept_token then costs time linear in
    # the text so far (4 ms a token at 1,024 tokens, measured on the CPU), which measures xgrammar.
    "regex grammar (1 in 10)": ({"constraint": ("regex", "[a-z0-9 ]+")}, 0.1),
    "regex grammar (all)": ({"constraint": ("regex", "[a-z0-9 ]+")}, 1.0),
}


SERVER_FLAGS = ("device", "dummy_weight")  # the server's flags, same names (minisgl.benchmark.flags)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="model dir (default: the built-in demo model)")
    add_flags(p, SERVER_FLAGS)
    add_workload_flags(p)
    p.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated subset of: " + ", ".join(VARIANTS))
    p.add_argument("--out", default="results/sampling_cost.json", help="JSON path; the PNG goes beside it")
    return p.parse_args()


def variant_params(base: list[SamplingParams], fields: dict, share: float) -> list[SamplingParams]:
    every = round(1 / share) if share else 0
    return [replace(p, **fields) if every and i % every == 0 else p for i, p in enumerate(base)]


def main() -> None:
    args = parse_args()
    names = [n.strip() for n in args.variants.split(",") if n.strip()]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise SystemExit(f"sampling_cost.py: error: unknown variant(s) {unknown}; known: {list(VARIANTS)}")
    llm = LLM(args.model or demo_model_dir(), **llm_kwargs(args, SERVER_FLAGS))
    vocab = llm.scheduler.engine.model_config.vocab_size
    prompts, base = workload_requests(args, vocab)
    # Warm-up: kernels, graphs, and the grammars' compilation (cached by its text after this).
    llm.generate(prompts[:2], [base[0], replace(base[1], **VARIANTS["regex grammar (all)"][0])], use_tqdm=False)
    runs = []
    for name in ["none", *[n for n in names if n != "none"], "none"]:
        params = variant_params(base, *VARIANTS[name])
        start = time.perf_counter()
        outs = llm.generate(prompts, params, use_tqdm=False)
        seconds = time.perf_counter() - start
        tokens = sum(len(o["token_ids"]) for o in outs)
        errors = sum(o["finish_reason"] == "error" for o in outs)
        runs.append({"variant": name, "output_tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds,
                     "errors": errors})
        print(f"{name:32s} {tokens:8d} tokens {seconds:7.2f} s {tokens / seconds:10.1f} tok/s"
              + (f"  ({errors} requests ended with an error)" if errors else ""), flush=True)
    llm.shutdown()
    baseline = (runs[0]["tokens_per_s"] + runs[-1]["tokens_per_s"]) / 2
    for run in runs:
        run["vs_none"] = run["tokens_per_s"] / baseline
    result = {"benchmark": "sampling_cost", "device": device_name(), "model": args.model, "runs": runs,
              "workload": workload_settings(args)}
    write_json(args.out, result)
    png = os.path.splitext(args.out)[0] + ".png"
    bar_plot(png, f"Sampling controls, offline workload on {result['device']}",
             [r["variant"] for r in runs], [r["tokens_per_s"] for r in runs], "output tokens / s")
    print(f"wrote {args.out} and {png}")


if __name__ == "__main__":
    main()
