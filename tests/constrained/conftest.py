"""What the constraint tests share: a constraint compiled as the server compiles it, matched
character by character."""

from __future__ import annotations

import pytest
import xgrammar as xgr

from minisgl.constrained.grammar import compile_constraint


@pytest.fixture(scope="module")
def accepts_constraint():
    """accepts_constraint((kind, spec), text): whether the compiled constraint takes exactly `text`
    (a vocabulary of the printable ASCII characters, one token each)."""
    vocab = [chr(i) for i in range(32, 127)] + ["</s>"]
    compiler = xgr.GrammarCompiler(xgr.TokenizerInfo(vocab, stop_token_ids=[len(vocab) - 1]))

    def check(constraint: tuple[str, str], text: str) -> bool:
        matcher = xgr.GrammarMatcher(compile_constraint(compiler, constraint), terminate_without_stop_token=True)
        return matcher.accept_string(text) and matcher.is_terminated()

    return check
