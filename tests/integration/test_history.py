"""A small live queue and an insert-only history (issue 31, schema 026):
a final row leaves webhook_live for webhook_history in the statement that
makes it final, comes back when replayed, is found by the contract's view
either way, is not enqueued again while its history lasts, goes with its
partition, and a database of the previous release upgrades while producers
and workers run, with nothing lost or sent twice."""

from __future__ import annotations

import asyncio
import itertools
import tarfile
from pathlib import Path

import asyncpg
import pytest

from dispatcher import db
from dispatcher.core.retention import Retention
from dispatcher.db import catalog, upkeep
from dispatcher.db.migrator import _apply_repeatables as apply_repeatables
from tests.helpers import add_endpoint, drain
from tests.receivers import Receiver
from tests.releases import build_release

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
OVERLAP = (
    "SELECT count(*) FROM (SELECT id FROM webhook_live INTERSECT SELECT id FROM webhook_history) x"
)
KEYLESS = (  # history rows within the window without their dedup key
    "SELECT count(*) FROM webhook_history h WHERE h.finished_at > dispatcher_dedup_since()"
    " AND NOT EXISTS (SELECT 1 FROM dispatcher_dedup_keys k WHERE k.event_id = h.event_id"
    "                 AND k.endpoint_id = h.endpoint_id AND k.expires_at > now())"
)
# History's dead letters as `dlq analyze` counts them (schema 030) and as
# they are: the rows that differ, either way.
BUCKETS_OFF = """
    WITH counted AS (
        SELECT endpoint_id, bucket, last_status_code, last_error, sum(n)::bigint AS n,
               sum(attempts)::bigint AS attempts
        FROM (SELECT * FROM dead_letter_buckets UNION ALL SELECT * FROM dead_letter_deltas) b
        GROUP BY 1, 2, 3, 4 HAVING sum(n) <> 0
    ), actual AS (
        SELECT endpoint_id, dispatcher_dead_bucket(updated_at), last_status_code, last_error,
               count(*), sum(attempt_count)::bigint
        FROM webhook_history WHERE status = 'dead_letter' GROUP BY 1, 2, 3, 4
    )
    SELECT (SELECT count(*) FROM (TABLE counted EXCEPT TABLE actual) x)
         + (SELECT count(*) FROM (TABLE actual EXCEPT TABLE counted) y)"""
# The dead letters as health counts them (schema 029) and as they are, when
# their buckets agree.
DEAD_COUNTED = (
    "SELECT CASE WHEN dispatcher_count('dead_letters') = count(*)"
    f" AND ({BUCKETS_OFF}) = 0 THEN count(*) END"
    " FROM webhook_queue WHERE status = 'dead_letter'"
)
FINAL_IN_LIVE = (
    "SELECT count(*) FROM webhook_live WHERE status IN ('delivered', 'dead_letter', 'cancelled')"
)


async def _where(conn: asyncpg.Connection, event_id: str) -> list[tuple[str, str]]:
    """(table, status) of each row of the event."""
    rows = await conn.fetch(
        "SELECT 'live' AS t, status FROM webhook_live WHERE event_id = $1"
        " UNION ALL SELECT 'history', status FROM webhook_history WHERE event_id = $1",
        event_id,
    )
    return sorted((r["t"], r["status"]) for r in rows)


async def test_a_delivered_row_moves_to_history_and_is_not_enqueued_again(
    db_url: str, conn: asyncpg.Connection, receiver: Receiver
) -> None:
    await add_endpoint(conn, receiver.url("/r"))
    first = await conn.fetchval("SELECT dispatcher_enqueue('t', '{\"a\": 1}'::json, 'once')")
    await drain(db_url)
    assert await _where(conn, "once") == [("history", "delivered")]
    row = await conn.fetchrow("SELECT * FROM webhook_queue WHERE event_id = 'once'")
    assert row["status"] == "delivered" and row["finished_at"] is not None
    assert row["payload"] == '{"a": 1}' and row["attempt_count"] == 1
    # The same event again: its delivery, not a new one (the dedup window).
    again = await conn.fetchval("SELECT dispatcher_enqueue('t', '{\"a\": 1}'::json, 'once')")
    assert again == first
    assert await catalog.enqueue_bulk(conn, [("once", "t", "{}", None)]) == 0
    await drain(db_url)
    assert len(receiver.received) == 1
    assert await _where(conn, "once") == [("history", "delivered")]


