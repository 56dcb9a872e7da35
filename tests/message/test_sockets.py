"""Messages cross processes over ZMQ PUSH/PULL sockets (minisgl.message.sockets): what is sent
arrives as an equal typed message, in order; a receive that waits too long gives None."""

from __future__ import annotations

import asyncio

from minisgl.core.params import SamplingParams
from minisgl.message import AbortMsg, ExitMsg, TokenizedRequestMsg
from minisgl.message.sockets import AsyncPullSocket, AsyncPushSocket, PullSocket, PushSocket
from minisgl.utils.net import ipc_addresses

WAIT_MS = 10_000  # a bound for a message already sent, never reached when the test passes


def test_messages_arrive_as_equal_typed_objects_in_order():
    addr = ipc_addresses(["scheduler"])["scheduler"]
    pull, push = PullSocket(addr), PushSocket(addr)
    try:
        sent = [TokenizedRequestMsg(1, [5, 6], SamplingParams(max_tokens=4)), AbortMsg(1), ExitMsg()]
        for msg in sent:
            push.send(msg)
        got = [pull.recv(WAIT_MS) for _ in sent]
        assert got == sent and [type(m) for m in got] == [TokenizedRequestMsg, AbortMsg, ExitMsg]
    finally:
        push.close()
        pull.close()


def test_a_receive_with_nothing_queued_times_out_with_none():
    addr = ipc_addresses(["idle"])["idle"]
    pull = PullSocket(addr)
    try:
        assert pull.recv(timeout_ms=1) is None
        assert pull.recv_all(timeout_ms=1) == []
    finally:
        pull.close()


def test_recv_all_takes_everything_queued():
    addr = ipc_addresses(["burst"])["burst"]
    pull, push = PullSocket(addr), PushSocket(addr)
    try:
        for uid in range(5):
            push.send(AbortMsg(uid))
        got = pull.recv_all(WAIT_MS)
        while len(got) < 5:  # the first wait returns what has arrived; the rest may still be in flight
            got += pull.recv_all(WAIT_MS)
        assert got == [AbortMsg(uid) for uid in range(5)]
    finally:
        push.close()
        pull.close()


def test_the_async_sockets_carry_messages_too():
    addr = ipc_addresses(["api"])["api"]

    async def exchange():
        pull, push = AsyncPullSocket(addr), AsyncPushSocket(addr)
        try:
            await push.send(AbortMsg(3))
            await push.send(AbortMsg(4))
            got = await pull.recv_all(limit=1)
            got += [await asyncio.wait_for(pull.recv(), WAIT_MS / 1000)]
            return got
        finally:
            push.sock.close()
            pull.sock.close()

    assert asyncio.run(exchange()) == [AbortMsg(3), AbortMsg(4)]

