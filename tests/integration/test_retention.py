"""A retention for every table that grows (issue 31, SPEC "History,
payloads and retention"): one maintenance round removes what is past each
table's retention and keeps what is not, and 0 keeps everything."""

from __future__ import annotations

import asyncpg
import pytest

from dispatcher.db import catalog, upkeep
from dispatcher.settings import RETENTION_NAMES, RETENTION_VARIABLES, Retention, Settings
from tests.helpers import add_endpoint

HOUR = 3600.0
WINDOW_S = 24 * HOUR
# Every table's retention one hour: what is two hours old goes, what is a
# minute old stays.
SHORT = Retention(**{name: HOUR for name in RETENTION_NAMES})
FOREVER = Retention(**{name: 0.0 for name in RETENTION_NAMES})
OLD, NEW = "2 hours", "1 minute"


async def _queue_rows(conn: asyncpg.Connection) -> None:
    ep, _ = await add_endpoint(conn, "http://127.0.0.1:9/r")
    await catalog.enqueue_bulk(conn, [(f"{s}-{age}", "t", "{}", None)
                                      for s in ("delivered", "dead_letter", "cancelled", "failed")
                                      for age in ("old", "new")])  # fmt: skip
    await conn.execute(
        "UPDATE webhook_queue SET status = split_part(event_id, '-', 1),"
        " created_at = now() - (CASE WHEN event_id LIKE '%-old' THEN $1 ELSE $2 END)::interval,"
        " updated_at = now() - (CASE WHEN event_id LIKE '%-old' THEN $1 ELSE $2 END)::interval,"
        " delivered_at = CASE WHEN event_id LIKE 'delivered%' THEN now()"
        "   - (CASE WHEN event_id LIKE '%-old' THEN $1 ELSE $2 END)::interval END",
        OLD, NEW,
    )  # fmt: skip
    # The attempt log goes by whole days (schema 023,
    # test_attempt_partitions): its old sample is older than the days made,
    # in the default partition, which is pruned row by row.
    await conn.execute(
        "INSERT INTO endpoint_latency (endpoint_id, response_ms, status_code, measured_at)"
        " VALUES ($1, 5, 200, now() - interval '3 days'),"
        " ($1, 5, 200, now() - $2::text::interval)",
        ep, NEW,
    )  # fmt: skip
    await conn.execute(
        "INSERT INTO breaker_transitions (endpoint_id, from_state, to_state, at)"
        " VALUES ($1, 'closed', 'open', now() - $2::text::interval),"
        " ($1, 'open', 'half_open', now() - $3::text::interval)",
        ep, OLD, NEW,
    )  # fmt: skip


async def _other_rows(conn: asyncpg.Connection) -> None:
    await conn.execute("INSERT INTO applications (id, name) VALUES ('acme', 'Acme')")
    for age, tag in ((OLD, "old"), (NEW, "new")):
        await conn.execute(
            "INSERT INTO messages (application_id, id, event_type, payload, created_at)"
            " VALUES ('acme', 'msg-' || $2, 't', '{}', now() - $1::text::interval)",
            age, tag,
        )  # fmt: skip
        await conn.execute(
            "INSERT INTO idempotency_keys (scope, key, request_hash, created_at)"
            " VALUES ('admin', $2, '\\x00', now() - $1::text::interval)",
            age, tag,
        )  # fmt: skip
        # expired that long ago
        await conn.execute(
            "INSERT INTO portal_codes (code_hash, application_id, expires_at)"
            " VALUES ($2::text::bytea, 'acme', now() - $1::text::interval)",
            age, tag,
        )  # fmt: skip
        await conn.execute(
            "INSERT INTO portal_sessions (session_hash, application_id, expires_at)"
            " VALUES ($2::text::bytea, 'acme', now() - $1::text::interval)",
            age, tag,
        )  # fmt: skip
    # An old message whose delivery is still to be made stays.
    await conn.execute(
        "INSERT INTO messages (application_id, id, event_type, payload, created_at)"
        " VALUES ('acme', 'failed-old', 't', '{}', now() - interval '2 hours')"
    )


TABLES = {  # what each table keeps after a round with SHORT
    "SELECT array_agg(event_id ORDER BY event_id) FROM webhook_queue": [
        "cancelled-new", "dead_letter-new", "delivered-new", "failed-new", "failed-old",
    ],
    "SELECT array_agg(id ORDER BY id) FROM messages": ["failed-old", "msg-new"],
    "SELECT array_agg(key ORDER BY key) FROM idempotency_keys": ["new"],
    "SELECT array_agg(convert_from(code_hash, 'UTF8')) FROM portal_codes": ["new"],
    "SELECT array_agg(convert_from(session_hash, 'UTF8')) FROM portal_sessions": ["new"],
    "SELECT array_agg(to_state) FROM breaker_transitions": ["half_open"],
    "SELECT count(*)::text FROM endpoint_latency": "1",
}  # fmt: skip


async def test_each_table_loses_what_is_past_its_retention(conn: asyncpg.Connection) -> None:
    await _queue_rows(conn)
    await _other_rows(conn)
    assert await upkeep.maintain(conn, WINDOW_S, SHORT) is True  # nothing left past it
    for query, kept in TABLES.items():
        assert await conn.fetchval(query) == kept, query


async def test_zero_keeps_every_table_forever(conn: asyncpg.Connection) -> None:
    await _queue_rows(conn)
    await _other_rows(conn)
    before = [await conn.fetchval(q) for q in TABLES]
    await upkeep.maintain(conn, WINDOW_S, FOREVER)
    assert [await conn.fetchval(q) for q in TABLES] == before


@pytest.mark.parametrize("name", RETENTION_NAMES)
def test_each_retention_is_a_setting(name: str) -> None:
    var = RETENTION_VARIABLES[name]
    assert getattr(Settings.from_env({var: "0"}).retention, name) == 0.0
    assert getattr(Settings.from_env({var: "120"}).retention, name) == 120.0
    assert getattr(Settings.from_env({}).retention, name) == getattr(Retention(), name)
