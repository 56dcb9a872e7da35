"""ZMQ PUSH/PULL sockets that carry minisgl messages (msgpack-encoded dataclasses)."""

from __future__ import annotations

from typing import Any

import zmq
import zmq.asyncio

from .base import decode, encode


class PushSocket:
    def __init__(self, addr: str, bind: bool = False, ctx: zmq.Context | None = None):
        self.sock = (ctx or zmq.Context.instance()).socket(zmq.PUSH)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind(addr) if bind else self.sock.connect(addr)

    def send(self, msg: Any) -> None:
        self.sock.send(encode(msg))

    def close(self) -> None:
        self.sock.close()


class PullSocket:
    def __init__(self, addr: str, bind: bool = True, ctx: zmq.Context | None = None):
        self.sock = (ctx or zmq.Context.instance()).socket(zmq.PULL)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind(addr) if bind else self.sock.connect(addr)

    def recv(self, timeout_ms: int | None = None) -> Any | None:
        """One message, waiting up to timeout_ms (None: forever); None on timeout."""
        if timeout_ms is not None and not self.sock.poll(timeout_ms):
            return None
        return decode(self.sock.recv())

    def recv_all(self, timeout_ms: int) -> list[Any]:
        """Everything queued now, waiting up to timeout_ms for the first."""
        msgs = []
        first = self.recv(timeout_ms)
        while first is not None:
            msgs.append(first)
            first = self.recv(0)
        return msgs

    def close(self) -> None:
        self.sock.close()


class AsyncPushSocket:
    def __init__(self, addr: str, bind: bool = False):
        self.sock = zmq.asyncio.Context.instance().socket(zmq.PUSH)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind(addr) if bind else self.sock.connect(addr)

    async def send(self, msg: Any) -> None:
        await self.sock.send(encode(msg))


class AsyncPullSocket:
    def __init__(self, addr: str, bind: bool = True):
        self.sock = zmq.asyncio.Context.instance().socket(zmq.PULL)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind(addr) if bind else self.sock.connect(addr)

    async def recv(self) -> Any:
        return decode(await self.sock.recv())

    async def recv_all(self, limit: int = 64) -> list[Any]:
        """The next message and up to `limit` - 1 more that are already queued."""
        msgs = [decode(await self.sock.recv())]
        while len(msgs) < limit:
            try:
                msgs.append(decode(self.sock.recv(zmq.NOBLOCK).result()))
            except zmq.Again:
                break
        return msgs
