"""What a soak samples from the bench database each interval: the lag of the
rows delivered in it, the sizes of webhook_live (the queue's table) and its
indexes, dead rows and vacuum counts (pg_stat_user_tables), and the server's autovacuum
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

TABLES_SQL = """
SELECT s.relname AS table, s.n_live_tup AS live, s.n_dead_tup AS dead,
       s.vacuum_count, s.autovacuum_count,
       pg_relation_size(s.relid) AS heap_bytes,
       pg_indexes_size(s.relid) AS index_bytes,
       pg_total_relation_size(s.relid) AS total_bytes
FROM pg_stat_user_tables s
WHERE s.relname IN ('webhook_live', 'endpoint_latency')
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
        r["table"]: {k: int(r[k]) for k in r.keys() if k != "table"}
        for r in await conn.fetch(TABLES_SQL)
    }
