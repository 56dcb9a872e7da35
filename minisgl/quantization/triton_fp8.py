"""Triton kernels for the FP8 GEMMs: per-token (row) quantization of the activations to e4m3 in
one launch (torch would take five: abs, amax, divide, clamp, cast), and the weight-streaming GEMV
for decode at small batch (at most 16 rows), optionally with the MLP's silu(gate) * up fused in;
at one to four rows it takes the weight through TMA (the Hopper Tensor Memory Accelerator).
Imported only on CUDA (and by the CPU tests, under Triton's interpreter)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from minisgl.layers.triton_kernels import N_SMS, pdl_launch, pdl_supported

from .fp8 import FP8, FP8_MAX


@triton.jit
def _per_token_fp8_kernel(x_ptr, q_ptr, s_ptr, stride_x, K, BLOCK: tl.constexpr, LIMIT: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    amax = tl.full((), 0.0, tl.float32)
    for start in range(0, K, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_x + offs, mask=offs < K, other=0.0).to(tl.float32)
        amax = tl.maximum(amax, tl.max(tl.abs(x), 0))
    scale = tl.maximum(amax / LIMIT, 1e-12)
    tl.store(s_ptr + row, scale)
    for start in range(0, K, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_x + offs, mask=offs < K, other=0.0).to(tl.float32)
        q = tl.minimum(tl.maximum(x / scale, -LIMIT), LIMIT)
        tl.store(q_ptr + row * K + offs, q.to(q_ptr.dtype.element_ty), mask=offs < K)


def quantize_per_token(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [rows, K] (last dim contiguous) -> (e4m3 [rows, K], float32 scales [rows, 1])."""
    rows, k = x.shape
    q = torch.empty((rows, k), dtype=FP8, device=x.device)
    s = torch.empty((rows, 1), dtype=torch.float32, device=x.device)
    if rows:
        _per_token_fp8_kernel[(rows,)](x, q, s, x.stride(0), k, BLOCK=1024, LIMIT=FP8_MAX, num_warps=4)
    return q, s


@triton.jit
def _tile(ptrs, row_ok, rk, k_left, EVEN_K: tl.constexpr):
    """A [rows, BLOCK_K] tile; masked in K only where K is not a multiple of BLOCK_K (a mask
    constant along K keeps the loads 16 bytes wide)."""
    if EVEN_K:
        mask = row_ok[:, None]
    else:
        mask = row_ok[:, None] & (rk < k_left)[None, :]
    return tl.load(ptrs, mask=mask, other=0.0)


@triton.jit
def _mac(acc, x, w, DOT: tl.constexpr, IEEE: tl.constexpr):
    """acc + x @ w^T. DOT: on tensor cores in bf16 (e4m3 -> bf16 is exact; IEEE: float32, for
    Triton's CPU interpreter, whose dot mishandles bf16). Else elementwise products into a
    [rows, BLOCK_N, BLOCK_K] accumulator, reduced over K once after the loop (_scaled)."""
    if not DOT:
        acc += x.to(tl.float32)[:, None, :] * w.to(tl.float32)[None, :, :]
    elif IEEE:
        acc = tl.dot(x.to(tl.float32), tl.trans(w.to(tl.float32)), acc, input_precision="ieee")
    else:
        acc = tl.dot(x.to(tl.bfloat16), tl.trans(w.to(tl.bfloat16)), acc)
    return acc


@triton.jit
def _zeros(BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DOT: tl.constexpr):
    """The accumulator _mac adds into: [rows, BLOCK_N], or [rows, BLOCK_N, BLOCK_K] on CUDA cores."""
    if DOT:  # (one return: Triton checks every return of a function against the others)
        acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    else:
        acc = tl.zeros([BLOCK_M, BLOCK_N, BLOCK_K], tl.float32)
    return acc


@triton.jit
def _scaled(acc, s_ptr, rn, n_ok, DOT: tl.constexpr):
    if not DOT:
        acc = tl.sum(acc, 2)
    return acc * tl.load(s_ptr + rn, mask=n_ok, other=0.0)[None, :]


