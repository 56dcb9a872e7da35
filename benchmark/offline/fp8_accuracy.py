"""How far FP8 moves the model's next-token distributions, where no real checkpoint can be loaded:
random-weight models of real shapes (minisgl's dummy weights on a published config), bf16 against
FP8 KV cache, FP8 weights (`--quantization fp8`) and both.

    python benchmark/offline/fp8_accuracy.py --model .bench-models/qwen3-0.6b --out results/kl-qwen3-0.6b.json

Each variant prefills the same random prompts (so the last position attends over the whole,
possibly FP8, cache) and keeps the next-token distribution at the last position; reported per
variant against bf16: KL(bf16 || variant) mean / p99 / max, top-1 agreement, and the bf16
distributions' mean entropy. Random weights give nearly flat distributions (entropy near
log(vocab)), on which any perturbation has a small KL; so every statistic is also reported at a
temperature T < 1 that brings the bf16 entropy down to --target-entropy nats (a confident model's;
dividing logits by T is what a T-times sharper LM head does to the same perturbation). Writes
JSON and a PNG.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import random

import torch

from minisgl.benchmark.report import bar_plot, device_name, write_json
from minisgl.engine import Engine, EngineConfig
from tests.helpers import EngineDriver  # the Engine driven by hand: prefill logits without a scheduler

VARIANTS = {
    "bf16": {},
    "fp8 KV": {"kv_cache_dtype": "fp8_e4m3"},
    "fp8 weights": {"quantization": "fp8"},
    "fp8 weights + KV": {"kv_cache_dtype": "fp8_e4m3", "quantization": "fp8"},
}


def last_logits(model: str, prompts: list[list[int]], batch: int, attn: str, **config) -> torch.Tensor:
    pages = len(prompts) * (-(-(len(prompts[0]) + 1) // 16))  # exactly what the prompts need: the
    engine = Engine(EngineConfig(model, dtype=torch.bfloat16, dummy_weight=True, cuda_graph_max_bs=0,
                                 max_running_requests=len(prompts), max_seq_len=len(prompts[0]) + 8,
                                 num_pages=pages, attn=attn, **config))
    driver = EngineDriver(engine)  # (rest of the device stays free for the next variant's engine)
    try:
        out = []
        for start in range(0, len(prompts), batch):
            reqs = [driver.add(p, max_len=len(p) + 1) for p in prompts[start : start + batch]]
            out.append(driver.step(reqs).float().cpu())
        return torch.cat(out)
    finally:
        engine.shutdown()
        del driver, engine
        gc.collect()  # the engine's reference cycles hold its weights until collected
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def sharpening_temperature(logits: torch.Tensor, entropy: float) -> float:
    """The T at which softmax(logits / T) has this mean entropy (bisection on log T)."""
    lo, hi = math.log(1e-4), 0.0
    for _ in range(40):
        mid = (lo + hi) / 2
        lp = torch.log_softmax(logits / math.exp(mid), dim=-1)
        if -(lp.exp() * lp).sum(-1).mean().item() > entropy:
            hi = mid
        else:
            lo = mid
    return math.exp((lo + hi) / 2)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--prompts", type=int, default=64)
    p.add_argument("--prompt-len", type=int, default=512)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--attn", default="auto", help="one backend for every variant (flashinfer on the GPU: FA2 "
                                                  "prefill both for bf16 and FP8 KV)")
    p.add_argument("--target-entropy", type=float, default=2.0, help="nats; see above")
    p.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, of: " + ", ".join(VARIANTS))
    p.add_argument("--out", default="results/fp8_accuracy.json")
    args = p.parse_args()
    from transformers import AutoConfig

    vocab = AutoConfig.from_pretrained(args.model).vocab_size
    rng = random.Random(0)
    prompts = [[rng.randrange(vocab) for _ in range(args.prompt_len)] for _ in range(args.prompts)]
    names = [n.strip() for n in args.variants.split(",")]
    logits = {}
    for name in ["bf16"] + [n for n in names if n != "bf16"]:
        print(f"{name}: {args.prompts} prompts of {args.prompt_len} tokens", flush=True)
        logits[name] = last_logits(args.model, prompts, args.batch, args.attn, **VARIANTS[name])
    temperature = sharpening_temperature(logits["bf16"], args.target_entropy)
    result = {"benchmark": "fp8_accuracy", "device": device_name(), "model": args.model, "prompts": args.prompts,
              "prompt_len": args.prompt_len, "log_vocab": math.log(vocab), "variants": {}}
    for t in (1.0, temperature):
        ref = torch.log_softmax(logits["bf16"] / t, dim=-1)
        entropy = -(ref.exp() * ref).sum(-1).mean().item()
        key = "T=1" if t == 1.0 else "sharpened"
        result[key] = {"temperature": t, "bf16_entropy_mean": entropy}
        print(f"{key} (T={t:.3g}): bf16 entropy mean {entropy:.3f} nats (log vocab {math.log(vocab):.3f})")
        for name, lg in logits.items():
            if name == "bf16":
                continue
            lp = torch.log_softmax(lg / t, dim=-1)
            kl = (ref.exp() * (ref - lp)).sum(-1)
            stats = {"kl_mean": kl.mean().item(), "kl_p99": kl.quantile(0.99).item(), "kl_max": kl.max().item(),
                     "top1_agreement": (lg.argmax(-1) == logits["bf16"].argmax(-1)).float().mean().item(),
                     "max_abs_logit_diff": (lg - logits["bf16"]).abs().max().item()}
            result["variants"].setdefault(name, {})[key] = stats
            print(f"  {name}: KL mean {stats['kl_mean']:.2e}, p99 {stats['kl_p99']:.2e}, max {stats['kl_max']:.2e} "
                  f"nats; top-1 agreement {stats['top1_agreement']:.3f}; max |logit diff| "
                  f"{stats['max_abs_logit_diff']:.3f}", flush=True)
    write_json(args.out, result)
    png = os.path.splitext(args.out)[0] + ".png"
    bar_plot(png, f"KL(bf16 || FP8) x 1e3, sharpened to {args.target_entropy} nats, "
             f"{os.path.basename(args.model.rstrip('/'))}", list(result["variants"]),
             [v["sharpened"]["kl_mean"] * 1e3 for v in result["variants"].values()], "mean KL, millinats")
    print(f"wrote {args.out} and {png}")


if __name__ == "__main__":
    main()
