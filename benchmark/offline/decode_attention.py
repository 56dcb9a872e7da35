"""Decode attention alone, in CUDA graphs: FlashInfer's graph wrapper against minisgl's Triton
decode (minisgl/kernels/decode_attention.py), per layer.

    python benchmark/offline/decode_attention.py            # Llama-3.1-8B heads, GPU only
    python benchmark/offline/decode_attention.py --heads 8 --kv-heads 1 --layers 48 --batches 1 \
        --contexts 138,384,2048,8192 --max-splits 8,16,32,64  # Qwen3-30B-A3B's share at TP=4

Triton columns are named triton<loop step>/<most slices>; with --splits and --warps, s<slices>w<warps>
(each launch shape forced, at every batch and context).

    python benchmark/offline/decode_attention.py --heads 16 --kv-heads 8 --layers 28 --kv-dtype float8_e4m3fn \
        --pairs 256x700,128x1050,64x1370,32x1500 --splits 1,2,4,8 --warps 1,2,4  # Qwen3-0.6B, the field's workload

For each batch size and context length, one CUDA graph runs the attention of every layer of a
model-sized KV cache through FlashInferBackend's decode graph path, with FlashInfer's kernels and
with the Triton ones (at every batch size here), the same requests for both.
Reports us a layer and the KV bytes read over that time. A short context's KV for all layers
fits in L2 (Llama-3.1-8B heads, 138 tokens: 18 MB a request), so those figures are optimistic
for both. Writes JSON and a PNG.
"""

from __future__ import annotations

import argparse

import torch

from minisgl.attention.base import AttnShape
from minisgl.attention.flashinfer import FlashInferBackend
from minisgl.benchmark.report import bar_plot, device_name, write_json
from minisgl.core import Batch, Context, Req, SamplingParams
from minisgl.distributed import DistributedInfo
from minisgl.engine.graph import ffi_stream
from minisgl.kernels import decode_attention as triton_decode
from minisgl.kvcache import MHAKVCache
from minisgl.layers import AttentionLayer

PAGE = 16


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--batches", default="1,2,4,8")
    p.add_argument("--contexts", default="138,2048")
    p.add_argument("--pairs", help="batch x context pairs (e.g. 256x700,64x1370) instead of --batches x --contexts")
    p.add_argument("--splits", help="slices a request to force, a list (with --warps)")
    p.add_argument("--warps", default="4", help="warps a program to force, a list (with --splits)")
    p.add_argument("--whole-stages", default=str(triton_decode.WHOLE_STAGES),
                   help="with --splits 1: the whole-request kernel's pipeline depths to try, a list (columns s1w<warps>n<depth>)")
    p.add_argument("--replays", type=int, default=50)
    p.add_argument("--kv-dtype", default="bfloat16", choices=["bfloat16", "float8_e4m3fn"],
                   help="what the KV cache stores (queries stay bf16)")
    p.add_argument("--block-ns", default=str(triton_decode.BLOCK_N), help="the Triton kernel's loop steps to try")
    p.add_argument("--max-splits", default=str(triton_decode.MAX_SPLITS),
                   help="caps on the split kernel's slices a (request, KV head) to try (its merge holds them all)")
    p.add_argument("--out", default="results/decode_attention.json")
    return p.parse_args()


