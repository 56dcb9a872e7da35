"""FP8 weight-streaming GEMV at decode batch sizes: per-linear and per-token GEMM time against the
weight-read floor, for Llama-3.1-8B's shapes (the batch-1 FP8 TPOT target is in benchmark/NOTES.md).

    python benchmark/offline/fp8_gemv.py --config .bench-models/llama-3.1-8b

Shapes from the config: qkv [(heads + 2 kv heads) * head_dim, hidden], o [hidden, heads * head_dim],
gate_up [2 * intermediate, hidden], down [hidden, intermediate] (FP8 e4m3, per-channel scales),
lm_head [vocab, hidden] (bf16, for reference). Per shape and row count (--rows) it times:
  gemv        minisgl's kernel with its table config (minisgl.kernels.gemv.gemv_config), launched as a
              programmatic dependent launch; gate_up also gated (silu(gate) * up in the epilogue)
              against gemv + silu_and_mul;
  sweep       other tile configs (at --sweep-rows; gate_up gated too): the best is printed next to
              the table's;
  splitk      the previous kernel (K split over the SMs, fp32 atomics into torch.zeros, a cast),
              kept here only as the baseline;
  scaled_mm   per-token activation quantization + torch._scaled_mm (the path above 16 rows);
  read only   (first row count) a kernel that reads the same weight bytes and computes nothing;
  bf16        F.linear on a bf16 copy of the weight.
Each is timed inside a CUDA graph of >= 20 calls that rotate over enough weight copies (> 2x the
L2) that every call reads its weight from HBM, as decode does; medians of 7 replays. Bandwidth is
weight bytes / time, also as a share of the device-to-device copy rate that latency.py measures
(minisgl.benchmark.floor). Then one graph of
--layers x (qkv, o, gate_up[, silu_and_mul], down) + the bf16 lm_head, i.e. a decode step's GEMMs
at batch 1, against the floor (its bytes at copy bandwidth): with and without PDL, and with the
two add + RMSNorm kernels in front of qkv and gate_up (FlashInfer's, or minisgl's Triton one, which lets the GEMV
launch at once); that one first. Writes JSON and a PNG.
"""

from __future__ import annotations

import argparse
import json
import math
import os

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from minisgl.benchmark.floor import copy_bandwidth
from minisgl.benchmark.report import device_name, write_json
from minisgl.kernels.dispatch import flashinfer_ops
from minisgl.kernels.gemv import GemvConfig, gemv, gemv_config
from minisgl.kernels.gemv_tuned import fastest_tiles, table_path, write_table
from minisgl.kernels.rmsnorm import add_rmsnorm
from minisgl.layers import silu_and_mul
from minisgl.quantization.fp8 import quantize_rows
from minisgl.quantization.gemm import quantize_per_token

L2_BYTES = 50 * 2**20  # an H100's


