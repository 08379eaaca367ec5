"""Reports built from the store and the pure analyses: dead letters, alerts."""

from __future__ import annotations

from typing import Any

from . import store
from .dlq import classify
from .settings import Settings
from .store import Conn


async def dlq_report(conn: Conn, hours: float) -> list[dict[str, Any]]:
    out = []
    for r in await store.dead_letters_by_endpoint(conn, hours):
        pattern = classify(r["times"], r["codes"])
        out.append(
            {
                "endpoint_id": r["endpoint_id"],
                "dead": r["dead"],
                "primary_error": r["primary_error"],
                "primary_status_code": r["primary_status_code"],
                "first_at": r["first_at"],
                "last_at": r["last_at"],
                "avg_attempts": round(r["avg_attempts"], 2),
                "pattern": pattern.name,
                "suggested_action": pattern.action,
            }
        )
    return out


DEFAULT_PENDING_AGE_S = 1800.0
DEFAULT_P95_MS = 2000.0


async def alerts(
    conn: Conn, settings: Settings, *, refresh: bool = True
) -> dict[str, dict[str, Any]]:
    """Each alert with its current value, threshold and whether it fires.

    - dead_letters_rising: dead letters created in the last hour exceed those
      of the hour before (and there is at least one).
    - oldest_pending: the oldest undelivered row is older than the retry
      window (the largest retry cap among endpoints) or 30 minutes.
    - slow_endpoints: endpoints whose rolling p95 exceeds the threshold
      (with at least 20 samples).
    """
    row = await conn.fetchrow(store.Q["alert_inputs"])
    assert row is not None
    window_s = max(DEFAULT_PENDING_AGE_S, float(row["retry_window_s"] or 0))
    oldest_age = row["oldest_pending_age_s"]
    slow = [
        r["endpoint_id"]
        for r in await store.endpoint_health(conn, settings.latency_window_s, refresh=refresh)
        if r["sample_count"] >= 20 and r["p95_ms"] is not None and r["p95_ms"] > DEFAULT_P95_MS
    ]
    return {
        "dead_letters_rising": {
            "firing": row["dead_last_hour"] > row["dead_prev_hour"] and row["dead_last_hour"] > 0,
            "value": row["dead_last_hour"],
            "threshold": row["dead_prev_hour"],
        },
        "oldest_pending": {
            "firing": oldest_age is not None and oldest_age > window_s,
            "value": None if oldest_age is None else round(oldest_age, 1),
            "threshold": window_s,
        },
        "slow_endpoints": {
            "firing": bool(slow),
            "value": slow,
            "threshold": DEFAULT_P95_MS,
        },
    }