@triton.jit
def _store(acc, acc_up, s_ptr, y_ptr, rm, rn, m_ok, n_ok, N, stride_ym, DOT: tl.constexpr, GATED: tl.constexpr):
    """y[rm, rn] = acc scaled per output feature; GATED: silu(that) * acc_up scaled by the up rows'."""
    out = _scaled(acc, s_ptr, rn, n_ok, DOT)
    if GATED:
        out = out / (1.0 + tl.exp(-out)) * _scaled(acc_up, s_ptr + N, rn, n_ok, DOT)
    tl.store(y_ptr + rm[:, None] * stride_ym + rn[None, :], out.to(y_ptr.dtype.element_ty),
             mask=m_ok[:, None] & n_ok[None, :])


@triton.jit
def _fp8_gemv_kernel(x_ptr, w_ptr, s_ptr, y_ptr, M, N, K, stride_xm, stride_wn, stride_ym,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DOT: tl.constexpr,
                     GATED: tl.constexpr, EVEN_K: tl.constexpr, IEEE: tl.constexpr, PDL: tl.constexpr):
    """y[:M, tile] = x[:M] @ (w[tile] * s[tile])^T in bf16 for one tile of BLOCK_N output features,
    over all of K (no split: no atomics, no zeroed buffer, no cast kernel). GATED: w holds
    [gate; up] (2N rows) and y = silu(gate) * up, both halves streamed by the same program.
    DOT=False (one or two rows): products on CUDA cores, the loop body only loads and FMAs;
    DOT=True (more rows): tl.dot with the rows padded to BLOCK_M=16.
    PDL: launched as a programmatic dependent launch, i.e. before the kernel that writes x is done
    (hiding the launch gap, a few us of a ~6-40 us kernel): wait for it before reading anything,
    and let the next kernel launch only at the end. A trigger at the start let the next kernel's
    programs take SM room while this one streams: Llama-3.1-8B FP8 at batch 8 (this kernel on
    tl.dot) decoded at 7.72 ms a token, slower than bf16 (6.58), against 5.47 without PDL. (Asking
    L2 for the weight before the wait, which does not depend on x, measured no faster.)"""
    if PDL:
        tl.extra.cuda.gdc_wait()
    rm = tl.arange(0, BLOCK_M)
    rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    m_ok, n_ok = rm < M, rn < N
    x_ptrs = x_ptr + rm[:, None] * stride_xm + rk[None, :]
    w_ptrs = w_ptr + rn.to(tl.int64)[:, None] * stride_wn + rk[None, :]  # [BLOCK_N, BLOCK_K], K contiguous
    up_off = tl.cast(N, tl.int64) * stride_wn  # the up rows, N further on
    acc = _zeros(BLOCK_M, BLOCK_N, BLOCK_K, DOT)
    acc_up = tl.zeros_like(acc)
    for k0 in range(0, K, BLOCK_K):
        x = _tile(x_ptrs, m_ok, rk, K - k0, EVEN_K)
        acc = _mac(acc, x, _tile(w_ptrs, n_ok, rk, K - k0, EVEN_K), DOT, IEEE)
        if GATED:
            acc_up = _mac(acc_up, x, _tile(w_ptrs + up_off, n_ok, rk, K - k0, EVEN_K), DOT, IEEE)
        x_ptrs += BLOCK_K
        w_ptrs += BLOCK_K
    _store(acc, acc_up, s_ptr, y_ptr, rm, rn, m_ok, n_ok, N, stride_ym, DOT, GATED)
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()


