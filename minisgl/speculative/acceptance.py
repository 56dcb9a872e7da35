"""Which drafted tokens are kept.

Greedy requests keep the longest prefix of the drafts equal to the target's argmax at each position,
then the target's own token: exactly the tokens decoding without speculation would give.

Sampled requests follow the rejection-sampling rule (Leviathan et al., Chen et al.): draft d_i,
proposed with probability q_i(d_i), is accepted with probability min(1, p_i(d_i) / q_i(d_i)); at the
first rejection the token is drawn from the residual max(0, p_i - q_i), normalised; when all k are
accepted one more is drawn from p_k. The output then follows the target distribution p whatever q
is (`rejection_sample`, for drafters with a distribution).

A deterministic drafter (n-gram lookup) has a one-hot q, where the rule reads: accept d with
probability p(d), else draw from p without d, renormalised. Drawing t ~ p and keeping d while t == d
is that rule exactly (P(t = d) = p(d), and t given t != d is the residual), and it is what the engine
does (`accepted_prefix` on the tokens sampled at every verified position): each position's draw
uses the request's own noise for that position, so a seeded request is reproducible, and it draws
the very token decoding without speculation would have drawn.
"""

from __future__ import annotations

import torch


def accepted_prefix(drafts: list[int], targets: list[int]) -> int:
    """How many drafts are kept: the length of the prefix where drafts[i] == targets[i] (targets
    has one more entry, the token after the last draft)."""
    n = 0
    for d, t in zip(drafts, targets):
        if d != t:
            break
        n += 1
    return n


def rejection_sample(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor,
                     generator: torch.Generator | None = None) -> list[int]:
    """The tokens kept for one request: p [k + 1, vocab] target probabilities at the k verified
    positions and the one after, q [k, vocab] the drafter's, drafts [k] the proposed tokens (drawn
    from q). Returns the accepted drafts and one token from the residual (or from p[k])."""
    k = drafts.numel()
    u = torch.rand(k, generator=generator, device=p.device)
    rows = torch.arange(k, device=p.device)
    ratio = p[rows, drafts] / q[rows, drafts]
    for i in range(k):
        if u[i] >= ratio[i]:  # min(1, ratio) without the min: u < 1 always
            residual = (p[i] - q[i]).clamp(min=0)
            if residual.sum() <= 0:  # p == q: nothing to correct, any draw from p is right
                residual = p[i]
            token = torch.multinomial(residual / residual.sum(), 1, generator=generator)
            return drafts[:i].tolist() + [int(token)]
    return drafts.tolist() + [int(torch.multinomial(p[k], 1, generator=generator))]
