"""`add_lora`: each token's LoRA delta gathered by its adapter slot, for decode's few tokens (the
layers call it inside the decode CUDA graphs on the GPU). Two kernels: a shrink, h[t] = A[slot_t] @ x[t]
for every sub-projection at once, and per sub-projection an expand, y[t] += B[slot_t] @ h[t]. A
token reads only its own adapter's rows (slot 0, the base model, reads none), so the cost follows
the adapters a batch uses, not the pool's size. Layouts are minisgl.lora.linear's: A [subs * slots
* r, in], rows grouped by sub-projection then slot; B per sub-projection [out, slots * r]."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _shrink_kernel(x_ptr, a_ptr, slot_ptr, h_ptr, stride_x, stride_h, K, SLOTS, R: tl.constexpr,
                   BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    sub = tl.program_id(1)
    slot = tl.load(slot_ptr + t)
    offs_r = tl.arange(0, BLOCK_R)
    acc = tl.zeros([BLOCK_R], dtype=tl.float32)
    if slot != 0:
        rows = ((sub * SLOTS + slot) * R + offs_r).to(tl.int64)
        for k0 in range(0, K, BLOCK_K):
            offs_k = k0 + tl.arange(0, BLOCK_K)
            xk = tl.load(x_ptr + t * stride_x + offs_k, mask=offs_k < K, other=0.0).to(tl.float32)
            a = tl.load(a_ptr + rows[:, None] * K + offs_k[None, :],
                        mask=(offs_r[:, None] < R) & (offs_k[None, :] < K), other=0.0).to(tl.float32)
            acc += tl.sum(a * xk[None, :], axis=1)
    tl.store(h_ptr + t * stride_h + sub * R + offs_r, acc, mask=offs_r < R)


@triton.jit
def _expand_kernel(h_ptr, b_ptr, slot_ptr, y_ptr, stride_h, stride_y, stride_b, N, h_offset, R: tl.constexpr,
                   BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_ptr + t)
    if slot != 0:
        offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_r = tl.arange(0, BLOCK_R)
        h = tl.load(h_ptr + t * stride_h + h_offset + offs_r, mask=offs_r < R, other=0.0)
        b = tl.load(b_ptr + offs_n[:, None].to(tl.int64) * stride_b + slot * R + offs_r[None, :],
                    mask=(offs_n[:, None] < N) & (offs_r[None, :] < R), other=0.0).to(tl.float32)
        delta = tl.sum(b * h[None, :], axis=1)
        y = tl.load(y_ptr + t * stride_y + offs_n, mask=offs_n < N, other=0.0)
        tl.store(y_ptr + t * stride_y + offs_n, (y.to(tl.float32) + delta).to(y.dtype), mask=offs_n < N)


def add_lora(x: torch.Tensor, y: torch.Tensor, a: torch.Tensor, bs: list[torch.Tensor], subs: list[tuple[int, int]],
             slots: int, rank: int, token_slots: torch.Tensor) -> torch.Tensor:
    """y[t, sub] += B_sub[slot_t] @ (A_sub[slot_t] @ x[t]) in place, for tokens x [T, in] (rows
    contiguous) and y [T, out]; `subs`: each sub-projection's (offset, rows) in y; `token_slots` [T]."""
    t, k = x.shape
    h = torch.empty(t, len(subs) * rank, dtype=torch.float32, device=x.device)
    block_r = triton.next_power_of_2(rank)
    _shrink_kernel[(t, len(subs))](x, a, token_slots, h, x.stride(0), h.stride(0), k, slots, R=rank,
                                   BLOCK_R=block_r, BLOCK_K=128)
    for i, ((offset, rows), b) in enumerate(zip(subs, bs)):
        out = y[:, offset : offset + rows]
        _expand_kernel[(t, triton.cdiv(rows, 64))](h, b, token_slots, out, h.stride(0), y.stride(0), b.stride(0),
                                                   rows, i * rank, R=rank, BLOCK_R=block_r, BLOCK_N=64)
    return y
