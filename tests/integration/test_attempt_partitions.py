"""The attempt log by day (schema 023, SPEC "History, payloads and
retention"): `endpoint_latency` keeps its name and columns as a table
partitioned by UTC day; retention drops whole days; what the table held
before the upgrade is one partition, dropped whole once past retention; the
default partition takes rows outside the days made, and a day made later
takes them along; the per-minute counter still sees every insert."""

from __future__ import annotations

import asyncpg

from dispatcher import db
from dispatcher.core.retention import Retention
from dispatcher.db import upkeep
from tests.helpers import add_endpoint
from tests.releases import build_release

DAY_S = 86400.0


async def _where(conn: asyncpg.Connection) -> dict[str, str]:
    """Each sample's partition, by its error text (the test's label)."""
    rows = await conn.fetch("SELECT error, tableoid::regclass::text AS part FROM endpoint_latency")
    return {r["error"]: r["part"] for r in rows}


async def _insert(conn: asyncpg.Connection, ep: int, label: str, offset: str) -> None:
    await conn.execute(
        "INSERT INTO endpoint_latency (endpoint_id, response_ms, status_code, measured_at, error)"
        " VALUES ($1, 5, 200, now() + $2::text::interval, $3)",
        ep, offset, label,
    )  # fmt: skip


async def test_a_fresh_database_has_days_a_default_and_the_counter(
    conn: asyncpg.Connection,
) -> None:
    assert (
        await conn.fetchval("SELECT relkind::text FROM pg_class WHERE relname = 'endpoint_latency'")
        == "p"
    )
    assert await conn.fetchval("SELECT to_regclass('endpoint_latency_legacy')") is None
    ep, _ = await add_endpoint(conn, "https://days.example/r")
    await _insert(conn, ep, "now", "0 s")
    await _insert(conn, ep, "old", "-10 days")
    await _insert(conn, ep, "ahead", "2 days")
    await _insert(conn, ep, "far", "6 days")
    today = await conn.fetchval("SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD')")
    where = await _where(conn)
    assert where["now"] == f"endpoint_latency_p{today}"
    assert where["old"] == where["far"] == "endpoint_latency_default"
    assert where["ahead"].startswith("endpoint_latency_p") and where["ahead"] != where["now"]
    # Every insert counted in its minute (the statement trigger on the parent).
    counted = await conn.fetchval(
        "SELECT sum(attempts) FROM endpoint_minutes WHERE endpoint_id = $1", ep
    )
    assert counted == 4

    # A maintenance round: the default's old row goes by delete (7 days),
    # the days stay; a day made later takes its rows out of the default.
    assert await upkeep.maintain(conn, DAY_S, Retention()) is not None
    assert set(await _where(conn)) == {"now", "ahead", "far"}
    await conn.execute("SELECT dispatcher_day_partitions('endpoint_latency', 7, NULL)")
    far = (await _where(conn))["far"]
    assert far.startswith("endpoint_latency_p") and far != "endpoint_latency_default"
    assert await conn.fetchval("SELECT count(*) FROM endpoint_latency_default") == 0


async def test_retention_drops_whole_days(conn: asyncpg.Connection) -> None:
    ep, _ = await add_endpoint(conn, "https://days.example/r")
    await _insert(conn, ep, "now", "0 s")
    await _insert(conn, ep, "ahead", "2 days")
    # A retention of minus one day: every partition whose range ends before
    # tomorrow this time is past it, today's among them.
    made, dropped = await conn.fetchrow(
        "SELECT * FROM dispatcher_day_partitions('endpoint_latency', 3, $1)", -DAY_S
    )
    assert (made, dropped) == (0, 1)
    assert set(await _where(conn)) == {"ahead"}
    # 0 keeps every day.
    await upkeep.maintain(conn, DAY_S, Retention(attempts_s=0))
    assert set(await _where(conn)) == {"ahead"}


async def test_an_upgrade_keeps_the_history_as_one_partition(empty_db_url: str) -> None:
    conn = await asyncpg.connect(empty_db_url)
    try:
        await build_release(conn, 22)
        ep = await conn.fetchval(
            "INSERT INTO endpoints (url, secret) VALUES ('https://old.example/r', 's') RETURNING id"
        )
        for label, offset in (("week", "-6 days"), ("hour", "-1 hour")):
            await _insert(conn, ep, label, offset)
        await db.migrate(conn)
        assert (
            await conn.fetchval(
                "SELECT relkind::text FROM pg_class WHERE relname = 'endpoint_latency'"
            )
            == "p"
        )
        await _insert(conn, ep, "later today", "0 s")
        await _insert(conn, ep, "ahead", "2 days")
        where = await _where(conn)
        assert where["week"] == where["hour"] == where["later today"] == "endpoint_latency_legacy"
        assert where["ahead"] != "endpoint_latency_legacy"
        # The attempts read as before, through the name.
        assert await conn.fetchval(
            "SELECT count(*) FROM endpoint_latency"
            " WHERE endpoint_id = $1 AND measured_at > now() - interval '7 days'",
            ep,
        ) == 4  # fmt: skip
        # Its range ends tomorrow: dropped whole once that is past retention.
        _, dropped = await conn.fetchrow(
            "SELECT * FROM dispatcher_day_partitions('endpoint_latency', 3, $1)", 0.0
        )
        assert dropped == 0 and "week" in await _where(conn)
        _, dropped = await conn.fetchrow(
            "SELECT * FROM dispatcher_day_partitions('endpoint_latency', 3, $1)",
            -DAY_S,
        )
        assert await conn.fetchval("SELECT to_regclass('endpoint_latency_legacy')") is None
        assert set(await _where(conn)) == {"ahead"}
    finally:
        await conn.close()
