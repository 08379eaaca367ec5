"""Schema 016 on a database at 015 holding endpoints and deliveries: the
switch starts at `probe` (a deployment that upgrades behaves as before: no
NOTIFY from producers), and the recreated dispatcher_enqueue_app keeps 013's
named arguments and 011's filter on endpoints of kind 'webhook'."""

from __future__ import annotations

import asyncio

import asyncpg

from dispatcher import db
from tests.releases import build_release


async def test_migration_016_starts_in_probe_mode_and_keeps_the_fan_out(
    empty_db_url: str,
) -> None:
    conn = await asyncpg.connect(empty_db_url)
    seen: list[str] = []
    try:
        await build_release(conn, 15)
        eid = await conn.fetchval(
            "INSERT INTO endpoints (url, secret) VALUES ('https://a.example/1', 'whsec_x')"
            " RETURNING id"
        )
        await conn.execute(
            "INSERT INTO endpoints (url, secret, kind, ops_scope)"
            " VALUES ('https://a.example/ops', 'whsec_x', 'ops', 'operator')"
        )
        [before] = await conn.fetchval("SELECT dispatcher_enqueue('t', '{}', 'e1')")
        await conn.execute(
            "INSERT INTO webhook_queue (endpoint_id, event_id, event_type, payload, status)"
            " VALUES ($1, 'held-1', 't', '{}', 'held')",
            eid,
        )

        assert (await db.migrate(conn))[0] == "016_wake.sql"

        assert await conn.fetchval("SELECT wake FROM dispatcher_settings") == "probe"
        await conn.add_listener("dispatcher_due", lambda *a: seen.append(str(a[2])))
        assert await conn.fetchval("SELECT dispatcher_enqueue('t', '{}', 'e1')") == [before]
        [after] = await conn.fetchval("SELECT dispatcher_enqueue('t', '{}', 'e2')")
        assert after > before
        kinds = await conn.fetch(
            "SELECT DISTINCT e.kind FROM webhook_queue q JOIN endpoints e ON e.id = q.endpoint_id"
        )
        assert [r["kind"] for r in kinds] == ["webhook"]
        ids = await conn.fetchval(
            "SELECT dispatcher_enqueue_app('default', 't', '{}', 'e3', channels => NULL,"
            " deliver_at => now(), hold => false)"
        )
        assert len(ids) == 1
        assert await conn.fetchval("SELECT dispatcher_release_event('default', 'held-1')") == [
            await conn.fetchval("SELECT id FROM webhook_queue WHERE event_id = 'held-1'")
        ]
        await conn.execute("SELECT 1")
        await asyncio.sleep(0.2)
        assert seen == []  # probe mode: as before the migration
        assert await db.migrate(conn) == []
    finally:
        await conn.close()
