"""The batch's host-side index arithmetic (minisgl.core.host) against plain per-request loops."""

from __future__ import annotations

import numpy as np

from minisgl.core.host import logit_rows, token_positions


def test_token_positions_are_each_requests_new_positions_in_order():
    cached, extend = np.array([0, 5, 3, 7]), np.array([3, 1, 0, 2])
    want = [p for c, e in zip(cached, extend) for p in range(c, c + e)]
    assert token_positions(cached, extend).tolist() == want == [0, 1, 2, 5, 7, 8]


def test_logit_rows_are_each_requests_last_rows_among_the_batch_tokens():
    extend, counts = np.array([3, 1, 4]), np.array([2, 1, 3])
    starts = np.cumsum(extend) - extend
    want = [s + e - c + j for s, e, c in zip(starts, extend, counts) for j in range(c)]
    assert logit_rows(extend, counts).tolist() == want == [1, 2, 3, 5, 6, 7]
    assert logit_rows(extend, np.ones(3, dtype=np.int64)).tolist() == [2, 3, 7]