@triton.jit
def _splitk_kernel(x_ptr, w_ptr, s_ptr, y_ptr, M, N, K, stride_xm, stride_wn, stride_ym, k_per_split,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    # The kernel minisgl used before gemv (baseline only): y += x @ w^T * s over one K split.
    pid_n, pid_k = tl.program_id(0), tl.program_id(1)
    rm, rn, rk = tl.arange(0, BLOCK_M), pid_n * BLOCK_N + tl.arange(0, BLOCK_N), tl.arange(0, BLOCK_K)
    k_start = pid_k * k_per_split
    k_end = tl.minimum(k_start + k_per_split, K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(k_start, k_end, BLOCK_K):
        kk = k0 + rk
        x = tl.load(x_ptr + rm[:, None] * stride_xm + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < k_end),
                    other=0.0)
        w = tl.load(w_ptr + rn[None, :] * stride_wn + kk[:, None], mask=(rn[None, :] < N) & (kk[:, None] < k_end),
                    other=0.0)
        acc += tl.dot(x.to(tl.bfloat16), w.to(tl.bfloat16))
    acc = acc * tl.load(s_ptr + rn, mask=rn < N, other=0.0)[None, :]
    tl.atomic_add(y_ptr + rm[:, None] * stride_ym + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def _read_kernel(w_ptr, out_ptr, CHUNK: tl.constexpr, BLOCK: tl.constexpr):
    # Reads CHUNK contiguous bytes a program and nothing more: what streaming the weight alone costs.
    pid = tl.program_id(0).to(tl.int64)
    acc = tl.zeros([BLOCK], tl.int32)
    for i in tl.range(0, CHUNK, BLOCK, num_stages=4):
        acc += tl.load(w_ptr + pid * CHUNK + i + tl.arange(0, BLOCK)).to(tl.int32)
    tl.store(out_ptr + pid, tl.sum(acc, 0))


READ_CHUNK = 16384  # bytes a program of _read_kernel reads


def read_only(w: torch.Tensor, out: torch.Tensor) -> None:
    """Reads w's bytes (whole chunks) into one int32 sum a program, in out [>= w.nbytes // READ_CHUNK]."""
    flat = w.view(torch.uint8).view(-1)
    _read_kernel[(flat.numel() // READ_CHUNK,)](flat, out, CHUNK=READ_CHUNK, BLOCK=2048, num_warps=4)


def splitk(x, w, s):
    m, k = x.shape
    n = w.shape[0]
    n_blocks, k_steps = triton.cdiv(n, 64), triton.cdiv(k, 256)
    k_per_split = triton.cdiv(k_steps, max(1, min(k_steps, 264 // n_blocks))) * 256
    y = torch.zeros((m, n), dtype=torch.float32, device=x.device)
    _splitk_kernel[(n_blocks, triton.cdiv(k, k_per_split))](x, w, s, y, m, n, k, x.stride(0), w.stride(0), y.stride(0),
                                                           k_per_split, BLOCK_M=16, BLOCK_N=64, BLOCK_K=256,
                                                           num_warps=4, num_stages=4)
    return y.to(x.dtype)


def scaled_mm(x, w, s):
    xq, xs = quantize_per_token(x)
    return torch._scaled_mm(xq, w.t(), scale_a=xs, scale_b=s.view(1, -1), out_dtype=x.dtype)


def graph_us(calls: list, replays: int = 7) -> float:
    """Median time of one of `calls` (closures) inside one CUDA graph of all of them, in us."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for fn in calls:
            fn()  # compiles (and loads) every Triton kernel outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for fn in calls:
            fn()
    graph.replay()
    times = []
    for _ in range(replays):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    del graph
    return sorted(times)[len(times) // 2] / len(calls)


def linear_shapes(cfg: dict) -> dict[str, tuple[int, int]]:
    """A dense decoder layer's linears [N, K] from an HF config: qkv, o, gate_up, down."""
    hidden, inter, heads = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_attention_heads"]
    head_dim = cfg.get("head_dim") or hidden // heads
    kv = cfg.get("num_key_value_heads", heads)
    return {"qkv": ((heads + 2 * kv) * head_dim, hidden), "o": (hidden, heads * head_dim),
            "gate_up": (2 * inter, hidden), "down": (hidden, inter)}


def weight_copies(nbytes: int) -> tuple[int, int]:
    """(copies, calls): enough copies of a weight of `nbytes` (> 2x the L2) that every call in a
    graph reads its weight from HBM, as decode does, and >= 20 calls rotating over them."""
    copies = max(2, math.ceil(2 * L2_BYTES / nbytes) + 1)
    return copies, copies * math.ceil(20 / copies)


def sweep_configs(rows: int, gated: bool = False) -> list[GemvConfig]:
    """Tile configs around the table's: CUDA-core ones whose accumulators fit 16-128 registers a
    thread, pipelined 2-8 deep, and tl.dot ones (rows padded to 16)."""
    block_m = triton.next_power_of_2(rows) * (2 if gated else 1)
    out = [GemvConfig(bn, bk, w, st, False) for bn in (4, 8, 16, 32) for bk in (256, 512, 1024) for w in (2, 4, 8)
           for st in (2, 4, 6, 8) if 16 <= block_m * bn * bk / (32 * w) <= 128 and bn * bk * st <= 2**15]
    out += [GemvConfig(bn, bk, 4, st, True) for bn in (16, 32, 64) for bk in (128, 256) for st in (3, 4)]
    return out


def per_token_gemms(shapes: dict, layers: int, vocab: int, hidden: int, copy_bw: float) -> dict:
    """A decode step's GEMMs at batch 1, `layers` x (qkv, o, gate_up, down) with distinct weights
    plus the bf16 lm_head, in one graph per variant: ms per token against the weight-read floor."""
    print(f"\nper-token GEMMs, batch 1, {layers} layers + lm_head", flush=True)
    x = {k: torch.randn(1, shape[1], device="cuda", dtype=torch.bfloat16) for k, shape in shapes.items()}
    stack = [{k: quantize_rows(torch.randn(*shape, device="cuda", dtype=torch.bfloat16) * 0.02)
              for k, shape in shapes.items()} for _ in range(layers)]
    lm_head = torch.randn(vocab, hidden, device="cuda", dtype=torch.bfloat16) * 0.02
    fp8_bytes = layers * sum(n * k + 4 * n for n, k in shapes.values()) + lm_head.numel() * 2
    floor_us = fp8_bytes / copy_bw * 1e6  # the bytes moved at the rate a copy moves them (read + write)

    hidden_x, residual = x["qkv"], torch.zeros_like(x["qkv"])
    norm_w = torch.ones(hidden, device="cuda", dtype=torch.bfloat16)
    fi_norm = flashinfer_ops().fused_add_rmsnorm
    norms = {"FlashInfer": lambda: fi_norm(hidden_x, residual, norm_w, 1e-5),
             "Triton": lambda: add_rmsnorm(hidden_x, residual, norm_w, 1e-5, pdl=True)}

    def gemv_layer(L, gated=True, pdl=None, norm=None):
        up = ((lambda: gemv(hidden_x, *L["gate_up"], gated=True, pdl=pdl)) if gated
              else (lambda: silu_and_mul(gemv(hidden_x, *L["gate_up"], pdl=pdl))))
        pre = [norms[norm]] if norm else []
        return [*pre, lambda: gemv(hidden_x, *L["qkv"], pdl=pdl), lambda: gemv(x["o"], *L["o"], pdl=pdl),
                *pre, up, lambda: gemv(x["down"], *L["down"], pdl=pdl)]

    # With the input norms between them (add + RMSNorm: FlashInfer's, or minisgl's Triton one that
    # lets the GEMV after it launch at once) or without.
    variants = {
        "gemv gated + Triton norms": lambda L: gemv_layer(L, norm="Triton"),
        "gemv gated + FlashInfer norms": lambda L: gemv_layer(L, norm="FlashInfer"),
        "gemv gated": gemv_layer,
        "gemv gated, no PDL": lambda L: gemv_layer(L, pdl=False),
        "gemv gated, no PDL + Triton norms": lambda L: gemv_layer(L, pdl=False, norm="Triton"),
        "gemv + silu_and_mul": lambda L: gemv_layer(L, gated=False),
        "splitk + silu_and_mul": lambda L: [lambda: splitk(x["qkv"], *L["qkv"]), lambda: splitk(x["o"], *L["o"]),
                                            lambda: silu_and_mul(splitk(x["gate_up"], *L["gate_up"])),
                                            lambda: splitk(x["down"], *L["down"])],
    }
    step = {}
    for variant, make in variants.items():
        calls = [fn for L in stack for fn in make(L)] + [lambda: F.linear(x["qkv"], lm_head)]
        step[variant] = graph_us(calls, replays=5) * len(calls)
        print(f"  {variant}: {step[variant] / 1e3:.3f} ms per token ({len(calls)} kernels); floor "
              f"{floor_us / 1e3:.3f} ms ({fp8_bytes / 1e9:.2f} GB at copy bandwidth), "
              f"{step[variant] / floor_us:.2f}x", flush=True)
    return {"layers": layers, "bytes": fp8_bytes, "floor_ms": floor_us / 1e3, "ms": {k: v / 1e3 for k, v in step.items()}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=".bench-models/llama-3.1-8b", help="dir with an HF config.json")
    p.add_argument("--rows", default="1,2,4,8,16")
    p.add_argument("--sweep-rows", default="1", help="row counts to sweep tile configs at ('' for none)")
    p.add_argument("--layers", type=int, default=None, help="layers in the per-token graph (default: the config's)")
    p.add_argument("--out", default="results/fp8_gemv.json")
    p.add_argument("--write-table", metavar="DIR", default=None,
                   help="write the sweep's fastest tiles per shape as this GPU's table in DIR "
                        "(minisgl/kernels/gemv_tuned to ship it; sweep every row count: --sweep-rows 1,2,4,8,16)")
    args = p.parse_args()
    cfg = json.load(open(os.path.join(args.config, "config.json")))
    hidden = cfg["hidden_size"]
    layers = args.layers or cfg["num_hidden_layers"]
    shapes = linear_shapes(cfg)
    rows_list = [int(r) for r in args.rows.split(",")]
    sweep_rows = {int(r) for r in args.sweep_rows.split(",") if r}
    torch.manual_seed(0)
    copy_bw = copy_bandwidth()
    print(f"{device_name()}: device-to-device copy {copy_bw / 1e9:.0f} GB/s", flush=True)

    # First the number the target is about (a call cut short by its time limit still has it).
    per_token = per_token_gemms(shapes, layers, cfg["vocab_size"], hidden, copy_bw)
    torch.cuda.empty_cache()  # its weights (~7 GB) are gone with the call
    results = []
    rule_us: dict = {}  # the rules' config's time per swept shape

    def record(shape: str, rows: int, method: str, us: float, nbytes: int, extra: dict | None = None) -> dict:
        r = {"shape": shape, "rows": rows, "method": method, "us": us, "gb_s": nbytes / us / 1e3,
             "pct_of_copy": 100 * nbytes / (us * 1e-6) / copy_bw, **(extra or {})}
        results.append(r)
        return r

    for name, (n, k) in [*shapes.items(), ("lm_head", (cfg["vocab_size"], hidden))]:
        fp8 = name != "lm_head"
        copies, calls = weight_copies(n * k * (1 if fp8 else 2))
        bf16 = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02]
        bf16 += [bf16[0].clone() for _ in range(copies - 1)]  # distinct memory is what matters, not values
        quant = [quantize_rows(w) for w in bf16] if fp8 else []
        print(f"\n{name} [{n}, {k}]: {copies} weight copies, {calls} calls per graph", flush=True)
        for rows in rows_list:
            x = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
            line = []
            if fp8:
                nbytes = n * k + 4 * n
                methods = {"gemv": lambda w, s: gemv(x, w, s),
                           "splitk": lambda w, s: splitk(x, w, s),
                           "scaled_mm": lambda w, s: scaled_mm(x, w, s)}
                if rows == rows_list[0]:  # the same bytes read by a kernel that does nothing else
                    sink = torch.empty(n * k // READ_CHUNK, dtype=torch.int32, device="cuda")
                    methods["read only"] = lambda w, s: read_only(w, sink)
                if name == "gate_up":
                    methods["gemv+silu_and_mul"] = lambda w, s: silu_and_mul(gemv(x, w, s))
                    methods["gemv gated"] = lambda w, s: gemv(x, w, s, gated=True)
                want = x.float() @ (quant[0][0].float() * quant[0][1][:, None]).T
                for method, fn in methods.items():
                    if method in ("gemv", "splitk", "scaled_mm"):
                        err = ((fn(*quant[0]).float() - want).norm() / want.norm()).item()
                    else:
                        err = None
                    try:
                        us = graph_us([lambda i=i: fn(*quant[i % copies]) for i in range(calls)])
                    except RuntimeError as e:  # e.g. a _scaled_mm that refuses this shape
                        print(f"  {rows:>2} rows {method}: {str(e).splitlines()[0]}")
                        continue
                    r = record(name, rows, method, us, nbytes, {"rel_err": err})
                    line.append(f"{method} {us:.1f} us ({r['pct_of_copy']:.0f}%)")
                sweeps = ([False, True] if name == "gate_up" else [False]) if rows in sweep_rows else []
                for gated in sweeps:
                    method = "sweep gated" if gated else "sweep"
                    table = gemv_config(rows, n // 2 if gated else n, k, gated)
                    key = {"n": n // 2 if gated else n, "k": k, "gated": gated, "weight_bytes": 1}
                    rule_us[(rows, key["n"], k, gated, 1)] = graph_us(
                        [lambda i=i: gemv(x, *quant[i % copies], config=table, gated=gated) for i in range(calls)])
                    best = None
                    for c in sweep_configs(rows, gated):
                        try:
                            us = graph_us([lambda i=i, c=c: gemv(x, *quant[i % copies], config=c, gated=gated)
                                           for i in range(calls)])
                        except Exception as e:  # a tile that does not build (e.g. out of resources)
                            print(f"  {rows:>2} rows config {vars(c)}: {type(e).__name__}")
                            continue
                        r = record(name, rows, method, us, nbytes, {"config": vars(c), **key})
                        best = r if best is None or us < best["us"] else best
                    line.append(f"{method} best {best['us']:.1f} us {best['config']} (table: {vars(table)})")
            nb = n * k * 2
            us = graph_us([lambda i=i: F.linear(x, bf16[i % copies]) for i in range(calls)])
            r = record(name, rows, "bf16", us, nb)
            line.append(f"bf16 {us:.1f} us ({r['pct_of_copy']:.0f}%)")
            print(f"  {rows:>2} rows: " + "; ".join(line), flush=True)
        bf16.clear()  # free this shape's copies before the next
        quant.clear()
        torch.cuda.empty_cache()

    write_json(args.out, {"benchmark": "fp8_gemv", "device": device_name(), "config": args.config,
                          "copy_gb_s": copy_bw / 1e9, "results": results,
                          "per_token": per_token})
    plot(os.path.splitext(args.out)[0] + ".png", results, shapes)
    if args.write_table:
        sweeps = [r for r in results if r["method"].startswith("sweep")]
        path = table_path(device_name(), args.write_table)
        write_table(path, device_name(), fastest_tiles(sweeps, rule_us), swept=set(rule_us))
        print(f"wrote {path}: the fastest tiles of {len(sweeps)} swept configs")


def plot(path: str, results: list, shapes: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(shapes), figsize=(4 * len(shapes), 3.6), sharey=True)
    for ax, (name, (n, k)) in zip(axes, shapes.items()):
        rows = [r for r in results if r["shape"] == name and not r["method"].startswith("sweep")]
        for method in dict.fromkeys(r["method"] for r in rows):
            pts = [r for r in rows if r["method"] == method]
            ax.plot([r["rows"] for r in pts], [r["pct_of_copy"] for r in pts], "o-", label=method)
        ax.set(xscale="log", xlabel="rows", title=f"{name} [{n}, {k}]")
    axes[0].set_ylabel("% of copy bandwidth (weight bytes / time)")
    axes[-1].legend(fontsize=7)
    fig.suptitle(f"FP8 GEMV, CUDA graphs, weights from HBM, {device_name()}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    main()
