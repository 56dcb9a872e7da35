"""The acceptance rule keeps the target model's distribution: tokens generated through drafts and
verification are distributed as tokens sampled from the target alone (a chi-square test over the
joint distribution of three tokens, drafted two at a time, so draws cross verify steps), for the
engine's rule (sample every position, keep drafts while they match) with a deterministic drafter,
and for the standard rule with one-hot and with sampled drafts. The same test fails for rules
broken in the ways a rule breaks: accepting drafts unchecked, resampling from the target instead of
the residual, leaving the drafter's probabilities out of the residual."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
import torch
from scipy.stats import chisquare

from minisgl.engine import BatchSamplingArgs, Sampler
from minisgl.speculative import accepted_prefix, rejection_sample

VOCAB, K, TOKENS, TRIALS = 4, 2, 3, 12_000
POSITIONS = TOKENS + K  # target distributions exist for every position a draft may reach


@pytest.fixture(scope="module")
def target():
    g = torch.Generator().manual_seed(3)
    return torch.softmax(torch.randn(POSITIONS, VOCAB, generator=g) * 1.2, dim=-1)


@pytest.fixture(scope="module")
def drafter():
    """A drafter's distribution per position (the sampled drafts'), unlike the target's."""
    g = torch.Generator().manual_seed(4)
    return torch.softmax(torch.randn(POSITIONS, VOCAB, generator=g) * 1.2, dim=-1)


# Rules: (p [n, K + 1, V], q [n, K, V] or None for one-hot drafts, drafts [n, K], generator) -> (tokens, accepted).

def engine_rule(p, q, drafts, g):
    """What the scheduler and engine do: every position sampled as decoding samples it (the
    Sampler, temperature 1), drafts kept while they equal the sampled token."""
    torch.manual_seed(int(torch.randint(0, 2**31 - 1, (), generator=g)))
    n = drafts.shape[0]
    args = BatchSamplingArgs(temperatures=torch.ones(n * (K + 1)))
    targets = Sampler().sample(p.log().reshape(n * (K + 1), VOCAB), args).view(n, K + 1)
    accepted = torch.tensor([accepted_prefix(d, t) for d, t in zip(drafts.tolist(), targets.tolist())])
    return targets, accepted


def one_hot(drafts):
    return torch.nn.functional.one_hot(drafts, VOCAB).float()


def standard_rule(p, q, drafts, g):
    return rejection_sample(p, one_hot(drafts) if q is None else q, drafts, g)


def accept_unchecked(p, q, drafts, g):
    extra = torch.multinomial(p[:, K], 1, generator=g)
    return torch.cat([drafts, extra], dim=1), torch.full((drafts.shape[0],), K)


def resample_from_target(p, q, drafts, g):
    """Right acceptance, but the token after a rejection drawn from p, not the residual."""
    _, accepted = standard_rule(p, q, drafts, g)
    tokens = torch.cat([drafts, drafts[:, :1]], dim=1)
    rows = torch.arange(len(drafts))
    tokens[rows, accepted] = torch.multinomial(p[rows, accepted], 1, generator=g).squeeze(1)
    return tokens, accepted


def residual_without_drafter(p, q, drafts, g):
    """Right acceptance (min(1, p/q)), but after a rejection the draft alone is taken out of p (the
    one-hot residual) where q's whole mass should be."""
    _, accepted = rejection_sample(p, q, drafts, g)
    rows = torch.arange(len(drafts))
    at = accepted.clamp(max=K - 1)
    residual = p[rows, accepted] * (1 - one_hot(drafts)[rows, at] * (accepted < K).unsqueeze(1))
    tokens = torch.cat([drafts, drafts[:, :1]], dim=1)
    tokens[rows, accepted] = torch.multinomial(residual, 1, generator=g).squeeze(1)
    return tokens, accepted


def generate(rule, target, drafter, sampled_drafts, g):
    """TRIALS sequences of TOKENS tokens, K drafts a step: position-dependent, context-free target."""
    out = [[] for _ in range(TRIALS)]
    while True:
        active = [i for i, o in enumerate(out) if len(o) < TOKENS]
        if not active:
            return out
        pos = torch.tensor([len(out[i]) for i in active])
        window = pos.unsqueeze(1) + torch.arange(K + 1)
        p = target[window]
        q = drafter[window[:, :K]]
        if sampled_drafts:
            drafts = torch.multinomial(q.reshape(-1, VOCAB), 1, generator=g).view(len(active), K)
        else:  # a deterministic drafter: the drafter's most likely token at each position
            drafts, q = q.argmax(dim=-1), None
        tokens, accepted = rule(p, q, drafts, g)
        for i, row, n in zip(active, tokens.tolist(), accepted.tolist()):
            out[i] += row[: n + 1]


def p_value(rule, target, drafter, sampled_drafts) -> float:
    g = torch.Generator().manual_seed(0)
    seen = Counter(tuple(o[:TOKENS]) for o in generate(rule, target, drafter, sampled_drafts, g))
    cells = list(itertools.product(range(VOCAB), repeat=TOKENS))
    expected = [TRIALS * float(torch.prod(target[torch.arange(TOKENS), torch.tensor(c)])) for c in cells]
    return chisquare([seen[c] for c in cells], expected).pvalue


@pytest.mark.parametrize("rule,sampled_drafts", [
    (engine_rule, False), (standard_rule, False), (standard_rule, True),
], ids=["engine rule, deterministic drafts", "standard rule, one-hot drafts", "standard rule, sampled drafts"])
def test_kept_tokens_follow_the_target_distribution(rule, sampled_drafts, target, drafter):
    assert p_value(rule, target, drafter, sampled_drafts) > 1e-3


@pytest.mark.parametrize("rule,sampled_drafts", [
    (accept_unchecked, False), (resample_from_target, False), (residual_without_drafter, True),
], ids=["drafts accepted unchecked", "resampled from the target, not the residual", "residual of the draft, not of q"])
def test_the_same_test_fails_a_broken_rule(rule, sampled_drafts, target, drafter):
    assert p_value(rule, target, drafter, sampled_drafts) < 1e-6


def test_greedy_keeps_the_prefix_that_agrees():
    assert accepted_prefix([5, 6, 7], [5, 6, 9, 1]) == 2
    assert accepted_prefix([5, 6, 7], [5, 6, 7, 1]) == 3
    assert accepted_prefix([5, 6, 7], [4, 6, 7, 1]) == 0
    assert accepted_prefix([], [4]) == 0