async def test_after_the_dedup_window_the_event_id_is_new_again(
    db_url: str, conn: asyncpg.Connection, receiver: Receiver
) -> None:
    await add_endpoint(conn, receiver.url("/r"))
    await upkeep.maintain(conn, 86400.0, dedup_window_s=3600.0)
    assert await conn.fetchval("SELECT dedup_window_s FROM dispatcher_settings") == 3600.0
    (first,) = await conn.fetchval("SELECT dispatcher_enqueue('t', '{}'::json, 'w1')")
    await drain(db_url)
    # Final 30 minutes ago: inside the window. Two hours ago: past it.
    enqueue = "SELECT dispatcher_enqueue('t', '{}'::json, 'w1')"
    for ago, again in (("30 minutes", [first]), ("2 hours", None)):
        await conn.execute(
            "UPDATE webhook_queue SET delivered_at = now() - $1::text::interval,"
            " updated_at = now() - $1::text::interval WHERE id = $2",
            ago,
            first,
        )
        ids = await conn.fetchval(enqueue)
        assert ids == again if again is not None else ids != [first]
    assert await conn.fetchval("SELECT count(*) FROM webhook_queue WHERE event_id = 'w1'") == 2


async def _keys(conn: asyncpg.Connection, event_id: str) -> list[tuple[int, bool]]:
    """(table, unexpired) of each dedup key of the event."""
    rows = await conn.fetch(
        "SELECT slot, expires_at > now() AS live FROM dispatcher_dedup_keys WHERE event_id = $1",
        event_id,
    )
    return sorted((r["slot"], r["live"]) for r in rows)


async def test_dedup_keys_follow_history_and_rotate_by_whole_tables(
    db_url: str, conn: asyncpg.Connection, receiver: Receiver
) -> None:
    await add_endpoint(conn, receiver.url("/r"))
    await upkeep.maintain(conn, 86400.0, dedup_window_s=3600.0)
    (first,) = await conn.fetchval("SELECT dispatcher_enqueue('t', '{}'::json, 'k1')")
    assert await _keys(conn, "k1") == []  # live: webhook_live's unique index answers
    await drain(db_url)
    assert await _keys(conn, "k1") == [(0, True)]  # the outcome write's move left it
    # A path through the live table's trigger (a cancel) leaves one too.
    (other,) = await conn.fetchval("SELECT dispatcher_enqueue('t', '{}'::json, 'k2')")
    await conn.execute("UPDATE webhook_queue SET status = 'cancelled' WHERE id = $1", other)
    assert await _keys(conn, "k2") == [(0, True)]
    rotate = "SELECT dispatcher_rotate_dedup_keys()"
    assert await conn.fetchval(rotate) is False  # the current table is minutes old
    # An hour on (the other table's window): table 1, empty, becomes current.
    await conn.execute("UPDATE dispatcher_dedup_slots SET opened_at = opened_at - interval '61 min'"
                       " WHERE slot = 0")  # fmt: skip
    assert await conn.fetchval(rotate) is True
    assert await conn.fetchval(rotate) is False
    assert await conn.fetchval(
        "SELECT slot FROM dispatcher_dedup_slots ORDER BY opened_at DESC LIMIT 1"
    ) == 1  # fmt: skip
    # Table 0's key still answers; a new final row's goes to table 1.
    assert await conn.fetchval("SELECT dispatcher_enqueue('t', '{}'::json, 'k1')") == [first]
    assert await catalog.enqueue_bulk(conn, [("k1", "t", "{}", None)]) == 0
    (third,) = await conn.fetchval("SELECT dispatcher_enqueue('t', '{}'::json, 'k3')")
    await conn.execute("UPDATE webhook_queue SET status = 'cancelled' WHERE id = $1", third)
    assert await _keys(conn, "k3") == [(1, True)]
    # Another hour on: table 0 (every key in it past the window) is emptied.
    await conn.execute(
        "UPDATE dispatcher_dedup_slots SET opened_at = opened_at - interval '61 min'"
    )
    assert await conn.fetchval(rotate) is True
    assert await _keys(conn, "k1") == [] and await _keys(conn, "k3") == [(1, True)]
    # A key past its expiry no longer answers, wherever it is.
    await conn.execute("UPDATE dispatcher_dedup_keys_1 SET expires_at = now() - interval '1 s'")
    assert await conn.fetchval("SELECT dispatcher_enqueue('t', '{}'::json, 'k3')") != [third]
    # A replayed row takes its key out of the window's tables (the live
    # row answers again), and leaves a new one when final again.
    assert await catalog.replay_ids(conn, [other]) == 0  # cancelled: not a dead letter
    await conn.execute("UPDATE webhook_queue SET status = 'dead_letter' WHERE id = $1", other)
    assert await _keys(conn, "k2") == [(0, True)]  # table 0 is current again
    assert await catalog.replay_ids(conn, [other]) == 1
    assert await _keys(conn, "k2") == []
    await drain(db_url)
    assert await _keys(conn, "k2") == [(0, True)]


