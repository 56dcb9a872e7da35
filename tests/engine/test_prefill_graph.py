"""Which prefills the piecewise CUDA graphs serve (minisgl.engine.prefill_graph): the token counts
captured and the padding to them. The capture and replay need a GPU: test_prefill_graph_cuda.py."""

from __future__ import annotations

import pytest

from minisgl.engine.graph import padded_batch_size
from minisgl.engine.prefill_graph import token_counts


def test_counts_step_by_256_to_2048_then_by_512_up_to_the_cap():
    counts = token_counts(8192)
    assert counts[:10] == [64, 128, 256, 512, 768, 1024, 1280, 1536, 1792, 2048]
    assert counts[10:] == list(range(2560, 8193, 512))


@pytest.mark.parametrize("cap", [1, 64, 100, 2048, 3000, 8191])
def test_the_cap_itself_is_always_captured_and_nothing_above_it(cap):
    counts = token_counts(cap)
    assert counts[-1] == cap and all(c <= cap for c in counts) and counts == sorted(set(counts))


def test_zero_captures_nothing():
    assert token_counts(0) == [] and token_counts(-5) == []


@pytest.mark.parametrize("tokens, padded", [(1, 64), (64, 64), (65, 128), (300, 512), (2049, 2560), (8192, 8192),
                                            (8193, None)])
def test_a_prefill_pads_to_the_next_captured_count_or_runs_eagerly_above_them(tokens, padded):
    assert padded_batch_size(tokens, token_counts(8192)) == padded


def test_the_pieces_are_off_unless_a_token_cap_asks_for_them():
    """Capturing them slowed every later decode step on an H200 (benchmark/NOTES.md): opt-in, as SGLang's are."""
    from minisgl.engine.config import EngineConfig
    from minisgl.server.args import parse_args

    assert parse_args([]).piecewise_cuda_graph_max_tokens == 0
    assert EngineConfig.__dataclass_fields__["piecewise_cuda_graph_max_tokens"].default == 0
    assert parse_args(["--piecewise-cuda-graph-max-tokens", "8192"]).piecewise_cuda_graph_max_tokens == 8192
