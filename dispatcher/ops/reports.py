"""The reports: what the CLI, the admin API, the dashboard and /metrics show.

One function per report, each taking a connection and already-read values
and owning its defaults and limits; the catalog reads the rows and the pure
analyses (dlq) interpret them. Results are JSON-ready documents (dicts and
lists), the same for every entry point. Never runs SQL.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from dispatcher.core.attemptdetail import attempt_doc
from dispatcher.core.dlq import classify_counted
from dispatcher.core.errors import BadInput
from dispatcher.core.rows import QueueGauges, as_dict
from dispatcher.db import Conn, catalog
from dispatcher.ops.inputs import check_event_id, check_number

DEFAULT_PENDING_AGE_S = 1800.0  # the oldest_pending alert's floor
DEFAULT_P95_MS = 2000.0  # "slow": rolling p95 over this …
MIN_SAMPLES = 20  # … measured on at least this many attempts
DEFAULT_DLQ_HOURS = 24.0
MAX_DLQ_HOURS = 24 * 365.0
DEFAULT_DEAD_LETTERS = 100
MAX_DEAD_LETTERS = 1000
DEFAULT_TIMELINE_MINUTES = 15.0
MAX_TIMELINE_MINUTES = 24 * 60.0
TIMELINE_POINTS = 120
# One-second buckets at the shortest spans: a burst that drains in ten
# seconds (the demo's) must be a curve, not one point of a flat line.
MIN_BUCKET_S = 1.0
RECENT_ROWS = 50  # transitions and failures on an endpoint's page


async def health_summary(conn: Conn) -> dict[str, Any]:
    """The one-row pipeline summary (`dispatcher health`)."""
    return as_dict(await catalog.health_summary(conn))


async def endpoint_health(
    conn: Conn, window_s: float, *, refresh: bool = True, app: str | None = None
) -> list[dict[str, Any]]:
    """Per endpoint (of `app`, or all): breaker, consecutive failures,
    percentiles over the window, attempts and 2xx share over the last hour.
    `refresh` recomputes the percentiles first instead of reading the stored
    ones (the admin API refreshes at most every few seconds)."""
    rows = await catalog.endpoint_health(conn, window_s, refresh=refresh, app=app)
    return [as_dict(r) for r in rows]


async def slow_endpoints(
    conn: Conn, window_s: float, p95_ms: float | None = None, *, refresh: bool = True
) -> list[dict[str, Any]]:
    """Endpoints whose rolling p95 is over `p95_ms` (with enough samples)."""
    threshold = DEFAULT_P95_MS if p95_ms is None else check_number(p95_ms, "p95_ms", 0, 1e9)
    return [
        r
        for r in await endpoint_health(conn, window_s, refresh=refresh)
        if r["sample_count"] >= MIN_SAMPLES and r["p95_ms"] is not None and r["p95_ms"] > threshold
    ]


async def dlq_analyze(conn: Conn, hours: float | None = None) -> list[dict[str, Any]]:
    """Per endpoint, the dead letters of the last `hours`: counts, primary
    error and status code, and the pattern they form with its suggested action."""
    span = DEFAULT_DLQ_HOURS if hours is None else hours
    if isinstance(span, bool) or not isinstance(span, int | float) or not 0 < span <= MAX_DLQ_HOURS:
        raise BadInput(f"hours must be positive and at most {MAX_DLQ_HOURS:g}")
    out = []
    for g in await catalog.dead_letters_by_endpoint(conn, span):
        pattern = classify_counted(
            list(zip(g.times, g.time_counts, strict=True)),
            Counter(dict(zip(g.codes, g.code_counts, strict=True))),
            first_at=g.first_at.timestamp(),
            primary_error=g.primary_error,
            success_share=g.success_share,
            endpoint_id=g.endpoint_id,
        )
        out.append(
            {
                "endpoint_id": g.endpoint_id,
                "app": g.app,
                "dead": g.dead,
                "primary_error": g.primary_error,
                "primary_status_code": g.primary_status_code,
                "first_at": g.first_at,
                "last_at": g.last_at,
                "avg_attempts": round(g.avg_attempts, 2),
                "pattern": pattern.name,
                "suggested_action": pattern.action,
            }
        )
    return out


async def alerts(conn: Conn, window_s: float, *, refresh: bool = True) -> dict[str, dict[str, Any]]:
    """Each alert with its current value, threshold and whether it fires.

    - dead_letters_rising: dead letters created in the last hour exceed those
      of the hour before (and there is at least one).
    - oldest_pending: the oldest undelivered row is older than the retry
      window (the largest retry cap among endpoints) or 30 minutes.
    - slow_endpoints: endpoints whose rolling p95 exceeds the threshold
      (with at least 20 samples).
    """
    a = await catalog.alert_inputs(conn)
    pending_window_s = max(DEFAULT_PENDING_AGE_S, float(a.retry_window_s or 0))
    oldest_age = a.oldest_pending_age_s
    slow = [r["endpoint_id"] for r in await slow_endpoints(conn, window_s, refresh=refresh)]
    return {
        "dead_letters_rising": {
            "firing": a.dead_last_hour > a.dead_prev_hour and a.dead_last_hour > 0,
            "value": a.dead_last_hour,
            "threshold": a.dead_prev_hour,
        },
        "oldest_pending": {
            "firing": oldest_age is not None and oldest_age > pending_window_s,
            "value": None if oldest_age is None else round(oldest_age, 1),
            "threshold": pending_window_s,
        },
        "slow_endpoints": {
            "firing": bool(slow),
            "value": slow,
            "threshold": DEFAULT_P95_MS,
        },
    }


async def metrics_view(
    conn: Conn, window_s: float, *, refresh: bool = True
) -> tuple[QueueGauges, dict[str, dict[str, Any]]]:
    """What a /metrics scrape reads from the database: queue and breaker
    gauges, and the alerts."""
    gauges = await catalog.queue_gauges(conn)
    return gauges, await alerts(conn, window_s, refresh=refresh)


async def deliveries_for_event(
    conn: Conn, event_id: str, app: str | None = None
) -> list[dict[str, Any]]:
    """Each delivery of one event (of `app`'s endpoints, or all), with its
    attempts (oldest first)."""
    if check_event_id(event_id or None) is None:
        raise BadInput("event_id is required")
    rows = [as_dict(d) for d in await catalog.deliveries_for_event(conn, event_id, app)]
    by_delivery: dict[int, list[dict[str, Any]]] = {}
    for attempt in await catalog.attempts_for_event(conn, event_id, app):
        doc = as_dict(attempt)
        by_delivery.setdefault(doc["delivery_id"], []).append(attempt_doc(doc))
    for r in rows:
        r["attempts"] = by_delivery.get(r["id"], [])
    return rows


def _limit(limit: int | None, default: int, most: int) -> int:
    n = default if limit is None else limit
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise BadInput("limit must be at least 1")
    return min(n, most)


async def dead_letters(
    conn: Conn, endpoint_id: int | None = None, limit: int | None = None, app: str | None = None
) -> list[dict[str, Any]]:
    """The newest dead letters (of one endpoint, of `app`, or all), at most 1,000."""
    if endpoint_id is not None and app is not None:
        await catalog.check_owner(conn, endpoint_id, app)
    n = _limit(limit, DEFAULT_DEAD_LETTERS, MAX_DEAD_LETTERS)
    return [as_dict(r) for r in await catalog.dead_letters(conn, endpoint_id, n, app)]


STATUSES = ("pending", "in_flight", "delivered", "failed", "dead_letter", "held", "cancelled")


async def recent_deliveries(
    conn: Conn,
    *,
    app: str | None = None,
    status: str | None = None,
    endpoint_id: int | None = None,
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """The newest deliveries (of `app`, of one status, of one endpoint), at
    most 1,000: what a portal lists."""
    if status is not None and status not in STATUSES:
        raise BadInput(f"status must be one of {', '.join(STATUSES)}")
    if endpoint_id is not None and app is not None:
        await catalog.check_owner(conn, endpoint_id, app)
    n = _limit(limit, DEFAULT_DEAD_LETTERS, MAX_DEAD_LETTERS)
    rows = await catalog.recent_deliveries(conn, app, status, endpoint_id, n)
    return [as_dict(r) for r in rows]


def _span(minutes: float | None) -> tuple[float, float]:
    """The span and bucket width (seconds) of a chart over the last `minutes`."""
    span_min = DEFAULT_TIMELINE_MINUTES
    if minutes is not None:
        span_min = check_number(minutes, "minutes", 1, MAX_TIMELINE_MINUTES)
    span_s = span_min * 60
    return span_s, max(MIN_BUCKET_S, span_s / TIMELINE_POINTS)


async def timeline(conn: Conn, minutes: float | None = None) -> dict[str, Any]:
    """Enqueued, delivered and dead per bucket over the last `minutes`, and
    the queue depth (pending, retrying, in flight) at the end of each bucket.

    The depth is walked back from the current one through each bucket's
    inflow and outflow, so it needs no stored samples. A replayed dead
    letter re-enters the queue without being counted as enqueued: before
    its replay the walk shows it as queued."""
    span_s, bucket_s = _span(minutes)
    points = [as_dict(p) for p in await catalog.timeline(conn, span_s, bucket_s)]
    g = await catalog.queue_gauges(conn)
    depth = g.pending + g.failed + g.in_flight
    for p in reversed(points):
        p["depth"] = max(0, depth)
        depth += p["delivered"] + p["dead"] - p["enqueued"]
    return {"bucket_s": bucket_s, "points": points}


async def endpoint_activity(
    conn: Conn, endpoint_id: int, minutes: float | None = None
) -> dict[str, Any]:
    """One endpoint's story for its page: percentiles and failures per
    bucket, its newest breaker transitions and failed attempts."""
    await catalog.get_endpoint(conn, endpoint_id)  # UnknownEndpoint: 404
    span_s, bucket_s = _span(minutes)
    latency = await catalog.endpoint_latency_timeline(conn, endpoint_id, span_s, bucket_s)
    transitions = await catalog.endpoint_transitions(conn, endpoint_id, RECENT_ROWS)
    failures = await catalog.endpoint_recent_failures(conn, endpoint_id, span_s, RECENT_ROWS)
    return {
        "bucket_s": bucket_s,
        "latency": [as_dict(p) for p in latency],
        "transitions": [as_dict(t) for t in transitions],
        "failures": [as_dict(f) for f in failures],
    }
