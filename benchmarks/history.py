"""Does a long history slow the claim? And what does retention cost?

`python -m benchmarks.history [--rows 10000000] [--samples 1000000]`:

1. builds a scratch database with ROWS delivered rows spread over 30 days
   (plus 2,000 pending rows over 20 endpoints) and SAMPLES latency samples;
2. times the claim statement against that history and against an empty one;
3. prunes delivered rows past 7 days in 10,000-row batches (what the
   maintenance task does) while a second connection keeps claiming and
   releasing, and reports the delete rate and the claim latency meanwhile;
4. times the exact percentile refresh over the sample window.

Prints one JSON document. Uses DATABASE_URL's server (default
127.0.0.1:5432); drops its scratch databases at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time

import asyncpg

from dispatcher import db
from dispatcher.db import latency, store
from dispatcher.db.embedded import with_database
from dispatcher.settings import Retention

ENDPOINTS = 20
PENDING = 2000


async def _fresh(server: str, name: str) -> asyncpg.Connection:
    conn = await asyncpg.connect(await db.recreate_database(server, name))
    await conn.execute(
        "INSERT INTO endpoints (url, secret) SELECT 'https://example.com/' || g,"
        " 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw' FROM generate_series(1, $1) g",
        ENDPOINTS,
    )
    return conn


async def _pending(conn: asyncpg.Connection) -> None:
    await conn.execute(
        "INSERT INTO webhook_live (endpoint_id, event_id, event_type, payload)"
        " SELECT 1 + g % $1, 'p' || g, 't', '{\"n\": 1}' FROM generate_series(1, $2) g",
        ENDPOINTS,
        PENDING,
    )


async def claim_times(
    conn: asyncpg.Connection, n: int, endpoint_ids: list[int] | None = None, limit: int = 100
) -> list[float]:
    """Claim `limit` rows over the endpoints (default: this script's) and
    hand them back, n times (ms each). Through the view, so a tree from
    before schema 025 measures the same way."""
    ids = endpoint_ids or list(range(1, ENDPOINTS + 1))
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        rows = await store.claim(
            conn,
            endpoint_ids=ids,
            budgets=[limit // len(ids) + 1] * len(ids),
            leases_s=[30.0] * len(ids),
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


def _summary(ms: list[float]) -> dict[str, float]:
    ms = sorted(ms)
    return {
        "p50_ms": round(statistics.median(ms), 3),
        "p99_ms": round(ms[int(0.99 * (len(ms) - 1))], 3),
        "max_ms": round(ms[-1], 3),
    }


async def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.history")
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--samples", type=int, default=1_000_000)
    a = p.parse_args(argv)
    server = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    report: dict[str, object] = {"rows": a.rows, "samples": a.samples}

    empty = await _fresh(server, "dispatcher_hist_empty")
    big = await _fresh(server, "dispatcher_hist_big")
    try:
        await _pending(empty)
        t0 = time.perf_counter()
        await big.execute(
            "INSERT INTO webhook_live (endpoint_id, event_id, event_type, payload, status,"
            " attempt_count, created_at, delivered_at, updated_at)"
            # Oldest first, as a real queue fills: ids grow with created_at.
            " SELECT 1 + g % $1, 'h' || g, 't', '{\"n\": 1}', 'delivered', 1,"
            " now() - (1 - g::float8 / $2) * interval '30 days',"
            " now() - (1 - g::float8 / $2) * interval '30 days',"
            " now() - (1 - g::float8 / $2) * interval '30 days'"
            " FROM generate_series(1, $2) g",
            ENDPOINTS,
            a.rows,
        )
        await _pending(big)
        await big.execute("VACUUM ANALYZE webhook_live")
        report["build_s"] = round(time.perf_counter() - t0, 1)
        print(f"history built in {report['build_s']} s", file=sys.stderr)

        await claim_times(empty, 20)  # warm up
        await claim_times(big, 20)
        report["claim_empty_history"] = _summary(await claim_times(empty, 300))
        report["claim_big_history"] = _summary(await claim_times(big, 300))

        # Retention while claiming: the maintenance task's batched deletes.
        claimer = await asyncpg.connect(with_database(server, "dispatcher_hist_big"))
        done = asyncio.Event()
        during: list[float] = []

        async def keep_claiming() -> None:
            while not done.is_set():
                during.extend(await claim_times(claimer, 5))

        task = asyncio.create_task(keep_claiming())
        t0 = time.perf_counter()
        before = await big.fetchval("SELECT count(*) FROM webhook_queue")
        batches = 0
        while time.perf_counter() - t0 < 900:
            # The maintenance round (schema 026: the backfill of the rows
            # written as final into the live table, then partition drops).
            finished = await store.maintain(big, 86400.0, Retention(), max_batches=1)
            batches += 1
            if finished:
                break
        elapsed = time.perf_counter() - t0
        done.set()
        await task
        await claimer.close()
        after = await big.fetchval("SELECT count(*) FROM webhook_queue")
        report["retention"] = {
            "deleted": before - after,
            "batches": batches,
            "seconds": round(elapsed, 1),
            "rows_per_s": round((before - after) / elapsed),
            "claim_while_deleting": _summary(during),
        }
        await big.execute("VACUUM ANALYZE webhook_live")
        report["claim_after_retention"] = _summary(await claim_times(big, 300))

        # Percentiles over a window of samples for one endpoint.
        await big.execute(
            "INSERT INTO endpoint_latency (endpoint_id, response_ms, status_code, measured_at)"
            " SELECT 1 + g % $1, (random() * 500)::int, 200,"
            " now() - random() * interval '23 hours' FROM generate_series(1, $2) g",
            ENDPOINTS,
            a.samples,
        )
        await big.execute("ANALYZE endpoint_latency")
        t0 = time.perf_counter()
        await latency.refresh_percentiles(big, 24 * 3600.0)
        report["percentile_refresh_s"] = round(time.perf_counter() - t0, 3)
    finally:
        await empty.close()
        await big.close()
        admin = await asyncpg.connect(server)
        for name in ("dispatcher_hist_empty", "dispatcher_hist_big"):
            await admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        await admin.close()
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    import uvloop

    sys.exit(uvloop.run(main(sys.argv[1:])))
