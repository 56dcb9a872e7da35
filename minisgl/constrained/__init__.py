"""Structured output: grammars compiled by xgrammar, a token bitmask per constrained request.

A request's constraint (SamplingParams.constraint, (kind, spec)) is checked against the server's
bounds at admission, then compiled in a worker process with a time budget (compiler.py), off the
scheduler, and cached by its text; each request then gets its own matcher, which fills its row of
the step's token bitmask (BatchMasks: the constrained rows only, applied to their logits before
sampling) and follows the tokens it accepts.

The package imports nothing itself: the API process reads constraints.py and tools.py (no torch,
which would cost each server start seconds of CPU), the scheduler compiler.py and grammar.py.
"""
