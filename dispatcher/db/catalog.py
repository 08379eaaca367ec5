"""Data access for everything but the worker's hot path: endpoints, events,
dead letters and the reports' reads (applications and credentials:
db.applications).

Binds named queries (queries.sql) to connections and hands back typed rows
(rows.py). It validates nothing a user typed (the service layer does) and
renders nothing (the entry points do).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import asyncpg
import orjson

from dispatcher.core.destinations import masked_url, seal_url
from dispatcher.core.errors import BadInput, Conflict, UnknownEndpoint
from dispatcher.core.models import EndpointSpec
from dispatcher.core.rows import (
    AlertInputs,
    Attempt,
    BreakerTransition,
    DeadLetter,
    DeadLetterGroup,
    DeliveryView,
    EndpointHealth,
    EndpointRecord,
    FailedAttempt,
    HealthSummary,
    LatencyPoint,
    QueueGauges,
    TimelinePoint,
)
from dispatcher.core.secretbox import PREFIX, SecretBox, seal
from dispatcher.db import Conn, Q, applications, latency, one_line, wake
from dispatcher.db.columns import Headers, seal_headers, settings_from_row

R = TypeVar("R")
DEFAULT_APP = "default"


def _typed(cls: type[R], rows: Iterable[asyncpg.Record]) -> list[R]:
    return [cls(**dict(r)) for r in rows]


def _one(cls: type[R], row: asyncpg.Record | None) -> R:
    assert row is not None  # aggregate queries always return a row
    return cls(**dict(row))


# ---------------------------------------------------------------- endpoints


def _record(row: asyncpg.Record | None, endpoint_id: int | None = None) -> EndpointRecord:
    if row is None:
        raise UnknownEndpoint(f"no endpoint with id {endpoint_id}")
    return EndpointRecord(
        id=row["id"],
        url=row["url"],
        sealed_secret=row["secret"],
        application_id=row["application_id"],
        name=row["name"],
        description=row["description"],
        enabled=row["enabled"],
        disabled_reason=row["disabled_reason"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        **settings_from_row(row),
    )


def _sealed_once(box: SecretBox | None, value: str | None) -> str | None:
    """A credential as stored: sealed, unless it already is (an update
    carries the stored value of what it does not change)."""
    if value is None or value.startswith(PREFIX):
        return value
    return seal(box, value)


def _settings_args(spec: EndpointSpec, box: SecretBox | None) -> tuple[object, ...]:
    """The settings and label columns of insert_endpoint and update_endpoint, in order."""
    return (
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
        spec.name,
        spec.description,
        spec.method,
        spec.body,
        spec.success_body,
        spec.filter,
        spec.ordering,
        spec.ordering_key,
        _sealed_once(box, spec.client_cert),
        _sealed_once(box, spec.client_key),
        spec.macro_style,
        spec.value_map,
        spec.disable_after,
        spec.disable_within_s,
    )


def _headers_json(headers: Headers) -> str:
    return orjson.dumps(dict(headers)).decode()


async def add_endpoint(
    conn: Conn,
    spec: EndpointSpec,
    secret: str,
    box: SecretBox | None = None,
    app: str = DEFAULT_APP,
    *,
    within_quota: bool = False,
) -> EndpointRecord:
    """`within_quota`: refused (Conflict) when the application already has
    its max_endpoints live endpoints."""
    async with conn.transaction():
        if within_quota:
            await check_endpoint_quota(conn, app)
        try:
            row = await conn.fetchrow(
                Q["insert_endpoint"],
                seal_url(box, spec.url),
                seal(box, secret),
                *_settings_args(spec, box),
                _headers_json(seal_headers(box, spec.headers)),
                app,
            )
        except asyncpg.ForeignKeyViolationError:
            raise BadInput(f"unknown application: {app}") from None
        if row is None:
            raise BadInput(f"unknown application: {app}")
    return _record(row)


async def check_endpoint_quota(conn: Conn, app: str) -> None:
    """Locks the application's row until the insert commits, then counts
    (a statement of its own, so it sees what a create it waited for added)."""
    row = await conn.fetchrow(Q["lock_endpoint_quota"], app)
    if row is None:
        raise BadInput(f"unknown application: {app}")
    cap = row["max_endpoints"]
    if cap is not None and await conn.fetchval(Q["live_endpoint_count"], app) >= cap:
        raise Conflict(
            f"application {app} has reached its quota of {cap} endpoints and ops webhooks"
            " (max_endpoints):"
            " delete one, or ask the operator to raise it"
        )


async def update_endpoint(
    conn: Conn,
    endpoint_id: int,
    spec: EndpointSpec,
    stored_headers: Headers,
    box: SecretBox | None = None,
) -> EndpointRecord:
    """Writes every setting of an already-validated, complete spec; the
    headers as given, already sealed (spec.headers is not read)."""
    row = await conn.fetchrow(
        Q["update_endpoint"],
        endpoint_id,
        seal_url(box, spec.url),
        *_settings_args(spec, box),
        _headers_json(stored_headers),
    )
    return _record(row, endpoint_id)


async def list_endpoints(conn: Conn, app: str | None = None) -> list[EndpointRecord]:
    return [_record(r) for r in await conn.fetch(Q["list_endpoints"], app)]


async def check_owner(conn: Conn, endpoint_id: int, app: str | None) -> None:
    """UnknownEndpoint unless the endpoint is live and, with `app`, that
    application's: another application's endpoint reads exactly like one
    that does not exist."""
    owner = await conn.fetchval(Q["endpoint_application"], endpoint_id)
    if owner is None or (app is not None and owner != app):
        raise UnknownEndpoint(f"no endpoint with id {endpoint_id}")


async def get_endpoint(conn: Conn, endpoint_id: int, *, lock: bool = False) -> EndpointRecord:
    row = await conn.fetchrow(Q["lock_endpoint" if lock else "get_endpoint"], endpoint_id)
    return _record(row, endpoint_id)


async def set_enabled(
    conn: Conn, endpoint_id: int, enabled: bool, reason: str | None = None
) -> EndpointRecord:
    row = await conn.fetchrow(Q["set_enabled"], endpoint_id, enabled, reason or "disabled by user")
    record = _record(row, endpoint_id)
    if enabled:
        await conn.execute(Q["notify_due"])
    return record


async def rotate_secret(
    conn: Conn, endpoint_id: int, new_secret: str, grace_s: float, box: SecretBox | None = None
) -> EndpointRecord:
    """The new secret signs from now on; the old one alongside it for grace_s."""
    async with conn.transaction():
        old = await conn.fetchval(Q["lock_secret"], endpoint_id)
        if old is None:
            raise UnknownEndpoint(f"no endpoint with id {endpoint_id}")
        if grace_s > 0:
            await conn.execute(Q["keep_secret"], endpoint_id, old, grace_s)
        row = await conn.fetchrow(Q["rotate_secret"], endpoint_id, seal(box, new_secret))
        await conn.execute(Q["prune_secrets"])
    return _record(row, endpoint_id)


async def delete_endpoint(
    conn: Conn, endpoint_id: int, *, force: bool
) -> tuple[EndpointRecord, int]:
    """Soft-deletes an endpoint; returns it and how many queued deliveries
    were dead-lettered. Without `force`, refuses (Conflict) while it has
    pending, failed or in-flight rows. The endpoint row is locked until
    commit: an enqueue that read it just before waits on its foreign-key
    check and may still add a row after the delete; the worker never claims
    a deleted endpoint's rows, so nothing more is sent."""
    async with conn.transaction():
        await get_endpoint(conn, endpoint_id, lock=True)
        if force:
            dead = len(await conn.fetch(Q["dead_letter_endpoint"], endpoint_id))
        else:
            live = await conn.fetchval(Q["live_delivery_count"], endpoint_id)
            if live:
                raise Conflict(
                    f"endpoint {endpoint_id} has {live} queued deliveries (pending, failed or"
                    " in flight): delete with force to dead-letter them first"
                )
            dead = 0
        row = await conn.fetchrow(Q["delete_endpoint"], endpoint_id)
    return _record(row, endpoint_id), dead


