"""The data-access module: the only place that runs SQL.

Queries live in queries.sql as named blocks and migrations in schema/; this
module binds them to asyncpg connections. It never makes delivery decisions:
callers hand it decided values (claims budgets, outcomes, breaker states).
"""

from __future__ import annotations

import importlib.resources
import re
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg
import orjson
from asyncpg.pool import PoolConnectionProxy

from .breaker import Breaker, BreakerState
from .embedded import with_database
from .errors import BadInput, OperationalError, UnknownEndpoint
from .models import Delivery, Endpoint, EndpointSpec, Outcome
from .secretbox import SecretBox, seal, unseal
from .signing import SIGNING_KEY_PREFIX, public_key

# What every query function takes: a plain connection or one from a pool.
Conn = asyncpg.Connection | PoolConnectionProxy

MIGRATION_LOCK = 0x6469737061746368  # "dispatch"
MAINTENANCE_LOCK = MIGRATION_LOCK + 1
_MIGRATION_NAME = re.compile(r"^(\d{3})_[a-z0-9_]+\.sql$")


def _load_queries() -> dict[str, str]:
    text = importlib.resources.files("dispatcher").joinpath("queries.sql").read_text()
    queries: dict[str, str] = {}
    name: str | None = None
    for line in text.splitlines():
        if line.startswith("-- name: "):
            name = line.removeprefix("-- name: ").strip()
            queries[name] = ""
        elif name is not None:
            queries[name] += line + "\n"
    return {k: v.strip().rstrip(";") for k, v in queries.items()}


Q = _load_queries()


# ---------------------------------------------------------------- connecting


async def connect(url: str) -> asyncpg.Connection:
    try:
        return await asyncpg.connect(url, timeout=10)
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        raise OperationalError(f"cannot connect to the database: {_one_line(exc)}") from None


async def _keep_session(_: asyncpg.Connection) -> None:
    """Pool reset hook that does nothing: our pooled connections never change
    session state (no LISTEN, no SET), so the default RESET ALL round trip on
    every release would be pure cost on the hot path."""


async def create_pool(url: str, *, size: int = 4, synchronous_commit: bool = True) -> asyncpg.Pool:
    settings = {} if synchronous_commit else {"synchronous_commit": "off"}
    try:
        pool = await asyncpg.create_pool(
            url,
            min_size=1,
            max_size=size,
            timeout=10,
            reset=_keep_session,
            server_settings=settings,
        )
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        raise OperationalError(f"cannot connect to the database: {_one_line(exc)}") from None
    assert pool is not None
    return pool


async def recreate_database(server_url: str, name: str) -> str:
    """Drops and creates database `name` on the server, migrated; returns its URL.

    For the demo and the benchmarks, which want a clean slate each run.
    """
    admin = await connect(server_url)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    url = with_database(server_url, name)
    conn = await connect(url)
    try:
        await migrate(conn)
    finally:
        await conn.close()
    return url


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


# ---------------------------------------------------------------- migrations


def _migrations() -> list[tuple[int, str, str]]:
    found = []
    for entry in importlib.resources.files("dispatcher.schema").iterdir():
        m = _MIGRATION_NAME.match(entry.name)
        if m:
            found.append((int(m.group(1)), entry.name, entry.read_text()))
    if not found:  # pragma: no cover - a broken install
        raise OperationalError(f"no migrations found in {Path(__file__).parent / 'schema'}")
    return sorted(found)


async def migrate(conn: Conn) -> list[str]:
    """Applies pending migrations; several processes may call it at once."""
    applied_now: list[str] = []
    # A session lock, held across the per-migration transactions, serialises
    # concurrent migrators; the second one finds everything applied.
    await conn.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK)
    try:
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS dispatcher_migrations ("
            " version integer PRIMARY KEY, name text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        done = {r["version"] for r in await conn.fetch("SELECT version FROM dispatcher_migrations")}
        for version, name, sql in _migrations():
            if version in done:
                continue
            async with conn.transaction():
                await conn.execute(sql)
                await conn.execute(
                    "INSERT INTO dispatcher_migrations (version, name) VALUES ($1, $2)",
                    version,
                    name,
                )
            applied_now.append(name)
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK)
    return applied_now


