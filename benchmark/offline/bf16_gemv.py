"""The bf16 weight-streaming GEMV's tiles at a model's decode shapes: per shape and row count, the
table's config (minisgl.kernels.gemv.gemv_config) against a sweep of others (fp8_gemv.py's grid),
and F.linear (cuBLAS) beside them; --write-table adds the fastest tiles where they beat the rules
to this GPU's table (weight bytes 2), as fp8_gemv.py does for FP8 weights.

    python benchmark/offline/bf16_gemv.py --config .bench-models/qwen3-30b-a3b --write-table minisgl/kernels/gemv_tuned

Shapes (bf16, the GEMV serves them at these rows, kernels/dispatch.dense_gemv): qkv and o at 1-2
rows, a dense model's gate_up and down at 1-2 rows (an MoE's experts have their own kernels),
lm_head at 1-16 rows. Timed in CUDA graphs over weight copies that exceed the L2 (fp8_gemv.graph_us).
Writes JSON.
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import torch.nn.functional as F
from fp8_gemv import (  # (this folder: the script's own, first on sys.path)
    graph_us,
    linear_shapes,
    sweep_configs,
    weight_copies,
)

from minisgl.benchmark.floor import copy_bandwidth
from minisgl.benchmark.report import device_name, write_json
from minisgl.kernels.gemv import gemv, gemv_config
from minisgl.kernels.gemv_tuned import fastest_tiles, table_path, write_table


def model_shapes(cfg: dict) -> dict[str, tuple[tuple[int, int], list[int]]]:
    """name -> ((N, K), the row counts the GEMV serves it at)."""
    moe = bool(cfg.get("num_experts"))  # an MoE's experts have kernels of their own (moe_decode)
    shapes = {name: (shape, [1, 2]) for name, shape in linear_shapes(cfg).items()
              if not (moe and name in ("gate_up", "down"))}
    return shapes | {"lm_head": ((cfg["vocab_size"], cfg["hidden_size"]), [1, 2, 4, 8, 16])}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=".bench-models/qwen3-30b-a3b", help="dir with an HF config.json")
    p.add_argument("--out", default="results/bf16_gemv.json")
    p.add_argument("--write-table", metavar="DIR", default=None, help="add the fastest tiles to this GPU's table in DIR")
    args = p.parse_args()
    cfg = json.load(open(os.path.join(args.config, "config.json")))
    copy_bw = copy_bandwidth()
    print(f"{device_name()}: device-to-device copy {copy_bw / 1e9:.0f} GB/s", flush=True)
    results, rule_us = [], {}
    for name, ((n, k), rows_list) in model_shapes(cfg).items():
        copies, calls = weight_copies(n * k * 2)
        ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02 for _ in range(copies)]
        floor_us = n * k * 2 / copy_bw * 1e6
        for rows in rows_list:
            x = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
            rule = gemv_config(rows, n, k, weight_bytes=2)
            key = {"n": n, "k": k, "gated": False, "weight_bytes": 2}
            rule_us[(rows, n, k, False, 2)] = graph_us([lambda i=i: gemv(x, ws[i % copies], config=rule)
                                                        for i in range(calls)])
            cublas = graph_us([lambda i=i: F.linear(x, ws[i % copies]) for i in range(calls)])
            best = None
            for c in sweep_configs(rows):
                try:
                    us = graph_us([lambda i=i, c=c: gemv(x, ws[i % copies], config=c) for i in range(calls)])
                except Exception as e:  # a tile that does not build (e.g. out of resources)
                    print(f"  {rows:>2} rows config {vars(c)}: {type(e).__name__}")
                    continue
                r = {"shape": name, "rows": rows, "method": "sweep", "us": us, "config": vars(c), **key}
                results.append(r)
                best = r if best is None or us < best["us"] else best
            results.append({"shape": name, "rows": rows, "method": "rules", "us": rule_us[(rows, n, k, False, 2)],
                            "config": vars(rule), **key})
            results.append({"shape": name, "rows": rows, "method": "cublas", "us": cublas, **key})
            print(f"{name} [{n}, {k}] {rows:>2} rows: floor {floor_us:5.1f} us | rules {rule_us[(rows, n, k, False, 2)]:5.1f} "
                  f"us | sweep best {best['us']:5.1f} us {best['config']} | cuBLAS {cublas:5.1f} us", flush=True)
        ws.clear()
        torch.cuda.empty_cache()
    write_json(args.out, {"benchmark": "bf16_gemv", "device": device_name(), "config": args.config,
                          "copy_gb_s": copy_bw / 1e9, "results": results})
    if args.write_table:
        path = table_path(device_name(), args.write_table)
        tiles = fastest_tiles([r for r in results if r["method"] == "sweep"], rule_us)
        write_table(path, device_name(), tiles, swept=set(rule_us))
        print(f"wrote {path}: {len(tiles)} bf16 shapes where a swept tile beat the rules")


if __name__ == "__main__":
    main()
