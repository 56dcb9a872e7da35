"""When speculation pays, per request and per batch.

A verify step costs more than a decode step (k + 1 tokens a request, no overlap with the next
step's preparation), and it pays only as far as drafts are accepted. So each request drafts k
tokens where k follows its acceptance: each drafted token's chance of being kept once those before
it were, estimated as kept / (kept + rejections) over recent verify steps (moving averages of
both). All of `max_k` from one half up, proportionally fewer below: a few more drafts cost a
small batch little, and drafts each right 4 times in 5 keep 2.4 of 4 on average, so the share
of drafted tokens kept (0.59 there) would misjudge them. A request whose acceptance falls below
`min_acceptance`, or whose drafter finds nothing, stops drafting for a while, twice as long each
time in a row (up to MAX_BACKOFF steps), then tries one draft again. Above `max_batch` running
requests nobody drafts: a large decode batch is bound by compute, not by reading the weights, and
verifying k + 1 tokens a request costs nearly k + 1 times as much.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_BACKOFF = 64  # steps
EMA_WEIGHT = 0.3  # of the latest verify step in a request's acceptance


@dataclass
class RequestSpeculation:
    k: int
    kept: float = 0.6  # moving averages of a verify step's kept drafts and of its trials (kept + 1 if one was
    trials: float = 1.0  # rejected): a start that drafts all k, and gives up after two misses
    proposed: int = 0
    accepted: int = 0
    misses: int = 0  # bad steps in a row (no draft, acceptance below the floor)
    resume_at: int = 0  # the policy step from which it drafts again

    @property
    def rate(self) -> float:
        """A drafted token's estimated chance of being kept, given those before it were."""
        return self.kept / self.trials


class SpeculationPolicy:
    def __init__(self, max_k: int, max_batch: int, min_acceptance: float):
        self.max_k, self.max_batch, self.min_acceptance = max_k, max_batch, min_acceptance
        self.reqs: dict[int, RequestSpeculation] = {}
        self.steps = 0

    def _state(self, uid: int) -> RequestSpeculation:
        if uid not in self.reqs:
            self.reqs[uid] = RequestSpeculation(self.max_k)
        return self.reqs[uid]

    def on(self, batch_size: int) -> bool:
        return batch_size <= self.max_batch

    def k_for(self, uid: int) -> int:
        """Tokens request `uid` drafts this step (0: none)."""
        state = self._state(uid)
        return state.k if self.steps >= state.resume_at else 0

    def tick(self) -> None:
        """One decode or verify step went by."""
        self.steps += 1

    def drafted(self, uid: int, n: int) -> None:
        """Request `uid`'s drafter proposed `n` tokens where it was asked for some."""
        if n == 0:
            self._back_off(self._state(uid))

    def verified(self, uid: int, proposed: int, accepted: int) -> None:
        state = self._state(uid)
        state.proposed += proposed
        state.accepted += accepted
        state.kept += EMA_WEIGHT * (accepted - state.kept)
        state.trials += EMA_WEIGHT * (accepted + (accepted < proposed) - state.trials)
        rate = state.rate
        state.k = max(1, min(self.max_k, round(2 * rate * self.max_k)))
        if rate < self.min_acceptance:
            self._back_off(state)
        else:
            state.misses = 0

    def _back_off(self, state: RequestSpeculation) -> None:
        state.misses += 1
        state.resume_at = self.steps + min(MAX_BACKOFF, 1 << state.misses)

    def forget(self, uid: int) -> None:
        self.reqs.pop(uid, None)