async def test_history_rows_without_keys_are_asked_for_until_seeded(
    conn: asyncpg.Connection, receiver: Receiver
) -> None:
    """A database that ran 026: history holds final rows and no keys."""
    await add_endpoint(conn, receiver.url("/r"))
    await catalog.enqueue_bulk(conn, [(f"s{i}", "t", "{}", None) for i in range(30)])
    await conn.execute(
        "UPDATE webhook_queue SET status = 'delivered', delivered_at = now() - (id % 5) * interval"
        " '1 hour' WHERE event_id LIKE 's%'"
    )
    await conn.execute(
        "TRUNCATE dispatcher_dedup_keys_0, dispatcher_dedup_keys_1;"
        " UPDATE dispatcher_dedup_seed SET complete = false, seeded_to = NULL"
    )
    enqueue = "SELECT dispatcher_enqueue('t', '{}'::json, $1)"
    known = await conn.fetchval("SELECT id FROM webhook_history WHERE event_id = 's7'")
    assert await conn.fetchval(enqueue, "s7") == [known]  # asked history
    assert await catalog.enqueue_bulk(conn, [("s8", "t", "{}", None)]) == 0
    # Small steps: several rounds, each a bounded insert.
    assert await upkeep.seed_dedup_keys(conn, batch=4, max_batches=2) is False
    assert await upkeep.seed_dedup_keys(conn) is True
    assert await conn.fetchval("SELECT complete FROM dispatcher_dedup_seed")
    assert await conn.fetchval("SELECT count(*) FROM dispatcher_dedup_keys") == 30
    assert await conn.fetchval(enqueue, "s7") == [known]  # the key answers now
    assert await upkeep.seed_dedup_keys(conn) is True  # complete: nothing more


async def test_a_dead_letter_replayed_comes_back_with_its_id(
    db_url: str, conn: asyncpg.Connection, receiver: Receiver
) -> None:
    await add_endpoint(conn, receiver.url("/r"))
    (rid,) = await conn.fetchval("SELECT dispatcher_enqueue('t', '{}'::json, 'd1')")
    # A hand edit through the view: the row moves on its own.
    await conn.execute("UPDATE webhook_queue SET status = 'dead_letter' WHERE id = $1", rid)
    assert await _where(conn, "d1") == [("history", "dead_letter")]
    assert await catalog.replay_ids(conn, [rid]) == 1
    assert await conn.fetchval("SELECT id FROM webhook_live WHERE event_id = 'd1'") == rid
    assert await catalog.replay_ids(conn, [rid]) == 0  # live again: nothing to replay
    await drain(db_url)
    assert await _where(conn, "d1") == [("history", "delivered")]
    assert await conn.fetchval(OVERLAP) == 0


