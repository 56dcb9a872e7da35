"""`add_lora`: every token's LoRA delta, y[t] += B[slot_t] @ (A[slot_t] @ x[t]), on the GPU's tensor
cores, with the tokens taken in runs of one adapter (segments): a program multiplies a tile of a
run's tokens with that run's adapter, so an adapter's rows are read once per tile, not once per
token, and the base model's tokens (slot 0) are not touched at all.

Where the runs come from: a prefill's tokens are runs already (one request's tokens, one
adapter); a decode graph's tokens are mixed, so minisgl.lora.pool sorts them by slot on the GPU
inside the graph and passes the order (`tokens`). Two launches a layer: a shrink, h = x A^T for
every sub-projection at once, and an expand over all sub-projections' outputs, y += h B^T.

Layouts are minisgl.lora.linear's: A [subs * slots * r, in], rows grouped by sub-projection then
slot; B [out, slots * r] (every sub-projection's rows at its offset in the layer's output).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _tokens(tok_ptr, start, offs_m, INDIRECT: tl.constexpr):
    """The batch rows of a run's tokens start + offs_m: the sorted order's entries, or themselves."""
    if INDIRECT:
        return tl.load(tok_ptr + start + offs_m).to(tl.int64)
    return (start + offs_m).to(tl.int64)


@triton.jit
def _shrink_kernel(x_ptr, a_ptr, seg_ptr, tok_ptr, h_ptr, stride_x, stride_h, stride_part, K, K_PART, SLOTS,
                   R: tl.constexpr, SPLITS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_R: tl.constexpr,
                   BLOCK_K: tl.constexpr, INDIRECT: tl.constexpr, IEEE: tl.constexpr):
    seg = tl.program_id(0)
    m0 = tl.program_id(1) * BLOCK_M
    sub = tl.program_id(2) // SPLITS
    part = tl.program_id(2) % SPLITS  # this program's share of K: its partial sum goes to h[part]
    length = tl.load(seg_ptr + seg * 3 + 1)
    if m0 < length:
        start = tl.load(seg_ptr + seg * 3)
        slot = tl.load(seg_ptr + seg * 3 + 2)
        offs_m = m0 + tl.arange(0, BLOCK_M)
        in_m = offs_m < length
        tokens = _tokens(tok_ptr, start, tl.where(in_m, offs_m, 0), INDIRECT)
        offs_r = tl.arange(0, BLOCK_R)
        rows = ((sub * SLOTS + slot) * R + offs_r).to(tl.int64)
        acc = tl.zeros([BLOCK_M, BLOCK_R], dtype=tl.float32)
        for k0 in range(part * K_PART, tl.minimum(K, (part + 1) * K_PART), BLOCK_K):
            offs_k = k0 + tl.arange(0, BLOCK_K)
            x = tl.load(x_ptr + tokens[:, None] * stride_x + offs_k[None, :],
                        mask=in_m[:, None] & (offs_k[None, :] < K), other=0.0)
            a = tl.load(a_ptr + rows[None, :] * K + offs_k[:, None],
                        mask=(offs_r[None, :] < R) & (offs_k[:, None] < K), other=0.0)
            if IEEE:
                acc = tl.dot(x, a, acc, input_precision="ieee")
            else:
                acc = tl.dot(x, a, acc)
        tl.store(h_ptr + part * stride_part + tokens[:, None] * stride_h + sub * R + offs_r[None, :], acc,
                 mask=in_m[:, None] & (offs_r[None, :] < R))


@triton.jit
def _expand_kernel(h_ptr, b_ptr, seg_ptr, tok_ptr, y_ptr, stride_h, stride_part, stride_y, stride_b,
                   OFF0, OFF1, OFF2, ROWS0, ROWS1, ROWS2, TILES0, TILES1, R: tl.constexpr, SPLITS: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr, INDIRECT: tl.constexpr,
                   IEEE: tl.constexpr):
    seg = tl.program_id(0)
    m0 = tl.program_id(1) * BLOCK_M
    length = tl.load(seg_ptr + seg * 3 + 1)
    if m0 < length:
        # Which sub-projection this program's column tile is in (up to 3: q, k, v), so a tile never
        # spans two of them (each has its own part of h).
        tile = tl.program_id(2)
        sub = (tile >= TILES0).to(tl.int32) + (tile >= TILES0 + TILES1).to(tl.int32)
        first = tl.where(sub == 0, 0, tl.where(sub == 1, TILES0, TILES0 + TILES1))
        offset = tl.where(sub == 0, OFF0, tl.where(sub == 1, OFF1, OFF2))
        n_rows = tl.where(sub == 0, ROWS0, tl.where(sub == 1, ROWS1, ROWS2))
        local_n = (tile - first) * BLOCK_N + tl.arange(0, BLOCK_N)
        in_n = local_n < n_rows
        offs_n = offset + local_n
        start = tl.load(seg_ptr + seg * 3)
        slot = tl.load(seg_ptr + seg * 3 + 2)
        offs_m = m0 + tl.arange(0, BLOCK_M)
        in_m = offs_m < length
        tokens = _tokens(tok_ptr, start, tl.where(in_m, offs_m, 0), INDIRECT)
        offs_r = tl.arange(0, BLOCK_R)
        h = tl.zeros([BLOCK_M, BLOCK_R], dtype=tl.float32)
        for part in tl.static_range(SPLITS):  # the shrink's partial sums over K
            h += tl.load(h_ptr + part * stride_part + tokens[:, None] * stride_h + sub * R + offs_r[None, :],
                         mask=in_m[:, None] & (offs_r[None, :] < R), other=0.0)
        b = tl.load(b_ptr + offs_n[None, :].to(tl.int64) * stride_b + slot * R + offs_r[:, None],
                    mask=in_n[None, :] & (offs_r[:, None] < R), other=0.0)
        if IEEE:
            delta = tl.dot(h.to(b.dtype), b, input_precision="ieee")
        else:
            delta = tl.dot(h.to(b.dtype), b)
        out = y_ptr + tokens[:, None] * stride_y + offs_n[None, :]
        y = tl.load(out, mask=in_m[:, None] & in_n[None, :], other=0.0)
        tl.store(out, (y.to(tl.float32) + delta).to(y.dtype), mask=in_m[:, None] & in_n[None, :])


def add_lora(x: torch.Tensor, y: torch.Tensor, a: torch.Tensor, b: torch.Tensor, subs: list[tuple[int, int]],
             slots: int, rank: int, segments: torch.Tensor, longest: int,
             tokens: torch.Tensor | None = None) -> torch.Tensor:
    """y[t, sub] += B_sub[slot_t] @ (A_sub[slot_t] @ x[t]) in place, for tokens x [T, in] (rows
    contiguous) and the layer's output y [T, out]; `subs`: each sub-projection's (offset, rows) in y
    and in B's rows. The runs: `segments` int32 [S, 3] of (first position, length, slot), base-model
    runs left out, and `longest` a bound on their lengths; a position is a row of x, or with
    `tokens` [T] an index into it (the rows sorted by slot)."""
    if len(subs) > 3:
        raise ValueError(f"add_lora takes up to 3 sub-projections, not {len(subs)}")
    t, k = x.shape
    decode = longest <= 256
    block_m = 16 if decode else 64  # decode's runs are short; a prefill's are long
    # The shrink's output is narrow (r per token) and its K long: split K among programs, or a
    # decode batch's few tiles would each walk all of it alone (the GPU mostly idle).
    k_part = triton.cdiv(k, triton.cdiv(k, 512 if decode else 2048))
    k_part = triton.cdiv(k_part, 128) * 128
    splits = triton.cdiv(k, k_part)
    h = torch.empty(splits, t, len(subs) * rank, dtype=torch.float32, device=x.device)
    block_r = max(16, triton.next_power_of_2(rank))  # tensor-core tiles are at least 16 wide
    flags = dict(R=rank, SPLITS=splits, BLOCK_M=block_m, BLOCK_R=block_r, INDIRECT=tokens is not None,
                 IEEE=x.dtype == torch.float32)  # else Triton multiplies float32 as tf32
    tokens = segments if tokens is None else tokens  # (not read when direct)
    n_seg, m_tiles = segments.shape[0], triton.cdiv(longest, block_m)
    _shrink_kernel[(n_seg, m_tiles, len(subs) * splits)](x, a, segments, tokens, h, x.stride(0), h.stride(1),
                                                         h.stride(0), k, k_part, slots, BLOCK_K=128, **flags)
    offsets, rows = [o for o, _ in subs] + [0] * (3 - len(subs)), [r for _, r in subs] + [0] * (3 - len(subs))
    tiles = [triton.cdiv(r, 128) for r in rows]
    _expand_kernel[(n_seg, m_tiles, sum(tiles))](h, b, segments, tokens, y, h.stride(1), h.stride(0), y.stride(0),
                                                 b.stride(0),
                                                 *offsets, *rows, tiles[0], tiles[1], BLOCK_N=128, **flags)
    return y
