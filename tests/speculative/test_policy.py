"""Speculation is on where it pays: each request drafts k tokens by its acceptance, stops drafting
for a while (longer each time) when acceptance is low or its drafter finds nothing, and nobody
drafts above the batch size limit."""

from __future__ import annotations

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


def test_k_shrinks_as_acceptance_falls_below_one_half():
    policy = SpeculationPolicy(max_k=4, max_batch=16, min_acceptance=0.1)
    for _ in range(50):
        policy.verified(1, 4, 1)  # acceptance 0.25: half of one half
    assert policy.k_for(1) == 2


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