async def migrations_current(conn: Conn) -> bool:
    try:
        done = {r["version"] for r in await conn.fetch("SELECT version FROM dispatcher_migrations")}
    except asyncpg.UndefinedTableError:
        return False
    return all(v in done for v, _, _ in _migrations())


async def require_schema(conn: Conn) -> None:
    if not await migrations_current(conn):
        raise OperationalError("the database is not migrated: run `dispatcher migrate` first")


# ---------------------------------------------------------------- endpoints


def _headers(raw: str | None) -> tuple[tuple[str, str], ...]:
    return tuple(orjson.loads(raw).items()) if raw else ()


_SETTINGS = ("rate_per_s", "burst", "max_in_flight", "timeout_ms", "max_attempts",
             "retry_base_ms", "retry_cap_ms", "failure_threshold", "cooldown_s")  # fmt: skip


def _settings(row: asyncpg.Record) -> dict[str, Any]:
    """The endpoint settings both Endpoint and EndpointSpec carry."""
    return {
        "url": row["url"],
        "event_types": tuple(row["event_types"]),
        "headers": _headers(row["headers"]),
        **{k: row[k] for k in _SETTINGS},
    }


def endpoint_from_row(
    row: asyncpg.Record, old_secrets: Sequence[str] = (), box: SecretBox | None = None
) -> Endpoint:
    return Endpoint(
        id=row["id"],
        secrets=tuple(unseal(box, s) for s in (row["secret"], *old_secrets)),
        enabled=row["enabled"],
        **_settings(row),
    )


def endpoint_public(row: asyncpg.Record, *, secret: str | None = None) -> dict[str, Any]:
    """An endpoint as users see it: the secret only when just created or rotated."""
    out = {k: row[k] for k in row.keys() if k != "secret"}
    out["event_types"] = list(row["event_types"])
    out["headers"] = dict(_headers(row["headers"]))
    if secret is not None:
        out["secret"] = secret
        if secret.startswith(SIGNING_KEY_PREFIX):
            out["public_key"] = public_key(secret)
    return out


async def add_endpoint(
    conn: Conn, spec: EndpointSpec, secret: str, box: SecretBox | None = None
) -> asyncpg.Record:
    row = await conn.fetchrow(
        Q["insert_endpoint"],
        spec.url,
        seal(box, secret),
        list(spec.event_types),
        spec.rate_per_s,
        spec.burst,
        spec.max_in_flight,
        spec.timeout_ms,
        spec.max_attempts,
        spec.retry_base_ms,
        spec.retry_cap_ms,
        spec.failure_threshold,
        spec.cooldown_s,
        orjson.dumps(dict(spec.headers)).decode(),
    )
    assert row is not None
    return row


async def list_endpoints(conn: Conn) -> list[asyncpg.Record]:
    return list(await conn.fetch(Q["list_endpoints"]))


async def get_endpoint(conn: Conn, endpoint_id: int) -> asyncpg.Record:
    row = await conn.fetchrow(Q["get_endpoint"], endpoint_id)
    if row is None:
        raise UnknownEndpoint(f"no endpoint with id {endpoint_id}")
    return row


async def set_enabled(
    conn: Conn, endpoint_id: int, enabled: bool, reason: str | None = None
) -> asyncpg.Record:
    row = await conn.fetchrow(Q["set_enabled"], endpoint_id, enabled, reason or "disabled by user")
    if row is None:
        raise UnknownEndpoint(f"no endpoint with id {endpoint_id}")
    if enabled:
        await conn.execute(Q["notify_due"])
    return row


async def rotate_secret(
    conn: Conn, endpoint_id: int, new_secret: str, grace_s: float, box: SecretBox | None = None
) -> asyncpg.Record:
    async with conn.transaction():
        old = await conn.fetchval(Q["lock_secret"], endpoint_id)
        if old is None:
            raise UnknownEndpoint(f"no endpoint with id {endpoint_id}")
        if grace_s > 0:
            await conn.execute(Q["keep_secret"], endpoint_id, old, grace_s)
        row = await conn.fetchrow(Q["rotate_secret"], endpoint_id, seal(box, new_secret))
        await conn.execute(Q["prune_secrets"])
    assert row is not None  # locked above
    return row


