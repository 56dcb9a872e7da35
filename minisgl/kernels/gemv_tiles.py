"""The weight-streaming GEMV's loop, in pieces that its kernels share (the plain and gated GEMV,
and the q/k/v GEMV with rotary in `qkv_rope`): load a tile, multiply-accumulate it on tensor or
CUDA cores, and turn the accumulator into the output tile."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def load_tile(ptrs, row_ok, rk, k_left, EVEN_K: tl.constexpr):
    """A [rows, BLOCK_K] tile; masked in K only where K is not a multiple of BLOCK_K (a mask
    constant along K keeps the loads 16 bytes wide)."""
    if EVEN_K:
        mask = row_ok[:, None]
    else:
        mask = row_ok[:, None] & (rk < k_left)[None, :]
    return tl.load(ptrs, mask=mask, other=0.0)


@triton.jit
def mac(acc, x, w, DOT: tl.constexpr, IEEE: tl.constexpr):
    """acc + x @ w^T. DOT: on tensor cores in bf16 (e4m3 -> bf16 is exact; IEEE: float32, for
    Triton's CPU interpreter, whose dot mishandles bf16). Else elementwise products into a
    [rows, BLOCK_N, BLOCK_K] accumulator, reduced over K once after the loop (output_tile)."""
    if not DOT:
        acc += x.to(tl.float32)[:, None, :] * w.to(tl.float32)[None, :, :]
    elif IEEE:
        acc = tl.dot(x.to(tl.float32), tl.trans(w.to(tl.float32)), acc, input_precision="ieee")
    else:
        acc = tl.dot(x.to(tl.bfloat16), tl.trans(w.to(tl.bfloat16)), acc)
    return acc


@triton.jit
def zero_accumulator(BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DOT: tl.constexpr):
    """The accumulator mac adds into: [rows, BLOCK_N], or [rows, BLOCK_N, BLOCK_K] on CUDA cores."""
    if DOT:  # (one return: Triton checks every return of a function against the others)
        acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    else:
        acc = tl.zeros([BLOCK_M, BLOCK_N, BLOCK_K], tl.float32)
    return acc


@triton.jit
def output_tile(acc, s_ptr, rn, n_ok, DOT: tl.constexpr, SCALED: tl.constexpr):
    """The accumulator as [rows, BLOCK_N] (summed over K on CUDA cores), times each output
    feature's scale where the weight has them (SCALED)."""
    if not DOT:
        acc = tl.sum(acc, 2)
    if SCALED:
        acc = acc * tl.load(s_ptr + rn, mask=n_ok, other=0.0)[None, :]
    return acc
