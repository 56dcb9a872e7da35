"""Where a step's GPU time goes: the kernels a torch.profiler recorded, summed by category and by
name per step (benchmark/offline/profile_steps.py, benchmark/offline/speculative.py --profile), and
where the GPU ran no kernel at all (`idle_time`)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

import torch

CATEGORIES = [  # first match wins; lower-case substrings of kernel names
    ("moe routing", ("_route_kernel", "_align_kernel")),
    ("moe experts", ("_gate_up_kernel", "_down_kernel", "_expert_gemm_kernel", "grouped")),
    ("attention decode", ("batchdecode", "_chunk_kernel", "_plan_kernel")),  # FlashInfer's, minisgl's Triton
    ("attention prefill", ("prefillwithkvcache", "batchprefill", "fmha", "mainloop")),
    ("merge states", ("mergestate", "merge_state", "variablelengthmerge")),
    ("q/k norm + rope + KV store", ("qk_norm_rope",)),
    ("sampling", ("gumbel", "sampling", "softmax", "argmax", "exponential", "distribution", "topk", "top_k", "top_p")),
    ("gemm", ("gemm", "gemv", "cutlass", "xmma", "nvjet", "cublas", "sm90_", "splitk")),
    ("rmsnorm", ("rmsnorm",)),
    ("rope", ("rope", "rotary")),
    ("silu_and_mul", ("act_and_mul", "silu")),
    ("kv store / gather", ("index", "gather", "scatter")),
    ("memcpy / memset", ("memcpy", "memset")),
]


def category(name: str) -> str:
    low = name.lower()
    for cat, keys in CATEGORIES:
        if any(k in low for k in keys):
            return cat
    return "other elementwise"


def kernel_table(prof, steps: int) -> tuple[dict, list]:
    by_cat: dict[str, float] = defaultdict(float)
    by_name: dict[str, float] = defaultdict(float)
    count = 0
    for evt in prof.events():
        if evt.device_type != torch.autograd.DeviceType.CUDA:
            continue
        count += 1
        us = evt.device_time_total if hasattr(evt, "device_time_total") else evt.cuda_time_total
        by_cat[category(evt.name)] += us / steps
        by_name[evt.name] += us / steps
    top = sorted(by_name.items(), key=lambda kv: -kv[1])[:12]
    top.append((f"({count / steps:.0f} kernels per step)", 0.0))
    return dict(sorted(by_cat.items(), key=lambda kv: -kv[1])), top


@dataclass(frozen=True)
class IdleTime:
    """How a profiled window's time splits, per step: `span_us` from the first kernel's start to
    the last one's end, `busy_us` while at least one kernel ran, `kernel_us` the kernels' own
    durations summed (above busy_us where they overlap, as under programmatic dependent launch),
    and `idle_before` the idle time before each kernel name, most first: where the GPU waited for
    the host or for a launch."""

    span_us: float
    busy_us: float
    kernel_us: float
    idle_before: list[tuple[str, float]]

    @property
    def idle_us(self) -> float:
        return self.span_us - self.busy_us


def idle_time(kernels: Iterable[tuple[float, float, str]], steps: int, top: int = 6) -> IdleTime:
    """IdleTime of kernels given as (start us, end us, name), over `steps` steps."""
    spans = sorted(kernels)
    if not spans:
        return IdleTime(0.0, 0.0, 0.0, [])
    busy, kernel_us = 0.0, 0.0
    idle: dict[str, float] = defaultdict(float)
    first = run_start = run_end = spans[0][0]
    for start, end, name in spans:
        kernel_us += end - start
        if start > run_end:  # nothing ran in between
            busy += run_end - run_start
            idle[name] += start - run_end
            run_start = start
        run_end = max(run_end, end)
    busy += run_end - run_start
    ranked = sorted(((n, us / steps) for n, us in idle.items()), key=lambda kv: -kv[1])[:top]
    return IdleTime((run_end - first) / steps, busy / steps, kernel_us / steps, ranked)


def kernel_spans(prof) -> list[tuple[float, float, str]]:
    """(start us, end us, name) of every CUDA kernel and copy a torch.profiler recorded."""
    return [(e.time_range.start, e.time_range.end, e.name) for e in prof.events()
            if e.device_type == torch.autograd.DeviceType.CUDA]


def show_idle(idle: IdleTime) -> None:
    print(f"  GPU span {idle.span_us / 1e3:.3f} ms/step: kernels running {idle.busy_us / 1e3:.3f}, none "
          f"{idle.idle_us / 1e3:.3f}; kernel time {idle.kernel_us / 1e3:.3f} (overlapping "
          f"{(idle.kernel_us - idle.busy_us) / 1e3:.3f})")
    for name, us in idle.idle_before:
        print(f"    idle {us:7.2f} us/step before {name[:100]}")


def show(title: str, wall_us: float, cats: dict, top: list) -> None:
    gpu = sum(cats.values())
    print(f"\n== {title}: wall {wall_us / 1e3:.2f} ms/step, GPU kernels {gpu / 1e3:.2f} ms/step "
          f"({100 * gpu / wall_us:.0f}% busy)")
    for cat, us in cats.items():
        print(f"  {cat:<20} {us / 1e3:8.3f} ms  {100 * us / gpu:5.1f}%")
    print("  top kernels:")
    for name, us in top:
        print(f"    {us / 1e3:8.3f} ms  {name[:110]}")
