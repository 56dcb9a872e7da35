"""Memory-bandwidth floors for decode: the bytes a step must read over the measured copy rate.

A decode step reads every weight it uses once and every request's KV cache. For a mixture of
experts it uses only the experts its tokens are routed to: with B tokens each picking k of E
experts (uniformly, as random/dummy routers do), E * (1 - (1 - k/E)^B) experts per layer.
Figures are per GPU: the engine's weights and KV heads are this rank's share.
"""

from __future__ import annotations

import torch


def copy_bandwidth(nbytes: int = 2 << 30) -> float:
    """Device-to-device copy rate (bytes read + written per second), median of 10."""
    src = torch.empty(nbytes // 2, dtype=torch.bfloat16, device="cuda").normal_()
    dst = torch.empty_like(src)
    times = []
    for _ in range(12):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    del src, dst
    torch.cuda.empty_cache()
    return 2 * nbytes / sorted(times[2:])[len(times[2:]) // 2]


def active_weight_bytes(engine, batch: int) -> float:
    """Weight bytes one decode step of `batch` tokens reads on this rank (expected, for MoE)."""
    from minisgl.layers import MoELayer

    total = float(engine.weight_bytes)
    for m in engine.model.modules():
        if isinstance(m, MoELayer):
            experts = (m.w13.numel() + m.w2.numel()) * m.w13.element_size()
            used = m.num_experts * (1 - (1 - m.top_k / m.num_experts) ** batch)
            total -= experts * (1 - used / m.num_experts)
    return total


def kv_bytes_per_token(engine) -> int:
    cfg = engine.model_config
    return 2 * cfg.num_layers * engine.num_kv_heads * cfg.head_dim * engine.kv_dtype.itemsize


def decode_floor_s(engine, input_lens: list[int], output_lens: list[int], bandwidth: float) -> float:
    """Decode time floor of a workload run with every request admitted at once: step s decodes
    the requests with more than s output tokens, reading their weights and their KV so far."""
    kv_token = kv_bytes_per_token(engine)
    weights: dict[int, float] = {}
    seconds = 0.0
    for step in range(max(output_lens)):
        live = [i for i, o in zip(input_lens, output_lens) if o > step]
        batch = len(live)
        if batch not in weights:
            weights[batch] = active_weight_bytes(engine, batch)
        seconds += (weights[batch] + kv_token * (sum(live) + step * batch)) / bandwidth
    return seconds
