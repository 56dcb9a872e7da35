"""`gather_decode_inputs`: a decode graph's (or a prefill piece's) positions, token ids, KV slots
(and where its next tokens go, and the attention's rows and lengths) from its one copied buffer of
positions and token-table indices, inside the graph (one kernel, not four ops and two copies outside)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .launch import launch

# One compile serves many graph sizes: bs and width are not specialized on (==1, %16), and BLOCK
# is at least MIN_BLOCK and at most MAX_BLOCK (more tokens take more programs: the prefill pieces'
# thousands), so capture compiles this kernel once per power of two between them instead of once
# per power of two and integer class (a compile is a kernel a new pod waits for).
MIN_BLOCK, MAX_BLOCK = 32, 1024


@triton.jit(do_not_specialize=["bs", "width"])
def _decode_inputs_kernel(step_ptr, tokens_ptr, table_ptr, pos_ptr, ids_ptr, loc_ptr, next_ptr, rows_lens_ptr, bs,
                          width, BLOCK: tl.constexpr, ROWS_LENS: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = i < bs
    pos = tl.load(step_ptr + i, mask=ok)
    flat = tl.load(step_ptr + bs + i, mask=ok)
    tl.store(pos_ptr + i, pos, mask=ok)
    tl.store(ids_ptr + i, tl.load(tokens_ptr + flat, mask=ok), mask=ok)
    tl.store(loc_ptr + i, tl.load(table_ptr + flat, mask=ok).to(loc_ptr.dtype.element_ty), mask=ok)
    tl.store(next_ptr + i, flat + 1, mask=ok)
    if ROWS_LENS:
        tl.store(rows_lens_ptr + i, (flat // width).to(tl.int32), mask=ok)
        tl.store(rows_lens_ptr + bs + i, (pos + 1).to(tl.int32), mask=ok)


def gather_decode_inputs(step: torch.Tensor, token_pool: torch.Tensor, page_table: torch.Tensor,
                         positions: torch.Tensor, input_ids: torch.Tensor, out_loc: torch.Tensor,
                         next_index: torch.Tensor, rows_lens: torch.Tensor | None = None) -> None:
    """For bs = len(positions) decode requests, `step` (int64 [2 bs]) holds each one's position
    and then its index into the flattened token pool / page table (row * width + position):
    writes positions, input_ids = token_pool[index], out_loc = page_table[index] (the slot its
    new KV goes to), next_index = index + 1 (where its sampled token goes) and, if given,
    rows_lens (int32 [2 bs]) = each one's table row, then its length (position + 1). Token pool
    and page table have the same [rows, width] shape."""
    bs = positions.shape[0]
    if bs:
        args = (step, token_pool, page_table, positions, input_ids, out_loc, next_index,
                positions if rows_lens is None else rows_lens, bs, page_table.shape[1])
        block = min(MAX_BLOCK, max(MIN_BLOCK, triton.next_power_of_2(bs)))
        launch(_decode_inputs_kernel, (triton.cdiv(bs, block), 1, 1), args,
               {"BLOCK": block, "ROWS_LENS": rows_lens is not None}, num_warps=1 if bs <= 32 else 4)