# ---------------------------------------------------------------- events


async def enqueue(
    conn: Conn,
    event_type: str,
    payload: str,
    event_id: str | None = None,
    endpoint_id: int | None = None,
    app: str | None = None,
    *,
    deliver_at: datetime | None = None,
    delay_s: float | None = None,
    hold: bool = False,
    traceparent: str | None = None,
    tracestate: str | None = None,
) -> list[int]:
    """One event; `app` None: the default application's (or, to an endpoint
    given by id, that endpoint's). `hold`: its rows wait, `held`, until
    released; `deliver_at` or `delay_s`: not sent before then. `traceparent`
    (and `tracestate`): the producer's trace, which every attempt joins."""
    if endpoint_id is not None:
        await check_owner(conn, endpoint_id, app)
    args = (event_type, payload, event_id, endpoint_id, app)
    trace = (traceparent, tracestate)
    try:
        if hold or deliver_at is not None or delay_s is not None:
            ids = await conn.fetchval(
                Q["enqueue_scheduled"], *args, deliver_at, delay_s, hold, *trace
            )
        else:
            ids = await conn.fetchval(Q["enqueue_one"], *args, *trace)
    except (asyncpg.InvalidTextRepresentationError, asyncpg.InvalidParameterValueError) as exc:
        raise BadInput(f"cannot enqueue: {one_line(exc)}") from None
    return list(ids)


