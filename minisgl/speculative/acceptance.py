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
                     generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The rule for drafters with a distribution, batched: p [n, k + 1, vocab] the target's
    probabilities at the k verified positions and the one after, q [n, k, vocab] the drafter's,
    drafts [n, k] the proposed tokens (drawn from q). Returns (tokens [n, k + 1], accepted [n]):
    request i keeps tokens[i, : accepted[i] + 1], its accepted drafts and one token from the
    residual at the first rejection (from p[k] when there is none)."""
    n, k = drafts.shape
    rows = torch.arange(n, device=p.device)
    u = torch.rand(n, k, generator=generator, device=p.device)
    p_d = p[:, :k].gather(2, drafts.unsqueeze(2)).squeeze(2)
    q_d = q.gather(2, drafts.unsqueeze(2)).squeeze(2)
    accepted = (u * q_d < p_d).int().cumprod(dim=1).sum(dim=1)  # u < min(1, p/q), up to the first rejection
    p_at = p[rows, accepted]
    q_at = torch.where((accepted < k).unsqueeze(1), q[rows, accepted.clamp(max=k - 1)], 0.0)
    residual = (p_at - q_at).clamp(min=0)
    # p == q there: nothing to correct, a draw from p is right (multinomial normalises either).
    residual = torch.where(residual.sum(dim=1, keepdim=True) > 0, residual, p_at)
    tokens = torch.cat([drafts, drafts.new_zeros(n, 1)], dim=1)
    tokens[rows, accepted] = torch.multinomial(residual, 1, generator=generator).squeeze(1)
    return tokens, accepted
