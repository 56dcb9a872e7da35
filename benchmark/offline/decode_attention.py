"""Decode attention alone, in CUDA graphs: FlashInfer's graph wrapper against minisgl's Triton
decode (minisgl/kernels/decode_attention.py), per layer.

    python benchmark/offline/decode_attention.py            # Llama-3.1-8B heads, GPU only
    python benchmark/offline/decode_attention.py --heads 8 --kv-heads 1 --layers 48 --batches 1 \
        --contexts 138,384,2048,8192 --max-chunks 8,16,32  # Qwen3-30B-A3B's share at TP=4

Triton columns are named triton<loop step>/<most chunks a request>, with w<waves> when several
--waves are tried.

    python benchmark/offline/decode_attention.py --heads 16 --kv-heads 8 --layers 28 --kv-dtype float8_e4m3fn \
        --pairs 256x700,128x1050,64x1370,32x1500 --spread 0.9 --flush-mb 128  # Qwen3-0.6B, the field's workload

For each batch size and context length, one CUDA graph runs the attention of every layer of a
model-sized KV cache through FlashInferBackend's decode graph path, with FlashInfer's kernels and
with the Triton ones, the same requests for both. As in a live batch, --spread spreads the
requests' lengths around the context (the one-program-a-request kernel this replaced lost 22% at
256 requests over FP8 to a spread of 0.9), and --flush-mb evicts L2 between layers as a model's
GEMMs do. Reports us a layer and the KV bytes read over that time. Without --flush-mb a short
context's KV for all layers fits in L2 (Llama-3.1-8B heads, 138 tokens: 18 MB a request), so those
figures are optimistic for both. Writes JSON and a PNG.
"""

from __future__ import annotations

import argparse

import torch

from minisgl.attention.base import AttnShape
from minisgl.attention.flashinfer import FlashInferBackend
from minisgl.benchmark.report import bar_plot, device_name, write_json
from minisgl.core.batch import Batch, Req
from minisgl.core.context import Context
from minisgl.core.params import SamplingParams
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
    p.add_argument("--replays", type=int, default=50)
    p.add_argument("--kv-dtype", default="bfloat16", choices=["bfloat16", "float8_e4m3fn"],
                   help="what the KV cache stores (queries stay bf16)")
    p.add_argument("--block-ns", default=str(triton_decode.BLOCK_N), help="the Triton kernel's loop steps to try")
    p.add_argument("--max-chunks", default=str(triton_decode.MAX_CHUNKS), help="the most chunks a request (powers of two), a list")
    p.add_argument("--waves", default=str(triton_decode.BALANCE_WAVES),
                   help="the chunks' programs in waves of those an SM holds, a list (0: the kernel's rule)")
    p.add_argument("--flush-mb", type=int, default=0,
                   help="write this many MB between layers (as a model's GEMMs evict L2), its own time taken off")
    p.add_argument("--spread", type=float, default=0.0,
                   help="requests' lengths spread evenly over context x [1 - spread, 1 + spread] (mean: context)")
    p.add_argument("--out", default="results/decode_attention.json")
    return p.parse_args()


