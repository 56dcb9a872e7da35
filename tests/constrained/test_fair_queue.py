"""Grammar compiles waiting for a worker take turns between clients: a client that floods slow
schemas waits behind its own compiles, and another client's compile goes next, with the real
compile workers (xgrammar) as with the queue alone."""

from __future__ import annotations

import json
import os

import pytest

from minisgl.constrained.compiler import CompileLimits, GrammarCompilerPool
from minisgl.constrained.fair_queue import FairQueue
from minisgl.constrained.grammar import GrammarState
from tests.constrained.helpers import SIMPLE_SCHEMA, compile_workers, nested_schema, wait_until


def test_clients_take_turns_and_a_new_client_goes_before_those_that_had_theirs():
    q: FairQueue[str] = FairQueue()
    for i in range(4):
        q.append(f"h{i}", "heavy")
    assert q.popleft() == "h0"  # heavy's turn in this round
    q.append("a0", "a")
    q.append("a1", "a")
    q.append("b0", "b")
    assert [q.popleft() for _ in range(len(q))] == ["a0", "b0", "h1", "a1", "h2", "h3"]
    assert not q


def test_an_idle_client_banks_no_turns_and_removal_keeps_the_order():
    q: FairQueue[str] = FairQueue()
    for i in range(3):
        q.append(f"h{i}", "heavy")
    q.append("x", "light")
    assert [q.popleft(), q.popleft()] == ["h0", "x"]
    for i in range(3, 6):
        q.append(f"h{i}", "heavy")
    assert [q.popleft(), q.popleft()] == ["h1", "h2"]
    q.append("y0", "light")  # back after idling: one turn now, not three
    q.append("y1", "light")
    q.remove("h3")
    assert "h3" not in q and q.queued("light") == 2
    assert [q.popleft() for _ in range(len(q))] == ["y0", "h4", "y1", "h5"]
    with pytest.raises(IndexError):
        q.popleft()


def test_a_client_whose_line_ran_empty_on_its_turn_queues_behind_a_new_client():
    # The pool hands out a compile as soon as it is queued: the flooding client's first one is taken
    # before its others arrive, and that turn still counts when they do.
    q: FairQueue[str] = FairQueue()
    q.append("h0", "heavy")
    assert q.popleft() == "h0"
    for i in range(1, 4):
        q.append(f"h{i}", "heavy")
    q.append("light", "light")
    assert [q.popleft() for _ in range(len(q))] == ["light", "h1", "h2", "h3"]


@pytest.mark.slow  # starts compile worker processes
def test_a_light_clients_compile_goes_before_a_heavy_clients_queued_slow_ones(tiny_model_dir):
    """One worker, a 2 s budget: four slow schemas from one client (each killed at the budget), then
    a simple one from another: it compiles right after the first slow one, not after all four."""
    model_dir = tiny_model_dir("Qwen3ForCausalLM")
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    pool = GrammarCompilerPool(model_dir, config["vocab_size"], [config["eos_token_id"]],
                               CompileLimits(timeout=2.0, workers=1, cache_bytes=64 << 20))
    try:
        pool.submit(("regex", "[0-9]+"), "warm").result(timeout=600)
        wait_until(lambda: pool.workers_ready == 1, "the compile worker ready")
        heavy = [pool.submit(("json_schema", nested_schema(400 + i)), "10.0.0.1") for i in range(4)]
        light = pool.submit(("json_schema", SIMPLE_SCHEMA), "10.0.0.2")
        grammar = light.result(timeout=600)
        assert sum(h.done() for h in heavy) <= 1, "the light compile waited for the heavy client's queue"
        assert GrammarState.start(grammar).matcher is not None
        for h in heavy:
            with pytest.raises(ValueError, match="--grammar-compile-timeout"):
                h.result(timeout=600)
    finally:
        pool.shutdown()
    assert not compile_workers()