async def engine_endpoints(
    conn: Conn, box: SecretBox | None = None
) -> tuple[float, list[tuple[Endpoint, Breaker, str | None, float | None, float]]]:
    """Every endpoint with its breaker, for the engine's cache; and the DB clock."""
    rows = await conn.fetch(Q["engine_endpoints"])
    out = []
    db_now = 0.0
    for r in rows:
        db_now = r["db_now"]
        breaker = Breaker(
            state=BreakerState(r["state"] or "closed"),
            consecutive_failures=r["consecutive_failures"] or 0,
            opened_at=r["opened_at"],
            cooldown_s=r["cooldown_seconds"] or r["cooldown_s"],
        )
        endpoint = endpoint_from_row(r, r["old_secrets"], box)
        out.append((endpoint, breaker, r["probe_owner"], r["p95_ms"], r["paused_for_s"] or 0.0))
    return db_now, out


# ---------------------------------------------------------------- producing


async def enqueue(
    conn: Conn,
    event_type: str,
    payload: str,
    event_id: str | None = None,
    endpoint_id: int | None = None,
) -> list[int]:
    if endpoint_id is not None:
        await get_endpoint(conn, endpoint_id)
    try:
        ids = await conn.fetchval(Q["enqueue_one"], event_type, payload, event_id, endpoint_id)
    except (asyncpg.InvalidTextRepresentationError, asyncpg.InvalidParameterValueError) as exc:
        raise BadInput(f"cannot enqueue: {_one_line(exc)}") from None
    return list(ids)


async def enqueue_bulk(conn: Conn, events: Iterable[tuple[str, str, str, int | None]]) -> int:
    """COPY events (event_id, event_type, payload, endpoint_id) into a staging
    table, then fan them out in one INSERT … SELECT. Returns deliveries created."""
    events = list(events)
    wanted = sorted({e[3] for e in events if e[3] is not None})
    async with conn.transaction():
        if wanted:
            found = {r["id"] for r in await conn.fetch(Q["endpoint_ids"], wanted)}
            missing = [i for i in wanted if i not in found]
            if missing:
                raise UnknownEndpoint(f"no endpoint with id {missing[0]}")
        await conn.execute(Q["stage_events"])
        await conn.copy_records_to_table(
            "dispatcher_stage",
            records=events,
            columns=["event_id", "event_type", "payload", "endpoint_id"],
        )
        try:
            created: int = await conn.fetchval(Q["fan_out_staged"])
        except asyncpg.InvalidTextRepresentationError as exc:
            raise BadInput(f"invalid JSON payload: {_one_line(exc)}") from None
    return created


# ---------------------------------------------------------------- the hot path


async def claim(
    conn: Conn,
    *,
    endpoint_ids: list[int],
    budgets: list[int],
    leases_s: list[float],
    limit: int,
    worker: str,
) -> list[Delivery]:
    rows = await conn.fetch(Q["claim_batch"], endpoint_ids, budgets, leases_s, limit, worker)
    return [
        Delivery(
            id=r[0],
            endpoint_id=r[1],
            event_id=r[2],
            body=r[3].encode(),
            attempt_count=r[4],
            max_attempts=r[5],
        )
        for r in rows
    ]


async def record_outcomes(conn: Conn, outcomes: Sequence[Outcome], worker: str) -> list[float]:
    """Persists outcomes; returns the end-to-end lag (s) of each row delivered."""
    lags: list[float] = await conn.fetchval(
        Q["record_outcomes"],
        [o.delivery_id for o in outcomes],
        [o.endpoint_id for o in outcomes],
        [o.status.value for o in outcomes],
        [o.next_attempt_in_s for o in outcomes],
        [o.spent_attempt for o in outcomes],
        [o.status_code for o in outcomes],
        [o.response_ms for o in outcomes],
        [o.error for o in outcomes],
        worker,
    )
    return lags


