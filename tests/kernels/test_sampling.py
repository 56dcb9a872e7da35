"""minisgl.kernels.sampling.sample_gumbel_max: its greedy sampling (without temperatures) is
torch.argmax, ties to the lowest index; it also writes the tokens to pinned host memory and into
the token pool. On the CPU the kernel runs under Triton's interpreter (tests/conftest.py sets
TRITON_INTERPRET=1); the device runs this file on the GPU too.

    python -m pytest tests/kernels/test_sampling.py -q
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from minisgl.kernels.sampling import sample_gumbel_max  # noqa: E402

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("rows", [4, 20])  # one block a program; above WIDE_ROWS, 16 slices a row
def test_greedy_rows_are_torch_argmax_with_ties_to_the_lowest_index(dtype, rows):
    torch.manual_seed(rows)
    vocab = 3000  # three 1,024-token blocks and a partial one
    logits = torch.randn(rows, vocab).to(dtype)
    logits[1, [5, 2500]] = 9.0  # a tie across slices
    logits[2, [1030, 1031]] = 9.0  # within one
    logits[3] = -1.0  # all tied
    got = sample_gumbel_max(logits.to(DEVICE), None)
    assert got.dtype == torch.int32
    want = logits.argmax(dim=-1)
    assert want[1:4].tolist() == [5, 1030, 0]
    assert got.cpu().tolist() == want.tolist()


@pytest.mark.parametrize("temperatures", [None, [0.0, 0.7, 0.0]])
def test_the_sampled_tokens_are_also_written_to_the_host_and_into_the_token_pool(temperatures):
    torch.manual_seed(3)
    logits = torch.randn(3, 5000).to(DEVICE)
    temps = None if temperatures is None else torch.tensor(temperatures, device=DEVICE)
    pool = torch.full((4, 16), -1, dtype=torch.int32, device=DEVICE)
    index = torch.tensor([5, 17, 40], device=DEVICE)  # flat: rows 0, 1, 2 at positions 5, 1, 8
    host = torch.full((3,), -1, dtype=torch.int32, pin_memory=DEVICE.type == "cuda")
    got = sample_gumbel_max(logits, temps, 11, host=host, pool=pool.view(-1), pool_index=index)
    assert got.cpu().tolist() == sample_gumbel_max(logits, temps, 11).cpu().tolist()  # same seed, same draws
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()
    assert host.tolist() == got.cpu().tolist()
    flat = pool.view(-1).cpu()
    assert flat[index.cpu()].tolist() == got.cpu().tolist() and (flat >= 0).sum() == 3  # nothing else touched
