"""Speculation is on where it pays: each request drafts k tokens by its acceptance, stops drafting
for a while (longer each time) when acceptance is low or its drafter finds nothing, and nobody
drafts above the batch size limit."""

from __future__ import annotations

import random

from minisgl.speculative import SpeculationPolicy
from minisgl.speculative.policy import MAX_BACKOFF


def run(policy, uid, accepted_of_4, steps):
    for _ in range(steps):
        policy.tick()
        k = policy.k_for(uid)
        if k:
            policy.verified(uid, k, min(k, accepted_of_4))


def test_a_well_accepted_request_keeps_drafting_all_k():
    policy = SpeculationPolicy(max_k=4, max_batch=16, min_acceptance=0.3)
    run(policy, 1, 4, 50)
    assert policy.k_for(1) == 4


def drafts_each_right(p, steps, seed, max_k=4):
    """The k each verify step drafted, for a drafter whose tokens are each right with chance p
    (the verify step keeps those up to the first wrong one)."""
    policy, rng, ks = SpeculationPolicy(max_k=max_k, max_batch=16, min_acceptance=0.1), random.Random(seed), []
    for _ in range(steps):
        policy.tick()
        if k := policy.k_for(1):
            kept = next((i for i in range(k) if rng.random() >= p), k)
            policy.verified(1, k, kept)
            ks.append(k)
    return ks


def test_drafts_each_right_four_times_in_five_keep_all_k():
    # They keep 2.4 of 4 a step (a share of 0.59), yet 4 drafts pay more than fewer would.
    for seed in range(5):
        ks = drafts_each_right(0.8, 500, seed)
        assert len(ks) == 500 and sum(k == 4 for k in ks) >= 0.95 * len(ks)


def test_k_shrinks_as_acceptance_falls_below_one_half():
    policy = SpeculationPolicy(max_k=4, max_batch=16, min_acceptance=0.1)
    for _ in range(50):
        policy.verified(1, 4, 0)
        policy.verified(1, 4, 1)  # 1 kept of 3 trials: each draft right 1 time in 3
    assert policy.k_for(1) == 3


def test_a_request_whose_drafts_fail_stops_drafting_and_retries_rarely():
    policy = SpeculationPolicy(max_k=4, max_batch=16, min_acceptance=0.3)
    verifies = 0
    for _ in range(1000):
        policy.tick()
        k = policy.k_for(1)
        if k:
            verifies += 1
            policy.verified(1, k, 0)
    # A few steps to measure, then one try per MAX_BACKOFF steps at most.
    assert verifies < 10 + 1000 // MAX_BACKOFF
    state = policy.reqs[1]
    assert state.proposed > 0 and state.accepted == 0


def test_a_request_recovers_once_its_drafts_are_accepted_again():
    policy = SpeculationPolicy(max_k=4, max_batch=16, min_acceptance=0.3)
    run(policy, 1, 0, 200)
    run(policy, 1, 4, 500)
    assert policy.k_for(1) == 4


def test_no_draft_found_backs_off_too():
    policy = SpeculationPolicy(max_k=4, max_batch=16, min_acceptance=0.3)
    policy.tick()
    policy.drafted(1, 0)
    assert policy.k_for(1) == 0
    for _ in range(2):
        policy.tick()
    assert policy.k_for(1) == 4


def test_large_batches_do_not_speculate():
    policy = SpeculationPolicy(max_k=4, max_batch=16, min_acceptance=0.3)
    assert policy.on(16) and not policy.on(17)
