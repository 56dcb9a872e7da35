"""Per-layer time of the MoE feed-forward: grouped GEMM vs the per-expert loop (the reference).

    python benchmark/offline/moe_layer.py --config ../shared/models/qwen3-30b-a3b

Shapes come from the config (hidden size, experts, top-k, expert width); weights are random. Times
are CUDA-event medians over repeated calls per token count. Writes JSON and a PNG.
"""

from __future__ import annotations

import argparse
import json
import os

import torch

from minisgl.benchmark.report import device_name, write_json
from minisgl.core import Context, set_global_ctx
from minisgl.distributed import DistributedInfo
from minisgl.layers import MoELayer


def time_ms(fn, iters: int) -> float:
    for _ in range(3):
        fn()
    if not torch.cuda.is_available():
        import time

        start = time.perf_counter()
        for _ in range(iters):
            fn()
        return (time.perf_counter() - start) * 1000 / iters
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="../shared/models/qwen3-30b-a3b", help="dir with an HF config.json")
    p.add_argument("--tokens", default="1,8,64,256,1024,4096")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--out", default="results/moe_layer.json")
    args = p.parse_args()
    cfg = json.load(open(os.path.join(args.config, "config.json")))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    ctx = Context(device=device, tp=DistributedInfo())
    set_global_ctx(ctx)
    with torch.device(device):
        torch.set_default_dtype(dtype)
        layer = MoELayer(cfg["hidden_size"], cfg["moe_intermediate_size"], cfg["num_experts"],
                         cfg["num_experts_per_tok"], cfg.get("norm_topk_prob", True))
        torch.set_default_dtype(torch.float32)
    for param in layer.parameters():
        param.data.normal_(std=0.02)
    rows = []
    for n in (int(t) for t in args.tokens.split(",")):
        x = torch.randn(n, cfg["hidden_size"], device=device, dtype=dtype)
        row = {"tokens": n}
        for backend in ("loop", "grouped"):
            ctx.moe_backend = backend
            with torch.inference_mode():
                row[f"{backend}_ms"] = time_ms(lambda: layer(x), args.iters)
        ctx.moe_backend = "loop"
        want = layer(x)
        ctx.moe_backend = "grouped"
        row["max_abs_diff"] = (layer(x) - want).abs().max().item()
        row["speedup"] = row["loop_ms"] / row["grouped_ms"]
        rows.append(row)
        print(f"{n:>6} tokens: loop {row['loop_ms']:.3f} ms, grouped {row['grouped_ms']:.3f} ms, "
              f"x{row['speedup']:.1f}, max |diff| {row['max_abs_diff']:.2e}")
    write_json(args.out, {"benchmark": "moe_layer", "device": device_name(), "config": args.config,
                          "dtype": str(dtype), "rows": rows})
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    xs = [r["tokens"] for r in rows]
    ax.plot(xs, [r["loop_ms"] for r in rows], "o-", label="per-expert loop")
    ax.plot(xs, [r["grouped_ms"] for r in rows], "o-", label="grouped GEMM")
    ax.set(xscale="log", yscale="log", xlabel="tokens", ylabel="ms per MoE layer", title=f"MoE layer on {device_name()}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.splitext(args.out)[0] + ".png", dpi=100)


if __name__ == "__main__":
    main()