async def lock_breakers(
    conn: Conn, endpoint_ids: list[int]
) -> dict[int, tuple[Breaker, float | None]]:
    rows = await conn.fetch(Q["lock_health"], endpoint_ids)
    return {
        r["endpoint_id"]: (
            Breaker(
                state=BreakerState(r["state"]),
                consecutive_failures=r["consecutive_failures"],
                opened_at=r["opened_at"],
                cooldown_s=r["cooldown_seconds"],
                last_failure_at=r["last_failure_at"],
                last_success_at=r["last_success_at"],
            ),
            r["p95_ms"],
        )
        for r in rows
    }


async def store_breakers(conn: Conn, breakers: dict[int, tuple[Breaker, int]]) -> None:
    ids = list(breakers)
    await conn.execute(
        Q["store_health"],
        ids,
        [breakers[i][0].state.value for i in ids],
        [breakers[i][0].consecutive_failures for i in ids],
        [breakers[i][0].opened_at for i in ids],
        [breakers[i][0].cooldown_s for i in ids],
        [breakers[i][1] for i in ids],
        [breakers[i][0].last_failure_at for i in ids],
        [breakers[i][0].last_success_at for i in ids],
    )


async def record_transitions(conn: Conn, transitions: list[tuple[int, str, str, float]]) -> None:
    if transitions:
        cols = list(zip(*transitions, strict=True))
        await conn.execute(Q["record_transitions"], *[list(c) for c in cols])


async def disable_gone(conn: Conn, endpoint_ids: list[int]) -> None:
    await conn.execute(Q["disable_gone"], endpoint_ids)


async def begin_probe(conn: Conn, endpoint_id: int, worker: str, stale_after_s: float) -> bool:
    return await conn.fetchval(Q["begin_probe"], endpoint_id, worker, stale_after_s) is not None


async def due_sendable(conn: Conn) -> bool:
    return bool(await conn.fetchval(Q["due_sendable"]))


# ---------------------------------------------------------------- maintenance


async def maintain(
    conn: Conn,
    window_s: float,
    retention_s: float | None = None,
    *,
    cursor: int = 0,
    batch: int = 10_000,
    max_batches: int = 20,
) -> int | None:
    """Percentiles and pruning, by one worker at a time (an advisory lock).

    Returns the retention cursor to resume from next time (None when another
    worker holds the lock). Each delete is its own short statement, so no
    long lock ever meets a claim.
    """
    async with conn.transaction():
        got = await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", MAINTENANCE_LOCK)
        if not got:
            return None
        await conn.execute(Q["prune_latency"], window_s, batch)
        await conn.execute(Q["refresh_percentiles"], window_s)
        await conn.execute(Q["prune_secrets"])
    if retention_s is None:
        return cursor
    for _ in range(max_batches):
        cursor, _, done = await prune_delivered_batch(conn, retention_s, cursor, batch)
        if done:
            return 0
    return cursor


async def prune_delivered_batch(
    conn: Conn, retention_s: float, cursor: int, batch: int = 10_000
) -> tuple[int, int, bool]:
    """One retention step: (next cursor, rows deleted, walk finished)."""
    row = await conn.fetchrow(Q["prune_delivered"], retention_s, batch, cursor)
    assert row is not None
    if row["last_id"] is None:
        return 0, row["deleted"], True
    return row["last_id"], row["deleted"], row["reached_young"]


async def refresh_percentiles(conn: Conn, window_s: float) -> None:
    await conn.execute(Q["refresh_percentiles"], window_s)


# ---------------------------------------------------------------- reports


async def health_summary(conn: Conn) -> dict[str, Any]:
    row = await conn.fetchrow(Q["health_summary"])
    assert row is not None
    out = dict(row)
    avg = out["avg_delivery_ms_last_hour"]
    out["avg_delivery_ms_last_hour"] = None if avg is None else round(float(avg), 1)
    return out


