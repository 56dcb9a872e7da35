"""Prompt lookup drafts what followed the latest earlier occurrence of the sequence's end, the
longest n-gram first; against a brute-force search over the same sequence."""

from __future__ import annotations

import random

import pytest

from minisgl.speculative import NgramDrafter


def brute_force(ids, k, min_n, max_n):
    for n in range(max_n, min_n - 1, -1):
        if len(ids) <= n:
            continue
        suffix = ids[-n:]
        for start in range(len(ids) - n - 1, -1, -1):  # latest first, the suffix itself excluded
            if ids[start : start + n] == suffix:
                return ids[start + n : start + n + k]
    return []


def test_copies_what_followed_the_latest_match():
    drafter = NgramDrafter(1, 3)
    assert drafter.propose([1, 2, 3, 9, 1, 2, 3, 7, 8, 1, 2, 3], 2) == [7, 8]
    assert drafter.propose([1, 2, 3, 4, 5, 1, 2], 8) == [3, 4, 5, 1, 2]  # up to the end, fewer than k


def test_longest_ngram_wins_over_a_later_shorter_one():
    # "3" alone last occurred before 6; "2 3" before 5.
    assert NgramDrafter(1, 2).propose([2, 3, 5, 0, 3, 6, 2, 3], 1) == [5]


def test_nothing_when_the_end_never_occurred_before():
    assert NgramDrafter(1, 4).propose([1, 2, 3, 4], 4) == []
    assert NgramDrafter(2, 4).propose([5, 1, 2, 3, 1], 4) == []  # "1" occurs, but min_n is 2
    assert NgramDrafter(1, 4).propose([7], 4) == []
    assert NgramDrafter(1, 4).propose([7, 7, 7], 0) == []


@pytest.mark.parametrize("seed", range(20))
def test_matches_a_brute_force_search(seed):
    rng = random.Random(seed)
    ids = [rng.randint(0, 5) for _ in range(rng.randint(1, 60))]
    min_n = rng.randint(1, 3)
    max_n = rng.randint(min_n, 5)
    k = rng.randint(1, 6)
    assert NgramDrafter(min_n, max_n).propose(ids, k) == brute_force(ids, k, min_n, max_n)


def test_refuses_sizes_out_of_order():
    with pytest.raises(ValueError, match="n-gram sizes"):
        NgramDrafter(3, 2)