async def test_writes_through_the_view_are_compare_and_swap(
    conn: asyncpg.Connection, receiver: Receiver
) -> None:
    await add_endpoint(conn, receiver.url("/r"))
    (rid,) = await conn.fetchval("SELECT dispatcher_enqueue('t', '{}'::json, 'v1')")
    claim = (
        "UPDATE webhook_queue SET status = 'in_flight', locked_by = $2"
        " WHERE id = $1 AND status = 'pending' RETURNING id"
    )
    assert await conn.fetchval(claim, rid, "w1") == rid
    assert await conn.fetchval(claim, rid, "w2") is None
    # Final, then edited back to live: it returns to webhook_live.
    await conn.execute("UPDATE webhook_queue SET status = 'cancelled' WHERE id = $1", rid)
    assert await _where(conn, "v1") == [("history", "cancelled")]
    await conn.execute(
        "UPDATE webhook_queue SET status = 'pending', locked_by = NULL WHERE id = $1", rid
    )
    assert await _where(conn, "v1") == [("live", "pending")]
    row = await conn.fetchrow(
        "SELECT payload::text, finished_at FROM webhook_queue WHERE id = $1", rid
    )
    assert tuple(row) == ("{}", None)
    await conn.execute(
        "INSERT INTO webhook_queue (endpoint_id, event_id, event_type, payload, status)"
        " SELECT endpoint_id, 'v2', 't', '{}', 'delivered' FROM webhook_live LIMIT 1"
    )
    assert await _where(conn, "v2") == [("history", "delivered")]
    assert await conn.execute("DELETE FROM webhook_queue WHERE event_id IN ('v1', 'v2')") == (
        "DELETE 2"
    )
    assert await conn.fetchval("SELECT count(*) FROM webhook_queue") == 0


async def test_retention_drops_whole_partitions(
    conn: asyncpg.Connection, receiver: Receiver
) -> None:
    await add_endpoint(conn, receiver.url("/r"))
    ids = await catalog.enqueue_bulk(conn, [(f"r{i}", "t", "{}", None) for i in range(3)])
    assert ids == 3
    await conn.execute(
        "SELECT dispatcher_day_partitions('webhook_history_delivered', 0, NULL, 86400,"
        " now() - interval '9 days')"
    )
    old_leaf = "webhook_history_delivered_p" + await conn.fetchval(
        "SELECT to_char((now() - interval '9 days') AT TIME ZONE 'UTC', 'YYYYMMDD')"
    )
    assert await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", old_leaf)
    await conn.execute(
        "UPDATE webhook_queue SET status = 'delivered', delivered_at = now() - CASE event_id"
        " WHEN 'r0' THEN interval '9 days' WHEN 'r1' THEN interval '1 minute' END"
        " WHERE event_id IN ('r0', 'r1')"
    )
    assert await conn.fetchval("SELECT tableoid::regclass::text FROM webhook_history"
                               " WHERE event_id = 'r0'") == old_leaf  # fmt: skip
    assert await upkeep.maintain(conn, 86400.0, Retention()) is True
    assert await conn.fetchval("SELECT to_regclass($1)", old_leaf) is None
    kept = await conn.fetch("SELECT event_id, status FROM webhook_queue ORDER BY event_id")
    assert [tuple(r) for r in kept] == [("r1", "delivered"), ("r2", "pending")]


async def test_a_drop_waits_for_its_partition_without_holding_the_parent(
    conn: asyncpg.Connection, db_url: str
) -> None:
    """A DROP locks the parent before the partition: waiting there for an
    autovacuum of the old partition it would stop every write of the
    table (the soak's 900 ms outcome stall). The partition's lock comes
    first, for 100 ms at most; the drop is then left to the next round,
    and a round drops one partition a transaction."""
    await conn.execute(
        "SELECT dispatcher_day_partitions('webhook_history_dead', 0, NULL, 86400,"
        " now() - interval '20 days')"
    )
    leaf = "webhook_history_dead_p" + await conn.fetchval(
        "SELECT to_char((now() - interval '20 days') AT TIME ZONE 'UTC', 'YYYYMMDD')"
    )
    vacuum, watcher = await asyncpg.connect(db_url), await asyncpg.connect(db_url)
    try:
        tx = vacuum.transaction()
        await tx.start()
        await vacuum.execute(f"LOCK TABLE {leaf} IN SHARE UPDATE EXCLUSIVE MODE")
        dropper = asyncio.create_task(
            conn.fetchrow(
                "SELECT * FROM dispatcher_day_partitions('webhook_history_dead', 0, $1)",
                14 * 86400.0,
            )
        )
        held_parent = False
        while not dropper.done():
            held_parent |= await watcher.fetchval(
                "SELECT count(*) > 0 FROM pg_locks WHERE granted AND mode = 'AccessExclusiveLock'"
                " AND relation = 'webhook_history_dead'::regclass"
            )
        assert tuple(await dropper) == (0, 0) and not held_parent
        assert await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", leaf)
        await tx.rollback()
    finally:
        await vacuum.close()
        await watcher.close()
    # One a call, the oldest first; the next call takes the next.
    _, dropped = await conn.fetchrow(
        "SELECT * FROM dispatcher_day_partitions('webhook_history_dead', 0, $1)", 14 * 86400.0
    )
    assert dropped == 1 and await conn.fetchval("SELECT to_regclass($1)", leaf) is None
    left = await conn.fetchval(
        "SELECT count(*) FROM dispatcher_partitions('webhook_history_dead')"
        " WHERE upper_bound <= now() - interval '14 days'"
    )
    assert left > 0
    await upkeep.maintain(conn, 86400.0, Retention(dead_s=14 * 86400.0))
    assert await conn.fetchval(
        "SELECT count(*) FROM dispatcher_partitions('webhook_history_dead')"
        " WHERE upper_bound <= now() - interval '14 days'"
    ) == 0  # fmt: skip


