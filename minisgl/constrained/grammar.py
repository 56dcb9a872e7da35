"""A constraint compiled with xgrammar, and the per-request matcher state (its checks before compiling
are in constraints.py)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import numpy as np
import torch

from .constraints import CONSTRAINT_FIELDS


def compile_constraint(compiler, constraint: tuple[str, str]):
    """`constraint` compiled by an xgrammar GrammarCompiler; a ValueError saying why it cannot be."""
    kind, spec = constraint
    try:
        if kind == "json_object":  # OpenAI's JSON mode: an object (any JSON value would do for xgrammar's builtin)
            return compiler.compile_json_schema('{"type": "object"}', any_whitespace=False, strict_mode=False)
        if kind == "json_schema":
            # Compact JSON: a weak model cannot wander off into unbounded whitespace.
            return compiler.compile_json_schema(spec, any_whitespace=False, strict_mode=True)
        if kind == "regex":
            return compiler.compile_regex(spec)
        if kind == "choice":
            return compiler.compile_grammar("root ::= " + " | ".join(_ebnf_literal(s) for s in json.loads(spec)))
        if kind == "grammar":
            return compiler.compile_grammar(spec)
        if kind == "tool_call_or_json":
            return compiler.compile_grammar(_call_or_answer(json.loads(spec)))
        if kind == "strict_tool_calls":
            return compiler.compile_structural_tag(spec)
    except (RuntimeError, ValueError, TypeError) as e:  # xgrammar reports bad input as RuntimeError
        reason = re.sub(r"^\[[\d:]+\] \S+:\d+: ", "", str(e).strip())  # xgrammar's time and source line
        raise ValueError(f"cannot compile the {kind} constraint ({CONSTRAINT_FIELDS[kind]}): {reason}") from None
    raise ValueError(f"unknown constraint kind {kind!r}")


def _call_or_answer(spec: dict):
    """The xgrammar Grammar of tools.call_or_answer's spec: a call between its syntax's markers,
    or the answer (both JSON as json_schema compiles it)."""
    import xgrammar as xgr

    def schema(value: dict):
        return xgr.Grammar.from_json_schema(json.dumps(value), any_whitespace=False, strict_mode=True)

    call = schema(spec["call"])
    marked = [xgr.Grammar.from_ebnf(f"root ::= {_ebnf_literal(spec[k])}") for k in ("before", "after") if spec[k]]
    if marked:
        call = xgr.Grammar.concat(marked[0], call, marked[1])
    return xgr.Grammar.union(call, schema(spec["answer"]))


def _ebnf_literal(text: str) -> str:
    """`text` as an EBNF string literal (JSON string escapes, which xgrammar's EBNF reads)."""
    return json.dumps(text, ensure_ascii=False)


def tokens_without_control_bytes(decoded_vocab: list[bytes], vocab_size: int) -> torch.Tensor:
    """A bitmask row (xgrammar's layout: token i is bit i % 32 of int32 word i // 32) of the
    tokens whose bytes hold no ASCII control character."""
    allowed = np.zeros(-(-vocab_size // 32) * 32, dtype=bool)
    for i, piece in enumerate(decoded_vocab[:vocab_size]):
        allowed[i] = not any(b < 0x20 for b in piece)
    return torch.from_numpy(np.packbits(allowed, bitorder="little").view(np.int32).copy())


@dataclass(frozen=True)
class Grammar:
    """A compiled constraint, shared by every request that asks for it."""

    compiled: object  # xgrammar.CompiledGrammar
    also_allowed: torch.Tensor | None = None  # a bitmask row ANDed into every mask, or None


@dataclass
class GrammarState:
    """One request's place in its grammar."""

    matcher: object  # xgrammar.GrammarMatcher
    also_allowed: torch.Tensor | None = None

    @classmethod
    def start(cls, grammar: Grammar) -> GrammarState:
        import xgrammar as xgr

        return cls(xgr.GrammarMatcher(grammar.compiled), grammar.also_allowed)

    def fill_mask(self, bitmask: torch.Tensor, row: int) -> None:
        self.matcher.fill_next_token_bitmask(bitmask, row)
        if self.also_allowed is not None:
            bitmask[row] &= self.also_allowed

    def fill_masks_along(self, bitmask: torch.Tensor, row: int, drafts: list[int]) -> None:
        """Rows row .. row + len(drafts) of `bitmask`: the masks after each prefix of `drafts` (a
        speculative verify step's positions), the state left as it was. Past a draft the grammar
        refuses the rows repeat the last mask: that draft is masked out where it is verified, so
        nothing after it is kept."""
        self.fill_mask(bitmask, row)
        taken = 0
        for i, token in enumerate(drafts, 1):
            if taken == i - 1 and not self.matcher.is_terminated() and self.matcher.accept_token(token):
                taken += 1
                self.fill_mask(bitmask, row + i)
            else:
                bitmask[row + i] = bitmask[row + i - 1]
        if taken:
            self.matcher.rollback(taken)

    def accept(self, token: int) -> bool:
        """Follow a sampled token; False if the grammar does not allow it: for a token sampled
        under this request's mask, only when the mask allowed nothing (a grammar no token of the
        vocabulary can spell, e.g. JSON with the benchmark models' synthetic tokenizers)."""
        return self.matcher.accept_token(token)

    @property
    def finished(self) -> bool:
        """The grammar is complete and its end (a stop token) was accepted."""
        return self.matcher.is_terminated()


@dataclass(frozen=True)
class BatchMasks:
    """The grammar masks of a batch's constrained rows only: `rows` (their indices in the batch) and
    one bitmask row each, int32 [len(rows), ceil(vocab / 32)] on the host. A batch with a few
    constrained requests among many fills, copies and applies just theirs (a whole-batch mask is
    ~19 KB a row at a 152K vocabulary: 4.8 MB a step at 256 rows)."""

    rows: list[int]
    bitmask: torch.Tensor

    @classmethod
    def fill(cls, constrained: list[tuple[int, GrammarState]], vocab_size: int,
             drafts: list[list[int]] | None = None) -> BatchMasks:
        """`drafts`: per constrained row, the speculative drafts verified after it (their rows
        follow it), each row masked by the grammar after the drafts before it."""
        import xgrammar as xgr

        drafts = drafts or [[] for _ in constrained]
        bitmask = xgr.allocate_token_bitmask(len(constrained) + sum(map(len, drafts)), vocab_size)
        j = 0
        for (_, state), d in zip(constrained, drafts):
            state.fill_masks_along(bitmask, j, d)
            j += 1 + len(d)
        return cls([row + i for (row, _), d in zip(constrained, drafts) for i in range(1 + len(d))], bitmask)

    def apply(self, logits: torch.Tensor) -> None:
        """Disallowed tokens of the constrained rows of `logits` [batch, vocab] become -inf, in place."""
        import xgrammar as xgr

        mask = self.bitmask.to(logits.device, non_blocking=True)
        if self.rows == list(range(logits.shape[0])):
            xgr.apply_token_bitmask_inplace(logits, mask)
            return
        rows = torch.tensor(self.rows, dtype=torch.int64).to(logits.device, non_blocking=True)
        sub = logits.index_select(0, rows)
        xgr.apply_token_bitmask_inplace(sub, mask)
        logits.index_copy_(0, rows, sub)
