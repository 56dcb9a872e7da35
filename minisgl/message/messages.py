"""The messages of the serving pipeline, in the order a request meets them:

API server --TokenizeMsg--> tokenizer --TokenizedRequestMsg--> scheduler --TokenBatchMsg--> detokenizer
--ReplyBatchMsg--> API server. AbortMsg travels the same way as the request it aborts, so it can
never overtake it.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

from minisgl.core.params import SamplingParams

from .base import message

message(SamplingParams)  # requests carry one; registered here, so minisgl.core knows nothing of the wire


@message
class TextParams:
    """What of a request only the tokenizer (the chat template's options) and the detokenizer (stop
    strings, matched on text; skip_special_tokens) read. Kept apart from SamplingParams, so the
    scheduler, which keeps a request's params for its whole life, never holds them."""

    stop: list[str] = field(default_factory=list)
    skip_special_tokens: bool = True
    # Chat only: {"add_generation_prompt": bool, "kwargs": dict, "tools": [tool objects] | None},
    # minisgl.tokenizer.chat_template.render_chat's options.
    template: dict[str, Any] | None = None


@message
class TokenizeMsg:
    uid: int
    params: SamplingParams  # max_tokens may be None, as in TokenizedRequestMsg; checked by the API server already
    text_params: TextParams
    text: str | None = None
    input_ids: list[int] | None = None
    messages: list[dict[str, Any]] | None = None  # chat: rendered with the tokenizer's chat template


@message
class TokenizedRequestMsg:
    """A request as the scheduler takes it: the prompt's token ids and its sampling parameters."""

    uid: int
    input_ids: list[int]
    params: SamplingParams  # max_tokens may still be None: the scheduler resolves it (Scheduler.resolve)


@message
class AbortMsg:
    uid: int


@message
class ExitMsg:
    pass


@message
class DetokenizeInfoMsg:
    """Tokenizer -> detokenizer: how to turn this request's tokens into text."""

    uid: int
    stop: list[str] = field(default_factory=list)
    skip_special_tokens: bool = True
    prompt_tail: list[int] = field(default_factory=list)  # context for the first tokens' spacing


@message
class StepOutput:
    """What one scheduler step produced for one request: a new token, an end, or both."""

    uid: int
    token_id: int | None
    finish_reason: str | None = None  # stop | length | abort | error | unavailable (the server's state: 503)
    error: str | None = None
    prompt_tokens: int = 0
    cached_tokens: int = 0  # of prompt_tokens, those found in the prefix cache
    logprob: float | None = None  # when the request asked for logprobs
    top_logprobs: list[list] | None = None  # [[token id, logprob], ...], most likely first
    # With the first token, when the request asked for prompt logprobs: per prompt token
    # [token id, logprob (None for the first), [[id, logprob], ...]].
    prompt_logprobs: list[list] | None = None


@message
class TokenBatchMsg:
    outputs: list[StepOutput] = field(default_factory=list)


@message
class Reply:
    """Text for one request since its last reply."""

    uid: int
    text: str
    completion_tokens: int
    finish_reason: str | None = None
    error: str | None = None
    prompt_tokens: int = 0
    # When asked for: per token of this reply, [token text, logprob, [[text, logprob], ...]].
    logprobs: list | None = None
    cached_tokens: int = 0  # of prompt_tokens, those found in the prefix cache
    stop: str | None = None  # the stop string that ended it (finish_reason stop)
    # With the first token, when asked: per prompt token
    # [token id, its text, logprob (None for the first), [[id, text, logprob], ...]].
    prompt_logprobs: list | None = None


def merge_replies(replies: list[Reply]) -> Reply:
    """Consecutive replies of one request as one: their text and logprobs joined, the last one's
    counts and end. Whoever holds several (a detokenizer or a client stream that fell behind)
    passes one on, so catching up costs one message and one event, not one per token."""
    last = replies[-1]
    logprobs = None
    if any(r.logprobs for r in replies):
        logprobs = [entry for r in replies for entry in (r.logprobs or [])]
    return Reply(last.uid, "".join(r.text for r in replies), last.completion_tokens, last.finish_reason,
                 last.error, max(r.prompt_tokens for r in replies), logprobs,
                 max(r.cached_tokens for r in replies), last.stop,
                 next((r.prompt_logprobs for r in replies if r.prompt_logprobs is not None), None))


def merge_by_request(replies: list[Reply]) -> list[Reply]:
    """Each request's replies merged into one, in the order the requests first appear."""
    by_uid: dict[int, list[Reply]] = {}
    for r in replies:
        by_uid.setdefault(r.uid, []).append(r)
    if len(by_uid) == len(replies):
        return replies
    return [rs[0] if len(rs) == 1 else merge_replies(rs) for rs in by_uid.values()]


@message
class ReplyBatchMsg:
    replies: list[Reply] = field(default_factory=list)


@message
class SchedulerStatsMsg:
    """Scheduler -> API server (a socket of its own), a few times a second while anything changes:
    what /metrics shows from the scheduler. Counters and queue times are increments since the
    previous message, so the receiver applies each exactly once; the rest are current values."""

    pid: int  # the scheduler process; a new one (a restart) sets the gauges afresh
    num_running: int
    num_waiting: int
    used_pages: int
    num_pages: int
    prefix_queried_tokens: int = 0
    prefix_hit_tokens: int = 0
    preemptions: int = 0
    draft_tokens: int = 0  # speculative decoding: tokens drafted and verified
    accepted_draft_tokens: int = 0  # of those, accepted
    queue_times: list[float] = field(default_factory=list)  # seconds, of requests admitted since
    info: dict[str, str] | None = None  # the first message: dtype, attention backend, ... as resolved
    structured_output_down: str | None = None  # why no grammar compile worker is up now, or None


@message
class LoraUpdateMsg:
    """Load (`path` set) or unload (`path` None) a LoRA adapter while serving. It travels as a
    request does, API server -> tokenizer -> scheduler (every rank applies it in the same step), and
    its outcome comes back through the detokenizer as the request's one reply: finish_reason stop,
    or error with the reason."""

    uid: int
    name: str
    path: str | None = None
