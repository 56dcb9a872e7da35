"""What a CUDA graph's replay copies in (minisgl.engine.graph.StaticInputs, shared by the decode
graphs and the prefill pieces): positions, then token-table indices, padding at the dummy row.
The gather kernel that reads them inside the graph needs a GPU (tests/engine/test_cuda.py)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

from minisgl.core.batch import Batch
from minisgl.engine.graph import StaticInputs

ROWS, WIDTH = 5, 32  # the page table's last row is the dummy row


def _inputs(extra: int = 0) -> StaticInputs:
    engine = SimpleNamespace(device=torch.device("cpu"), page_table=torch.zeros(ROWS, WIDTH, dtype=torch.int32),
                             token_pool=torch.zeros(ROWS, WIDTH, dtype=torch.int32))
    return StaticInputs(engine, rows=8, extra=extra)


def test_a_capture_batch_is_padding_at_position_0_of_the_dummy_row():
    inputs = _inputs()
    batch = inputs.padding_batch(4, "prefill")
    assert inputs.step[:4].tolist() == [0] * 4 and inputs.step[4:8].tolist() == [(ROWS - 1) * WIDTH] * 4
    assert batch.phase == "prefill" and len(batch.input_ids) == len(batch.positions) == len(batch.out_loc) == 4
    assert batch.positions.data_ptr() == inputs.positions.data_ptr()  # the static buffer itself


def test_a_replay_copies_positions_then_table_indices_then_the_tail():
    """Requests in table rows 0 and 2 compute 3 tokens from position 5 and 1 token at position 9;
    padded to 8 rows, then the caller's tail (a prefill's logit rows)."""
    inputs = _inputs(extra=8)
    batch = Batch(reqs=[], phase="prefill")
    inputs.copy_in(batch, np.array([0, 2]), np.array([3, 1]), np.array([5, 6, 7, 9]), padded=8, tail=np.array([2, 3]))
    dummy = (ROWS - 1) * WIDTH
    assert inputs.step[:8].tolist() == [5, 6, 7, 9, 0, 0, 0, 0]
    assert inputs.step[8:16].tolist() == [5, 6, 7, 2 * WIDTH + 9, dummy, dummy, dummy, dummy]
    assert inputs.step[16:18].tolist() == [2, 3]
    assert len(batch.positions) == len(batch.input_ids) == len(batch.out_loc) == 4