async def test_the_dead_letters_count_follows_every_way_in_and_out(
    conn: asyncpg.Connection, receiver: Receiver
) -> None:
    """health and /metrics read the dead letters from a count (schema 029),
    and `dlq analyze` from their five-minute buckets (030), not a scan of
    30 days of them: dead by an edit (history's insert
    trigger counts it, as it does the outcome write's move), replayed,
    dropped with a partition, pruned from a default leaf, gone with a
    hard-deleted endpoint."""
    await add_endpoint(conn, receiver.url("/r"))
    await catalog.enqueue_bulk(conn, [(f"d{i}", "t", "{}", None) for i in range(8)])
    await conn.execute(
        "SELECT dispatcher_day_partitions('webhook_history_dead', 0, NULL, 86400,"
        " now() - interval '40 days')"
    )
    await conn.execute(
        "UPDATE webhook_queue SET status = 'dead_letter', updated_at = now() - CASE"
        " WHEN event_id IN ('d0', 'd1') THEN interval '35 days' ELSE interval '1 minute' END"
        " WHERE event_id <> 'd7'"
    )
    assert await conn.fetchval(DEAD_COUNTED) == 7
    assert (await catalog.health_summary(conn)).dead_letter == 7
    # A dead letter that found its way into the default leaf (a clock far
    # off), past retention: moved by hand, its count kept by hand.
    await conn.execute(
        "CREATE TEMP TABLE d AS SELECT * FROM webhook_history_dead WHERE event_id = 'd2';"
        " DELETE FROM webhook_history WHERE event_id = 'd2';"
        " UPDATE d SET finished_at = now() - interval '200 days';"
        " INSERT INTO webhook_history_dead_default SELECT * FROM d; DROP TABLE d"
    )
    await conn.execute("SELECT dispatcher_count_dead(1)")
    counted = await conn.fetchval(
        "SELECT dispatcher_dead_deltas_insert('webhook_history_dead_default', 1)"
    )
    assert await conn.fetchval(counted) == 1
    assert await conn.fetchval(DEAD_COUNTED) == 7
    replayed = await conn.fetchval(
        "SELECT count(*) FROM dispatcher_revive("
        "  ARRAY(SELECT id FROM webhook_history WHERE event_id = 'd3'), '{dead_letter}', false)"
    )
    assert replayed == 1 and await conn.fetchval(DEAD_COUNTED) == 6
    # Retention: d0 and d1 with their partition, d2 from the default leaf.
    assert await conn.fetchval("SELECT count(*) FROM dispatcher_counts") > 1  # appended
    assert await upkeep.maintain(conn, 86400.0, Retention()) is True
    assert await conn.fetchval(DEAD_COUNTED) == 3
    await upkeep.maintain(conn, 86400.0, Retention())  # folds what the drops appended
    assert await conn.fetchval("SELECT count(*) FROM dispatcher_counts") == 1
    gone, _ = await add_endpoint(conn, receiver.url("/gone"))
    await catalog.enqueue_bulk(conn, [("g", "t", "{}", None)])
    await conn.execute("UPDATE webhook_queue SET status = 'dead_letter' WHERE event_id = 'g'")
    assert await conn.fetchval(DEAD_COUNTED) == 5  # g to both endpoints
    await conn.execute("DELETE FROM endpoints WHERE id = $1", gone)
    assert await conn.fetchval(DEAD_COUNTED) == 4
    assert (await catalog.health_summary(conn)).dead_letter == 4


