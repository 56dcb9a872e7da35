"""Freed rows gather for one prefill (PrefillManager.gathered): while nearly every row decodes and
requests queue beyond the free rows, they are prefilled together once a sixteenth of the rows is
free, or after --prefill-delay-steps decode steps at most; a queue shorter than that is prefilled
at once; the tokens are the same as with each freed row prefilled at once (--prefill-delay-steps 0),
in fewer prefill steps; and a more urgent request under the priority policy never waits."""

from __future__ import annotations

import random

import torch

from minisgl.core.params import SamplingParams
from minisgl.scheduler import Scheduler, SchedulerConfig

ROWS = 64  # a prefill waits for ROWS // 16 = 4 free rows
DELAY = 2  # short enough that some prefills come by it, before 4 rows are free


def make_scheduler(model_dir: str, delay: int, **options) -> Scheduler:
    options = {"device": "cpu", "dtype": torch.float32, "page_size": 4, "num_pages": 4096,
               "max_running_requests": ROWS, "prefill_delay_steps": delay, **options}
    return Scheduler(SchedulerConfig(model_path=model_dir, **options))


def workload(n: int = 160) -> tuple[list[list[int]], list[SamplingParams]]:
    """More requests than rows, of spread output lengths, so rows free one or two a step."""
    rng = random.Random(3)
    prompts = [[rng.randint(3, 380) for _ in range(rng.randint(4, 24))] for _ in range(n)]
    params = [SamplingParams(temperature=0, max_tokens=rng.randint(2, 40), ignore_eos=True) for _ in range(n)]
    return prompts, params


def watch_steps(s: Scheduler) -> list[tuple[str, int, int, int]]:
    """From now on, each step as (phase, batch size, rows free before it, requests waiting before it)."""
    steps: list[tuple[str, int, int, int]] = []
    schedule = s._schedule

    def watched():
        free, waiting = s.table.num_free, len(s.prefill.waiting)
        batch = schedule()
        steps.append((batch.phase, batch.size, free, waiting) if batch else ("idle", 0, free, waiting))
        return batch

    s._schedule = watched  # watch, do not change
    return steps


def serve(s: Scheduler, prompts, params) -> tuple[dict[int, list[int]], list[tuple[str, int, int, int]]]:
    """Every request's tokens, and its steps (watch_steps)."""
    steps = watch_steps(s)
    for uid, (prompt, p) in enumerate(zip(prompts, params)):
        s.add_request(uid, prompt, p)
    got: dict[int, list[int]] = {uid: [] for uid in range(len(prompts))}
    while s.has_work:
        for out in s.step():
            if out.token_id is not None:
                got[out.uid].append(out.token_id)
    assert s.cache.used_pages == 0 and s.table.num_free == s.table.rows
    return got, steps


def fill_every_row(s: Scheduler, prompts: list[list[int]], params: list[SamplingParams]) -> None:
    for uid, (prompt, p) in enumerate(zip(prompts, params)):
        s.add_request(uid, prompt, p)
    while s.prefill.waiting or s.prefill.chunked:
        s.step()


def abort_all(s: Scheduler) -> None:
    for uid in list(s.reqs):
        s.abort(uid)
    while s.has_work:
        s.step()


def test_freed_rows_gather_into_fewer_prefills_with_the_same_tokens(tiny_model_dir):
    model_dir = tiny_model_dir("Qwen3ForCausalLM")
    prompts, params = workload()
    runs = {}
    for delay in (0, DELAY):
        s = make_scheduler(model_dir, delay)
        try:
            runs[delay] = serve(s, prompts, params)
        finally:
            s.shutdown()
    (at_once, at_once_steps), (gathered, steps) = runs[0], runs[DELAY]
    assert gathered == at_once
    prefills = [step for step in steps if step[0] == "prefill"]
    assert len(prefills) < len([step for step in at_once_steps if step[0] == "prefill"]) * 2 // 3
    # A prefill while requests decode took a batch's worth of free rows, or a queue shorter than that, or
    # came after DELAY decode steps that held one back; and no more decode steps held one back than that.
    gather, held_back, why = ROWS // 16, 0, set()
    for i, (phase, size, free, waiting) in enumerate(steps):
        if phase == "decode":
            after_decode = i > 0 and steps[i - 1][0] == "decode"  # (after a prefill a decode step comes anyway)
            held_back = held_back + 1 if after_decode and 0 < free < gather <= waiting else 0
            assert held_back <= DELAY, steps[max(0, i - DELAY - 2): i + 1]
        elif phase == "prefill" and i and steps[i - 1][0] == "decode":
            assert free >= gather or waiting < gather or held_back == DELAY, steps[max(0, i - DELAY - 2): i + 1]
            why.add("rows" if free >= gather else "short queue" if waiting < gather else "delay")
            held_back = 0
    assert {"rows", "delay"} <= why  # both ways out of a backlog were taken


def test_a_short_queue_is_prefilled_as_soon_as_a_row_is_free(tiny_model_dir):
    """Fewer requests waiting than a batch's worth: gathering would only delay their first token."""
    prompts, _ = workload(ROWS + 1)
    s = make_scheduler(tiny_model_dir("Qwen3ForCausalLM"), delay=1000)
    try:  # every row runs long but one, which frees its row after a few tokens
        fill_every_row(s, prompts[:ROWS], [SamplingParams(temperature=0, max_tokens=3 if uid == 0 else 200,
                                                          ignore_eos=True) for uid in range(ROWS)])
        s.add_request(ROWS, prompts[ROWS], SamplingParams(temperature=0, max_tokens=4, ignore_eos=True))
        steps = watch_steps(s)
        while s.reqs[ROWS].table_idx < 0:
            s.step()
            assert len(steps) < 20, steps
        first_free = next(i for i, (_, _, free, _) in enumerate(steps) if free)
        # prefilled in the first step that could (the one after a row is free, or the next one: after a
        # prefill a decode step comes anyway)
        assert steps[-1][0] == "prefill" and len(steps) - 1 <= first_free + 1, steps
        abort_all(s)
    finally:
        s.shutdown()


def test_a_more_urgent_request_preempts_at_once_instead_of_gathering(tiny_model_dir):
    """Under the priority policy, a request of a higher class than a running one does not wait for rows to
    gather: it takes a row from the lower class in the next step."""
    prompts, _ = workload(ROWS)
    s = make_scheduler(tiny_model_dir("Qwen3ForCausalLM"), delay=1000, scheduling_policy="priority")
    try:  # the low class fills every row
        fill_every_row(s, prompts, [SamplingParams(temperature=0, max_tokens=200, ignore_eos=True, priority=1)] * ROWS)
        s.step()
        assert s.table.num_free == 0
        s.add_request(ROWS, prompts[0], SamplingParams(temperature=0, max_tokens=4, ignore_eos=True, priority=0))
        s.step()
        s.step()  # scheduled, launched
        assert s.reqs[ROWS].table_idx >= 0
        assert [r.sampling_params.priority for r in s.prefill.waiting] == [1]  # its victim waits instead
        abort_all(s)
    finally:
        s.shutdown()
