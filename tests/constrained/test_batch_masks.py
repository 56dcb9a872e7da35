"""BatchMasks carries the masks of a batch's constrained rows only and masks exactly what
xgrammar's own whole-batch bitmask masks: the constrained rows' disallowed tokens become -inf,
the other rows keep their logits."""

from __future__ import annotations

import json
import os

import pytest
import torch
import xgrammar as xgr

from minisgl.constrained.compiler import CompileLimits, GrammarCompilerPool
from minisgl.constrained.grammar import BatchMasks, GrammarState

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
SCHEMA = json.dumps({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]})


@pytest.fixture(scope="module")
def grammar(tiny_model_dir):
    model_dir = tiny_model_dir("Qwen3ForCausalLM")
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    vocab = config["vocab_size"]
    pool = GrammarCompilerPool(model_dir, vocab, [config["eos_token_id"]], CompileLimits(None, 1, 1 << 20))
    try:
        yield pool.submit(("json_schema", SCHEMA)).result(), vocab
    finally:
        pool.shutdown()


@pytest.mark.parametrize("constrained_rows", [[1, 4], [0, 1, 2, 3, 4, 5], [5]])
def test_masks_of_the_constrained_rows_equal_a_whole_batch_bitmask(grammar, constrained_rows):
    compiled, vocab = grammar
    states = {row: GrammarState.start(compiled) for row in constrained_rows}
    first = states[constrained_rows[0]]
    assert first.accept(_first_allowed(first, vocab))  # one row a token further on: the rows' masks differ
    torch.manual_seed(len(constrained_rows))
    logits = torch.randn(6, vocab, device=DEVICE)

    masks = BatchMasks.fill(sorted(states.items()), vocab)
    got = logits.clone()
    masks.apply(got)

    # xgrammar alone: a bitmask for all six rows, unconstrained ones allowing everything.
    whole = xgr.allocate_token_bitmask(6, vocab)
    for row, state in states.items():
        state.fill_mask(whole, row)
    want = logits.clone()
    xgr.apply_token_bitmask_inplace(want, whole.to(DEVICE))

    assert masks.bitmask.shape[0] == len(constrained_rows)
    assert torch.equal(got, want)
    for row in set(range(6)) - set(constrained_rows):
        assert torch.equal(got[row], logits[row])
    assert all(torch.isinf(got[row]).any() for row in constrained_rows)


def _first_allowed(state: GrammarState, vocab: int) -> int:
    mask = xgr.allocate_token_bitmask(1, vocab)
    state.fill_mask(mask, 0)
    logits = torch.zeros(1, vocab)
    xgr.apply_token_bitmask_inplace(logits, mask)
    return int(torch.nonzero(~torch.isinf(logits[0]))[0])
