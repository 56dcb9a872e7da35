"""CUDA-graph batch sizes and the padding choice (pure logic: runs on the CPU)."""

from __future__ import annotations

from minisgl.engine.graph import graph_batch_sizes, padded_batch_size


def test_default_sizes_cover_every_batch_up_to_the_cap():
    sizes = graph_batch_sizes(None, 256)
    assert sizes[:5] == [1, 2, 4, 8, 16] and sizes[-1] == 256
    assert all(b % 8 == 0 for b in sizes[3:])
    assert graph_batch_sizes(None, 100)[-1] == 100  # capped by max_running_requests, cap included
    assert graph_batch_sizes(20, 256) == [1, 2, 4, 8, 16, 20]
    assert graph_batch_sizes(0, 256) == []  # 0 turns graphs off
    assert graph_batch_sizes(3, 256) == [1, 2, 3]


def test_explicit_sizes_are_filtered_and_capped():
    assert graph_batch_sizes(64, 48, (1, 32, 64, 128)) == [1, 32, 48]
    assert graph_batch_sizes(None, 256, (4, 2)) == [2, 4, 256]


def test_padding_picks_the_next_captured_size():
    sizes = graph_batch_sizes(None, 64)
    assert padded_batch_size(1, sizes) == 1
    assert padded_batch_size(3, sizes) == 4
    assert padded_batch_size(9, sizes) == 16
    assert padded_batch_size(16, sizes) == 16
    assert padded_batch_size(64, sizes) == 64
    assert padded_batch_size(65, sizes) is None  # above the largest: eager
