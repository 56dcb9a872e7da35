"""minisgl.kernels.decode_inputs.gather_decode_inputs: the decode graphs' input gather is torch's
indexing of the token pool and page table. On the CPU the kernel runs under Triton's interpreter
(tests/conftest.py sets TRITON_INTERPRET=1); the device runs this file on the GPU too.

    python -m pytest tests/kernels/test_decode_inputs.py -q
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from minisgl.kernels.decode_inputs import gather_decode_inputs  # noqa: E402

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


@pytest.mark.parametrize("bs", [1, 5, 40, 2500])
def test_decode_inputs_are_the_token_pool_and_page_table_at_each_request_position(bs):
    """Up to 40 tokens one program, 2,500 (a prefill piece's) three of 1,024."""
    torch.manual_seed(bs)
    rows, width = 50, 64
    token_pool = torch.randint(0, 32000, (rows, width), dtype=torch.int32, device=DEVICE)
    page_table = torch.randint(0, 10_000, (rows, width), dtype=torch.int32, device=DEVICE)
    req_rows = torch.randint(0, rows, (bs,)) if bs > rows else torch.randperm(rows)[:bs]
    positions = torch.randint(0, width, (bs,))
    flat = req_rows * width + positions
    step = torch.cat([positions, flat]).to(DEVICE)
    out_pos = torch.full((bs,), -1, dtype=torch.int64, device=DEVICE)
    out_ids = torch.full((bs,), -1, dtype=torch.int32, device=DEVICE)
    out_loc = torch.full((bs,), -1, dtype=torch.int64, device=DEVICE)
    next_index = torch.full((bs,), -1, dtype=torch.int64, device=DEVICE)
    rows_lens = torch.full((2 * bs,), -1, dtype=torch.int32, device=DEVICE)
    gather_decode_inputs(step, token_pool, page_table, out_pos, out_ids, out_loc, next_index, rows_lens)
    assert out_pos.cpu().tolist() == positions.tolist()
    assert out_ids.cpu().tolist() == token_pool.cpu()[req_rows, positions].tolist()
    assert out_loc.cpu().tolist() == page_table.cpu()[req_rows, positions].long().tolist()
    # The next token goes right after this one; the attention reads the row and the length.
    assert next_index.cpu().tolist() == (flat + 1).tolist()
    assert rows_lens.cpu().tolist() == req_rows.tolist() + (positions + 1).tolist()
    # Without a rows/lengths buffer (a backend whose graphs do not read them) the rest is the same.
    out_loc.fill_(-1)
    gather_decode_inputs(step, token_pool, page_table, out_pos, out_ids, out_loc, next_index)
    assert out_loc.cpu().tolist() == page_table.cpu()[req_rows, positions].long().tolist()
