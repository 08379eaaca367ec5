"""The three alert conditions of SPEC, evaluated against the database."""

from __future__ import annotations

from typing import Any

import asyncpg

from . import store
from .settings import Settings

DEFAULT_PENDING_AGE_S = 1800.0
DEFAULT_P95_MS = 2000.0


async def evaluate(conn: asyncpg.Connection, settings: Settings) -> dict[str, dict[str, Any]]:
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
        for r in await store.endpoint_health(conn, settings.latency_window_s)
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
