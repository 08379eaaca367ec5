"""The hot tables stay vacuumed without autovacuum (real PostgreSQL).

Autovacuum is switched off for webhook_live in the test database, so the
test holds whatever the server's own setting is.
"""

from __future__ import annotations

import asyncio

import asyncpg

from dispatcher.core.tablehealth import vacuum_due
from dispatcher.db import create_pool, upkeep
from dispatcher.worker.connectivity import Connectivity
from dispatcher.worker.maintenance import Maintenance
from tests.helpers import FAST, add_endpoint


async def _dead_rows(conn: asyncpg.Connection) -> tuple[int, int]:
    await conn.execute("SELECT pg_stat_clear_snapshot()")
    row = await conn.fetchrow(
        "SELECT n_dead_tup, vacuum_count FROM pg_stat_user_tables WHERE relname = 'webhook_live'"
    )
    assert row is not None
    return int(row[0]), int(row[1])


async def test_maintenance_clears_dead_rows_with_autovacuum_off(
    conn: asyncpg.Connection, db_url: str
) -> None:
    await conn.execute("ALTER TABLE webhook_live SET (autovacuum_enabled = false)")
    eid, _ = await add_endpoint(conn, "https://example.com/hook")
    await conn.execute(
        "INSERT INTO webhook_queue (endpoint_id, event_id, event_type, payload)"
        " SELECT $1, 'e' || i, 't', '{}' FROM generate_series(1, 20000) i",
        eid,
    )
    # What a delivery does to a row: claimed, then delivered (two dead versions).
    await conn.execute("UPDATE webhook_queue SET status = 'in_flight'")
    await conn.execute("UPDATE webhook_queue SET status = 'delivered', delivered_at = now()")
    await conn.execute("SELECT pg_stat_force_next_flush()")
    dead, vacuums = await _dead_rows(conn)
    for _ in range(50):  # the statistics reach shared memory within a second
        if dead >= 40_000:
            break
        await asyncio.sleep(0.1)
        dead, vacuums = await _dead_rows(conn)
    assert dead >= 40_000
    health = {h.table: h for h in await upkeep.table_health(conn)}
    assert not health["webhook_live"].autovacuum_on
    assert vacuum_due(health["webhook_live"])

    pool = await create_pool(db_url, size=2)
    try:
        m = Maintenance(pool, settings=FAST, connectivity=Connectivity(), url=db_url)
        await m.once()
    finally:
        await pool.close()
    assert m.vacuums >= 1
    dead_after, vacuums_after = await _dead_rows(conn)
    for _ in range(50):
        if vacuums_after > vacuums:
            break
        await asyncio.sleep(0.1)
        dead_after, vacuums_after = await _dead_rows(conn)
    assert vacuums_after == vacuums + 1
    assert dead_after < 1000
    # Nothing left to do: the next round does not vacuum again.
    health = {h.table: h for h in await upkeep.table_health(conn)}
    assert not vacuum_due(health["webhook_live"])
