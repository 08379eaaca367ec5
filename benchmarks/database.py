"""The bench database: created fresh for a phase, filled with endpoints,
read back for results and pg_stat_database counters, dropped.

The only benchmark module that talks SQL to the bench database or creates
endpoints (with the dispatcher's own service call, as the CLI does); the
only one importing the dispatcher's service, inputs and settings. It
connects as the dispatcher does (dispatcher.db.connect_any), so a
multi-host DATABASE_URL with connect_timeout works here as in the CLI.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from dispatcher.db import DATABASE_ERRORS, connect_any
from dispatcher.ops import service, tenancy
from dispatcher.ops.inputs import spec_from_fields
from dispatcher.settings import Settings

from .errors import BenchError

DB_COUNTERS = (
    "xact_commit",
    "xact_rollback",
    "tup_returned",
    "tup_fetched",
    "tup_inserted",
    "tup_updated",
    "tup_deleted",
    "blks_read",
    "blks_hit",
)

# Everything below reads one endpoint set ($1), or all of them when $1 is NULL.
RESULT_SQL = """
SELECT count(*) AS rows,
       count(*) FILTER (WHERE status = 'delivered') AS delivered,
       coalesce(sum(attempt_count), 0) AS attempts,
       percentile_cont(0.5) WITHIN GROUP (
           ORDER BY extract(epoch FROM delivered_at - created_at) * 1000)
           FILTER (WHERE status = 'delivered') AS lag_p50_ms,
       percentile_cont(0.99) WITHIN GROUP (
           ORDER BY extract(epoch FROM delivered_at - created_at) * 1000)
           FILTER (WHERE status = 'delivered') AS lag_p99_ms,
       max(extract(epoch FROM delivered_at - created_at) * 1000)
           FILTER (WHERE status = 'delivered') AS lag_max_ms,
       extract(epoch FROM min(delivered_at)) AS first_delivered_ts,
       extract(epoch FROM max(delivered_at)) AS last_delivered_ts,
       count(*) FILTER (WHERE status = 'delivered' AND attempt_count <> 1) AS multi_attempt
FROM webhook_queue
WHERE $1::bigint[] IS NULL OR endpoint_id = ANY($1::bigint[])
"""

HTTP_SQL = """
SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY response_ms) AS p50,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY response_ms) AS p99,
       count(*) AS n
FROM endpoint_latency
WHERE $1::bigint[] IS NULL OR endpoint_id = ANY($1::bigint[])
"""

STATUS_SQL = """
SELECT endpoint_id, status, count(*) AS n FROM webhook_queue GROUP BY 1, 2 ORDER BY 1, 2
"""


def redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password:
        netloc = parts.netloc.replace(":" + parts.password + "@", ":***@")
        return urlunsplit(parts._replace(netloc=netloc))
    return url


async def create_database(admin_url: str, name: str) -> str:
    """Drops and creates database `name`; returns the server's version."""
    try:
        conn = await connect_any(admin_url, timeout=10)
    except DATABASE_ERRORS as exc:
        raise BenchError(f"cannot connect to {redact(admin_url)}: {exc}") from None
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await conn.execute(f'CREATE DATABASE "{name}"')
        version = await conn.fetchval("SHOW server_version")
    finally:
        await conn.close()
    return str(version)


async def drop_database(admin_url: str, name: str) -> None:
    conn = await connect_any(admin_url, timeout=10)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


async def db_counters(admin_url: str, name: str) -> dict[str, int] | None:
    """The bench database's cumulative pg_stat_database counters, read from
    another database so that reading them does not count."""
    conn = await connect_any(admin_url, timeout=10)
    try:
        row = await conn.fetchrow(
            f"SELECT {', '.join(DB_COUNTERS)} FROM pg_stat_database WHERE datname = $1", name
        )
    finally:
        await conn.close()
    return None if row is None else {k: int(row[k] or 0) for k in DB_COUNTERS}


async def wal_position(admin_url: str) -> int | None:
    """Bytes of WAL the server has written so far (the whole server's: on
    a quiet machine, the bench database's writes and their autovacuum)."""
    conn = await connect_any(admin_url, timeout=10)
    try:
        n = await conn.fetchval("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")
    except asyncpg.PostgresError:  # a standby, or no permission
        return None
    finally:
        await conn.close()
    return int(n)


