"""A failover to an asynchronous standby that missed the last outcome writes
(SPEC "Several processes, several hosts, a database that fails over"): the
worker sends again at most what it had in flight.

Two PostgreSQL servers of the test's own (tests/pgcluster.py): a primary
and a standby streaming through a proxy that the test black-holes, so the
standby misses what the primary acknowledged in the last seconds. A
`dispatcher run` worker, given both hosts with target_session_attrs,
delivers to a real receiver; it is frozen while the primary is stopped (as
a crash) and the standby promoted, so what it had in flight is counted
exactly, then let go."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections import Counter

import asyncpg
import pytest

from dispatcher import db
from dispatcher.db import catalog
from tests.helpers import add_endpoint, until_received, worker
from tests.pgcluster import Cluster, bindir
from tests.receivers import Receiver, delay

pytestmark = [
    # Two servers and a worker of its own: heavy, and timing matters.
    pytest.mark.serial,
    pytest.mark.skipif(
        bindir() is None,
        reason="needs PostgreSQL server binaries (initdb, pg_basebackup, pg_ctl) under "
        "/usr/lib/postgresql/*/bin or PG_BINDIR, to run a primary and a standby of its own",
    ),
]

N = 8000


async def _count(url: str, sql: str) -> int:
    conn = await asyncpg.connect(url)
    try:
        n: int = await conn.fetchval(sql)
        return n
    finally:
        await conn.close()


IN_FLIGHT = "SELECT count(*) FROM webhook_queue WHERE status = 'in_flight'"
DELIVERED = "SELECT count(*) FROM webhook_queue WHERE status = 'delivered'"


async def _caught_up(cluster: Cluster, timeout: float = 60) -> None:
    """The standby has replayed everything the primary wrote so far."""
    primary = await asyncpg.connect(cluster.primary_url)
    try:
        target = await primary.fetchval("SELECT pg_current_wal_lsn()")
    finally:
        await primary.close()

    async def wait() -> None:
        while True:
            with contextlib.suppress(OSError, asyncpg.PostgresError):
                standby = await asyncpg.connect(cluster.standby_url)
                try:
                    got = await standby.fetchval(
                        "SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn", target
                    )
                finally:
                    await standby.close()
                if got:
                    return
            await asyncio.sleep(0.1)

    await asyncio.wait_for(wait(), timeout)


async def test_a_failover_to_a_lagging_standby_resends_at_most_what_was_in_flight(
    receiver: Receiver,
) -> None:
    receiver.routes["/r"] = delay(0.02)
    cluster = Cluster()
    proc = None
    try:
        await cluster.start()
        conn = await asyncpg.connect(cluster.primary_url)
        try:
            await db.migrate(conn)
            # A 10 s timeout: the worker is frozen through the failover, and
            # its requests must come back answered, not timed out (failed
            # attempts would open the breaker and stall the rest).
            await add_endpoint(conn, receiver.url("/r"), max_in_flight=100, timeout_ms=10000)
            await catalog.enqueue_bulk(conn, [(f"e{i}", "t", "{}", None) for i in range(N)])
        finally:
            await conn.close()
        await cluster.add_standby()
        await _caught_up(cluster)
        proc = await worker(cluster.url, "--max-in-flight", "100")
        await until_received(receiver, 300, timeout=60)
        # From here the standby hears nothing: the outcomes the primary
        # acknowledges now are the writes it will lack.
        assert cluster.proxy is not None
        cluster.proxy.silent = True
        # Many more outcomes than can be in flight, acknowledged meanwhile.
        await until_received(receiver, len(receiver.received) + 1000, timeout=60)
        await asyncio.sleep(0.2)
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            # Frozen, it claims nothing more: what the primary holds in
            # flight (claimed, no outcome acknowledged) is exact.
            in_flight = await _count(cluster.primary_url, IN_FLIGHT)
            delivered_before = await _count(cluster.primary_url, DELIVERED)
            await cluster.stop_primary()
            await cluster.promote()
            missed = delivered_before - await _count(cluster.standby_url, DELIVERED)
        finally:
            os.kill(proc.pid, signal.SIGCONT)

        async def all_delivered() -> None:
            while await _count(cluster.standby_url, DELIVERED) < N:
                await asyncio.sleep(0.2)

        try:
            await asyncio.wait_for(all_delivered(), 120)
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = await asyncio.wait_for(proc.communicate(), 60)
        print(f"worker's log, the end: {err.decode()[-3000:]}")  # shown when the test fails
    finally:
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
            await proc.wait()
        await cluster.close()
    got = Counter(r.headers["webhook-id"] for r in receiver.received)
    resent = sum(n - 1 for n in got.values())
    log = err.decode()
    print(f"\nfailover: missed {missed} outcomes, {in_flight} in flight, {resent} re-sent")
    assert set(got) == {f"e{i}" for i in range(N)}
    assert "Traceback" not in log, log[-3000:]
    # The test did what it means to: the standby lacked more outcomes than
    # were in flight, so re-sending all it lacked would fail the bound.
    assert missed > in_flight
    assert '"event":"outcomes_rewritten"' in log, log[-3000:]
    assert resent <= in_flight
