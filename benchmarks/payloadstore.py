"""What a payload costs to store and to read back, by fan-out (schema 025).

`python -m benchmarks.payloadstore [--events 20000] [--fanout 1,10] [--bytes 2000]`:

for each fan-out F, a scratch database with F endpoints, then
1. EVENTS events of BYTES-byte payloads enqueued through `dispatcher_enqueue`,
   one per transaction, from 8 producer connections (the transactional
   outbox as users run it): events/s and deliveries/s;
2. the bytes this left: the queue table, the payload store, and both
   together per delivery, and the WAL written per event;
3. the claim statement over those rows (batches of 500, each released
   again): its median milliseconds, which reads a fan-out row's payload
   from the store.

Prints one JSON document. Uses DATABASE_URL's server (default
127.0.0.1:5432); drops its scratch databases at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import random
import statistics
import sys
import time
from typing import Any

import asyncpg

from dispatcher import db
from dispatcher.db import store

from .database import drop_database

PRODUCERS = 8
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
# The queue's table: webhook_live since schema 025 (the same script then
# measures a tree from before it, for the comparison).
QUEUE = "coalesce(to_regclass('webhook_live'), to_regclass('webhook_queue'))"
SIZES = f"""
SELECT pg_total_relation_size({QUEUE}) AS queue,
       coalesce((SELECT sum(pg_total_relation_size(inhrelid)) FROM pg_inherits
                 WHERE inhparent = to_regclass('event_payloads')), 0)::bigint AS store
"""


async def claim_times(
    conn: asyncpg.Connection, n: int, endpoint_ids: list[int], limit: int = 100
) -> list[float]:
    """Claim `limit` rows over the endpoints and hand them back, n times (ms
    each). Through the view, so a tree from before schema 025 measures the
    same way."""
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        rows = await store.claim(
            conn,
            endpoint_ids=endpoint_ids,
            budgets=[limit // len(endpoint_ids) + 1] * len(endpoint_ids),
            leases_s=[30.0] * len(endpoint_ids),
            limit=limit,
            worker="bench",
        )
        out.append((time.perf_counter() - t0) * 1000)
        await conn.execute(
            "UPDATE webhook_queue SET status = 'pending', next_attempt_at = now(),"
            " locked_by = NULL WHERE id = ANY($1::bigint[])",
            [d.id for d in rows],
        )
    return out


async def _produce(url: str, events: int, body: str) -> float:
    conns = [await asyncpg.connect(url) for _ in range(PRODUCERS)]
    per = events // PRODUCERS

    async def one(conn: asyncpg.Connection, k: int) -> None:
        for i in range(per):
            await conn.fetchval("SELECT dispatcher_enqueue('t', $1::json, $2)", body, f"e{k}-{i}")

    try:
        t0 = time.perf_counter()
        await asyncio.gather(*(one(c, k) for k, c in enumerate(conns)))
        return time.perf_counter() - t0
    finally:
        for c in conns:
            await c.close()


async def run_one(server: str, fanout: int, events: int, size: int) -> dict[str, Any]:
    name = f"dispatcher_bench_payloads_{fanout}"
    url = await db.recreate_database(server, name)
    conn = await asyncpg.connect(url)
    try:
        endpoints = [
            await conn.fetchval(
                "INSERT INTO endpoints (url, secret) VALUES ($1, $2) RETURNING id",
                f"https://example.com/{i}",
                SECRET,
            )
            for i in range(fanout)
        ]
        # Incompressible, as real payloads mostly are to pglz (a run of
        # one letter would be stored in a few bytes and hide the copies).
        pad = base64.b64encode(random.Random(fanout).randbytes(size)).decode()[: max(0, size - 24)]
        body = json.dumps({"order": 1, "pad": pad})
        wal0 = await conn.fetchval("SELECT pg_current_wal_lsn()")
        took = await _produce(url, events, body)
        wal = await conn.fetchval("SELECT pg_current_wal_lsn() - $1::pg_lsn", wal0)
        table = await conn.fetchval(f"SELECT {QUEUE}::text")
        await conn.execute(f"VACUUM ANALYZE {table}")
        sizes = await conn.fetchrow(SIZES)
        assert sizes is not None  # one row, always
        deliveries = await conn.fetchval("SELECT count(*) FROM webhook_queue")
        claims = await claim_times(conn, 40, endpoints, limit=500)
        return {
            "fanout": fanout,
            "events": events,
            "deliveries": deliveries,
            "events_per_s": round(events / took),
            "deliveries_per_s": round(deliveries / took),
            "queue_mb": round(sizes["queue"] / 1e6, 1),
            "store_mb": round(sizes["store"] / 1e6, 1),
            "bytes_per_delivery": round((sizes["queue"] + sizes["store"]) / deliveries),
            "wal_bytes_per_event": round(float(wal) / events),
            "claim_500_ms_p50": round(statistics.median(claims[5:]), 2),
        }
    finally:
        await conn.close()
        await drop_database(server, name)


async def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.payloadstore")
    p.add_argument("--events", type=int, default=20_000)
    p.add_argument("--fanout", default="1,10")
    p.add_argument("--bytes", type=int, default=2000)
    a = p.parse_args(argv)
    server = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    report = [
        await run_one(server, int(f), a.events, a.bytes) for f in a.fanout.split(",") if f.strip()
    ]
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
