"""What a soak samples from the bench database each interval: the lag of the
rows delivered in it, the sizes of webhook_live (the queue's table), history,
the attempt log, the payload store and the dedup keys, with their indexes, dead
rows and vacuum counts (pg_stat_user_tables), and the server's autovacuum
setting. Reads only; the soak decides what to do with the figures.
"""

from __future__ import annotations

from typing import Any

import asyncpg

WINDOW_SQL = """
SELECT count(*) AS delivered,
       percentile_cont(0.5) WITHIN GROUP (
           ORDER BY extract(epoch FROM delivered_at - created_at) * 1000) AS lag_p50_ms,
       percentile_cont(0.99) WITHIN GROUP (
           ORDER BY extract(epoch FROM delivered_at - created_at) * 1000) AS lag_p99_ms
FROM webhook_queue
WHERE status = 'delivered' AND delivered_at > $1 AND delivered_at <= $2
"""

# A partitioned table's figures are its leaves' sums (the parent has none);
# the dedup keys' two tables count as one.
TABLES_SQL = """
SELECT t.name AS table, sum(s.n_live_tup) AS live, sum(s.n_dead_tup) AS dead,
       sum(s.vacuum_count) AS vacuum_count, sum(s.autovacuum_count) AS autovacuum_count,
       sum(pg_relation_size(s.relid)) AS heap_bytes,
       sum(pg_indexes_size(s.relid)) AS index_bytes,
       sum(pg_total_relation_size(s.relid)) AS total_bytes
FROM pg_stat_user_tables s
CROSS JOIN LATERAL (
    SELECT CASE WHEN s.relname LIKE 'dispatcher\\_dedup\\_keys\\__' THEN 'dedup_keys'
                ELSE coalesce(pg_partition_root(s.relid), s.relid)::regclass::text END AS name
) t
WHERE t.name IN ('webhook_live', 'webhook_history', 'endpoint_latency', 'event_payloads',
                 'dedup_keys')
GROUP BY t.name
"""


async def db_now(conn: asyncpg.Connection) -> Any:
    return await conn.fetchval("SELECT now()")


async def autovacuum_setting(conn: asyncpg.Connection) -> str:
    return str(await conn.fetchval("SHOW autovacuum"))


async def window(conn: asyncpg.Connection, since: Any, until: Any) -> dict[str, Any]:
    """Rows delivered in (since, until] and their created -> delivered lag."""
    row = await conn.fetchrow(WINDOW_SQL, since, until)
    assert row is not None
    return {
        "delivered": int(row["delivered"]),
        "lag_p50_ms": None if row["lag_p50_ms"] is None else round(float(row["lag_p50_ms"]), 1),
        "lag_p99_ms": None if row["lag_p99_ms"] is None else round(float(row["lag_p99_ms"]), 1),
    }


async def tables(conn: asyncpg.Connection) -> dict[str, dict[str, int]]:
    await conn.execute("SELECT pg_stat_clear_snapshot()")
    return {
        # A leaf dropped between the statistics' snapshot and its size
        # reads as NULL (a retention drop meets the sample): counted as 0.
        r["table"]: {k: int(r[k] or 0) for k in r.keys() if k != "table"}
        for r in await conn.fetch(TABLES_SQL)
    }
