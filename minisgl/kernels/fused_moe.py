"""The fused mixture-of-experts path for the GPU, in Triton: routing, sorting by expert and the
expert GEMMs in four launches plus one reduction, with no host synchronisation anywhere, so the
decode CUDA graph captures it.

1. `route_topk`: one program per token takes softmax over the router logits, picks the top k
   (ties: the lower expert id) and renormalises them when the model asks (`norm_topk_prob`).
2. `align_to_blocks`: one program sorts the (token, slot) pairs by expert into a buffer whose
   size depends only on the token count: each expert's pairs start at a multiple of BLOCK_M and
   are padded to one (padding entries hold the sentinel `pairs`), `expert_ids` names the expert
   of each block and `num_padded` (a device tensor) how many entries are real blocks. Every
   block then holds one expert's rows, so a GEMM tile never mixes experts.
3. `_expert_gemm_kernel` for gate_up: one launch over (block, column tile) gathers the block's
   token rows of x, multiplies by that expert's gate and up rows together, stores silu(gate) * up.
4. the same kernel for down: one launch multiplies by the expert's down projection and by each
   pair's routing weight; the k slots of a token are then summed.

Blocks past `num_padded` return at once; the grid itself is sized for the worst case so it is
the same for every batch of a given size. Float32 runs the dots in IEEE precision (no TF32), so
a float32 model matches the per-expert loop (`MoELayer.loop_experts`, the reference) closely.

Imported only when the fused backend runs (triton may be missing on a CPU machine); the kernels
also run under TRITON_INTERPRET=1 on CPU tensors, which is how the CPU suite checks them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .device import pdl_launch


@triton.jit
def _route_kernel(logits_ptr, stride_t, weights_ptr, ids_ptr, E: tl.constexpr, E_P: tl.constexpr,
                  K: tl.constexpr, K_P: tl.constexpr, RENORM: tl.constexpr, PDL: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    if PDL:
        tl.extra.cuda.gdc_wait()
    experts = tl.arange(0, E_P)
    x = tl.load(logits_ptr + t * stride_t + experts, mask=experts < E, other=float("-inf")).to(tl.float32)
    p = tl.exp(x - tl.max(x, 0))
    p = p / tl.sum(p, 0)
    p = tl.where(experts < E, p, -1.0)  # below every probability: never picked
    slots = tl.arange(0, K_P)
    weights = tl.zeros([K_P], tl.float32)
    ids = tl.zeros([K_P], tl.int32)
    for k in tl.static_range(K):
        best = tl.max(p, 0)
        idx = tl.min(tl.where(p == best, experts, E_P), 0)
        weights = tl.where(slots == k, best, weights)
        ids = tl.where(slots == k, idx, ids)
        p = tl.where(experts == idx, -1.0, p)
    if RENORM:
        weights = weights / tl.sum(weights, 0)
    tl.store(weights_ptr + t * K + slots, weights, mask=slots < K)
    tl.store(ids_ptr + t * K + slots, ids, mask=slots < K)
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()


def route_topk(logits: torch.Tensor, top_k: int, renormalize: bool,
               pdl: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Router logits [T, E] -> (weights float32 [T, k], expert ids int32 [T, k]). `pdl`: launch as a
    programmatic dependent launch (minisgl.kernels.device), for a next kernel that launches so too."""
    tokens, experts = logits.shape
    weights = torch.empty(tokens, top_k, dtype=torch.float32, device=logits.device)
    ids = torch.empty(tokens, top_k, dtype=torch.int32, device=logits.device)
    if tokens:
        _route_kernel[(tokens,)](logits, logits.stride(0), weights, ids, E=experts, E_P=triton.next_power_of_2(experts),
                                 K=top_k, K_P=triton.next_power_of_2(top_k), RENORM=renormalize, PDL=pdl,
                                 num_warps=1, **pdl_launch(pdl))  # one warp: its reductions need no shared memory
    return weights, ids


