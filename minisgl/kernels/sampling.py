"""`sample_gumbel_max`: temperature sampling straight from (bf16 or fp32) logits in one pass:
argmax(logits / T + Gumbel noise), greedy argmax where T == 0 (or for every row)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .launch import launch


@triton.jit(do_not_specialize=["seed"])  # a new seed every call: no recompiles on its value
def _gumbel_max_kernel(logits_ptr, stride_row, temps_ptr, val_ptr, idx_ptr, seed, vocab: tl.constexpr,
                       CHUNK: tl.constexpr, SPLITS: tl.constexpr, BLOCK: tl.constexpr, GREEDY: tl.constexpr):
    """Program (row, split) finds the best score in vocab[split * CHUNK : (split + 1) * CHUNK].
    GREEDY: every row's argmax (no temperatures, no noise)."""
    B4: tl.constexpr = BLOCK // 4
    row = tl.program_id(0)
    split = tl.program_id(1)
    if not GREEDY:
        temp = tl.load(temps_ptr + row).to(tl.float32)
        greedy = temp <= 0.0
        inv_t = 1.0 / tl.where(greedy, 1.0, temp)
    row_ptr = logits_ptr + row.to(tl.int64) * stride_row
    r = tl.arange(0, B4)[:, None]
    c = tl.arange(0, 4)[None, :]
    # Each lane keeps its own best over the loop (the first offset on a tie: offsets only grow),
    # reduced across the program once at the end instead of twice a block (benchmark/NOTES.md).
    best_val = tl.full((B4, 4), float("-inf"), tl.float32)
    best_idx = tl.zeros((B4, 4), tl.int32)  # (a split of -inf scores only, past the vocabulary: offset 0)
    for start in range(0, CHUNK, BLOCK):
        base = split * CHUNK + start
        offs = base + r * 4 + c  # [BLOCK / 4, 4]: one Philox draw gives the 4 uniforms of a row
        mask = offs < vocab
        x = tl.load(row_ptr + offs, mask=mask, other=float("-inf")).to(tl.float32)
        if GREEDY:
            score = x
        else:
            u0, u1, u2, u3 = tl.rand4x(seed, row * (vocab // 4 + 1) + base // 4 + tl.arange(0, B4))
            u = tl.where(c == 0, u0[:, None], tl.where(c == 1, u1[:, None], tl.where(c == 2, u2[:, None], u3[:, None])))
            # Exponential race / Gumbel max: argmax(x / T - log(E)), E = -log(U) ~ Exp(1).
            score = tl.where(greedy, x, x * inv_t - tl.log(-tl.log(u)))
        score = tl.where(mask, score, float("-inf"))
        take = score > best_val
        best_idx = tl.where(take, offs, best_idx)
        best_val = tl.where(take, score, best_val)
    m = tl.max(tl.max(best_val, 1), 0)
    # The first offset reaching the maximum (no reshape: it may reorder elements).
    i = tl.min(tl.min(tl.where(best_val == m, best_idx, 2147483647), 1), 0)
    tl.store(val_ptr + row * SPLITS + split, m)
    tl.store(idx_ptr + row * SPLITS + split, i)


@triton.jit
def _best_of_splits_kernel(val_ptr, idx_ptr, out_ptr, host_ptr, pool_ptr, pool_index_ptr, SPLITS: tl.constexpr,
                           HOST: tl.constexpr, POOL: tl.constexpr):
    """Program (row): the winner of its splits' best scores, the lowest token index on a tie;
    also into pinned host memory (HOST) and the token pool at the row's index (POOL)."""
    row = tl.program_id(0)
    r = tl.arange(0, SPLITS)
    val = tl.load(val_ptr + row * SPLITS + r)
    idx = tl.load(idx_ptr + row * SPLITS + r)
    token = tl.min(tl.where(val == tl.max(val, 0), idx, 2147483647), 0)
    tl.store(out_ptr + row, token)
    if HOST:
        tl.store(host_ptr + row, token)
    if POOL:
        tl.store(pool_ptr + tl.load(pool_index_ptr + row), token)


# Up to WIDE_ROWS rows, a row is cut into slices of one 1,024-token block each, read at once
# (Llama-3's 128,256 tokens: 128 programs at batch 1, where torch's argmax walks the row in one
# program, a latency-bound share of a batch-1 step). More rows fill the GPU by themselves:
# GUMBEL_SPLITS slices a row, and greedy rows take torch's argmax (figures: benchmark/NOTES.md).
GUMBEL_BLOCK, GUMBEL_SPLITS, WIDE_ROWS = 1024, 16, 16


def sample_gumbel_max(logits: torch.Tensor, temperatures: torch.Tensor | None, seed: int = 0,
                      host: torch.Tensor | None = None, pool: torch.Tensor | None = None,
                      pool_index: torch.Tensor | None = None) -> torch.Tensor:
    """One token per row of `logits` [rows, vocab] (last dim contiguous), int32: a draw from
    softmax(logits / T) where T > 0, the argmax where T <= 0 (every row's where `temperatures` is
    None). Same seed, same draws. Each row is split over several programs, then one program a
    row picks the winner and writes it, also into `host` (int32 [rows], pinned: read it after an
    event recorded behind this) and `pool` (flat int32) at `pool_index` (int64 [rows]) if given:
    no copy op and no index kernel after it (each a launch a batch-1 step would wait for;
    benchmark/NOTES.md)."""
    rows, vocab = logits.shape
    block = GUMBEL_BLOCK
    splits = triton.next_power_of_2(-(-vocab // block)) if rows <= WIDE_ROWS else GUMBEL_SPLITS
    chunk = triton.cdiv(triton.cdiv(vocab, splits), block) * block  # (one block up to WIDE_ROWS rows)
    vals = torch.empty(rows, splits, dtype=torch.float32, device=logits.device)
    idxs = torch.empty(rows, splits, dtype=torch.int32, device=logits.device)
    out = torch.empty(rows, dtype=torch.int32, device=logits.device)
    if rows == 0:
        return out
    greedy = temperatures is None
    # `seed` is not specialized on (do_not_specialize): the key ignores its value.
    launch(_gumbel_max_kernel, (rows, splits, 1),
           (logits, logits.stride(0), logits if greedy else temperatures, vals, idxs, seed),
           {"vocab": vocab, "CHUNK": chunk, "SPLITS": splits, "BLOCK": block, "GREEDY": greedy}, num_warps=4)
    args = (vals, idxs, out, out if host is None else host, out if pool is None else pool,
            out if pool_index is None else pool_index)
    launch(_best_of_splits_kernel, (rows, 1, 1), args,
           {"SPLITS": splits, "HOST": host is not None, "POOL": pool is not None}, num_warps=4)
    return out
