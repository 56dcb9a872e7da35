"""NCCL all-reduce time per decode step under tensor parallelism.

    python benchmark/offline/allreduce.py --config ../shared/models/qwen3-8b --tp 2

Each layer all-reduces twice (after attention and after the MLP) a [batch, hidden] tensor; this
times one all-reduce per batch size with CUDA events and reports 2 x layers x that per step.
Writes JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from minisgl.benchmark.report import device_name, write_json


def worker(rank: int, tp: int, addr: str, hidden: int, layers: int, batches: list[int], out: str) -> None:
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=addr, rank=rank, world_size=tp)
    rows = []
    for bs in batches:
        x = torch.randn(bs, hidden, device="cuda", dtype=torch.bfloat16)
        for _ in range(10):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        iters = 200
        start.record()
        for _ in range(iters):
            dist.all_reduce(x)
        end.record()
        end.synchronize()
        us = start.elapsed_time(end) * 1000 / iters
        rows.append({"batch": bs, "allreduce_us": us, "per_step_ms": 2 * layers * us / 1000})
        if rank == 0:
            print(f"batch {bs:>4}: one all-reduce {us:.1f} us, per decode step {2 * layers * us / 1000:.2f} ms")
    if rank == 0:
        write_json(out, {"benchmark": "allreduce", "device": device_name(), "tp": tp, "hidden": hidden,
                         "layers": layers, "rows": rows})
    dist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="../shared/models/qwen3-8b")
    p.add_argument("--tp", type=int, default=2)
    p.add_argument("--batches", default="1,16,64,256")
    p.add_argument("--out", default="results/allreduce.json")
    args = p.parse_args()
    cfg = json.load(open(os.path.join(args.config, "config.json")))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        addr = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    batches = [int(b) for b in args.batches.split(",")]
    mp.spawn(worker, args=(args.tp, addr, cfg["hidden_size"], cfg["num_hidden_layers"], batches, args.out),
             nprocs=args.tp)


if __name__ == "__main__":
    main()
