"""Outcomes carried by the claim's transaction (worker/recorder.py
`riding`, issue 31: transactions per delivery): what the recorder lends is
written in the borrower's transaction, counted once it commits, and buffered
again when it does not, so an outcome is never lost nor written twice."""

from __future__ import annotations

import time

import asyncpg

from dispatcher import db
from dispatcher.core.models import Outcome, Status
from dispatcher.settings import Settings
from dispatcher.worker.connectivity import Connectivity
from dispatcher.worker.recorder import RIDE_WAITS, Recorder
from tests.helpers import add_endpoint

ME = "w-me"


async def _claimed(conn: asyncpg.Connection, ep: int, n: int) -> list[int]:
    await conn.execute(
        "INSERT INTO webhook_queue (endpoint_id, event_id, event_type, payload, status,"
        " locked_by) SELECT $1, 'r-' || g, 't', '{}', 'in_flight', $2"
        " FROM generate_series(1, $3) g",
        ep,
        ME,
        n,
    )
    return [r[0] for r in await conn.fetch("SELECT id FROM webhook_live ORDER BY id")]


def _recorder(pool: asyncpg.Pool, written: list[dict[int, int]]) -> Recorder:
    return Recorder(
        pool,
        worker=ME,
        settings=Settings(),
        metrics=None,
        connectivity=Connectivity(),
        on_written=lambda counts, _breakers: written.append(counts),
    )


async def _xmins(conn: asyncpg.Connection) -> set[str]:
    return {r[0] for r in await conn.fetch("SELECT xmin::text FROM webhook_history")}


async def test_outcomes_commit_with_the_borrowers_transaction(
    conn: asyncpg.Connection, db_url: str
) -> None:
    ep = (await add_endpoint(conn, "http://127.0.0.1:9/r"))[0]
    ids = await _claimed(conn, ep, 3)
    written: list[dict[int, int]] = []
    pool = await db.create_pool(db_url, size=2)
    try:
        rec = _recorder(pool, written)
        for i in ids:
            rec.add(Outcome(i, ep, Status.DELIVERED, 0.0, True, 200, 5, attempt=0))
        rec.add_results(ep, [True, True, True])
        async with pool.acquire() as c:
            async with rec.riding(c) as write:
                assert write is not None
                async with c.transaction():
                    await write()
                    txid = await c.fetchval("SELECT (txid_current() % 4294967296)::text")
            assert rec.waiting == 0
            assert rec.stats.delivered == 3 and rec.stats.flushes == 1
            assert written == [{ep: 3}]
            # Nothing left to lend: the claim runs on its own.
            async with rec.riding(c) as write:
                assert write is None
    finally:
        await pool.close()
    assert await _xmins(conn) == {txid}
    assert await conn.fetchval("SELECT count(*) FROM webhook_live") == 0


async def test_a_failed_borrower_gives_the_outcomes_back(
    conn: asyncpg.Connection, db_url: str
) -> None:
    ep = (await add_endpoint(conn, "http://127.0.0.1:9/r"))[0]
    ids = await _claimed(conn, ep, 2)
    pool = await db.create_pool(db_url, size=2)
    try:
        rec = _recorder(pool, [])
        for i in ids:
            rec.add(Outcome(i, ep, Status.DELIVERED, 0.0, True, 200, 5, attempt=0))
        async with pool.acquire() as c:
            # Lent but never written (the borrower did not call it): kept.
            async with rec.riding(c) as write:
                assert write is not None
            assert rec.waiting == 2
            try:
                async with rec.riding(c) as write:
                    assert write is not None
                    async with c.transaction():
                        await write()
                        await c.execute("SELECT 1 / 0")  # the claim fails after the write
            except asyncpg.DivisionByZeroError:
                pass
            assert rec.waiting == 2 and rec.stats.delivered == 0
            assert await conn.fetchval("SELECT count(*) FROM webhook_history") == 0
            # Behind, as after a failed flush: nothing is lent until it is
            # written (the claimer flushes first).
            assert rec.behind
            async with rec.riding(c) as write:
                assert write is None
        await rec.flush_all()
        assert not rec.behind
        assert rec.waiting == 0 and rec.stats.delivered == 2
    finally:
        await pool.close()
    assert await conn.fetchval("SELECT count(*) FROM webhook_history") == 2


async def test_only_clean_successes_wait_for_a_claim(db_url: str) -> None:
    """While claims come, a clean success may wait RIDE_WAITS flush
    intervals for one to carry it; a failure, or a success that may change a
    stored breaker (a half-open probe's), waits one, as without riding: a
    breaker stored late let a second worker send a second probe."""
    pool = await db.create_pool(db_url, size=1)
    try:
        rec = _recorder(pool, [])
        step = Settings().flush_interval_s
        async with pool.acquire() as c:
            async with rec.riding(c) as write:
                assert write is None  # nothing buffered: only says a claim came
        now = time.monotonic()
        rec._clean_at[7] = now
        rec.add(Outcome(1, 7, Status.DELIVERED, 0.0, True, 200, 5, attempt=0))
        rec.add_results(7, [True])
        assert rec._due_in(time.monotonic()) > (RIDE_WAITS - 1) * step
        # A success on an endpoint whose stored breaker it may change.
        rec.add_results(8, [True])
        assert rec._due_in(time.monotonic()) <= step
        rec._take()
        rec.add(Outcome(2, 7, Status.DELIVERED, 0.0, True, 200, 5, attempt=0))
        rec.add_results(7, [True])
        assert rec._due_in(time.monotonic()) > (RIDE_WAITS - 1) * step
        rec._flush_wanted.clear()  # the flusher took the first one and waits out RIDE_WAITS
        rec.add(Outcome(3, 7, Status.FAILED, 1.0, True, 500, 5, attempt=0))
        assert rec._flush_wanted.is_set()  # it looks again now, not after the long wait
        rec.add_results(7, [False])
        assert rec._due_in(time.monotonic()) <= step
    finally:
        await pool.close()
