"""Where a step's GPU time goes: the kernels a torch.profiler recorded, summed by category and by
name per step (benchmark/offline/profile_steps.py, benchmark/offline/speculative.py --profile)."""

from __future__ import annotations

from collections import defaultdict

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


def show(title: str, wall_us: float, cats: dict, top: list) -> None:
    gpu = sum(cats.values())
    print(f"\n== {title}: wall {wall_us / 1e3:.2f} ms/step, GPU kernels {gpu / 1e3:.2f} ms/step "
          f"({100 * gpu / wall_us:.0f}% busy)")
    for cat, us in cats.items():
        print(f"  {cat:<20} {us / 1e3:8.3f} ms  {100 * us / gpu:5.1f}%")
    print("  top kernels:")
    for name, us in top:
        print(f"    {us / 1e3:8.3f} ms  {name[:110]}")
