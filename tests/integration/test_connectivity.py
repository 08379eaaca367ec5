"""What a worker says about its database: one line each way per outage,
whatever number of its tasks saw it, and a database that answers but will
not write said as such (not as a flapping outage). Through tests/pgproxy.py,
which cuts the worker's connections as a restart or a failover would."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import asyncpg
import pytest

from dispatcher.db import catalog
from dispatcher.worker.engine import Engine
from tests.helpers import add_endpoint, engine, statuses, until_received
from tests.pgproxy import PgProxy
from tests.receivers import Receiver

EVENTS = (
    "database_lost",
    "database_back",
    "database_refusing_writes",
    "database_accepting_writes",
)


def _said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage() in EVENTS]


async def _until_said(
    caplog: pytest.LogCaptureFixture, event: str, n: int = 1, timeout: float = 30
) -> None:
    async def wait() -> None:
        while _said(caplog).count(event) < n:
            await asyncio.sleep(0.05)

    await asyncio.wait_for(wait(), timeout)


@contextlib.asynccontextmanager
async def _running(e: Engine) -> AsyncIterator[None]:
    task = asyncio.create_task(e.run())
    try:
        yield
    finally:
        e.stop()
        await asyncio.wait_for(task, 30)


async def _enqueue(conn: asyncpg.Connection, n: int, prefix: str) -> None:
    await catalog.enqueue_bulk(conn, [(f"{prefix}{i}", "t", "{}", None) for i in range(n)])


async def test_an_outage_seen_by_every_task_is_said_once_each_way(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    await add_endpoint(conn, receiver.url("/r"))
    proxy = await PgProxy(db_url).start()
    try:
        with caplog.at_level(logging.INFO, logger="dispatcher"):
            async with _running(engine(proxy.url)):
                await _enqueue(conn, 50, "a")
                await until_received(receiver, 50)
                # Claims, flushes, probes, the listener and the heartbeat all fail.
                await proxy.outage(3.0)
                await _until_said(caplog, "database_back")
                await _enqueue(conn, 50, "b")
                await until_received(receiver, 100)
                await asyncio.sleep(1.5)  # time for a false second outage to show
    finally:
        await proxy.stop()
    assert _said(caplog) == ["database_lost", "database_back"]


async def test_a_database_that_will_not_write_is_said_once_not_as_outages(
    conn: asyncpg.Connection,
    db_url: str,
    receiver: Receiver,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Read-only (SQLSTATE 25006), as a full disk (53100) is: reads work,
    writes fail. Before, the worker said lost/back four times a second."""
    name = await conn.fetchval("SELECT current_database()")
    await add_endpoint(conn, receiver.url("/r"))
    proxy = await PgProxy(db_url).start()
    try:
        with caplog.at_level(logging.INFO, logger="dispatcher"):
            async with _running(engine(proxy.url)):
                await _enqueue(conn, 20, "a")
                await until_received(receiver, 20)
                await conn.execute(
                    f'ALTER DATABASE "{name}" SET default_transaction_read_only = on'
                )
                proxy.cut()  # the worker's new sessions are read-only
                await _until_said(caplog, "database_refusing_writes")
                await _enqueue(conn, 20, "b")  # not claimable while read-only
                await asyncio.sleep(3.0)  # many claims, flushes, probes, heartbeats
                during = _said(caplog)
                await conn.execute(f'ALTER DATABASE "{name}" RESET default_transaction_read_only')
                proxy.cut()
                await _until_said(caplog, "database_accepting_writes")
                await until_received(receiver, 40)
                # A cut's "back" waits out the settle time after its first
                # good round trip: let the last outage end before counting.
                await _until_said(caplog, "database_back", _said(caplog).count("database_lost"))
    finally:
        with contextlib.suppress(Exception):
            await conn.execute(f'ALTER DATABASE "{name}" RESET default_transaction_read_only')
        await proxy.stop()
    # The cuts are real outages (each at most one pair); the refusal, one line.
    assert during.count("database_refusing_writes") == 1, during
    said = _said(caplog)
    assert said.count("database_refusing_writes") == 1, said
    assert said.count("database_accepting_writes") == 1, said
    assert said.count("database_lost") <= 2, said
    assert said.count("database_lost") == said.count("database_back"), said
    assert (await statuses(conn)) == {"delivered": 40}


async def test_a_silent_database_is_noticed_and_left_within_the_spec_bounds(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    """A black hole (nothing refused, nothing answered): noticed within 10 s,
    deliveries again within 10 s of its end (the SPEC's bounds; the worker
    aims at about half of each: a 3 s probe timeout, 5 s statement and
    connect timeouts)."""
    await add_endpoint(conn, receiver.url("/r"))
    proxy = await PgProxy(db_url).start()
    try:
        with caplog.at_level(logging.INFO, logger="dispatcher"):
            async with _running(engine(proxy.url)):
                await _enqueue(conn, 50, "a")
                await until_received(receiver, 50)
                hole = asyncio.create_task(proxy.hole(60))
                try:
                    await _until_said(caplog, "database_lost", timeout=10)
                    # Rows that come meanwhile; connections opened in the hole.
                    await _enqueue(conn, 50, "b")
                    await asyncio.sleep(2.0)
                finally:
                    hole.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await hole
                assert not proxy.silent
                await until_received(receiver, 100, timeout=10)
                await _until_said(caplog, "database_back")
    finally:
        await proxy.stop()
    assert _said(caplog) == ["database_lost", "database_back"]
    assert (await statuses(conn)) == {"delivered": 100}
