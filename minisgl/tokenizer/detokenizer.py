"""The detokenizer worker's state: every live request's incremental detokenizer, fed from the
scheduler's token batches (`on_output`) and the tokenizer's per-request info (`on_info`).

Outputs may overtake their request's DetokenizeInfoMsg (they travel by different routes); they
wait in `early` until it comes. A request whose detokenization fails ends with an error and the
scheduler is told to stop generating for it; its later outputs are dropped.
"""

from __future__ import annotations

from collections.abc import Callable

from minisgl.message import AbortMsg, DetokenizeInfoMsg, Reply, StepOutput
from minisgl.utils.logger import get_logger

from .incremental import IncrementalDetokenizer

logger = get_logger(__name__)


class Detokenizer:
    def __init__(self, backend, abort: Callable[[AbortMsg], None]):
        self.backend = backend  # a tokenizers.Tokenizer
        self.abort = abort  # tells the scheduler to stop a request
        self.states: dict[int, IncrementalDetokenizer] = {}
        self.counts: dict[int, int] = {}
        self.early: dict[int, list[StepOutput]] = {}
        self.failed: set[int] = set()

    def on_info(self, msg: DetokenizeInfoMsg, replies: list[Reply]) -> None:
        self.states[msg.uid] = IncrementalDetokenizer(self.backend, msg.stop, msg.skip_special_tokens, msg.prompt_tail)
        self.counts[msg.uid] = 0
        for out in self.early.pop(msg.uid, []):
            self.on_output(out, replies)

    def on_output(self, out: StepOutput, replies: list[Reply]) -> None:
        """One request's failure must not end the others': it ends with an error."""
        try:
            self._handle(out, replies)
        except Exception as e:
            uid = out.uid
            logger.exception("detokenizing request %d failed", uid)
            self.states.pop(uid, None)
            self.counts.pop(uid, None)
            if out.finish_reason is None:
                self.failed.add(uid)
                self.abort(AbortMsg(uid))
            replies.append(Reply(uid, "", 0, "error", f"detokenization failed: {e}"))

    def _piece(self, token_id: int) -> str:  # one token's own text, as logprobs name it
        return self.backend.decode([token_id], skip_special_tokens=False)

    def _handle(self, out: StepOutput, replies: list[Reply]) -> None:
        uid, reason = out.uid, out.finish_reason
        if uid in self.failed:
            if reason:
                self.failed.discard(uid)
            return
        state = self.states.get(uid)
        if state is None:
            self.early.setdefault(uid, []).append(out)
            return
        if state.stopped:  # a stop string already ended it for the client
            if reason:
                del self.states[uid], self.counts[uid]
            return
        text, logprobs = "", None
        if out.token_id is not None:
            self.counts[uid] += 1
            text = state.add(out.token_id)
            if out.logprob is not None:
                logprobs = [[self._piece(out.token_id), out.logprob,
                             [[self._piece(i), lp] for i, lp in out.top_logprobs]]]
        if state.stopped:
            if reason is None:
                self.abort(AbortMsg(uid))  # the scheduler is still generating: stop it
            reason = "stop"
        if reason:
            text += state.finish()
        prompt_logprobs = None
        if out.prompt_logprobs is not None:
            prompt_logprobs = [[i, self._piece(i), lp, [[t, self._piece(t), v] for t, v in top]]
                               for i, lp, top in out.prompt_logprobs]
        replies.append(Reply(uid, text, self.counts[uid], reason, out.error, out.prompt_tokens, logprobs,
                             out.cached_tokens, state.matched_stop, prompt_logprobs))
        if reason and not (state.stopped and out.finish_reason is None):
            del self.states[uid], self.counts[uid]
