"""Schema 009 on a database an older release left: out-of-range settings
are clamped, success_body patterns RE2 cannot compile are set aside
(disabled with the reason, their rows kept), and error texts that held
URLs or receiver bytes keep only their class."""

from __future__ import annotations

import math

import asyncpg

from dispatcher import db
from tests.releases import build_release

LEAKY = "https://p.example/c?click_id=CLICK-SECRET-123&email=victim%40example.com"


async def _endpoint(conn: asyncpg.Connection, url: str, **columns: object) -> int:
    eid: int = await conn.fetchval(
        "INSERT INTO endpoints (url, secret) VALUES ($1, 'whsec_x') RETURNING id", url
    )
    for column, value in columns.items():
        await conn.execute(f"UPDATE endpoints SET {column} = $2 WHERE id = $1", eid, value)
    return eid


async def test_migration_009_clamps_sets_aside_and_scrubs(empty_db_url: str) -> None:
    conn = await asyncpg.connect(empty_db_url)
    try:
        await build_release(conn, 8)
        huge = await _endpoint(conn, "https://a.example/1", rate_per_s=1e308, burst=2**31 - 1,
                               max_in_flight=2**31 - 1, timeout_ms=1, max_attempts=1000,
                               retry_cap_ms=2**31 - 1, cooldown_s=math.inf)  # fmt: skip
        nan = await _endpoint(conn, "https://a.example/2", rate_per_s=math.nan, cooldown_s=0.01)
        lookaround = await _endpoint(conn, "https://a.example/3", success_body="(?=ok)ok")
        fine = await _endpoint(conn, "https://a.example/4", success_body='"ok":\\s*true')
        await conn.execute(
            "INSERT INTO webhook_queue (endpoint_id, event_id, event_type, payload, status,"
            " last_error) VALUES"
            " ($1, 'e1', 't', '{}', 'dead_letter', $2),"
            " ($1, 'e2', 't', '{}', 'failed', 'HTTP 503'),"
            " ($1, 'e3', 't', '{}', 'failed', $3),"
            " ($1, 'e4', 't', '{}', 'failed', 'timeout after 15000 ms'),"
            " ($4, 'e5', 't', '{}', 'pending', NULL)",
            huge,
            f"ClientResponseError: 400, message='Invalid HTTP status line: <b>', url='{LEAKY}'",
            f"connection error: Cannot connect to host p.example:443 ssl:default [{LEAKY}]",
            lookaround,
        )
        await conn.execute(
            "INSERT INTO endpoint_latency (endpoint_id, response_ms, error) VALUES ($1, 5, $2)",
            huge,
            f"ServerDisconnectedError: {LEAKY}",
        )

        assert (await db.migrate(conn))[0] == "009_limits.sql"

        row = await conn.fetchrow("SELECT * FROM endpoints WHERE id = $1", huge)
        assert (row["rate_per_s"], row["burst"], row["max_in_flight"], row["timeout_ms"],
                row["max_attempts"], row["retry_cap_ms"], row["cooldown_s"]) == (
            100000, 100000, 10000, 100, 100, 604800000, 86400)  # fmt: skip
        row = await conn.fetchrow("SELECT * FROM endpoints WHERE id = $1", nan)
        assert (row["rate_per_s"], row["cooldown_s"]) == (100000, 1)
        aside = await conn.fetchrow("SELECT * FROM endpoints WHERE id = $1", lookaround)
        assert not aside["enabled"] and "RE2" in aside["disabled_reason"]
        assert aside["success_body"] == "(?=ok)ok"  # kept, for the operator to fix
        ok = await conn.fetchrow("SELECT * FROM endpoints WHERE id = $1", fine)
        assert ok["enabled"] and ok["disabled_reason"] is None
        errors = dict(await conn.fetch("SELECT event_id, last_error FROM webhook_queue"))
        assert errors == {
            "e1": "bad response",
            "e2": "HTTP 503",
            "e3": "connection error",
            "e4": "timeout after 15000 ms",
            "e5": None,
        }
        assert await conn.fetchval("SELECT error FROM endpoint_latency") == (
            "connection reset: closed before the response"
        )
        dumped = await conn.fetchval(
            "SELECT string_agg(t::text, ' ') FROM (SELECT * FROM webhook_queue) t"
        )
        assert "CLICK-SECRET" not in dumped and "victim" not in dumped and "<b>" not in dumped
        assert await conn.fetchval("SELECT count(*) FROM webhook_queue") == 5
        assert await db.migrate(conn) == []
    finally:
        await conn.close()
