"""All-reduce time per decode step under tensor parallelism: NCCL against the custom all-reduce
(PyTorch symmetric memory, one-shot and two-shot; minisgl/distributed/custom_allreduce.py), and the
all-reduce fused with the residual add and RMSNorm (FlashInfer's one-shot and two-shot kernels;
minisgl/distributed/fused_norm.py), which the decoder's norms call in its place.

    python benchmark/offline/allreduce.py --config ../shared/models/qwen3-8b --tp 2

Each layer all-reduces twice (after attention and after the MLP) a [batch, hidden] tensor; this
times one all-reduce per batch size and method, as decode runs it: 50 calls captured in one CUDA
graph, replayed (so no launch overhead), median of 5 replays. Per step = 2 x layers x that. First
checks that each method sums correctly. Prints the fastest method per size and the message
sizes where one-shot, two-shot and NCCL take over. Writes JSON and a PNG.
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from minisgl.benchmark.report import device_name, write_json
from minisgl.utils.net import rendezvous_addr

CALLS = 50


def graph_us(fn, x: torch.Tensor) -> float:
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn(x)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(CALLS):
            fn(x)
    times = []
    for _ in range(6):
        dist.barrier()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000 / CALLS)
    return sorted(times[1:])[2]


def worker(rank: int, tp: int, addr: str, hidden: int, layers: int, batches: list[int], out: str) -> None:
    from minisgl.distributed import custom_allreduce

    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
    dist.init_process_group("nccl", init_method=addr, rank=rank, world_size=tp)
    biggest = max(batches) * hidden * 2
    custom = custom_allreduce.create(dist.group.WORLD, device, max_bytes=biggest)
    methods = {"nccl": lambda x: dist.all_reduce(x)}
    if custom is not None:
        methods.update({"one_shot": custom.one_shot, "two_shot": custom.two_shot})
    fused = None
    if custom is not None:
        from minisgl.distributed import fused_norm

        fused = fused_norm.create(rank, tp, max(batches), hidden, torch.bfloat16, device)
    rows = []
    for bs in batches:
        row = {"batch": bs, "bytes": bs * hidden * 2}
        for name, fn in methods.items():
            x = torch.full((bs, hidden), float(rank + 1), dtype=torch.bfloat16, device=device)
            fn(x)
            want = tp * (tp + 1) / 2
            if not torch.all(x == want):
                raise AssertionError(f"{name} at batch {bs}: got {x.flatten()[:4].tolist()}, want {want}")
            row[f"{name}_us"] = graph_us(fn, x.zero_())
        best = min((k for k in row if k.endswith("_us")), key=row.get)
        if fused is not None:  # all-reduce + add + RMSNorm in one kernel (two-shot needs more rows than ranks)
            weight = torch.ones(hidden, dtype=torch.bfloat16, device=device)
            residual = torch.zeros(bs, hidden, dtype=torch.bfloat16, device=device)
            for shot in (True, False) if bs > tp else (True,):
                row[f"fused_{'one' if shot else 'two'}_shot_us"] = graph_us(
                    lambda x, shot=shot: fused(x, residual, weight, 1e-6, one_shot=shot), x)
        row["best"] = best.removesuffix("_us")
        row.update({f"{k.removesuffix('_us')}_per_step_ms": 2 * layers * row[k] / 1000 for k in list(row)
                    if k.endswith("_us")})
        rows.append(row)
        if rank == 0:
            print(f"batch {bs:>5} ({row['bytes'] / 1024:>7.0f} KiB): " + ", ".join(
                f"{k.removesuffix('_us')} {row[k]:.1f} us" for k in row if k.endswith("_us"))
                + f"; per decode step {row['nccl_per_step_ms']:.2f} ms NCCL -> "
                f"{row[row['best'] + '_per_step_ms']:.2f} ms {row['best']}")
    if rank == 0 and fused is not None:
        print("fused: " + ", ".join(k.removesuffix("_us") for k in rows[-1] if k.startswith("fused_") and k.endswith("_us"))
              + " include the residual add and RMSNorm")
    if fused is not None:
        fused.destroy()
    if rank == 0:
        write_json(out, {"benchmark": "allreduce", "device": device_name(), "tp": tp, "hidden": hidden,
                         "layers": layers, "custom_all_reduce": custom is not None, "rows": rows})
        plot(out, rows, list(methods) + [k.removesuffix("_us") for k in rows[-1] if k.startswith("fused_")
                                         and k.endswith("_us")])
    dist.destroy_process_group()


def plot(out: str, rows: list[dict], methods: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for m in methods:
        has = [r for r in rows if f"{m}_us" in r]  # (fused two-shot only above one row a rank)
        ax.plot([r["bytes"] / 1024 for r in has], [r[f"{m}_us"] for r in has], "o-", label=m)
    ax.set(xscale="log", yscale="log", xlabel="message (KiB)", ylabel="µs per all-reduce",
           title=f"All-reduce on {device_name()}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.splitext(out)[0] + ".png", dpi=100)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="../shared/models/qwen3-8b")
    p.add_argument("--tp", type=int, default=2)
    p.add_argument("--batches", default="1,8,32,64,128,256,512,1024,2048")
    p.add_argument("--out", default="results/allreduce.json")
    args = p.parse_args()
    cfg = json.load(open(os.path.join(args.config, "config.json")))
    batches = [int(b) for b in args.batches.split(",")]
    mp.spawn(worker, args=(args.tp, rendezvous_addr(), cfg["hidden_size"], cfg["num_hidden_layers"], batches,
                           args.out), nprocs=args.tp)


if __name__ == "__main__":
    main()
