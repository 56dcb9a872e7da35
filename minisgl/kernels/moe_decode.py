"""The mixture-of-experts feed-forward for decode's few tokens, as weight-streaming GEMVs: at a
handful of tokens each expert gets a row or two, reading the selected experts' weights is the
whole cost, and the block-aligned path of `fused_moe` (sorting, 16-row tensor-core tiles, a grid
sized for every expert, a reduction over the slots) spends most of its time on everything else.

Four launches, no sorting and no host synchronisation (a decode CUDA graph captures them):
1. `router_logits`: the router's GEMV (the layer's; the cuBLAS kernel it replaces took longer
   than the routing after it).
2. `fused_moe.route_topk`: softmax top-k per token (weights float32 [T, k], expert ids [T, k]).
3. `_gate_up_kernel`, one program per (token, slot) pair and tile of output features: the pair's
   token row through its expert's [gate; up] rows, stores routing weight * silu(gate) * up in h
   [T * k, I]. The pairs vary fastest in the grid, so pairs of different tokens that chose the
   same expert stream the same weight tile at about the same time (the second read can come
   from L2).
4. `_down_kernel`, one program per token and tile of hidden features: the token's k rows of h
   are one contiguous vector of k * I, multiplied by its k experts' down rows one after the other
   (a GEMV whose weight rows jump to the next expert every I elements), so the sum over the slots
   happens in registers and the output is written once. At one token that is too few programs
   for the SMs, each with a long loop: then one program per slot too, and the last of a token's
   k programs to finish a tile (counted by an atomic) sums their parts; no kernel after it either.

Both GEMVs run on CUDA cores with the tiles of `minisgl.kernels.gemv` (one row), pipelined
STAGES deep, and launch as programmatic dependent launches where the GPU has them.
Imported only when the fused backend runs; the kernels also run under TRITON_INTERPRET=1 on CPU
tensors (the CPU suite's check).
"""

from __future__ import annotations

import functools
from dataclasses import replace

import torch
import triton
import triton.language as tl

from .device import pdl_launch, pdl_supported, sm_count
from .fused_moe import route_topk
from .gemv import GemvConfig, gemv, gemv_config
from .gemv_tiles import load_tile, mac, output_tile, zero_accumulator

# Up to this many tokens the layer runs this path, above the block-aligned one (fused_moe): the
# crossover measured with benchmark/offline/moe_layer.py (benchmark/NOTES.md).
DECODE_MAX_TOKENS = 4
# The router's weight (E x H, 0.5 MB for Qwen3-30B-A3B) a row a program, as many programs as SMs.
ROUTER_TILES = GemvConfig(block_n=1, block_k=1024, num_warps=4, num_stages=4, dot=False)


@triton.jit
def _gate_up_kernel(x_ptr, w_ptr, ids_ptr, weights_ptr, h_ptr, inter, hidden, stride_x, stride_we, stride_wn,
                    stride_h, TOP_K: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                    EVEN_K: tl.constexpr, STAGES: tl.constexpr, PDL: tl.constexpr):
    """h[pair, tile] = weight[pair] * silu(x[token] @ gate[e, tile]^T) * (x[token] @ up[e, tile]^T),
    e the pair's expert; w holds each expert's [gate; up] (2 * inter rows)."""
    pair = tl.program_id(0)
    if PDL:
        tl.extra.cuda.gdc_wait()
    token = pair // TOP_K
    expert = tl.load(ids_ptr + pair).to(tl.int64)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    n_ok = rn < inter
    one = tl.arange(0, 1) < 1
    x_ptrs = x_ptr + token.to(tl.int64) * stride_x + tl.arange(0, 1)[:, None] + rk[None, :]
    w_ptrs = w_ptr + expert * stride_we + rn.to(tl.int64)[:, None] * stride_wn + rk[None, :]
    up_off = tl.cast(inter, tl.int64) * stride_wn
    acc = zero_accumulator(1, BLOCK_N, BLOCK_K, False)
    acc_up = tl.zeros_like(acc)
    for k0 in tl.range(0, hidden, BLOCK_K, num_stages=STAGES):
        x = load_tile(x_ptrs + k0, one, rk, hidden - k0, EVEN_K)
        acc = mac(acc, x, load_tile(w_ptrs + k0, n_ok, rk, hidden - k0, EVEN_K), False, False)
        acc_up = mac(acc_up, x, load_tile(w_ptrs + up_off + k0, n_ok, rk, hidden - k0, EVEN_K), False, False)
    gate = output_tile(acc, w_ptr, rn, n_ok, False, False)
    up = output_tile(acc_up, w_ptr, rn, n_ok, False, False)
    h = gate / (1.0 + tl.exp(-gate)) * up * tl.load(weights_ptr + pair)
    tl.store(h_ptr + pair.to(tl.int64) * stride_h + tl.arange(0, 1)[:, None] + rn[None, :],
             h.to(h_ptr.dtype.element_ty), mask=n_ok[None, :])
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()