async def add_endpoints(
    url: str,
    env: Mapping[str, str],
    specs: Sequence[Mapping[str, Any]],
    apps: Sequence[str | None] = (),
) -> list[tuple[int, str]]:
    """Creates endpoints in-process (1,000 `endpoint add` processes would take
    minutes) with the operation `dispatcher endpoint add` runs, in one
    transaction. Each spec holds endpoint fields, each app its application
    (created here the first time; None or none given: the default one);
    returns (id, secret) each."""
    box = Settings.from_env(dict(env)).secret_box()
    out = []
    apps = list(apps) or [None] * len(specs)
    conn = await connect_any(url, timeout=10)
    try:
        async with conn.transaction():
            for new in dict.fromkeys(a for a in apps if a is not None):
                await tenancy.add_application(conn, new)
            for fields, app in zip(specs, apps, strict=True):
                doc = await service.add_endpoint(conn, spec_from_fields(fields), box=box, app=app)
                out.append((int(doc["id"]), str(doc["secret"])))
    finally:
        await conn.close()
    return out


async def db_results(url: str, endpoint_ids: list[int] | None = None) -> dict[str, Any]:
    """Delivered rows, attempts, lag and HTTP percentiles of the given
    endpoints (all when None), and the status counts of every endpoint."""
    conn = await connect_any(url, timeout=10)
    try:
        row = await conn.fetchrow(RESULT_SQL, endpoint_ids)
        http = await conn.fetchrow(HTTP_SQL, endpoint_ids)
        per = await conn.fetch(STATUS_SQL)
    finally:
        await conn.close()
    assert row is not None and http is not None
    out: dict[str, Any] = {k: (float(v) if isinstance(v, float) else v) for k, v in row.items()}
    for k in ("lag_p50_ms", "lag_p99_ms", "lag_max_ms", "first_delivered_ts", "last_delivered_ts"):
        out[k] = None if row[k] is None else float(row[k])
    for q in ("p50", "p99"):
        out[f"http_{q}_ms"] = None if http[q] is None else float(http[q])
    out["latency_samples"] = http["n"]
    by_ep: dict[int, dict[str, int]] = {}
    for r in per:
        by_ep.setdefault(int(r["endpoint_id"]), {})[r["status"]] = int(r["n"])
    out["by_endpoint"] = by_ep
    return out


BULK_SQL = """
INSERT INTO webhook_live (endpoint_id, event_id, event_type, payload)
SELECT e.ids[1 + n % cardinality(e.ids)], $2 || n, $3, $4::json
FROM (SELECT $1::bigint[] AS ids) e, generate_series(0, $5 - 1) AS n
"""


async def bulk_queue(
    url: str, endpoint_ids: list[int], events: int, *, prefix: str, event_type: str, payload: str
) -> float:
    """`events` pending rows spread over the endpoints in turn, written by
    one INSERT ... SELECT (a backlog as fast as the database takes it, not
    the producers' path), then analyzed; returns the seconds it took. Then a
    CHECKPOINT (when allowed), so that a phase does not pay for the WAL of
    the one before it."""
    conn = await connect_any(url, timeout=10)
    try:
        t0 = time.perf_counter()
        await conn.execute(BULK_SQL, endpoint_ids, prefix, event_type, payload, events)
        await conn.execute("ANALYZE webhook_live")
        took = time.perf_counter() - t0
        with contextlib.suppress(asyncpg.InsufficientPrivilegeError):
            await conn.execute("CHECKPOINT")
        return took
    finally:
        await conn.close()


def status_totals(by_ep: dict[int, dict[str, int]]) -> dict[str, int]:
    """Rows per status over all endpoints, from db_results' by_endpoint."""
    out: dict[str, int] = {}
    for counts in by_ep.values():
        for k, v in counts.items():
            out[k] = out.get(k, 0) + v
    return out


FINISHED_SQL = "SELECT count(*) FROM webhook_queue WHERE status IN ('delivered', 'dead_letter')"
OUTCOME_SQL = """
SELECT count(*) FILTER (WHERE status = 'delivered') AS delivered,
       count(*) FILTER (WHERE status = 'dead_letter') AS dead,
       coalesce(sum(attempt_count), 0) AS attempts,
       (SELECT count(*) FROM breaker_transitions WHERE to_state = 'open') AS opened
FROM webhook_queue
"""


class Progress:
    """One connection kept open while a worker runs: how far it got."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._conn: asyncpg.Connection | None = None

    async def __aenter__(self) -> Progress:
        self._conn = await connect_any(self._url, timeout=10)
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._conn is not None:
            await self._conn.close()

    async def finished(self) -> int:
        """Rows delivered or dead."""
        assert self._conn is not None
        n: int = await self._conn.fetchval(FINISHED_SQL)
        return n

    async def outcome(self) -> dict[str, int]:
        """Delivered, dead, attempts spent, breaker openings."""
        assert self._conn is not None
        row = await self._conn.fetchrow(OUTCOME_SQL)
        assert row is not None
        return {k: int(row[k]) for k in ("delivered", "dead", "attempts", "opened")}
