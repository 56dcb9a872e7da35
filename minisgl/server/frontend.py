"""The API process's side of the pipeline: send requests to the tokenizer, route replies back
to the coroutine waiting for them."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from typing import Any

from minisgl.message import AbortMsg, Reply, ReplyBatchMsg, TokenizeMsg
from minisgl.utils.zmq import AsyncPullSocket, AsyncPushSocket


class FrontendClient:
    def __init__(self, addrs: dict[str, str]):
        self.to_tokenizer = AsyncPushSocket(addrs["tokenizer"])
        self.inbox = AsyncPullSocket(addrs["api"])
        self.queues: dict[int, asyncio.Queue[Reply]] = {}
        self.unstarted = 0  # streams created but not yet iterated (their queue is not registered yet)
        self._uids = itertools.count(1)
        self._reader: asyncio.Task | None = None

    @property
    def in_flight(self) -> int:
        """Requests between their creation and their end: what the pending-request limit counts."""
        return len(self.queues) + self.unstarted

    def created(self, n: int) -> None:
        """Count `n` streams created but not started yet (negative: that many started, or will
        never start). Until a stream starts, its queue is not registered."""
        self.unstarted += n

    def start(self) -> None:
        if self._reader is None:
            self._reader = asyncio.get_running_loop().create_task(self._read_replies())

    async def _read_replies(self) -> None:
        while True:
            msg = await self.inbox.recv()
            if isinstance(msg, ReplyBatchMsg):
                for r in msg.replies:
                    queue = self.queues.get(r["uid"])
                    if queue is not None:  # replies for a request given up on are dropped
                        queue.put_nowait(Reply(**r))

    async def generate(self, params: dict[str, Any], text: str | None = None, input_ids: list[int] | None = None,
                       messages: list[dict] | None = None) -> AsyncIterator[Reply]:
        """Replies for one request until it finishes. Leaving early (cancel, disconnect, an
        exception in the consumer) aborts the request, so its KV pages are freed."""
        self.start()
        uid = next(self._uids)
        queue: asyncio.Queue[Reply] = asyncio.Queue()
        self.queues[uid] = queue
        finished = False
        try:
            try:
                await self.to_tokenizer.send(TokenizeMsg(uid, params, text, input_ids, messages))
            except (UnicodeEncodeError, ValueError, TypeError, OverflowError) as e:  # e.g. a lone surrogate
                finished = True
                yield Reply(uid, "", 0, "error", f"the request cannot be encoded: {e}")
                return
            while not finished:
                reply = await queue.get()
                finished = reply.finish_reason is not None
                yield reply
        finally:
            del self.queues[uid]
            if not finished:
                await asyncio.shield(self.to_tokenizer.send(AbortMsg(uid)))