@triton.jit
def _down_kernel(h_ptr, w_ptr, ids_ptr, out_ptr, part_ptr, arrivals_ptr, hidden, inter, stride_h, stride_we,
                 stride_wn, stride_out, TOP_K: tl.constexpr, K_P: tl.constexpr, BLOCK_N: tl.constexpr,
                 BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr, STAGES: tl.constexpr, SPLIT: tl.constexpr,
                 PDL: tl.constexpr):
    """out[token, tile] = sum over the token's slots s of h[token * k + s] @ down[e_s, tile]^T.
    SPLIT: a program per slot too, which writes its float32 part at part[token * k + slot, tile]
    and counts itself in at arrivals[token, tile]; the last of the k in sums the parts in slot
    order (the same sum whichever finished last) and sets the count back to 0 for the next
    launch. Else one program loops over all k * ceil(inter / BLOCK_K) steps of its token (h's rows
    of a token are contiguous)."""
    token = tl.program_id(0)
    if PDL:
        tl.extra.cuda.gdc_wait()
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    n_ok = rn < hidden
    one = tl.arange(0, 1) < 1
    slots = tl.arange(0, K_P)
    h_ptrs = h_ptr + token.to(tl.int64) * TOP_K * stride_h + tl.arange(0, 1)[:, None] + rk[None, :]
    w_ptrs = w_ptr + rn.to(tl.int64)[:, None] * stride_wn + rk[None, :]
    out_ptrs = out_ptr + token.to(tl.int64) * stride_out + tl.arange(0, 1)[:, None] + rn[None, :]
    acc = zero_accumulator(1, BLOCK_N, BLOCK_K, False)
    if SPLIT:
        slot = tl.program_id(2)
        base = tl.load(ids_ptr + token * TOP_K + slot).to(tl.int64) * stride_we
        for k0 in tl.range(0, inter, BLOCK_K, num_stages=STAGES):
            h = load_tile(h_ptrs + slot * stride_h + k0, one, rk, inter - k0, EVEN_K)
            acc = mac(acc, h, load_tile(w_ptrs + base + k0, n_ok, rk, inter - k0, EVEN_K), False, False)
        part_row = part_ptr + (token * TOP_K).to(tl.int64) * hidden
        tl.store(part_row + slot * hidden + tl.arange(0, 1)[:, None] + rn[None, :],
                 output_tile(acc, w_ptr, rn, n_ok, False, False), mask=n_ok[None, :])
        # Every thread's stores, then one release-acquire count: the last program in sees all parts.
        tl.debug_barrier()
        count = arrivals_ptr + token * tl.num_programs(1) + tl.program_id(1)
        if tl.atomic_add(count, 1, sem="acq_rel", scope="gpu") == TOP_K - 1:
            tl.store(count, 0)
            parts = tl.load(part_row + slots[:, None] * hidden + rn[None, :], mask=(slots < TOP_K)[:, None] & n_ok[None, :],
                            other=0.0, cache_modifier=".cg")  # through L2: other SMs wrote them
            tl.store(out_ptrs, tl.sum(parts, 0)[None, :].to(out_ptr.dtype.element_ty), mask=n_ok[None, :])
    else:
        experts = tl.load(ids_ptr + token * TOP_K + slots, mask=slots < TOP_K, other=0).to(tl.int64)
        bases = experts * stride_we  # each slot's expert, as an offset into w
        steps = tl.cdiv(inter, BLOCK_K)
        for i in tl.range(0, TOP_K * steps, num_stages=STAGES):
            slot = i // steps
            k0 = (i - slot * steps) * BLOCK_K
            base = tl.sum(tl.where(slots == slot, bases, 0), 0)
            h = load_tile(h_ptrs + slot * stride_h + k0, one, rk, inter - k0, EVEN_K)
            acc = mac(acc, h, load_tile(w_ptrs + base + k0, n_ok, rk, inter - k0, EVEN_K), False, False)
        tl.store(out_ptrs, output_tile(acc, w_ptr, rn, n_ok, False, False).to(out_ptr.dtype.element_ty),
                 mask=n_ok[None, :])
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()