@triton.jit
def _fp8_gemv_tma_kernel(x_ptr, w_desc, s_ptr, y_ptr, M, N, K, stride_xm, stride_ym,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DOT: tl.constexpr,
                         GATED: tl.constexpr, IEEE: tl.constexpr, PDL: tl.constexpr, STAGES: tl.constexpr):
    """_fp8_gemv_kernel with the weight tiles brought in by the Tensor Memory Accelerator (w_desc: a
    [BLOCK_N, BLOCK_K] descriptor of the weight; zeros past its edges): the copies run
    asynchronously, STAGES deep, without a thread's registers or load instructions.
    PDL: as _fp8_gemv_kernel, the wait at the start and the trigger at the end (Llama-3.1-8B
    batch-1 TPOT on an H100: 4.03 ms with the trigger at the start, 3.80 without PDL, 3.73 with
    the trigger at the end)."""
    if PDL:
        tl.extra.cuda.gdc_wait()
    n0 = tl.program_id(0) * BLOCK_N
    rm = tl.arange(0, BLOCK_M)
    rn = n0 + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    m_ok, n_ok = rm < M, rn < N
    acc = _zeros(BLOCK_M, BLOCK_N, BLOCK_K, DOT)
    acc_up = tl.zeros_like(acc)
    # The loop's own num_stages: Triton pipelines descriptor loads that feed no tl.dot only so.
    for k0 in tl.range(0, K, BLOCK_K, num_stages=STAGES):
        x = tl.load(x_ptr + rm[:, None] * stride_xm + (k0 + rk)[None, :], mask=m_ok[:, None] & (k0 + rk < K)[None, :],
                    other=0.0)
        acc = _mac(acc, x, w_desc.load([n0, k0]), DOT, IEEE)
        if GATED:  # (a gate tile past row N reads up rows: those outputs are not stored)
            acc_up = _mac(acc_up, x, w_desc.load([n0 + N, k0]), DOT, IEEE)
    _store(acc, acc_up, s_ptr, y_ptr, rm, rn, m_ok, n_ok, N, stride_ym, DOT, GATED)
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()


@dataclass(frozen=True)
class GemvConfig:
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int
    dot: bool
    tma: bool = False  # the weight through TMA descriptors (_fp8_gemv_tma_kernel); tiles of at most 256 a side


GEMV_MAX_ROWS = 16  # above, per-token activation quantization and torch._scaled_mm (gemm.py)
# From 3 rows tl.dot (rows padded to 16): the CUDA-core accumulator grows with the rows, so its K
# steps would shrink below 16 bytes of weight a thread (at 4 rows, gated: 8 bytes).
DOT_MIN_ROWS = 3
ACC_ELEMENTS = 8192  # the CUDA-core accumulator: 64 float32 registers a thread at 4 warps


def _widest(n: int, widths: tuple[int, ...], programs: int) -> int:
    """The widest tile of `widths` that still cuts n output features into >= `programs` tiles."""
    return next((w for w in widths if triton.cdiv(n, w) >= programs), widths[-1])


def _k_step(k: int, cap: int) -> int:
    return min(cap, max(16, triton.next_power_of_2(k)))


