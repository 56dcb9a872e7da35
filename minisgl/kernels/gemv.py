"""The weight-streaming GEMV for decode at small batch (at most 16 rows, where reading the weight
is the whole cost and a tensor-core GEMM leaves most SMs idle): bf16 rows times an e4m3 weight
with per-output-feature scales, or a weight in their own dtype as it is (the lm_head), in one
launch over all SMs; optionally with the MLP's silu(gate) * up fused in.
Imported only on CUDA (and by the CPU tests, under Triton's interpreter)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .device import cuda_device_name, pdl_launch, pdl_supported, sm_count
from .gemv_tiles import load_tile, mac, output_tile, zero_accumulator
from .gemv_tuned import device_table, row_bucket


@triton.jit
def _store(acc, acc_up, s_ptr, y_ptr, rm, rn, m_ok, n_ok, N, stride_ym, DOT: tl.constexpr, GATED: tl.constexpr,
           SCALED: tl.constexpr):
    """y[rm, rn] = acc (SCALED: times its output feature's scale); GATED: silu(that) * acc_up
    (scaled by the up rows')."""
    out = output_tile(acc, s_ptr, rn, n_ok, DOT, SCALED)
    if GATED:
        out = out / (1.0 + tl.exp(-out)) * output_tile(acc_up, s_ptr + N, rn, n_ok, DOT, SCALED)
    tl.store(y_ptr + rm[:, None] * stride_ym + rn[None, :], out.to(y_ptr.dtype.element_ty),
             mask=m_ok[:, None] & n_ok[None, :])


@triton.jit
def _gemv_kernel(x_ptr, w_ptr, s_ptr, y_ptr, M, N, K, stride_xm, stride_wn, stride_ym,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DOT: tl.constexpr,
                 GATED: tl.constexpr, EVEN_K: tl.constexpr, IEEE: tl.constexpr, PDL: tl.constexpr,
                 STAGES: tl.constexpr, SCALED: tl.constexpr):
    """y[:M, tile] = x[:M] @ (w[tile] * s[tile])^T in bf16 for one tile of BLOCK_N output features
    (SCALED: an FP8 weight's per-feature scales s; else a bf16 weight as it is, e.g. the lm_head),
    over all of K (no split: no atomics, no zeroed buffer, no cast kernel). GATED: w holds
    [gate; up] (2N rows) and y = silu(gate) * up, both halves streamed by the same program.
    DOT=False (up to four rows): products on CUDA cores, the loop body only loads and FMAs;
    DOT=True (more rows): tl.dot with the rows padded to BLOCK_M=16. Either way the loop is
    software-pipelined STAGES deep (cp.async copies in flight while the products run).
    PDL: launched as a programmatic dependent launch, i.e. before the kernel that writes x is done
    (hiding the launch gap, a large share of so short a kernel): wait for it before reading
    anything, and let the next kernel launch only at the end. A trigger at the start let the next
    kernel's programs take SM room while this one streams: Llama-3.1-8B FP8 at batch 8 (this kernel
    on tl.dot) decoded slower than bf16, and much slower than without PDL. (Asking L2 for the
    weight before the wait, which does not depend on x, measured no faster.) Figures:
    benchmark/NOTES.md."""
    if PDL:
        tl.extra.cuda.gdc_wait()
    rm = tl.arange(0, BLOCK_M)
    rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    m_ok, n_ok = rm < M, rn < N
    x_ptrs = x_ptr + rm[:, None] * stride_xm + rk[None, :]
    w_ptrs = w_ptr + rn.to(tl.int64)[:, None] * stride_wn + rk[None, :]  # [BLOCK_N, BLOCK_K], K contiguous
    up_off = tl.cast(N, tl.int64) * stride_wn  # the up rows, N further on
    acc = zero_accumulator(BLOCK_M, BLOCK_N, BLOCK_K, DOT)
    acc_up = tl.zeros_like(acc)
    # The loop's own num_stages: without it Triton pipelines only the loads that feed a tl.dot,
    # and the CUDA-core loop streamed one tile at a time, slower than TMA copies; pipelined like
    # this it beats them (benchmark/NOTES.md).
    for k0 in tl.range(0, K, BLOCK_K, num_stages=STAGES):
        x = load_tile(x_ptrs + k0, m_ok, rk, K - k0, EVEN_K)
        acc = mac(acc, x, load_tile(w_ptrs + k0, n_ok, rk, K - k0, EVEN_K), DOT, IEEE)
        if GATED:
            acc_up = mac(acc_up, x, load_tile(w_ptrs + up_off + k0, n_ok, rk, K - k0, EVEN_K), DOT, IEEE)
    _store(acc, acc_up, s_ptr, y_ptr, rm, rn, m_ok, n_ok, N, stride_ym, DOT, GATED, SCALED)
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()


@dataclass(frozen=True)
class GemvConfig:
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int
    dot: bool


GEMV_MAX_ROWS = 16  # above, per-token activation quantization and torch._scaled_mm (minisgl.quantization.gemm)
# From 3 rows tl.dot (rows padded to 16): the CUDA-core accumulator grows with the rows, so its K
# steps would shrink below 16 bytes of weight a thread (at 4 rows, gated: 8 bytes).
DOT_MIN_ROWS = 3
ACC_ELEMENTS = 8192  # the CUDA-core accumulator: 64 float32 registers a thread at 4 warps


def _widest(n: int, widths: tuple[int, ...], programs: int) -> int:
    """The widest tile of `widths` that still cuts n output features into >= `programs` tiles."""
    return next((w for w in widths if triton.cdiv(n, w) >= programs), widths[-1])


def _k_step(k: int, cap: int) -> int:
    return min(cap, max(16, triton.next_power_of_2(k)))


def gemv_config(m: int, n: int, k: int, gated: bool = False, weight_bytes: int = 1,
                device: torch.device | None = None) -> GemvConfig:
    """The tiles for x [m, k] @ w [n, k]^T: those measured fastest for this shape on this GPU model
    where it has a table (gemv_tuned.py), else chosen by shape by the rules below (fixed: a CUDA
    graph capture must not autotune), from the tile sweeps on an H100 (benchmark/NOTES.md). Output tiles
    only, no split-K: for small N (e.g. tensor-parallel shards) narrower tiles rather than a K
    split. `weight_bytes`: 1 for e4m3, 2 for a bf16 weight (the lm_head), which streams as many
    bytes an output feature as a gated e4m3 one and takes its tiles.
    - One or two rows, and three or four for ungated weights of at most 8,192 rows: products on
      CUDA cores in 512-byte K steps (256 from three rows; 1,024 gated at one row), 8 output
      features a tile or as many as the accumulator holds (gated: 4), pipelined 4 deep (gated,
      6): faster than the weight through TMA copies for every Llama-3.1-8B shape at one and two
      rows. Its bf16 lm_head takes 4 features x 2 KB steps, 6 deep, and beats cuBLAS in graphs.
    - Else tl.dot, the rows padded to 16 (CUDA cores measured slower; gated, two CUDA-core
      accumulators would halve the K steps), 32 output features a tile even where that leaves
      fewer programs than SMs, in 512-element K steps 3 deep (96 KB of shared memory for e4m3;
      gated, 128-element steps): faster than 16-wide tiles of 256-byte steps 4 deep at 8 rows, and
      the bf16 lm_head beats cuBLAS up to 16 rows.
    The per-shape figures of both sweeps are in benchmark/NOTES.md."""
    name = cuda_device_name(device)
    measured = device_table(name).get((row_bucket(m), n, k, gated, weight_bytes)) if name else None
    if measured is not None:
        return GemvConfig(**measured)
    wide = gated or weight_bytes > 1  # two bytes an output feature per K
    sms = sm_count(device)
    if m < DOT_MIN_ROWS or (m <= 4 and not gated and n <= 8192):
        block_k = _k_step(k, (1024 if wide and m == 1 else 512) if m < DOT_MIN_ROWS else 256)
        fits = ACC_ELEMENTS // (triton.next_power_of_2(m) * (2 if wide else 1) * block_k)
        block_n = min(fits, _widest(n, (8, 4), 2 * sms))
        return GemvConfig(block_n, block_k, num_warps=4, num_stages=6 if wide else 4, dot=False)
    return GemvConfig(_widest(n, (32, 16), sms // 2), _k_step(k, 128 if gated else 512), num_warps=4,
                      num_stages=3, dot=True)


def gemv(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor | None = None, *, gated: bool = False,
         config: GemvConfig | None = None, pdl: bool | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """x [M <= 16, K] (bf16, rows contiguous) @ (weight [N, K] e4m3 * scale [N])^T in x's dtype,
    in one launch; with no `scale`, weight is in x's dtype and used as it is (the lm_head). With
    `gated`, weight is [gate; up] (2I rows) and the result is silu(gate) * up [M, I]. For decode
    at small batch, where streaming the weight is the whole cost and a tensor-core GEMM leaves
    most SMs idle; x stays unquantized. `pdl`: None for where it runs; `out`: where to write
    (rows contiguous), else a new tensor."""
    m, k = x.shape
    n = weight.shape[0] // 2 if gated else weight.shape[0]
    if m > GEMV_MAX_ROWS:
        raise ValueError(f"gemv takes at most {GEMV_MAX_ROWS} rows, got {m}")
    y = torch.empty((m, n), dtype=x.dtype, device=x.device) if out is None else out
    if m == 0:
        return y
    cfg = config or gemv_config(m, n, k, gated, weight.element_size(), x.device)
    block_m = 16 if cfg.dot else triton.next_power_of_2(m)
    pdl = pdl_supported(x.device) if pdl is None else pdl
    grid = (triton.cdiv(n, cfg.block_n),)
    tiles = dict(BLOCK_M=block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, DOT=cfg.dot, GATED=gated,
                 IEEE=not x.is_cuda, PDL=pdl, num_warps=cfg.num_warps, num_stages=cfg.num_stages, **pdl_launch(pdl))
    # (With no scale the kernel reads none: the weight stands in for the pointer.)
    _gemv_kernel[grid](x, weight, weight if scale is None else scale, y, m, n, k, x.stride(0), weight.stride(0),
                       y.stride(0), EVEN_K=k % cfg.block_k == 0, STAGES=cfg.num_stages, SCALED=scale is not None,
                       **tiles)
    return y
