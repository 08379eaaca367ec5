"""The pipelined Redis link against a server that never answers (a
black hole on 127.0.0.1): publishers that give up at their deadline free
the batch's connection, as a cancelled XADD did, and a closed link fails
what it still held instead of leaving it waiting."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio
from redis.asyncio.connection import BlockingConnectionPool

from dispatcher.core.destinations import BrokerTarget, parse_broker
from dispatcher.worker.brokers.link import BrokerFailure, BrokerMessage
from dispatcher.worker.brokers.redisstream import RedisLink


class BlackHole:
    """Accepts connections, reads everything, answers nothing; counts
    the connections the client has closed."""

    def __init__(self) -> None:
        self.opened = 0
        self.closed = 0
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.opened += 1
            while await reader.read(65536):
                pass
            self.closed += 1
            writer.close()

        self.server = await asyncio.start_server(serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])


async def _hole() -> tuple[BlackHole, RedisLink, BrokerTarget]:
    """A black hole, a link to it (a pool of 4), and a stream there."""
    hole = BlackHole()
    port = await hole.start()
    pool = BlockingConnectionPool(host="127.0.0.1", port=port, max_connections=4, timeout=None)
    link = RedisLink(redis.asyncio.Redis(connection_pool=pool))
    return hole, link, parse_broker(f"redis://127.0.0.1:{port}/0?stream=s")


MSG = BrokerMessage(b"{}", {"webhook-id": "msg_1"}, "msg_1", "t", 0)


async def _until(check: object, limit_s: float = 5.0) -> None:
    for _ in range(int(limit_s / 0.02)):
        if callable(check) and check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("not within the time allowed")


async def _opened(hole: BlackHole, count: int) -> None:
    await _until(lambda: hole.opened == count)


async def test_publishers_that_give_up_free_their_batchs_connection() -> None:
    hole, link, target = await _hole()
    try:
        for batch in range(1, 4):  # more batches than one connection, fewer than the pool
            publishing = asyncio.gather(*(link.publish(target, MSG) for _ in range(5)))
            # The publishers give up (what their deadline does) only once
            # their batch holds a connection: a fixed deadline could pass
            # before a loaded machine had opened it, and prove nothing.
            await _opened(hole, batch)
            publishing.cancel()
            with pytest.raises(asyncio.CancelledError):
                await publishing
        # Each batch's connection was closed once its publishers had gone.
        # (redis-py alone gives up on a silent socket after about 5 s.)
        await _until(lambda: hole.closed == hole.opened == 3, limit_s=2.0)
    finally:
        await link.close()
        assert hole.server is not None
        hole.server.close()


async def test_a_closed_link_fails_what_it_held() -> None:
    hole, link, target = await _hole()
    try:
        waiting = asyncio.ensure_future(link.publish(target, MSG))
        await _until(lambda: hole.opened == 1)
        await link.close()
        # Failed at once (how depends on where the batch was), not left waiting.
        with pytest.raises((BrokerFailure, TimeoutError, OSError)):
            await asyncio.wait_for(waiting, 2)
        with pytest.raises(BrokerFailure):
            await link.publish(target, MSG)
    finally:
        assert hole.server is not None
        hole.server.close()
