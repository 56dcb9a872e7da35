"""The MoE layer at decode's few tokens: the GEMV path (minisgl.kernels.moe_decode) against the
block-aligned one (minisgl.kernels.fused_moe), each part timed, against the read time of the
experts the tokens chose, and a sweep of the GEMV path's tiles.

    python benchmark/offline/moe_decode.py --config ../shared/models/qwen3-30b-a3b [--tp 2]

Shapes from the config (one rank's share of each expert at --tp); random bf16 weights. Every
figure is one call's median inside a CUDA graph of `--calls` calls, each on its own input (so on
other experts: one call's experts are not left in L2 for the next). "floor" is the bytes of the
distinct experts each call reads (plus the router) over the copy rate measured here.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os

import torch
import torch.nn.functional as F
from fp8_gemv import graph_us  # (this folder: the script's own, first on sys.path)

from minisgl.benchmark.floor import copy_bandwidth
from minisgl.benchmark.report import device_name, write_json
from minisgl.kernels import fused_moe, moe_decode
from minisgl.kernels.gemv import GemvConfig


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="../shared/models/qwen3-30b-a3b")
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--tokens", default="1,2,3,4,6,8,16")
    p.add_argument("--calls", type=int, default=24)
    p.add_argument("--sweep", action="store_true", help="also time other tiles of the GEMV path (and the router) at 1 and 4 tokens")
    p.add_argument("--out", default="results/moe_decode.json")
    args = p.parse_args()
    with open(os.path.join(args.config, "config.json")) as f:
        cfg = json.load(f)
    hidden, experts, top_k = cfg["hidden_size"], cfg["num_experts"], cfg["num_experts_per_tok"]
    inter = cfg["moe_intermediate_size"] // args.tp
    norm = cfg.get("norm_topk_prob", True)
    dev, dt = torch.device("cuda"), torch.bfloat16
    torch.manual_seed(0)
    w13 = torch.empty(experts, 2 * inter, hidden, device=dev, dtype=dt).normal_(std=0.02)
    w2 = torch.empty(experts, hidden, inter, device=dev, dtype=dt).normal_(std=0.02)
    gate = torch.empty(experts, hidden, device=dev, dtype=dt).normal_(std=0.02)
    bw = copy_bandwidth()
    expert_bytes = (w13[0].numel() + w2[0].numel()) * w13.element_size()
    default = moe_decode.decode_tiles(inter, hidden, top_k, 2, dev)
    print(f"{device_name()}: hidden {hidden}, {experts} experts of width {inter} (TP={args.tp} share), top-{top_k}; "
          f"copy rate {bw / 1e12:.2f} TB/s; GEMV tiles gate_up {default[0]}, down {default[1]}")
    gu, dn = default
    rows = []
    for n in (int(t) for t in args.tokens.split(",")):
        xs = [torch.randn(n, hidden, device=dev, dtype=dt) for _ in range(args.calls)]
        logits = [F.linear(x, gate) for x in xs]
        routes = [fused_moe.route_topk(lg, top_k, norm) for lg in logits]
        distinct = sum(len(torch.unique(ids)) for _, ids in routes) / len(xs)
        floor_us = (distinct * expert_bytes + gate.numel() * 2) / bw * 1e6
        hs = [moe_decode.expert_gate_up(x, w13, w, ids, gu, False) for x, (w, ids) in zip(xs, routes)]
        row = {"tokens": n, "distinct_experts": distinct, "floor_us": floor_us, "parts_us": {
            "router cuBLAS": graph_us([lambda x=x: F.linear(x, gate) for x in xs]),
            "router GEMV": graph_us([lambda x=x: moe_decode.router_logits(x, gate) for x in xs]),
            "route": graph_us([lambda lg=lg: fused_moe.route_topk(lg, top_k, norm) for lg in logits]),
            "gate_up": graph_us([lambda x=x, r=r: moe_decode.expert_gate_up(x, w13, *r, gu, False)
                                 for x, r in zip(xs, routes)]),
            "down": graph_us([lambda h=h, r=r, x=x: moe_decode.expert_down(h, w2, r[1], torch.empty_like(x), dn, False)
                              for h, r, x in zip(hs, routes, xs)]),
            "down per token": graph_us([lambda h=h, r=r, x=x: moe_decode.expert_down(h, w2, r[1], torch.empty_like(x),
                                                                                      dn, False, split=False)
                                        for h, r, x in zip(hs, routes, xs)]),
        }}
        # Each path as the layer runs it, its router included.
        row["block_aligned_us"] = graph_us([lambda x=x: fused_moe.fused_experts(x, F.linear(x, gate), w13, w2, top_k,
                                                                                 norm) for x in xs])
        row["gemv_us"] = graph_us([lambda x=x: moe_decode.decode_experts(x, moe_decode.router_logits(x, gate), w13, w2,
                                                                         top_k, norm) for x in xs])
        ref = fused_moe.fused_experts(xs[0], logits[0], w13, w2, top_k, norm).float()
        got = moe_decode.decode_experts(xs[0], logits[0], w13, w2, top_k, norm).float()
        row["rel_diff"] = (torch.linalg.norm(got - ref) / torch.linalg.norm(ref)).item()
        rows.append(row)
        parts = ", ".join(f"{k} {v:.1f}" for k, v in row["parts_us"].items())
        print(f"{n:>3} tokens: {distinct:5.1f} experts, floor {floor_us:6.1f} us | block-aligned "
              f"{row['block_aligned_us']:6.1f} us, GEMV path {row['gemv_us']:6.1f} us ({row['gemv_us'] / floor_us:.2f}x "
              f"floor) | parts (no PDL): {parts} | rel diff {row['rel_diff']:.1e}", flush=True)
    sweep = []
    if args.sweep:
        gate_ups = [gu] + [GemvConfig(bn, bk, 4, st, False) for bn, bk, st in
                           ((4, 512, 4), (4, 512, 8), (2, 512, 6), (8, 512, 6), (4, 256, 8), (2, 1024, 4), (1, 1024, 6))]
        downs = [dn] + [GemvConfig(bn, bk, 4, st, False) for bn, bk, st in
                        ((4, 256, 4), (2, 256, 6), (4, 128, 8), (8, 128, 6), (2, 512, 4),
                         # a tensor-parallel share's narrow experts (192 wide at TP=4): wider tiles
                         (8, 64, 4), (16, 64, 3), (32, 64, 2), (16, 128, 3))
                        if inter % bk == 0]
        x1 = [torch.randn(1, hidden, device=dev, dtype=dt) for _ in range(args.calls)]
        for cfg in (moe_decode.ROUTER_TILES, GemvConfig(4, 1024, 4, 6, False), GemvConfig(2, 1024, 4, 4, False),
                    GemvConfig(1, 512, 4, 4, False), GemvConfig(1, 2048, 4, 2, False), GemvConfig(1, 1024, 2, 4, False)):
            us = graph_us([lambda x=x, c=cfg: moe_decode.router_logits(x, gate, c) for x in x1])
            sweep.append({"tokens": 1, "router": cfg.__dict__, "us": us})
            print(f"  sweep 1 token: router {cfg.block_n}x{cfg.block_k}/{cfg.num_stages} {cfg.num_warps} warps: "
                  f"{us:5.1f} us", flush=True)
        for n in (1, 4):
            xs = [torch.randn(n, hidden, device=dev, dtype=dt) for _ in range(args.calls)]
            logits = [F.linear(x, gate) for x in xs]
            # One part varied at a time, the other at its default.
            for g, d in itertools.chain(((g, dn) for g in gate_ups), ((gu, d) for d in downs[1:])):
                us = graph_us([lambda x=x, lg=lg, t=(g, d): moe_decode.decode_experts(x, lg, w13, w2, top_k, norm, tiles=t)
                               for x, lg in zip(xs, logits)])
                sweep.append({"tokens": n, "gate_up": g.__dict__, "down": d.__dict__, "us": us})
                print(f"  sweep {n} tokens: gate_up {g.block_n}x{g.block_k}/{g.num_stages}, down "
                      f"{d.block_n}x{d.block_k}/{d.num_stages}: {us:6.1f} us", flush=True)
            us = graph_us([lambda x=x, lg=lg: moe_decode.decode_experts(x, lg, w13, w2, top_k, norm, split=False)
                           for x, lg in zip(xs, logits)])
            sweep.append({"tokens": n, "down_per_token": True, "us": us})
            print(f"  sweep {n} tokens: default tiles, down a program per token (not per slot): {us:6.1f} us",
                  flush=True)
    write_json(args.out, {"benchmark": "moe_decode", "device": device_name(), "config": args.config, "tp": args.tp,
                          "copy_bandwidth_bytes_per_s": bw, "rows": rows, "sweep": sweep})


if __name__ == "__main__":
    main()