@triton.jit(do_not_specialize=["pairs", "capacity"])  # one build for every batch size
def _align_kernel(ids_ptr, sorted_ptr, expert_ids_ptr, num_padded_ptr, pairs, capacity, E_P: tl.constexpr,
                  BLOCK_M: tl.constexpr, CHUNK: tl.constexpr):
    experts = tl.arange(0, E_P)
    rows = tl.arange(0, CHUNK)
    # Pass 1: pairs per expert, and each expert's start in the padded layout.
    counts = tl.zeros([E_P], tl.int32)
    for start in range(0, pairs, CHUNK):
        i = start + rows
        e = tl.load(ids_ptr + i, mask=i < pairs, other=E_P)  # E_P matches no expert
        counts += tl.sum((e[:, None] == experts[None, :]).to(tl.int32), 0)
    padded = (counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    ends = tl.cumsum(padded, 0)
    starts = ends - padded
    total = tl.sum(padded, 0)
    tl.store(num_padded_ptr, total)
    # Padding entries hold the sentinel `pairs`; a block's expert is the number of experts that
    # end at or before its first entry (-1 past the used blocks).
    for start in range(0, capacity, CHUNK):
        j = start + rows
        tl.store(sorted_ptr + j, pairs, mask=j < capacity)
    for start in range(0, capacity // BLOCK_M, CHUNK):
        b = start + rows
        first = b * BLOCK_M
        eid = tl.sum((ends[None, :] <= first[:, None]).to(tl.int32), 1)
        tl.store(expert_ids_ptr + b, tl.where(first < total, eid, -1), mask=b < capacity // BLOCK_M)
    tl.debug_barrier()  # the sentinels are written before the pairs overwrite their slots
    # Pass 2: each pair goes to its expert's start + the pairs of that expert before it.
    seen = tl.zeros([E_P], tl.int32)
    for start in range(0, pairs, CHUNK):
        i = start + rows
        e = tl.load(ids_ptr + i, mask=i < pairs, other=E_P)
        hit = (e[:, None] == experts[None, :]).to(tl.int32)
        before = tl.cumsum(hit, 0) - hit
        dest = tl.sum((starts[None, :] + seen[None, :] + before) * hit, 1)
        tl.store(sorted_ptr + dest, i, mask=i < pairs)
        seen += tl.sum(hit, 0)


@dataclass(frozen=True)
class Alignment:
    sorted_pairs: torch.Tensor  # int32 [capacity]: pair index t * k + slot, `pairs` for padding
    expert_ids: torch.Tensor  # int32 [capacity // block_m]: the expert of each block, -1 unused
    num_padded: torch.Tensor  # int32 [1]: entries in use (a multiple of block_m)
    block_m: int


def align_capacity(pairs: int, num_experts: int, block_m: int) -> int:
    """Entries the sorted buffer needs in the worst case: every expert's last block part-full."""
    return -(-(pairs + num_experts * (block_m - 1)) // block_m) * block_m


def align_to_blocks(expert_ids: torch.Tensor, num_experts: int, block_m: int) -> Alignment:
    """Sort the (token, slot) pairs of `expert_ids` [T, k] by expert into blocks of `block_m`."""
    pairs = expert_ids.numel()
    capacity = align_capacity(pairs, num_experts, block_m)
    dev = expert_ids.device
    sorted_pairs = torch.empty(capacity, dtype=torch.int32, device=dev)
    block_experts = torch.empty(capacity // block_m, dtype=torch.int32, device=dev)
    num_padded = torch.empty(1, dtype=torch.int32, device=dev)
    e_p = triton.next_power_of_2(num_experts)
    # The one-hot tile is CHUNK x E_P ints: about 16K of them per step.
    chunk = max(16, min(256, 16384 // e_p))
    _align_kernel[(1,)](expert_ids, sorted_pairs, block_experts, num_padded, pairs, capacity, E_P=e_p,
                        BLOCK_M=block_m, CHUNK=chunk, num_warps=8)
    return Alignment(sorted_pairs, block_experts, num_padded, block_m)


@triton.jit(do_not_specialize=["pairs"])
def _expert_gemm_kernel(a_ptr, w_ptr, out_ptr, weights_ptr, sorted_ptr, expert_ids_ptr, num_padded_ptr, pairs, n, k,
                        stride_a, stride_we, stride_wn, stride_out, A_ROW_DIV: tl.constexpr, GATED: tl.constexpr,
                        WEIGHTED: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                        IEEE: tl.constexpr):
    """out[pair, :n] = a[pair // A_ROW_DIV, :k] @ W[expert of the pair][:n, :k].T for the pairs of one
    block and one column tile. GATED: W holds [gate; up] (2n rows) and out is silu(gate) * up.
    WEIGHTED: out is scaled by each pair's routing weight."""
    pid = tl.program_id(0)
    n_tiles = tl.cdiv(n, BLOCK_N)
    block = pid // n_tiles
    if block * BLOCK_M >= tl.load(num_padded_ptr):
        return
    expert = tl.load(expert_ids_ptr + block).to(tl.int64)
    rows = tl.load(sorted_ptr + block * BLOCK_M + tl.arange(0, BLOCK_M))
    valid = rows < pairs
    cols = (pid % n_tiles) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < n
    ks = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + (rows // A_ROW_DIV).to(tl.int64)[:, None] * stride_a + ks[None, :]
    # [BLOCK_K, BLOCK_N] view of this expert's rows `cols` (and of its up rows, n further on).
    w_ptrs = w_ptr + expert * stride_we + cols[None, :].to(tl.int64) * stride_wn + ks[:, None]
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    acc_up = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in range(0, k, BLOCK_K):
        k_ok = ks < k - k0
        a = tl.load(a_ptrs, mask=valid[:, None] & k_ok[None, :], other=0.0)
        w = tl.load(w_ptrs, mask=k_ok[:, None] & col_ok[None, :], other=0.0)
        if IEEE:
            acc = tl.dot(a, w, acc, input_precision="ieee")
        else:
            acc = tl.dot(a, w, acc)
        if GATED:
            up = tl.load(w_ptrs + n * stride_wn, mask=k_ok[:, None] & col_ok[None, :], other=0.0)
            if IEEE:
                acc_up = tl.dot(a, up, acc_up, input_precision="ieee")
            else:
                acc_up = tl.dot(a, up, acc_up)
        a_ptrs += BLOCK_K
        w_ptrs += BLOCK_K
    if GATED:
        acc = acc / (1.0 + tl.exp(-acc)) * acc_up
    if WEIGHTED:
        acc = acc * tl.load(weights_ptr + rows, mask=valid, other=0.0)[:, None]
    dst = out_ptr + rows.to(tl.int64)[:, None] * stride_out + cols[None, :]
    tl.store(dst, acc.to(out_ptr.dtype.element_ty), mask=valid[:, None] & col_ok[None, :])


@dataclass(frozen=True)
class TileConfig:
    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int


# (rows per expert up to, tiles): decode batches give each active expert a few rows (small
# BLOCK_M, long K steps: the weights are the traffic; narrow N tiles, so that the few active
# experts still spread over all SMs: at batch 1, top-8 and 768 columns, 8 x 24 programs); prefill
# fills 64-row tiles.
TILE_CONFIGS = ((16, TileConfig(16, 32, 128, 4, 4)), (48, TileConfig(32, 64, 64, 4, 4)),
                (None, TileConfig(64, 64, 64, 4, 3)))


def tile_config(tokens: int, num_experts: int, top_k: int, dtype: torch.dtype = torch.bfloat16) -> TileConfig:
    rows_per_expert = tokens * top_k / num_experts
    cfg = next(cfg for limit, cfg in TILE_CONFIGS if limit is None or rows_per_expert <= limit)
    if dtype == torch.float32:  # twice the bytes per tile: stay within shared memory (227 KiB on Hopper)
        cfg = TileConfig(cfg.block_m, cfg.block_n, min(cfg.block_k, 64), cfg.num_warps, min(cfg.num_stages, 3))
    return cfg


def warm_up(w13: torch.Tensor, w2: torch.Tensor, top_k: int, renormalize: bool) -> None:
    """Build every kernel variant these weights will use (one per tile config) now, at start,
    rather than on the first request that needs it."""
    num_experts, _, hidden = w13.shape
    previous = 0
    for limit, _ in TILE_CONFIGS:
        # The most tokens within this config's rows per expert; past the last limit, a few more.
        tokens = max(1, limit * num_experts // top_k if limit is not None else previous + -(-num_experts // top_k))
        previous = tokens
        x = torch.zeros(tokens, hidden, dtype=w13.dtype, device=w13.device)
        logits = torch.zeros(tokens, num_experts, dtype=w13.dtype, device=w13.device)
        fused_experts(x, logits, w13, w2, top_k, renormalize)


def fused_experts(x: torch.Tensor, router_logits: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, top_k: int,
                  renormalize: bool) -> torch.Tensor:
    """The MoE feed-forward of x [T, H] (this rank's share: w13 [E, 2I, H], w2 [E, H, I])."""
    tokens, hidden = x.shape
    num_experts, two_inter, _ = w13.shape
    inter = two_inter // 2
    out = torch.empty_like(x)
    if tokens == 0:
        return out
    x = x.contiguous()
    cfg = tile_config(tokens, num_experts, top_k, x.dtype)
    weights, ids = route_topk(router_logits, top_k, renormalize)
    align = align_to_blocks(ids, num_experts, cfg.block_m)
    pairs = tokens * top_k
    blocks = align.expert_ids.numel()
    h = torch.empty(pairs, inter, dtype=x.dtype, device=x.device)
    y = torch.empty(pairs, hidden, dtype=x.dtype, device=x.device)
    tiles = {"BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n, "BLOCK_K": cfg.block_k, "IEEE": x.dtype == torch.float32,
             "num_warps": cfg.num_warps, "num_stages": cfg.num_stages}
    # gate_up: token rows of x (pair // k) through [gate; up], SiLU-and-mul fused: h [pairs, inter].
    _expert_gemm_kernel[(blocks * triton.cdiv(inter, cfg.block_n),)](
        x, w13, h, weights, align.sorted_pairs, align.expert_ids, align.num_padded, pairs, inter, hidden,
        x.stride(0), w13.stride(0), w13.stride(1), h.stride(0), A_ROW_DIV=top_k, GATED=True, WEIGHTED=False, **tiles)
    # down: pair rows of h through the down projection, times each pair's routing weight.
    _expert_gemm_kernel[(blocks * triton.cdiv(hidden, cfg.block_n),)](
        h, w2, y, weights, align.sorted_pairs, align.expert_ids, align.num_padded, pairs, hidden, inter,
        h.stride(0), w2.stride(0), w2.stride(1), y.stride(0), A_ROW_DIV=1, GATED=False, WEIGHTED=True, **tiles)
    return torch.sum(y.view(tokens, top_k, hidden), dim=1, out=out)
