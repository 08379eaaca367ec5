"""The latency window's one percentile refresh: p50/p95/p99 and the last
hour's attempts and 2xx answers per endpoint, merged from the per-minute
histograms and counters of endpoint_minutes (schema 020) and stored in
endpoint_health. Run by maintenance (one worker at a time, every
percentile_refresh_s) and by a report asked to be fresh; both call this."""

from __future__ import annotations

from dispatcher.db import Conn, Q


async def refresh_percentiles(conn: Conn, window_s: float) -> None:
    await conn.execute(Q["refresh_percentiles"], window_s)
