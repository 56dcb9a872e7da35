"""Compiling constraints with xgrammar, and the per-request matcher state."""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch

# json_schema: no property or item beyond the schema's unless it allows them (xgrammar's strict_mode,
# vLLM's default), whether or not the request says `strict`: a weak model free to add keys adds them
# until max_tokens cuts the JSON.
CONSTRAINT_KINDS = ("json_object", "json_schema", "regex", "choice", "grammar")


def constraint_problem(constraint: tuple[str, str] | None) -> str | None:
    """Why a constraint is malformed before compiling it, or None."""
    if constraint is None:
        return None
    if len(constraint) != 2 or constraint[0] not in CONSTRAINT_KINDS:
        return f"unknown constraint {constraint!r}"
    kind, spec = constraint
    if kind.startswith("json_schema") or kind == "choice":
        try:
            value = json.loads(spec)
        except ValueError as e:
            return f"the JSON schema is not valid JSON: {e}"
        if kind == "choice" and not (isinstance(value, list) and value and all(isinstance(c, str) for c in value)):
            return "guided_choice must be a non-empty list of strings"
        if kind != "choice" and not isinstance(value, dict):
            return "a JSON schema must be an object"
    return None


def _ebnf_literal(text: str) -> str:
    """`text` as an EBNF string literal (JSON string escapes, which xgrammar's EBNF reads)."""
    return json.dumps(text, ensure_ascii=False)


class GrammarCompilerPool:
    """Compiles constraints on one background thread, caching the results (a repeated schema, the
    common case for an application, compiles once). The tokenizer info is built on that thread
    too, at the first constrained request, so servers that never see one never pay for it."""

    CACHE_SIZE = 256  # compiled grammars kept, least recently used dropped first

    def __init__(self, model_path: str, vocab_size: int, stop_token_ids: list[int]):
        self.model_path, self.vocab_size, self.stop_token_ids = model_path, vocab_size, stop_token_ids
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="grammar")
        self._compiler = None
        self._no_control: torch.Tensor | None = None
        self._cache: OrderedDict[tuple[str, str], Future] = OrderedDict()
        self._lock = threading.Lock()

    def submit(self, constraint: tuple[str, str]) -> Future:
        """A future of the Grammar to start requests from; it raises ValueError when the
        constraint cannot be compiled (an invalid schema or regex)."""
        key = (constraint[0], constraint[1])
        with self._lock:
            fut = self._cache.get(key)
            if fut is not None:
                self._cache.move_to_end(key)
                return fut
            fut = self._pool.submit(self._compile, key)
            self._cache[key] = fut
            while len(self._cache) > self.CACHE_SIZE:
                self._cache.popitem(last=False)
        return fut

    def _compile(self, constraint: tuple[str, str]) -> Grammar:
        compiled = self._compile_xgrammar(constraint)
        # xgrammar's JSON strings admit raw control characters, which JSON (RFC 8259) and
        # json.loads refuse; compact JSON never needs one outside a string, so they are masked.
        return Grammar(compiled, self._no_control if constraint[0].startswith("json") else None)

    def _compile_xgrammar(self, constraint: tuple[str, str]):
        import xgrammar as xgr

        if self._compiler is None:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(self.model_path)
            info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=self.vocab_size,
                                                      stop_token_ids=self.stop_token_ids)
            self._compiler = xgr.GrammarCompiler(info, max_threads=1)
            self._no_control = _tokens_without_control_bytes(info.decoded_vocab, self.vocab_size)
        kind, spec = constraint
        c = self._compiler
        try:
            if kind == "json_object":  # OpenAI's JSON mode: an object (any JSON value would do for xgrammar's builtin)
                return c.compile_json_schema('{"type": "object"}', any_whitespace=False, strict_mode=False)
            if kind == "json_schema":
                # Compact JSON: a weak model cannot wander off into unbounded whitespace.
                return c.compile_json_schema(spec, any_whitespace=False, strict_mode=True)
            if kind == "regex":
                return c.compile_regex(spec)
            if kind == "choice":
                return c.compile_grammar("root ::= " + " | ".join(_ebnf_literal(s) for s in json.loads(spec)))
            if kind == "grammar":
                return c.compile_grammar(spec)
        except (RuntimeError, ValueError, TypeError) as e:  # xgrammar reports bad input as RuntimeError
            reason = re.sub(r"^\[[\d:]+\] \S+:\d+: ", "", str(e).strip())  # xgrammar's time and source line
            raise ValueError(f"cannot compile the {kind.removesuffix('_loose')} constraint: {reason}") from None
        raise ValueError(f"unknown constraint kind {kind!r}")

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _tokens_without_control_bytes(decoded_vocab: list[bytes], vocab_size: int) -> torch.Tensor:
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
    def fill(cls, constrained: list[tuple[int, GrammarState]], vocab_size: int) -> BatchMasks:
        import xgrammar as xgr

        bitmask = xgr.allocate_token_bitmask(len(constrained), vocab_size)
        for j, (_, state) in enumerate(constrained):
            state.fill_mask(bitmask, j)
        return cls([row for row, _ in constrained], bitmask)

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
