"""GrammarCompilerPool: compiles run in worker processes, so one past its time budget is killed
and fails naming the budget's flag while other compiles are served meanwhile; a cancelled compile's
worker is killed; compiled grammars are cached by their text, bounded by their size in memory."""

from __future__ import annotations

import json
import os

import pytest

from minisgl.constrained.compiler import CompileLimits, GrammarCompilerPool
from minisgl.constrained.grammar import GrammarState
from tests.constrained.helpers import SIMPLE_SCHEMA, SLOW_SCHEMA, compile_workers, wait_until

pytestmark = pytest.mark.slow  # starts the server or worker processes: out of the fast loop (tests/test_tiers.py)

BUDGET = 4.0  # seconds: the slow schema compiles for far longer; a simple one in milliseconds


@pytest.fixture
def make_pool(tiny_model_dir):
    model_dir = tiny_model_dir("Qwen3ForCausalLM")
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    pools = []

    def make(timeout: float | None = BUDGET, workers: int = 2, cache_bytes: int = 64 << 20) -> GrammarCompilerPool:
        pool = GrammarCompilerPool(model_dir, config["vocab_size"], [config["eos_token_id"]],
                                   CompileLimits(timeout, workers, cache_bytes))
        pools.append(pool)
        return pool

    yield make
    for pool in pools:
        pool.shutdown()
    assert not compile_workers()  # shutting down ends every worker


def _warm(pool: GrammarCompilerPool) -> None:
    """The first request starts the workers; wait until all are ready, as on a server that has
    served structured output before."""
    pool.submit(("regex", "[0-9]+")).result(timeout=600)
    wait_until(lambda: pool.workers_ready == pool.limits.workers, "every compile worker ready")


def test_a_slow_compile_holds_up_no_other(make_pool):
    pool = make_pool(timeout=None)
    _warm(pool)
    slow = pool.submit(("json_schema", SLOW_SCHEMA))
    simple = pool.submit(("json_schema", SIMPLE_SCHEMA))
    assert GrammarState.start(simple.result(timeout=600)).matcher is not None
    assert not slow.done()  # served while the slow one compiles on the other worker
    pool.cancel(slow)


def test_a_compile_past_its_budget_is_killed_and_fails_naming_it(make_pool):
    pool = make_pool(workers=1)
    _warm(pool)
    (worker,) = compile_workers()
    slow = pool.submit(("json_schema", SLOW_SCHEMA))
    error = slow.exception(timeout=BUDGET + 120)  # a hang guard: the budget ends it
    assert isinstance(error, ValueError)
    assert "response_format" in str(error) and f"budget of {BUDGET:g} s (--grammar-compile-timeout)" in str(error)
    # Its worker was killed and a fresh one took its place.
    wait_until(lambda: len(compile_workers() - {worker}) == 1 and worker not in compile_workers(), "a new worker")
    # A time-out is not remembered: the same schema gets a new compile (and the same answer).
    again = pool.submit(("json_schema", SLOW_SCHEMA))
    assert again is not slow and "--grammar-compile-timeout" in str(again.exception(timeout=BUDGET + 600))


def test_cancelling_a_compile_kills_its_worker_and_resolves_nothing(make_pool):
    pool = make_pool(timeout=None, workers=1)  # no budget: only the cancel can end it
    _warm(pool)
    (worker,) = compile_workers()
    slow = pool.submit(("json_schema", SLOW_SCHEMA))
    # Running on the worker, not still queued (a queued compile is dropped, its worker kept): the
    # pool's thread hands it over soon after the submit, later on a busy machine.
    wait_until(lambda: pool.compiling == 1, "the slow compile running")
    pool.cancel(slow)
    assert slow.cancelled()
    wait_until(lambda: worker not in compile_workers(), "the cancelled compile's worker gone")
    # The pool goes on with a fresh worker; the cancelled schema can be asked for again.
    assert pool.submit(("regex", "[a-z]+")).result(timeout=600) is not None
    assert pool.submit(("json_schema", SLOW_SCHEMA)) is not slow


def test_a_compile_error_is_reported_and_remembered(make_pool):
    pool = make_pool(workers=1)
    bad = pool.submit(("regex", "(unclosed"))
    with pytest.raises(ValueError, match=r"^cannot compile the regex constraint \(guided_regex\): Regex parsing error"):
        bad.result(timeout=600)
    assert pool.submit(("regex", "(unclosed")) is bad


def test_the_cache_keeps_compiled_grammars_within_its_byte_budget(make_pool):
    probe = make_pool(workers=1)
    small, big = ("regex", "[a-z]{1,3}"), ("json_schema", SIMPLE_SCHEMA)
    sizes = {c: len(probe.submit(c).result(timeout=600).compiled.serialize_json()) for c in (small, big)}
    assert probe.submit(small) is probe.submit(small)  # compiled once, then served from the cache

    pool = make_pool(workers=1, cache_bytes=sizes[small] + sizes[big] - 1)  # room for one of them only
    first = pool.submit(small)
    first.result(timeout=600)
    assert pool.submit(small) is first
    pool.submit(big).result(timeout=600)  # kept; the least recently used goes to make room
    assert pool.submit(small) is not first

    tiny = make_pool(workers=1, cache_bytes=sizes[small] - 1)  # smaller than any grammar: each is refused
    with pytest.raises(ValueError, match="--grammar-cache-bytes"):
        tiny.submit(small).result(timeout=600)


def test_a_worker_killed_before_it_is_ready_takes_structured_output_down_only_for_a_backoff(make_pool):
    """SIGKILL of the compile worker while it starts: the compile waiting for it fails with the
    reason, and once the backoff has passed a new worker starts and compiles; structured output is
    not off until a restart."""
    import signal
    import time

    pool = make_pool(workers=1)
    first = pool.submit(("regex", "[0-9]+"))
    wait_until(lambda: compile_workers(), "the first worker to be started")
    (worker,) = compile_workers()
    assert pool.workers_ready == 0, "the worker was ready before it could be killed: the test proves nothing"
    os.kill(worker, signal.SIGKILL)
    with pytest.raises(ValueError, match="structured output is unavailable for now: its compiler did not start"):
        first.result(timeout=600)
    time.sleep(GrammarCompilerPool.RESTART_BACKOFF_S + 0.5)
    later = pool.submit(("regex", "[a-z]+"))
    assert GrammarState.start(later.result(timeout=600)).matcher is not None
    assert pool.workers_ready == 1


def test_a_grammar_is_counted_as_its_serialized_size_and_one_over_the_budget_is_refused(make_pool):
    """A schema of many bounded strings compiles to token masks of MiBs (what the scheduler
    holds once it deserializes them), far more than the grammar's memory_size_bytes says: the cache
    counts the serialized size (or memory_size_bytes, where xgrammar counts a small grammar as more),
    and a grammar larger than the whole budget is refused naming the flag."""
    strings = {"type": "object", "properties": {f"p{i}": {"type": "string", "maxLength": 200} for i in range(30)}}
    pool = make_pool(workers=1, cache_bytes=1 << 20)
    small = pool.submit(("json_schema", SIMPLE_SCHEMA)).result(timeout=600)
    assert pool.cached_bytes == max(len(small.compiled.serialize_json()), small.compiled.memory_size_bytes)
    with pytest.raises(ValueError, match=r"response_format or guided_json.*holds [\d.]+ MiB.*--grammar-cache-bytes"):
        pool.submit(("json_schema", json.dumps(strings))).result(timeout=600)