def time_layer(args, bs: int, context: int, triton: bool) -> float:
    """us a layer of one graph holding every layer's decode attention for `bs` requests."""
    dev = torch.device("cuda")
    pages_each = -(-context // PAGE)
    width = pages_each * PAGE
    ctx = Context(device=dev, tp=DistributedInfo())
    ctx.page_table = torch.zeros(bs + 1, width, dtype=torch.int32, device=dev)
    total_pages = bs * pages_each + 1
    kv_dtype = getattr(torch, args.kv_dtype)
    ctx.kv_cache = MHAKVCache(args.layers, total_pages, PAGE, args.kv_heads, args.head_dim, kv_dtype, dev)
    perm = torch.randperm(total_pages - 1, device=dev).to(torch.int32)  # pages scattered, as a live cache has them
    for row in range(bs):
        pages = perm[row * pages_each : (row + 1) * pages_each]
        ctx.page_table[row] = (pages.repeat_interleave(PAGE) * PAGE + torch.arange(PAGE, device=dev).repeat(pages_each))
    ctx.page_table[bs, :PAGE] = torch.arange((total_pages - 1) * PAGE, total_pages * PAGE, device=dev)
    shape = AttnShape(args.heads, args.kv_heads, args.head_dim, torch.bfloat16, kv_dtype)
    backend = FlashInferBackend(ctx, shape, triton_decode=triton)
    reqs = [Req(uid=i, prompt_ids=[0] * context, sampling_params=SamplingParams(), table_idx=i, cached_len=context - 1,
                device_len=context) for i in range(bs)]
    batch = Batch(reqs=reqs, phase="decode", out_loc=ctx.page_table[:bs, context - 1].long())
    layers = [AttentionLayer(i, args.heads, args.kv_heads, args.head_dim) for i in range(args.layers)]
    q = torch.randn(bs, args.heads, args.head_dim, device=dev, dtype=torch.bfloat16)
    backend.init_capture_graph(bs, [bs])
    backend.prepare_for_capture(batch, bs)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), ffi_stream():
        for layer in layers:  # warm-up: compiles and loads the kernels
            backend.forward(q, None, None, layer, batch)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream), ffi_stream():
        for layer in layers:
            backend.forward(q, None, None, layer, batch)
    backend.prepare_for_replay(batch, bs)
    rows_lens = backend.graph_rows_lens(bs)
    if rows_lens is not None:  # what the engine's graph runner writes before a replay: rows, then lengths
        rows_lens[:bs] = torch.arange(bs, dtype=torch.int32, device=dev)
        rows_lens[bs:] = context
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(args.replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / args.replays / args.layers


def main() -> None:
    args = parse_args()
    rows = []
    kv_bytes_token = 2 * args.kv_heads * args.head_dim * getattr(torch, args.kv_dtype).itemsize
    if args.pairs:
        pairs = [tuple(int(x) for x in pair.split("x")) for pair in args.pairs.split(",")]
    else:
        pairs = [(int(b), int(c)) for c in args.contexts.split(",") for b in args.batches.split(",")]
    auto_shape, auto_stages, auto_pick = triton_decode.launch_shape, triton_decode.WHOLE_STAGES, triton_decode._fullest_waves
    for bs, context in pairs:
        us = {"flashinfer": time_layer(args, bs, context, False)}
        triton_decode.MAX_BATCH = max(triton_decode.MAX_BATCH, bs)  # the Triton kernels at this batch too
        for block_n in (int(b) for b in args.block_ns.split(",")):
            for max_splits in (int(m) for m in args.max_splits.split(",")):
                triton_decode.BLOCK_N, triton_decode.MAX_SPLITS = block_n, max_splits
                us[f"triton{block_n}/{max_splits}"] = time_layer(args, bs, context, True)
        for splits in (int(s) for s in args.splits.split(",")) if args.splits else ():
            for warps in (int(w) for w in args.warps.split(",")):
                for stages in (int(n) for n in args.whole_stages.split(",")) if splits == 1 else (auto_stages,):
                    triton_decode.launch_shape = lambda *_, s=splits, w=warps: (s, w)
                    triton_decode._fullest_waves = lambda *_, w=warps, **__: w
                    triton_decode.WHOLE_STAGES = stages
                    name = f"s{splits}w{warps}" + (f"n{stages}" if "," in args.whole_stages and splits == 1 else "")
                    us[name] = time_layer(args, bs, context, True)
        triton_decode.launch_shape, triton_decode.WHOLE_STAGES, triton_decode._fullest_waves = (auto_shape, auto_stages,
                                                                                                auto_pick)
        gbs = {name: bs * context * kv_bytes_token / (t * 1e-6) / 1e9 for name, t in us.items()}
        rows.append(dict(batch=bs, context=context, us=us, gb_per_s=gbs))
        print(f"batch {bs:2d}, context {context:5d}, us a layer (KV GB/s): "
              + ", ".join(f"{name} {t:.2f} ({gbs[name]:.0f})" for name, t in us.items()), flush=True)
    write_json(args.out, dict(benchmark="decode_attention", device=device_name(), kv_dtype=args.kv_dtype, heads=args.heads,
                              kv_heads=args.kv_heads, head_dim=args.head_dim, layers=args.layers, rows=rows))
    labels = [f"bs{r['batch']} ctx{r['context']} {name}" for r in rows for name in r["us"]]
    values = [t for r in rows for t in r["us"].values()]
    bar_plot(args.out.replace(".json", ".png"), "decode attention, us a layer (CUDA graph)", labels, values, "us")


if __name__ == "__main__":
    main()