async def event_applications(conn: Conn, event_id: str, *, tenant: bool = False) -> list[str]:
    """The applications with deliveries of this event id (event ids are
    unique per application). `tenant`: as a caller scoped to an application
    sees them, the operator's ops deliveries left out."""
    return [r[0] for r in await conn.fetch(Q["event_applications"], event_id, tenant)]


async def release_event(conn: Conn, app: str, event_id: str) -> list[int]:
    """The event's held rows become pending (due at their deliver_at or now)."""
    async with conn.transaction():
        ids = list(await conn.fetchval(Q["release_event"], app, event_id))
        if ids:
            await conn.execute(Q["notify_due"])
    return ids


async def cancel_event(
    conn: Conn, app: str, event_id: str, *, operator_ops: bool = True
) -> list[int]:
    """The event's rows not yet sent (held, pending, awaiting retry) are
    cancelled; the operator's ops deliveries among them only with `operator_ops`."""
    return list(await conn.fetchval(Q["cancel_event"], app, event_id, operator_ops))


# event_id, event_type, payload, endpoint_id[, application]
StagedEvent = tuple[str, str, str, int | None] | tuple[str, str, str, int | None, str | None]


async def enqueue_bulk(conn: Conn, events: Iterable[StagedEvent]) -> int:
    """COPY events into a staging table, then fan them out in one INSERT …
    SELECT. Returns deliveries created. A line without an application is the
    default's, or with an endpoint id, that endpoint's."""
    staged = [(*e[:4], e[4] if len(e) > 4 else None) for e in events]
    wanted = sorted({e[3] for e in staged if e[3] is not None})
    apps = sorted({e[4] for e in staged if e[4] is not None})
    async with conn.transaction():
        await applications.require_applications(conn, apps)
        if wanted:
            owner = {
                r["id"]: r["application_id"] for r in await conn.fetch(Q["endpoint_ids"], wanted)
            }
            for e in staged:
                if e[3] is not None and (e[3] not in owner or e[4] not in (None, owner[e[3]])):
                    raise UnknownEndpoint(f"no endpoint with id {e[3]}")
        await conn.execute(Q["stage_events"])
        await conn.copy_records_to_table(
            "dispatcher_stage",
            records=staged,
            columns=["event_id", "event_type", "payload", "endpoint_id", "application_id"],
        )
        try:
            created: int = await conn.fetchval(Q["fan_out_staged"])
        except asyncpg.InvalidTextRepresentationError as exc:
            raise BadInput(f"invalid JSON payload: {one_line(exc)}") from None
        if created:
            await wake.wake_workers(conn)
    return created


async def deliveries_for_event(
    conn: Conn, event_id: str, app: str | None = None
) -> list[DeliveryView]:
    return _typed(DeliveryView, await conn.fetch(Q["deliveries_for_event"], event_id, app))


async def attempts_for_event(conn: Conn, event_id: str, app: str | None = None) -> list[Attempt]:
    return _typed(Attempt, await conn.fetch(Q["attempts_for_event"], event_id, app))


async def recent_deliveries(
    conn: Conn, app: str | None, status: str | None, endpoint_id: int | None, limit: int
) -> list[DeliveryView]:
    rows = await conn.fetch(Q["recent_deliveries"], app, status, endpoint_id, limit)
    return _typed(DeliveryView, rows)


# ---------------------------------------------------------------- dead letters