async def endpoint_health(
    conn: Conn, window_s: float, *, refresh: bool = True
) -> list[dict[str, Any]]:
    """Per endpoint breaker and percentiles; `refresh` recomputes the
    percentiles first (a scan of the window) instead of reading the stored ones."""
    if refresh:
        await refresh_percentiles(conn, window_s)
    return [dict(r) for r in await conn.fetch(Q["endpoint_health_report"])]


async def dead_letters_by_endpoint(conn: Conn, hours: float) -> list[asyncpg.Record]:
    return list(await conn.fetch(Q["dead_letters_by_endpoint"], hours * 3600.0))


async def replay_ids(conn: Conn, ids: list[int]) -> int:
    async with conn.transaction():
        rows = await conn.fetch(Q["replay_ids"], ids)
        if rows:
            await conn.execute(Q["notify_due"])
    return len(rows)


async def replay_endpoint(
    conn: Conn,
    endpoint_id: int,
    since: datetime | None,
    until: datetime | None,
    limit: int = 10_000,
) -> int:
    await get_endpoint(conn, endpoint_id)
    async with conn.transaction():
        rows = await conn.fetch(Q["replay_endpoint"], endpoint_id, since, until, limit)
        if rows:
            await conn.execute(Q["notify_due"])
    return len(rows)


async def deliveries_for_event(conn: Conn, event_id: str) -> list[dict[str, Any]]:
    return [dict(r) for r in await conn.fetch(Q["deliveries_for_event"], event_id)]


async def update_endpoint(conn: Conn, endpoint_id: int, spec: EndpointSpec,
                          changed: set[str]) -> asyncpg.Record:  # fmt: skip
    """Applies the fields named in `changed` from an already-validated spec."""

    def pick(name: str) -> Any:
        return getattr(spec, name) if name in changed else None

    event_types = list(spec.event_types) if "event_types" in changed else None
    row = await conn.fetchrow(
        Q["update_endpoint"],
        endpoint_id,
        pick("url"),
        event_types,
        spec.rate_per_s,
        spec.burst,
        pick("max_in_flight"),
        pick("timeout_ms"),
        pick("max_attempts"),
        pick("retry_base_ms"),
        pick("retry_cap_ms"),
        pick("failure_threshold"),
        pick("cooldown_s"),
        "rate_per_s" in changed,
        "burst" in changed,
        orjson.dumps(dict(spec.headers)).decode() if "headers" in changed else None,
    )
    if row is None:
        raise UnknownEndpoint(f"no endpoint with id {endpoint_id}")
    return row


def spec_from_row(row: asyncpg.Record) -> EndpointSpec:
    return EndpointSpec(**_settings(row))


async def dead_letters_list(
    conn: Conn, endpoint_id: int | None, limit: int
) -> list[dict[str, Any]]:
    return [dict(r) for r in await conn.fetch(Q["dead_letters_list"], endpoint_id, limit)]


async def attempts_for_event(conn: Conn, event_id: str) -> list[dict[str, Any]]:
    return [dict(r) for r in await conn.fetch(Q["attempts_for_event"], event_id)]


async def metrics_view(conn: Conn) -> dict[str, Any]:
    row = await conn.fetchrow(Q["metrics_view"])
    assert row is not None
    return dict(row)


async def ping(conn: Conn) -> None:
    await conn.fetchval("SELECT 1")


async def timeline(conn: Conn, span_s: float, bucket_s: float) -> list[dict[str, Any]]:
    return [dict(r) for r in await conn.fetch(Q["timeline"], span_s, bucket_s)]


async def heartbeat(conn: Conn, worker: str, host: str, pid: int, live_s: float) -> list[str]:
    return [r[0] for r in await conn.fetch(Q["heartbeat"], worker, host, pid, live_s)]


async def leave(conn: Conn, worker: str) -> None:
    await conn.execute(Q["leave"], worker)


async def pause_endpoints(conn: Conn, pauses: dict[int, float]) -> None:
    ids = sorted(pauses)
    await conn.execute(Q["pause_endpoints"], ids, [pauses[i] for i in ids])