async def test_migrate_makes_the_first_partitions_as_wide_as_the_retention(
    empty_db_url: str,
) -> None:
    """A ten-minute retention from the first day: history's first leaves
    five minutes wide, not days the maintenance could only prune row by row."""
    conn = await asyncpg.connect(empty_db_url)
    try:
        await db.migrate(conn, Retention(delivered_s=600, attempts_s=86400))
        leaves = "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        narrow = await conn.fetch(
            f"{leaves} WHERE i.inhparent = 'webhook_history_delivered'::regclass"
            " AND c.relname ~ '_p[0-9]{12}$'"
        )
        daily = await conn.fetch(
            f"{leaves} WHERE i.inhparent = 'webhook_history_delivered'::regclass"
            " AND c.relname ~ '_p[0-9]{8}$'"
        )
        assert len(narrow) == 13 and not daily  # the one holding now and 12 ahead
        # A day's retention: the widest at most a quarter of it, an hour.
        attempts = await conn.fetch(
            f"{leaves} WHERE i.inhparent = 'endpoint_latency'::regclass"
            " AND c.relname ~ '_p[0-9]{12}$'"
        )
        assert len(attempts) == 13
    finally:
        await conn.close()


async def _release(conn: asyncpg.Connection, n: int) -> None:
    """A previous release: tables as schema n left them, its functions
    (tests/fixtures/functions-0n.tar.gz: `git archive` of its schema/functions)."""
    await build_release(conn, n)
    with tarfile.open(FIXTURES / f"functions-{n:03d}.tar.gz") as tar:
        files = sorted(
            (m.name, tar.extractfile(m).read().decode())  # type: ignore[union-attr]
            for m in tar.getmembers() if m.isfile() and m.name.endswith(".sql")
        )  # fmt: skip
    # As its migrate applied them: stale overloads of 019's dropped.
    await conn.execute(
        "CREATE TABLE dispatcher_repeatables (name text PRIMARY KEY, checksum text NOT NULL,"
        " applied_at timestamptz NOT NULL DEFAULT now())"
    )
    await apply_repeatables(conn, files)
    parents = ["endpoint_latency", "event_payloads"]
    if n >= 26:
        parents += ["webhook_history_delivered", "webhook_history_dead",
                    "webhook_history_cancelled"]  # fmt: skip
    for parent in parents:  # its migrate made the days
        await conn.execute("SELECT dispatcher_day_partitions($1, 3, NULL)", parent)


