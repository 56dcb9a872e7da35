"""What matching a grammar costs per token, probed when it compiles.

A grammar's matcher runs in the scheduler, on every step, for every request that uses it. An
ambiguous grammar (`e ::= e e | [a-z]`) makes the Earley matcher track more parses with every
token, so its cost per token grows without bound and slows every request of the batch. So a
compiled grammar is walked for PROBE_TOKENS tokens in the compile worker (inside the compile's
time budget, off the scheduler); one whose steps grow as only such grammars do is refused naming
its field, before any request uses it.
"""

from __future__ import annotations

import time

import numpy as np

PROBE_TOKENS = 64  # tokens walked; the ambiguous grammars grow several-fold within them
GROWTH = 4.0  # the last steps cost this many times the first ones: superlinear matching
FLOOR_S = 0.001  # CPU per step below which no grammar is refused (timer noise, cache effects)


def matching_problem(compiled, vocab_size: int, stop_token_ids: list[int]) -> str | None:
    """Why matching `compiled` (an xgrammar CompiledGrammar) costs too much per token, or None.
    The walk takes the last token each mask allows that is not a stop token (a deterministic
    path that goes on as long as the grammar does)."""
    import xgrammar as xgr

    matcher = xgr.GrammarMatcher(compiled)
    bitmask = xgr.allocate_token_bitmask(1, vocab_size)
    stops = np.zeros(bitmask.shape[1] * 32, dtype=bool)
    stops[[t for t in stop_token_ids if 0 <= t < vocab_size]] = True
    costs = []
    for _ in range(PROBE_TOKENS):
        start = time.thread_time()
        matcher.fill_next_token_bitmask(bitmask, 0)
        allowed = np.unpackbits(bitmask[0].numpy().view(np.uint8), bitorder="little").astype(bool) & ~stops
        allowed[vocab_size:] = False
        if not allowed.any() or not matcher.accept_token(int(np.flatnonzero(allowed)[-1])):
            break
        costs.append(time.thread_time() - start)
    quarter = len(costs) // 4
    if quarter < 4:
        return None  # the grammar ends early: too few tokens to grow on
    first, last = np.mean(costs[1:quarter + 1]), np.mean(costs[-quarter:])
    if last > FLOOR_S and last > GROWTH * first:
        return (f"matching it costs more with every token ({first * 1e3:.2f} ms of CPU a token at first, "
                f"{last * 1e3:.1f} ms after {len(costs)} tokens), as an ambiguous grammar's does (a rule "
                f"such as e ::= e e, or one that can match nothing and repeat); write it unambiguously")
    return None