def time_layer(args, bs: int, context: int, triton: bool) -> float:
    """us a layer of one graph holding every layer's decode attention for `bs` requests."""
    dev = torch.device("cuda")
    lens = lengths(bs, context, args.spread)
    pages_each = -(-max(lens) // PAGE)
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
    reqs = [Req(uid=i, prompt_ids=[0] * n, sampling_params=SamplingParams(), table_idx=i, cached_len=n - 1,
                device_len=n) for i, n in enumerate(lens)]
    batch = Batch(reqs=reqs, phase="decode", out_loc=ctx.page_table[torch.arange(bs), torch.tensor(lens) - 1].long())
    layers = [AttentionLayer(i, args.heads, args.kv_heads, args.head_dim) for i in range(args.layers)]
    q = torch.randn(bs, args.heads, args.head_dim, device=dev, dtype=torch.bfloat16)
    backend.init_capture_graph(bs, [bs])
    backend.prepare_for_capture(batch, bs)
    flush = torch.empty(args.flush_mb << 20, dtype=torch.uint8, device=dev) if args.flush_mb else None

    def run_layers(attend: bool = True):
        for layer in layers:
            if attend:
                backend.forward(q, None, None, layer, batch)
            if flush is not None:
                flush.zero_()

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), ffi_stream():
        run_layers()  # warm-up: compiles and loads the kernels
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream), ffi_stream():
        run_layers()
    flush_us = 0.0
    if flush is not None:  # the writes alone, taken off the layers' time
        flushes = torch.cuda.CUDAGraph()
        with torch.cuda.graph(flushes, stream=stream):
            run_layers(attend=False)
        flush_us = replay_us(flushes, args.replays)
    backend.prepare_for_replay(batch, bs)
    rows_lens = backend.graph_rows_lens(bs)
    if rows_lens is not None:  # what the engine's graph runner writes before a replay: rows, then lengths
        rows_lens[:bs] = torch.arange(bs, dtype=torch.int32, device=dev)
        rows_lens[bs:] = torch.tensor(lens, dtype=torch.int32, device=dev)
    return (replay_us(graph, args.replays) - flush_us) / args.layers


def lengths(bs: int, context: int, spread: float) -> list[int]:
    """bs lengths evenly over context x [1 - spread, 1 + spread], in a shuffled order."""
    lens = [max(1, round(context * (1 - spread + 2 * spread * (i + 0.5) / bs))) for i in range(bs)]
    order = torch.randperm(bs, generator=torch.Generator().manual_seed(bs)).tolist()
    return [lens[i] for i in order]


def replay_us(graph: torch.cuda.CUDAGraph, replays: int) -> float:
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / replays


def main() -> None:
    args = parse_args()
    rows = []
    kv_bytes_token = 2 * args.kv_heads * args.head_dim * getattr(torch, args.kv_dtype).itemsize
    if args.pairs:
        pairs = [tuple(int(x) for x in pair.split("x")) for pair in args.pairs.split(",")]
    else:
        pairs = [(int(b), int(c)) for c in args.contexts.split(",") for b in args.batches.split(",")]
    for bs, context in pairs:
        us = {"flashinfer": time_layer(args, bs, context, False)}
        for block_n in (int(b) for b in args.block_ns.split(",")):
            for max_chunks in (int(m) for m in args.max_chunks.split(",")):
                for waves in (int(w) for w in args.waves.split(",")):
                    triton_decode.BLOCK_N, triton_decode.MAX_CHUNKS = block_n, max_chunks
                    triton_decode.BALANCE_WAVES = waves
                    name = f"triton{block_n}/{max_chunks}" + (f"w{waves}" if "," in args.waves else "")
                    us[name] = time_layer(args, bs, context, True)
        gbs = {name: sum(lengths(bs, context, args.spread)) * kv_bytes_token / (t * 1e-6) / 1e9 for name, t in us.items()}
        rows.append(dict(batch=bs, context=context, us=us, gb_per_s=gbs))
        print(f"batch {bs:2d}, context {context:5d}, us a layer (KV GB/s): "
              + ", ".join(f"{name} {t:.2f} ({gbs[name]:.0f})" for name, t in us.items()), flush=True)
    write_json(args.out, dict(benchmark="decode_attention", device=device_name(), kv_dtype=args.kv_dtype, heads=args.heads,
                              kv_heads=args.kv_heads, head_dim=args.head_dim, layers=args.layers, spread=args.spread,
                              flush_mb=args.flush_mb, rows=rows))
    labels = [f"bs{r['batch']} ctx{r['context']} {name}" for r in rows for name in r["us"]]
    values = [t for r in rows for t in r["us"].values()]
    bar_plot(args.out.replace(".json", ".png"), "decode attention, us a layer (CUDA graph)", labels, values, "us")


if __name__ == "__main__":
    main()
