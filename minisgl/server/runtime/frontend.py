"""The API process's side of the pipeline: send requests to the tokenizer, route replies back
to the coroutine waiting for them."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator

from minisgl.core.params import SamplingParams
from minisgl.message import AbortMsg, LoraUpdateMsg, Reply, ReplyBatchMsg, TextParams, TokenizeMsg, merge_replies
from minisgl.message.sockets import AsyncPullSocket, AsyncPushSocket

# The finish reason of a request that the server itself ended before the pipeline did (the drain
# deadline passed, a worker died): the client gets a 503 or a stream error event, never a 4xx.
UNAVAILABLE = "unavailable"


class ReplyStream:
    """One request's replies as they arrive. The reader only appends and wakes the consumer if it
    waits; the consumer takes everything that arrived meanwhile as one merged reply, so a stream
    that falls behind catches up in one step instead of one event per token."""

    __slots__ = ("pending", "waiter")

    def __init__(self) -> None:
        self.pending: list[Reply] = []
        self.waiter: asyncio.Future | None = None

    def push(self, reply: Reply) -> None:
        self.pending.append(reply)
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    async def next(self) -> Reply:
        while not self.pending:
            self.waiter = asyncio.get_running_loop().create_future()
            try:
                await self.waiter
            finally:
                self.waiter = None
        replies, self.pending = self.pending, []
        return replies[0] if len(replies) == 1 else merge_replies(replies)


class FrontendClient:
    def __init__(self, addrs: dict[str, str]):
        from minisgl.tokenizer.routing import tokenizer_addresses

        # A request and its abort go to the same tokenizer (uid % workers), so the abort never overtakes it.
        self.to_tokenizers = [AsyncPushSocket(addr) for addr in tokenizer_addresses(addrs)]
        self.inbox = AsyncPullSocket(addrs["api"])
        self.streams: dict[int, ReplyStream] = {}
        self.unstarted = 0  # streams created but not yet iterated (not in self.streams yet)
        self.uncounted = 0  # streams of the server's own probes: no client's slot under the pending limit
        self._uids = itertools.count(1)
        self._reader: asyncio.Task | None = None
        self.closed: str | None = None  # why every request is ended at once from now on (end_all)
        self._upstream_gone = False  # a worker died: aborts would wait on a dead socket

    @property
    def in_flight(self) -> int:
        """Requests between their creation and their end (a drain waits for them)."""
        return len(self.streams) + self.unstarted

    @property
    def pending(self) -> int:
        """The requests in flight that the pending-request limit counts: the clients'."""
        return self.in_flight - self.uncounted

    def created(self, n: int) -> None:
        """Count `n` streams created but not started yet (negative: that many started, or will
        never start). Until a stream starts, it is not in self.streams."""
        self.unstarted += n

    def start(self) -> None:
        if self._reader is None:
            self._reader = asyncio.get_running_loop().create_task(self._read_replies())

    async def _read_replies(self) -> None:
        streams = self.streams
        while True:
            # Everything queued now, then one yield: awaiting a socket that always has a message
            # ready never suspends, and would starve the streams that send the replies out.
            for msg in await self.inbox.recv_all():
                if isinstance(msg, ReplyBatchMsg):
                    for reply in msg.replies:
                        stream = streams.get(reply.uid)
                        if stream is not None:  # replies for a request given up on are dropped
                            stream.push(reply)
            await asyncio.sleep(0)

    def end_all(self, reason: str, upstream_alive: bool = True) -> int:
        """End every request in flight now, and any started later, each with an UNAVAILABLE reply
        saying `reason`; with the pipeline alive, each is also aborted there (its KV pages freed).
        Returns how many were in flight."""
        self.closed = reason
        self._upstream_gone = self._upstream_gone or not upstream_alive
        for uid, stream in self.streams.items():
            stream.push(Reply(uid, "", 0, UNAVAILABLE, reason))
        return len(self.streams)

    async def generate(self, params: SamplingParams, text: str | None = None, input_ids: list[int] | None = None,
                       messages: list[dict] | None = None, text_params: TextParams | None = None,
                       counted: bool = True) -> AsyncIterator[Reply]:
        """Replies for one request until it finishes (several that arrived together come as one).
        Leaving early (cancel, disconnect, an exception in the consumer) aborts the request, so
        its KV pages are freed. `text_params`: stop strings, skip_special_tokens, the chat template's
        options (default: none, True, none). `counted`: False for the server's own probe, which
        the pending-request limit does not count."""
        self.start()
        uid = next(self._uids)
        stream = self.streams[uid] = ReplyStream()
        self.uncounted += not counted
        to_tokenizer = self.to_tokenizers[uid % len(self.to_tokenizers)]
        finished = False  # the pipeline ended it: nothing to abort
        try:
            if self.closed is not None:  # created before end_all, started after it
                finished = True
                yield Reply(uid, "", 0, UNAVAILABLE, self.closed)
                return
            msg = TokenizeMsg(uid, params, text_params or TextParams(), text, input_ids, messages)
            try:
                await to_tokenizer.send(msg)
            except (UnicodeEncodeError, ValueError, TypeError, OverflowError) as e:  # e.g. a lone surrogate
                finished = True
                yield Reply(uid, "", 0, "error", f"the request cannot be encoded: {e}")
                return
            while True:
                reply = await stream.next()
                finished = reply.finish_reason not in (None, UNAVAILABLE)
                yield reply
                if reply.finish_reason is not None:
                    return
        finally:
            del self.streams[uid]
            self.uncounted -= not counted
            if not finished and not self._upstream_gone:
                await asyncio.shield(to_tokenizer.send(AbortMsg(uid)))

    async def update_lora(self, name: str, path: str | None) -> Reply:
        """Load (`path`) or unload (None) a LoRA adapter in the scheduler; its one reply says how it went
        (finish_reason stop, or error with the reason)."""
        self.start()
        uid = next(self._uids)
        stream = self.streams[uid] = ReplyStream()
        try:
            if self.closed is not None:
                return Reply(uid, "", 0, UNAVAILABLE, self.closed)
            await self.to_tokenizers[uid % len(self.to_tokenizers)].send(LoraUpdateMsg(uid, name, path))
            return await stream.next()
        finally:
            del self.streams[uid]
