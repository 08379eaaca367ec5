"""Schema 011 on a database at 010 holding endpoints and deliveries: every
existing endpoint is a customer's (kind 'webhook'), the enqueue functions
still reach them, and nothing is emitted until an ops webhook exists."""

from __future__ import annotations

import asyncpg
import pytest

from dispatcher import db
from tests.releases import build_release


async def test_migration_011_keeps_every_endpoint_a_webhook(empty_db_url: str) -> None:
    conn = await asyncpg.connect(empty_db_url)
    try:
        await build_release(conn, 10)
        eid = await conn.fetchval(
            "INSERT INTO endpoints (url, secret) VALUES ('https://a.example/1', 'whsec_x')"
            " RETURNING id"
        )
        [before] = await conn.fetchval("SELECT dispatcher_enqueue('t', '{}', 'e1')")

        assert (await db.migrate(conn))[0] == "011_ops_webhooks.sql"

        row = await conn.fetchrow("SELECT kind, ops_scope FROM endpoints WHERE id = $1", eid)
        assert tuple(row) == ("webhook", None)
        assert await conn.fetchval("SELECT dispatcher_enqueue('t', '{}', 'e1')") == [before]
        [after] = await conn.fetchval("SELECT dispatcher_enqueue('t', '{}', 'e2')")
        assert after > before
        emitted = "SELECT dispatcher_ops_emit(ARRAY['endpoint.created'], ARRAY[$1::bigint])"
        assert await conn.fetchval(emitted, eid) == 0
        with pytest.raises(asyncpg.CheckViolationError):
            await conn.execute("UPDATE endpoints SET kind = 'ops' WHERE id = $1", eid)
        assert await db.migrate(conn) == []
        # A producer's event reaches no ops webhook.
        await conn.execute(
            "INSERT INTO endpoints (url, secret, kind, ops_scope)"
            " VALUES ('https://a.example/ops', 'whsec_x', 'ops', 'operator')"
        )
        [only] = await conn.fetchval("SELECT dispatcher_enqueue('t', '{}', 'e3')")
        assert (
            await conn.fetchval("SELECT endpoint_id FROM webhook_queue WHERE id = $1", only) == eid
        )
    finally:
        await conn.close()