@pytest.mark.parametrize("release", [25, 26])
async def test_an_upgrade_under_live_traffic_loses_nothing_and_sends_nothing_twice(
    empty_db_url: str, receiver: Receiver, release: int
) -> None:
    """From 025 (final rows in the one table, moved by the backfill) and
    from 026 (final rows in history without their dedup keys, written by
    the seeding while the enqueue asks history)."""
    conn = await asyncpg.connect(empty_db_url)
    try:
        await _release(conn, release)
        for i in range(2):
            await conn.execute(
                "INSERT INTO endpoints (url, secret) VALUES ($1, $2)",
                receiver.url(f"/e{i}"),
                SECRET,
            )
        # The history the previous release kept (025: in its one table; 026
        # moves them to history as they are written): final rows of every
        # status, within the dedup window or past the retention, and a
        # backlog.
        await conn.execute(
            "INSERT INTO webhook_live (endpoint_id, event_id, event_type, payload, status,"
            " attempt_count, created_at, updated_at, delivered_at)"
            " SELECT e.id, 'legacy-' || s.status || '-' || g, 't', '{}', s.status, 1,"
            "        now() - s.age, now() - s.age,"
            "        CASE WHEN s.status = 'delivered' THEN now() - s.age END"
            " FROM endpoints e, generate_series(1, 150) g,"
            "      (VALUES ('delivered', interval '2 hours'), ('delivered', interval '10 days'),"
            "              ('dead_letter', interval '5 hours'), ('cancelled', interval '1 hour'))"
            "          AS s(status, age)"
            " ON CONFLICT DO NOTHING"
        )
        kept_before = await conn.fetch(
            "SELECT id, event_id, endpoint_id, status FROM webhook_queue"
            " WHERE status <> 'delivered' OR delivered_at > now() - interval '7 days' ORDER BY id"
        )
        await conn.execute(
            "INSERT INTO webhook_live (endpoint_id, event_id, event_type, payload)"
            " SELECT e.id, 'backlog-' || g, 't', '{}' FROM endpoints e, generate_series(1, 100) g"
        )
        legacy_final = [r["event_id"] for r in kept_before]
    finally:
        await conn.close()

    stop = asyncio.Event()
    errors: list[BaseException] = []
    enqueued: list[str] = []

    async def produce(k: int) -> None:
        c = await asyncpg.connect(empty_db_url)
        try:
            for i in itertools.count():
                if stop.is_set():
                    return
                event_id = f"p{k}-{i}"
                try:
                    async with c.transaction():
                        await c.fetchval("SELECT dispatcher_enqueue('t', '{}'::json, $1)", event_id)
                        # Repeats: of a row just enqueued, and of a legacy final one.
                        await c.fetchval("SELECT dispatcher_enqueue('t', '{}'::json, $1)", event_id)
                        await c.fetchval(
                            "SELECT dispatcher_enqueue('t', '{}'::json, $1)",
                            legacy_final[(i * 7 + k) % len(legacy_final)],
                        )
                    enqueued.append(event_id)
                except Exception as exc:  # every one is counted: none may happen
                    errors.append(exc)
                await asyncio.sleep(0.002)
        finally:
            await c.close()

    async def backfill() -> None:
        c = await asyncpg.connect(empty_db_url)
        try:
            while True:
                moved = await upkeep.backfill_history(c, Retention(), batch=40, max_batches=1)
                keyed = await upkeep.seed_dedup_keys(c, batch=40, max_batches=1)
                if moved and keyed:
                    return
                await asyncio.sleep(0.01)
        finally:
            await c.close()

    producers = [asyncio.create_task(produce(k)) for k in range(3)]
    await asyncio.sleep(0.3)
    conn = await asyncpg.connect(empty_db_url)
    try:
        await db.migrate(conn)  # mid-flight
        await asyncio.gather(backfill(), drain(empty_db_url, timeout=60))
        await asyncio.sleep(0.3)
        stop.set()
        await asyncio.gather(*producers)
        await drain(empty_db_url, timeout=60)

        assert [f"{e!r}: {getattr(e, 'detail', '')}" for e in errors] == []
        assert len(enqueued) > 20
        sent = [(r.path, r.headers["webhook-id"]) for r in receiver.received]
        assert len(sent) == len(set(sent)), "a delivery was sent twice"
        by_event = {h for _, h in sent}
        expected = {*enqueued, *(f"backlog-{g}" for g in range(1, 101))}
        assert by_event == expected  # nothing lost, no legacy final row sent again
        assert len(sent) == 2 * len(expected)
        assert await conn.fetchval(OVERLAP) == 0
        assert await conn.fetchval(FINAL_IN_LIVE) == 0
        assert await conn.fetchval(
            "SELECT done_at IS NOT NULL FROM dispatcher_history_backfill"
        )  # fmt: skip
        after = await conn.fetch(
            "SELECT id, event_id, endpoint_id, status FROM webhook_history"
            " WHERE event_id LIKE 'legacy-%'"
            "   AND (status <> 'delivered' OR delivered_at > now() - interval '7 days') ORDER BY id"
        )
        assert [tuple(r) for r in after] == [tuple(r) for r in kept_before]
        # Every final row within the window has its key; the enqueue no
        # longer asks history.
        assert await conn.fetchval("SELECT complete FROM dispatcher_dedup_seed")
        assert await conn.fetchval(KEYLESS) == 0
        assert await conn.fetchval(DEAD_COUNTED) == 300  # 150 an endpoint
        assert await db.migrate(conn) == []  # a second migrate: nothing to do
    finally:
        await conn.close()
