"""matching_problem: a grammar whose matcher costs more with every token (an ambiguous one) is
refused when it compiles; grammars and regexes whose cost per token stays flat pass."""

from __future__ import annotations

import pytest
import xgrammar as xgr

from minisgl.constrained.grammar import compile_constraint
from minisgl.constrained.matching_cost import matching_problem


@pytest.fixture(scope="module")
def tokenizer_info(tiny_model_dir):
    """The test models' tokenizer, as the server's compile workers read it (costs grow with the
    vocabulary: a mask is filled over all of it)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir("Qwen3ForCausalLM"))
    return xgr.TokenizerInfo.from_huggingface(tok, vocab_size=len(tok), stop_token_ids=[tok.eos_token_id])


@pytest.fixture(scope="module")
def problem(tokenizer_info):
    compiler = xgr.GrammarCompiler(tokenizer_info, max_threads=1)
    return lambda constraint: matching_problem(compile_constraint(compiler, constraint), tokenizer_info.vocab_size,
                                               tokenizer_info.stop_token_ids)


@pytest.mark.parametrize("grammar", ['root ::= e\ne ::= e e | e | [a-z] | ""', "root ::= e\ne ::= e e | [a-z]"])
def test_an_ambiguous_grammar_is_refused_saying_why(problem, grammar):
    why = problem(("grammar", grammar))
    assert why and "ambiguous" in why and "more with every token" in why, why


@pytest.mark.parametrize("constraint", [
    ("grammar", 'root ::= e\ne ::= [a-z] e | ""'),
    ("grammar", "root ::= [a-z]*"),
    ("grammar", 'root ::= "{" ws ( pair ( "," ws pair )* )? "}"\npair ::= [a-z]+ ":" ws [0-9]+\nws ::= [ ]*'),
    ("regex", "[a-z]{1,12000}[0-9]{1,120}"),
    ("regex", "(a|b|ab)*c"),
    ("regex", "[0-9]{1,3}"),  # ends within the walk
])
def test_grammars_of_flat_cost_pass(problem, constraint):
    assert problem(constraint) is None
