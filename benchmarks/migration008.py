"""What applying schema 008 (applications) costs on a full queue.

`python -m benchmarks.migration008 [--rows 10000000] [--endpoints 1000]
[--tries 3]`: a throwaway database (`dispatcher_mig008`) at schema 007,
ENDPOINTS endpoints and ROWS pending webhook_queue rows (one INSERT ...
SELECT), then 008 applied the way `dispatcher migrate` applies it (one
transaction with its dispatcher_migrations row), TRIES times: every try but
the last rolls back. Schema 007 is built as it was then
(tests/releases.py); 008 is today's file, which holds its table changes
only (its functions are in schema/functions/, applied in a transaction of
their own that takes no lock on webhook_queue). Prints one JSON document: the milliseconds of each
try, the locks the transaction held before COMMIT on relations that existed
before, and webhook_queue's filenode and size before and after (the same
filenode: the queue was not rewritten). The database is dropped however the run ends. DATABASE_URL
names the server (the embedded one when unset).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from typing import Any

import asyncpg

from dispatcher.db import migrations
from dispatcher.db.embedded import embedded_url, with_database
from dispatcher.settings import Settings
from tests.releases import build_release

DB = "dispatcher_mig008"
QUEUE = "SELECT pg_relation_filenode('webhook_queue'), pg_total_relation_size('webhook_queue')"
EXISTING = "SELECT array_agg(oid) FROM pg_class WHERE relnamespace = 'public'::regnamespace"
# The locks this backend holds on relations that existed before (those on
# the tables and indexes 008 creates concern nobody else).
LOCKS = """
SELECT c.relname, string_agg(l.mode, ', ' ORDER BY l.mode) FROM pg_locks l
JOIN pg_class c ON c.oid = l.relation
WHERE l.pid = pg_backend_pid() AND l.locktype = 'relation' AND c.oid = ANY($1::oid[])
GROUP BY 1 ORDER BY 1
"""
LOAD = """
INSERT INTO webhook_queue (endpoint_id, event_id, event_type, payload)
SELECT 1 + n % $1, 'evt_' || n, 'order.paid', '{"order": 42}'::json
FROM generate_series(0, $2 - 1) AS n
"""


async def run(server: str, rows: int, endpoints: int, tries: int) -> dict[str, Any]:
    admin = await asyncpg.connect(server, timeout=10)
    await admin.execute(f'DROP DATABASE IF EXISTS "{DB}" WITH (FORCE)')
    await admin.execute(f'CREATE DATABASE "{DB}"')
    try:
        conn = await asyncpg.connect(with_database(server, DB), timeout=10)
        try:
            return await _measure(conn, rows, endpoints, tries)
        finally:
            await conn.close()
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{DB}" WITH (FORCE)')
        await admin.close()


async def _measure(
    conn: asyncpg.Connection, rows: int, endpoints: int, tries: int
) -> dict[str, Any]:
    await build_release(conn, 7)
    pending = [m for m in migrations() if m[0] >= 8]
    await conn.execute(
        "INSERT INTO endpoints (url, secret) SELECT 'https://example.com/' || n, 'whsec_x'"
        " FROM generate_series(1, $1) n",
        endpoints,
    )
    t0 = time.perf_counter()
    await conn.execute(LOAD, endpoints, rows, timeout=3600)
    await conn.execute("VACUUM ANALYZE webhook_queue", timeout=3600)
    await conn.execute("CHECKPOINT")
    load_s = time.perf_counter() - t0
    before = await conn.fetchrow(QUEUE)
    existing = await conn.fetchval(EXISTING)
    times, locks = [], []
    version, name, sql = pending[0]
    for i in range(tries):
        tx = conn.transaction()
        t0 = time.perf_counter()
        await tx.start()
        await conn.execute(sql)
        await conn.execute("INSERT INTO dispatcher_migrations VALUES ($1, $2)", version, name)
        took = time.perf_counter() - t0
        locks = [f"{r[0]}: {r[1]}" for r in await conn.fetch(LOCKS, existing)]
        t1 = time.perf_counter()
        await (tx.commit() if i == tries - 1 else tx.rollback())
        times.append(round((took + time.perf_counter() - t1) * 1000, 1))
    after = await conn.fetchrow(QUEUE)
    assert before is not None and after is not None
    return {
        "rows": await conn.fetchval("SELECT count(*) FROM webhook_queue"),
        "endpoints": endpoints,
        "load_s": round(load_s, 1),
        "migration": name,
        "apply_ms": times,
        "locks_before_commit": locks,
        "queue_filenode_before_after": [before[0], after[0]],
        "queue_bytes_before_after": [before[1], after[1]],
        "server_version": await conn.fetchval("SHOW server_version"),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.migration008", description=__doc__)
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--endpoints", type=int, default=1000)
    p.add_argument("--tries", type=int, default=3)
    a = p.parse_args(argv)
    if a.rows < 0 or a.endpoints < 1 or a.tries < 1:
        p.error("--rows >= 0, --endpoints >= 1, --tries >= 1")
    server = os.environ.get("DATABASE_URL") or embedded_url(Settings.from_env().home)
    doc = asyncio.run(run(server, a.rows, a.endpoints, a.tries))
    sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