NARROW_EXPERT = 768  # expert widths up to which down takes wide tiles (decode_tiles)
MAX_ARRIVALS = 16384  # (token, hidden tile) counts of a split down launch: the arrivals' buffer
SPLIT_BELOW_PER_SM = 4  # expert_down's default: split while fewer programs an SM than this


@functools.cache
def _arrivals(device: torch.device) -> torch.Tensor:
    """The split down kernel's counts, zero between launches (the last program in resets its
    count); one buffer for every layer, whose kernels run one after another."""
    return torch.zeros(MAX_ARRIVALS, dtype=torch.int32, device=device)


def _pow2_divisor(n: int, cap: int) -> int:
    """The largest power of two <= cap that divides n (at least 16: else the last step is masked)."""
    step = cap
    while step > 16 and n % step:
        step //= 2
    return step


def decode_tiles(inter: int, hidden: int, top_k: int, weight_bytes: int,
                 device: torch.device | None = None) -> tuple[GemvConfig, GemvConfig]:
    """The gate_up and down tiles: the dense GEMV's one-row tiles (gemv_config) for the shapes of
    one expert, gate_up in K steps of at most 512 (half the registers of the dense GEMV's 1,024,
    so more programs stream at once: faster in the sweep of benchmark/offline/moe_decode.py); down's
    K steps divide the expert width where they can, so no step straddles two experts' rows and the
    loads stay unmasked. A tensor-parallel share's narrow experts (Qwen3-30B-A3B's 768 is 384 wide
    at TP=2, 192 at TP=4) leave down's one-row tiles a few hundred bytes a step: there down takes
    16 or 32 hidden features a program in 64-element steps, faster at TP=2 and TP=4 at one and four
    tokens in the sweep on H200s, and at TP=1's 768 too (benchmark/NOTES.md)."""
    gate_up = gemv_config(1, inter, hidden, gated=True, weight_bytes=weight_bytes, device=device)
    down = gemv_config(1, hidden, inter, gated=False, weight_bytes=weight_bytes, device=device)
    if inter <= NARROW_EXPERT:
        wide = 32 if inter <= 256 else 16
        down = GemvConfig(wide, _pow2_divisor(inter, 64), num_warps=4, num_stages=2 if wide == 32 else 3, dot=False)
    else:
        down = replace(down, block_k=_pow2_divisor(inter, down.block_k))
    return replace(gate_up, block_k=min(gate_up.block_k, 512)), down


def router_logits(x: torch.Tensor, weight: torch.Tensor, config: GemvConfig | None = None) -> torch.Tensor:
    """x [T <= GEMV_MAX_ROWS, H] @ the router's weight [E, H]^T by the weight-streaming GEMV, which
    launches as a programmatic dependent launch like the kernels after it."""
    return gemv(x, weight, config=config or ROUTER_TILES)



def split_down(programs: int, device: torch.device) -> bool:
    """Whether the down projection runs a program per slot too, given its programs per token and
    tile: while those leave the SMs under SPLIT_BELOW_PER_SM programs each."""
    return programs < SPLIT_BELOW_PER_SM * sm_count(device) and programs <= MAX_ARRIVALS


