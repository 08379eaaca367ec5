"""Schema 013 on a database at 012 holding data: endpoints get the postback
columns at their defaults, queue rows keep their statuses, and the
recreated dispatcher_enqueue_app still takes 012's named arguments."""

from __future__ import annotations

import asyncpg

from dispatcher import db
from tests.releases import build_release


async def test_migration_013_keeps_rows_and_named_arguments(empty_db_url: str) -> None:
    conn = await asyncpg.connect(empty_db_url)
    try:
        await build_release(conn, 12)
        eid = await conn.fetchval(
            "INSERT INTO endpoints (url, secret) VALUES ('https://a.example/pb', 'whsec_x')"
            " RETURNING id"
        )
        await conn.execute(
            "INSERT INTO webhook_queue (endpoint_id, event_id, event_type, payload, status)"
            " VALUES ($1, 'e1', 't', '{}', 'dead_letter'), ($1, 'e2', 't', '{}', 'pending')",
            eid,
        )
        await db.migrate(conn)
        row = await conn.fetchrow(
            "SELECT macro_style, value_map, disable_after, disable_within_s FROM endpoints"
        )
        assert tuple(row) == ("brace", None, None, None)
        statuses = await conn.fetch("SELECT event_id, status FROM webhook_queue ORDER BY id")
        assert [tuple(r) for r in statuses] == [("e1", "dead_letter"), ("e2", "pending")]
        assert await conn.fetchval("SELECT failure_times FROM endpoint_health") == []
        ids = await conn.fetchval(
            "SELECT dispatcher_enqueue_app('default', 't', '{}', 'e3', channels => NULL,"
            " deliver_at => now())"
        )
        assert len(ids) == 1
        held = await conn.fetchval(
            "SELECT dispatcher_enqueue_app('default', 't', '{}', 'e4', hold => true)"
        )
        assert await conn.fetchval("SELECT status FROM webhook_queue WHERE id = $1", held[0]) == (
            "held"
        )
        with_bad_status = "UPDATE webhook_queue SET status = 'lost' WHERE event_id = 'e1'"
        try:
            await conn.execute(with_bad_status)
        except asyncpg.CheckViolationError:
            pass
        else:
            raise AssertionError("the status CHECK let 'lost' through")
    finally:
        await conn.close()
