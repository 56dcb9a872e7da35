"""Structured output: grammars compiled by xgrammar, a token bitmask per constrained request.

A request's constraint (SamplingParams.constraint, (kind, spec)) is compiled on a worker thread,
off the scheduler's loop, and cached by its text; each request then gets its own matcher, which
fills its row of the step's token bitmask (BatchMasks: the constrained rows only, applied to their
logits before sampling) and follows the tokens it accepts.
"""

from .grammar import CONSTRAINT_KINDS, BatchMasks, GrammarCompilerPool, GrammarState, constraint_problem

__all__ = ["CONSTRAINT_KINDS", "BatchMasks", "GrammarCompilerPool", "GrammarState", "constraint_problem"]
