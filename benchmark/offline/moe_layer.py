"""Per-layer time of the MoE feed-forward: fused Triton path vs grouped GEMM vs the per-expert loop
(the reference), per token count, and the crossover for minisgl.layers.moe.FUSED_MAX_TOKENS.

    python benchmark/offline/moe_layer.py --config ../shared/models/qwen3-30b-a3b [--tp 2]

Shapes come from the config (hidden size, experts, top-k, expert width / --tp: one rank's share);
weights are random. The GPU paths are timed as decode runs them, captured in a CUDA graph (20
calls per replay; capture also proves they need no host sync); the loop eagerly. Medians of
CUDA-event timings. Each path's output is checked against the loop. Writes JSON and a PNG.
"""

from __future__ import annotations

import argparse
import json
import os

import torch

from minisgl.benchmark.report import device_name, write_json
from minisgl.core.context import Context, set_global_ctx
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


def graph_ms(fn, calls: int = 20) -> float:
    """Median time of one call of fn inside a CUDA graph of `calls` calls."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(calls):
            fn()
    return time_ms(graph.replay, 7) / calls


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="../shared/models/qwen3-30b-a3b", help="dir with an HF config.json")
    p.add_argument("--tokens", default="1,2,4,8,16,32,64,128,256,512,1024,2048,4096,8192")
    p.add_argument("--tp", type=int, default=1, help="time one rank's share of the experts at this TP size")
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
        layer = MoELayer(cfg["hidden_size"], cfg["moe_intermediate_size"] // args.tp, cfg["num_experts"],
                         cfg["num_experts_per_tok"], cfg.get("norm_topk_prob", True))
        torch.set_default_dtype(torch.float32)
    for param in layer.parameters():
        param.data.normal_(std=0.02)
    backends = ["fused", "grouped"] if device.type == "cuda" else ["grouped"]
    rows = []
    for n in (int(t) for t in args.tokens.split(",")):
        x = torch.randn(n, cfg["hidden_size"], device=device, dtype=dtype)
        row = {"tokens": n}
        with torch.inference_mode():
            ctx.moe_backend = "loop"
            want = layer(x)
            row["loop_ms"] = time_ms(lambda: layer(x), args.iters) if n <= 1024 else None
            for backend in backends:
                ctx.moe_backend = backend
                row[f"{backend}_max_abs_diff"] = (layer(x) - want).abs().max().item()
                run = lambda: layer(x)  # noqa: E731
                row[f"{backend}_ms"] = graph_ms(run) if device.type == "cuda" else time_ms(run, args.iters)
        row["best"] = min(backends, key=lambda b: row[f"{b}_ms"])
        rows.append(row)
        print(f"{n:>6} tokens: " + ", ".join(f"{b} {row[f'{b}_ms']:.3f} ms" for b in ["loop", *backends]
                                             if row.get(f"{b}_ms") is not None)
              + f"; best {row['best']}; max |diff| vs loop " + ", ".join(
                  f"{b} {row[f'{b}_max_abs_diff']:.1e}" for b in backends))
    if "fused" in backends:
        fused_wins = [r["tokens"] for r in rows if r["best"] == "fused"]
        first_loss = next((r["tokens"] for r in rows if r["best"] != "fused"), None)
        print(f"fused is faster at {fused_wins}; set FUSED_MAX_TOKENS below {first_loss} "
              f"(largest winning size before the first loss)" if first_loss else "fused wins at every size")
    write_json(args.out, {"benchmark": "moe_layer", "device": device_name(), "config": args.config, "tp": args.tp,
                          "dtype": str(dtype), "rows": rows})
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    xs = [r["tokens"] for r in rows]
    loop = [r for r in rows if r["loop_ms"] is not None]
    ax.plot([r["tokens"] for r in loop], [r["loop_ms"] for r in loop], "o-", label="per-expert loop (eager)")
    for b in backends:
        ax.plot(xs, [r[f"{b}_ms"] for r in rows], "o-", label=f"{b} (CUDA graph)" if device.type == "cuda" else b)
    ax.set(xscale="log", yscale="log", xlabel="tokens", ylabel="ms per MoE layer", title=f"MoE layer on {device_name()}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.splitext(args.out)[0] + ".png", dpi=100)


if __name__ == "__main__":
    main()
