"""The scheduler's host time to pick a decode batch (DecodeManager.schedule: each request's next
page from its reservation, the new pages into the page table), on the CPU, no model.

    python benchmark/offline/host_step.py --batches 64,128,256
    PYTHONPATH=.base python benchmark/offline/host_step.py --out results/host_step-base.json  # a baseline tree

At batch 256 a decode step's host time on the GPU machines was 4.6 ms (benchmark/NOTES.md), the
page-table writes ~1.2 ms of it; this times the scheduling part of it on any machine. Requests start
at 100-355 prompt tokens and decode 300 steps; median and mean microseconds a step. Writes JSON and a
PNG.
"""

from __future__ import annotations

import argparse
import time

import torch

from minisgl.benchmark.report import bar_plot, device_name, write_json
from minisgl.core.batch import Req
from minisgl.core.params import SamplingParams
from minisgl.kvcache import create_prefix_cache
from minisgl.scheduler.cache import CacheManager
from minisgl.scheduler.decode import DecodeManager

PAGE_SIZE, TABLE_WIDTH, STEPS = 16, 2048, 300


def schedule_us(batch: int) -> tuple[float, float]:
    """(median, mean) µs of DecodeManager.schedule over STEPS decode steps of `batch` requests."""
    table = torch.zeros(batch + 1, TABLE_WIDTH, dtype=torch.int32)
    cache = CacheManager(batch * TABLE_WIDTH // PAGE_SIZE, PAGE_SIZE, create_prefix_cache("radix", PAGE_SIZE), table,
                         TABLE_WIDTH // PAGE_SIZE)
    decode = DecodeManager(cache)
    for i in range(batch):  # admitted and prefilled, as the prefill manager leaves them
        req = Req(uid=i, prompt_ids=list(range(100 + i)), sampling_params=SamplingParams(max_tokens=1024))
        req.table_idx = i
        assert cache.try_admit(req)
        req.device_len = req.prompt_len
        cache.allocate(req)
        req.cached_len, req.seq_len = req.prompt_len, req.prompt_len + 1
        decode.add(req)
    write = getattr(cache, "write_table", None)  # (a baseline tree may write rows as it allocates)
    if write is not None:
        write()
    times = []
    for _ in range(STEPS):
        start = time.perf_counter()
        reqs = decode.schedule()
        times.append((time.perf_counter() - start) * 1e6)
        for r in reqs:  # what the scheduler's launch does next
            r.cached_len = r.device_len
            r.seq_len += 1
    return sorted(times)[STEPS // 2], sum(times) / STEPS


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batches", default="64,128,256")
    p.add_argument("--out", default="results/host_step.json")
    args = p.parse_args()
    rows = []
    for batch in (int(b) for b in args.batches.split(",")):
        median, mean = schedule_us(batch)
        rows.append({"batch": batch, "median_us": median, "mean_us": mean})
        print(f"batch {batch:>4}: schedule() {median:.0f} µs median, {mean:.0f} µs mean a step", flush=True)
    write_json(args.out, {"benchmark": "host_step", "device": device_name(), "page_size": PAGE_SIZE, "rows": rows})
    bar_plot(args.out.removesuffix(".json") + ".png", "Decode scheduling, host µs a step",
             [f"batch {r['batch']}" for r in rows], [r["median_us"] for r in rows], "µs (median)")


if __name__ == "__main__":
    main()