def expert_gate_up(x: torch.Tensor, w13: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor, tile: GemvConfig,
                   pdl: bool) -> torch.Tensor:
    """h [T * k, I]: every (token, slot) pair's routing weight * silu(gate) * up."""
    pairs, hidden, inter = ids.numel(), x.shape[1], w13.shape[1] // 2
    h = torch.empty(pairs, inter, dtype=x.dtype, device=x.device)
    _gate_up_kernel[(pairs, triton.cdiv(inter, tile.block_n))](
        x, w13, ids, weights, h, inter, hidden, x.stride(0), w13.stride(0), w13.stride(1), h.stride(0),
        TOP_K=ids.shape[1], BLOCK_N=tile.block_n, BLOCK_K=tile.block_k, EVEN_K=hidden % tile.block_k == 0,
        STAGES=tile.num_stages, PDL=pdl, num_warps=tile.num_warps, num_stages=tile.num_stages, **pdl_launch(pdl))
    return h


def expert_down(h: torch.Tensor, w2: torch.Tensor, ids: torch.Tensor, out: torch.Tensor, tile: GemvConfig,
                pdl: bool, split: bool | None = None) -> torch.Tensor:
    """out [T, H]: each token's rows of h through its experts' down projections, summed. `split`:
    a program per slot too; by default only while a program per token and tile would leave the
    SMs under SPLIT_BELOW_PER_SM programs each (one token, for Qwen3-30B-A3B's shapes: from two
    tokens on the unsplit kernel measured faster, benchmark/NOTES.md)."""
    (tokens, top_k), hidden, inter = ids.shape, w2.shape[1], w2.shape[2]
    tiles = triton.cdiv(hidden, tile.block_n)
    split = split_down(tokens * tiles, h.device) if split is None else split
    if split and tokens * tiles > MAX_ARRIVALS:
        raise ValueError(f"a split down launch counts at most {MAX_ARRIVALS} (token, tile) pairs, got {tokens * tiles}")
    # (Unsplit, the kernel reads neither: out stands in for the pointers.)
    part = torch.empty(tokens * top_k, hidden, dtype=torch.float32, device=h.device) if split else out
    arrivals = _arrivals(h.device) if split else ids
    _down_kernel[(tokens, tiles, top_k if split else 1)](
        h, w2, ids, out, part, arrivals, hidden, inter, h.stride(0), w2.stride(0), w2.stride(1), out.stride(0),
        TOP_K=top_k, K_P=triton.next_power_of_2(top_k), BLOCK_N=tile.block_n, BLOCK_K=tile.block_k,
        EVEN_K=inter % tile.block_k == 0, STAGES=tile.num_stages, SPLIT=split, PDL=pdl, num_warps=tile.num_warps,
        num_stages=tile.num_stages, **pdl_launch(pdl))
    return out


def decode_experts(x: torch.Tensor, router_logits: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, top_k: int,
                   renormalize: bool, tiles: tuple[GemvConfig, GemvConfig] | None = None,
                   pdl: bool | None = None, split: bool | None = None) -> torch.Tensor:
    """The MoE feed-forward of x [T, H] (this rank's share: w13 [E, 2I, H], w2 [E, H, I]) for a few
    tokens; `tiles` (gate_up, down), `pdl` and `split` (expert_down) override the defaults (the
    benchmark's sweep)."""
    tokens, hidden = x.shape
    out = torch.empty_like(x)
    if tokens == 0:
        return out
    x = x.contiguous()
    gate_up, down = tiles or decode_tiles(w13.shape[1] // 2, hidden, top_k, w13.element_size(), x.device)
    pdl = pdl_supported(x.device) if pdl is None else pdl
    weights, ids = route_topk(router_logits, top_k, renormalize, pdl=pdl)
    return expert_down(expert_gate_up(x, w13, weights, ids, gate_up, pdl), w2, ids, out, down, pdl, split)


def warm_up(w13: torch.Tensor, w2: torch.Tensor, gate: torch.Tensor, top_k: int, renormalize: bool) -> None:
    """Build this path's kernels for these weights now, at start (one variant serves every token
    count)."""
    x = torch.zeros(1, w13.shape[2], dtype=w13.dtype, device=w13.device)
    decode_experts(x, router_logits(x, gate), w13, w2, top_k, renormalize)