async def dead_letters(
    conn: Conn, endpoint_id: int | None, limit: int, app: str | None = None
) -> list[DeadLetter]:
    return _typed(DeadLetter, await conn.fetch(Q["dead_letters_list"], endpoint_id, limit, app))


async def dead_letters_by_endpoint(conn: Conn, hours: float) -> list[DeadLetterGroup]:
    return _typed(DeadLetterGroup, await conn.fetch(Q["dead_letters_by_endpoint"], hours * 3600.0))


async def _requeued(conn: Conn, query: str, *args: Any) -> int:
    async with conn.transaction():
        rows = await conn.fetch(query, *args)
        if rows:
            await conn.execute(Q["notify_due"])
    return len(rows)


async def replay_ids(conn: Conn, ids: Sequence[int], app: str | None = None) -> int:
    return await _requeued(conn, Q["replay_ids"], list(ids), app)


async def replay_endpoint(
    conn: Conn,
    endpoint_id: int,
    since: datetime | None,
    until: datetime | None,
    limit: int = 10_000,
) -> int:
    await get_endpoint(conn, endpoint_id)
    return await _requeued(conn, Q["replay_endpoint"], endpoint_id, since, until, limit)


# ---------------------------------------------------------------- reports


async def health_summary(conn: Conn) -> HealthSummary:
    row = await conn.fetchrow(Q["health_summary"])
    assert row is not None
    doc = dict(row)
    avg = doc["avg_delivery_ms_last_hour"]
    doc["avg_delivery_ms_last_hour"] = None if avg is None else round(float(avg), 1)
    return HealthSummary(**doc)


async def endpoint_health(
    conn: Conn, window_s: float, *, refresh: bool = True, app: str | None = None
) -> list[EndpointHealth]:
    """Per endpoint breaker and percentiles; `refresh` recomputes the
    percentiles first (a scan of the window) instead of reading the stored ones."""
    if refresh:
        await latency.refresh_percentiles(conn, window_s)
    rows = await conn.fetch(Q["endpoint_health_report"], app)
    # A broker URL's password is sealed in the row, and never shown.
    return [EndpointHealth(**{**dict(r), "url": masked_url(r["url"])}) for r in rows]


async def alert_inputs(conn: Conn) -> AlertInputs:
    return _one(AlertInputs, await conn.fetchrow(Q["alert_inputs"]))


async def queue_gauges(conn: Conn) -> QueueGauges:
    return _one(QueueGauges, await conn.fetchrow(Q["metrics_view"]))


# How far this clock may be from the database's: the timeline's bound on
# history (by the caller's clock) is that much wider than its span.
CLOCK_MARGIN_S = 300.0


async def timeline(conn: Conn, span_s: float, bucket_s: float) -> list[TimelinePoint]:
    # A value the planner can read (the query's exact bounds are on the
    # database's clock): history's partitions of the span, by their index.
    since = datetime.now(UTC) - timedelta(seconds=span_s + CLOCK_MARGIN_S)
    return _typed(TimelinePoint, await conn.fetch(Q["timeline"], span_s, bucket_s, since))


async def status_counts(conn: Conn) -> dict[str, int]:
    return {r["status"]: r["n"] for r in await conn.fetch(Q["status_counts"])}


async def breaker_transitions(conn: Conn, offset: int = 0) -> list[dict[str, Any]]:
    return [dict(r) for r in await conn.fetch(Q["breaker_transitions"], offset)]


# ---------------------------------------------------------------- one endpoint's history


async def endpoint_latency_timeline(
    conn: Conn, endpoint_id: int, span_s: float, bucket_s: float
) -> list[LatencyPoint]:
    rows = await conn.fetch(Q["endpoint_latency_timeline"], endpoint_id, span_s, bucket_s)
    return _typed(LatencyPoint, rows)


async def endpoint_transitions(conn: Conn, endpoint_id: int, limit: int) -> list[BreakerTransition]:
    rows = await conn.fetch(Q["endpoint_transitions"], endpoint_id, limit)
    return _typed(BreakerTransition, rows)


async def endpoint_recent_failures(
    conn: Conn, endpoint_id: int, span_s: float, limit: int
) -> list[FailedAttempt]:
    rows = await conn.fetch(Q["endpoint_recent_failures"], endpoint_id, span_s, limit)
    return _typed(FailedAttempt, rows)