def gemv_config(m: int, n: int, k: int, gated: bool = False, tma: bool = True) -> GemvConfig:
    """The tiles for x [m, k] @ w [n, k]^T, chosen by shape (a fixed table: a CUDA graph capture must
    not autotune), from the tile sweeps on an H100 (benchmark/NOTES.md, issue 16). Output tiles
    only, no split-K: tiles narrow enough that every SM streams weight rows (narrower tiles rather
    than a K split for small N, e.g. tensor-parallel shards).
    - One or two rows, and three or four for ungated weights of at most 8,192 rows (gated, two
      16-wide accumulators would not fit the registers): products on CUDA cores, the weight
      through TMA in 256-byte K steps (Llama-3.1-8B, against pointer loads: 1 row qkv 13.6 ->
      12.3 us, gated gate/up 49.1 -> 44.5, down 25.1 -> 23.4; 4 rows, 16-wide tiles, qkv 19.2 ->
      15.5, o 13.8 -> 12.1, down 41.5 -> 28.4, but gate/up, 28,672 rows, 46.1 -> 60.0). TMA needs
      K a multiple of 16 (its rows 16-byte aligned) and `tma` (the weight and Triton allow it,
      see fp8_gemv); else, ungated at one or two rows, pointer loads with K steps as long as the
      accumulator allows.
    - Else tl.dot over pointer loads, the rows padded to 16 (CUDA cores measured 1.1-5x slower;
      gated, with two CUDA-core accumulators the K steps halve: 1 row 64 us against 49 on tl.dot).
    With `tma` False this is the table from before TMA."""
    if tma and k % 16 == 0 and (m < DOT_MIN_ROWS or (m <= 4 and not gated and n <= 8192)):
        if m < DOT_MIN_ROWS:
            return GemvConfig(_widest(n, (8, 4), 2 * N_SMS), _k_step(k, 256), num_warps=4, num_stages=6, dot=False,
                              tma=True)
        return GemvConfig(_widest(n, (16, 8, 4), N_SMS), _k_step(k, 256), num_warps=4, num_stages=4, dot=False,
                          tma=True)
    if m < DOT_MIN_ROWS and not gated:
        block_n = _widest(n, (8, 4), 2 * N_SMS)
        acc = triton.next_power_of_2(m) * block_n
        return GemvConfig(block_n, min(1024, ACC_ELEMENTS // acc, _k_step(k, 1024)), num_warps=4, num_stages=2,
                          dot=False)
    return GemvConfig(_widest(n, (32, 16), 2 * N_SMS), _k_step(k, 256), num_warps=4,
                      num_stages=3 if gated else 4, dot=True)


@functools.cache
def _tensor_descriptor():
    """Triton's host-side TMA descriptor (Triton 3.4 and newer), or None."""
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor
    except ImportError:
        return None
    return TensorDescriptor


def _tma_ok(weight: torch.Tensor) -> bool:
    """A TMA descriptor can cover `weight`: the API exists, rows 16-byte aligned and contiguous."""
    return (_tensor_descriptor() is not None and weight.stride(-1) == 1 and weight.stride(0) % 16 == 0
            and weight.data_ptr() % 16 == 0)


def fp8_gemv(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, *, gated: bool = False,
             config: GemvConfig | None = None, pdl: bool | None = None) -> torch.Tensor:
    """x [M <= 16, K] (bf16, rows contiguous) @ (weight [N, K] e4m3 * scale [N])^T in x's dtype,
    in one launch; with `gated`, weight is [gate; up] (2I rows) and the result is silu(gate) * up
    [M, I]. For decode at small batch, where streaming the weight is the whole cost and a
    tensor-core GEMM leaves most SMs idle; x stays unquantized. `pdl`: None for where it runs."""
    m, k = x.shape
    n = weight.shape[0] // 2 if gated else weight.shape[0]
    if m > GEMV_MAX_ROWS:
        raise ValueError(f"fp8_gemv takes at most {GEMV_MAX_ROWS} rows, got {m}")
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if m == 0:
        return y
    cfg = config or gemv_config(m, n, k, gated, tma=_tma_ok(weight))
    block_m = 16 if cfg.dot else triton.next_power_of_2(m)
    pdl = pdl_supported(x.device) if pdl is None else pdl
    grid = (triton.cdiv(n, cfg.block_n),)
    tiles = dict(BLOCK_M=block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, DOT=cfg.dot, GATED=gated,
                 IEEE=not x.is_cuda, PDL=pdl, num_warps=cfg.num_warps, num_stages=cfg.num_stages, **pdl_launch(pdl))
    if cfg.tma:
        desc = _tensor_descriptor()(weight, list(weight.shape), list(weight.stride()), [cfg.block_n, cfg.block_k])
        _fp8_gemv_tma_kernel[grid](x, desc, scale, y, m, n, k, x.stride(0), y.stride(0), STAGES=cfg.num_stages,
                                   **tiles)
    else:
        _fp8_gemv_kernel[grid](x, weight, scale, y, m, n, k, x.stride(0), weight.stride(0), y.stride(0),
                               EVEN_K=k % cfg.block_k == 0, **tiles)
    return y
