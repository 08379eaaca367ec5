"""What the operator's reads cost once history has piled up (issue 31).

`python -m benchmarks.reads [--rows N] [--samples N] [--phases fill,time]`:

- `fill`: two scratch databases migrated by the code imported here, one
  left empty and one given what a steady flow leaves: ROWS delivered rows
  over 7 days (1 % of them dead letters) in arrival order, SAMPLES latency
  samples over the last 24 h plus a tenth as many older, 50 endpoints, and
  2,000 rows pending. Only columns every schema since 013 has, so that an
  older release's code can fill them and this one's `migrate` them.
- `migrate`: `db.migrate` on both (the upgrade, timed), then, from schema
  026 on, the move of the final rows into history to its end (timed).
- `time`: each read an operator, the console or the portal makes, median
  of five after one warm-up, on both databases; and one maintenance round.

The before/after of a release: run `fill,time` from the older release's
tree (with `--keep`), then `migrate,time` from this one. Prints one JSON
document; uses DATABASE_URL's server (default 127.0.0.1:5432).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from dispatcher import db
from dispatcher.core.retention import Retention
from dispatcher.db import upkeep
from dispatcher.db.embedded import with_database
from dispatcher.ops import reports

ENDPOINTS = 50
PENDING = 2000
WINDOW_S = 24 * 3600.0
NAMES = {"empty": "dispatcher_reads_empty", "history": "dispatcher_reads_history"}

Read = Callable[[asyncpg.Connection], Awaitable[Any]]
READS: dict[str, Read] = {
    "endpoints_health (GET /v1/endpoints/health, fresh)": lambda c: reports.endpoint_health(
        c, WINDOW_S, refresh=True
    ),
    "health (GET /v1/health)": reports.health_summary,
    "alerts": lambda c: reports.alerts(c, WINDOW_S, refresh=True),
    "slow": lambda c: reports.slow_endpoints(c, WINDOW_S, refresh=True),
    "dead_letters (list)": lambda c: reports.dead_letters(c),
    "dead_letters analyze": lambda c: reports.dlq_analyze(c),
    "deliveries, newest": lambda c: reports.recent_deliveries(c),
    "deliveries, status delivered": lambda c: reports.recent_deliveries(c, status="delivered"),
    "deliveries, one endpoint": lambda c: reports.recent_deliveries(c, endpoint_id=7),
    "timeline (15 min)": lambda c: reports.timeline(c),
    "endpoint activity": lambda c: reports.endpoint_activity(c, 7),
}


async def _fill(conn: asyncpg.Connection, rows: int, samples: int) -> None:
    await conn.execute(
        "INSERT INTO endpoints (url, secret) SELECT 'https://example.com/' || g,"
        " 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw' FROM generate_series(1, $1) g",
        ENDPOINTS,
    )
    # Oldest first, as a queue fills: ids grow with time.
    await conn.execute(
        "INSERT INTO webhook_live (endpoint_id, event_id, event_type, payload, status,"
        " attempt_count, created_at, delivered_at, updated_at, last_status_code,"
        " last_response_ms, last_error)"
        " SELECT 1 + g % $1, 'h' || g, 't', '{\"n\": 1}',"
        "  CASE WHEN g % 100 = 0 THEN 'dead_letter' ELSE 'delivered' END,"
        "  CASE WHEN g % 100 = 0 THEN 8 ELSE 1 END, at,"
        "  CASE WHEN g % 100 = 0 THEN NULL ELSE at END, at,"
        "  CASE WHEN g % 100 = 0 THEN 503 ELSE 200 END, 40 + g % 200,"
        "  CASE WHEN g % 100 = 0 THEN 'http_503' END"
        " FROM generate_series(1, $2) g,"
        "  LATERAL (SELECT now() - (1 - g::float8 / $2) * interval '7 days' AS at) t",
        ENDPOINTS,
        rows,
    )
    await conn.execute(
        "INSERT INTO webhook_live (endpoint_id, event_id, event_type, payload)"
        " SELECT 1 + g % $1, 'p' || g, 't', '{\"n\": 1}' FROM generate_series(1, $2) g",
        ENDPOINTS,
        PENDING,
    )
    # A tenth as many from the day before the window, then the window's.
    for n, start_h in ((samples // 10, 48), (samples, 24)):
        await conn.execute(
            "INSERT INTO endpoint_latency (endpoint_id, response_ms, status_code, measured_at,"
            " delivery_id)"
            " SELECT 1 + g % $1, (exp(3.5 + 1.5 * random()))::int,"
            "  CASE WHEN g % 50 = 0 THEN 503 ELSE 200 END,"
            "  now() - make_interval(hours => $3) + (g::float8 / $2) * interval '24 hours', g"
            " FROM generate_series(1, $2) g",
            ENDPOINTS,
            n,
            start_h,
        )
    await conn.execute("VACUUM ANALYZE")


async def _median_ms(conn: asyncpg.Connection, read: Read, repeat: int) -> float:
    await read(conn)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        await read(conn)
        times.append((time.perf_counter() - t0) * 1000)
    return round(statistics.median(times), 1)


async def _time(conn: asyncpg.Connection, repeat: int) -> dict[str, Any]:
    out: dict[str, Any] = {
        name: await _median_ms(conn, read, repeat) for name, read in READS.items()
    }
    before = await conn.fetchval("SELECT count(*) FROM endpoint_latency")
    t0 = time.perf_counter()
    await upkeep.maintain(conn, WINDOW_S)
    out["maintenance round (s)"] = round(time.perf_counter() - t0, 2)
    out["samples pruned by it"] = before - await conn.fetchval(
        "SELECT count(*) FROM endpoint_latency"
    )
    return out


async def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.reads")
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--samples", type=int, default=10_000_000)
    p.add_argument("--phases", default="fill,time")
    p.add_argument("--keep", action="store_true", help="leave the databases for a next phase")
    p.add_argument("--repeat", type=int, default=5, help="timed runs of each read (median)")
    a = p.parse_args(argv)
    phases = a.phases.split(",")
    server = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    report: dict[str, Any] = {"rows": a.rows, "samples": a.samples, "phases": phases}
    try:
        for kind, name in NAMES.items():
            if "fill" in phases:
                url = await db.recreate_database(server, name)
            else:
                url = with_database(server, name)
            conn = await asyncpg.connect(url)
            try:
                if "fill" in phases and kind == "history":
                    t0 = time.perf_counter()
                    await _fill(conn, a.rows, a.samples)
                    report["fill_s"] = round(time.perf_counter() - t0, 1)
                elif "fill" in phases:
                    await _fill(conn, 0, 0)
                if "migrate" in phases:
                    t0 = time.perf_counter()
                    applied = await db.migrate(conn)
                    report[f"migrate_{kind}"] = {
                        "applied": applied,
                        "s": round(time.perf_counter() - t0, 2),
                    }
                    # Schema 026: the rows final before it move to history,
                    # 5,000 ids a transaction, to the end.
                    t0 = time.perf_counter()
                    await upkeep.backfill_history(conn, Retention())
                    report[f"backfill_{kind}_s"] = round(time.perf_counter() - t0, 1)
                    report[f"history_{kind}_rows"] = await conn.fetchval(
                        "SELECT count(*) FROM webhook_history"
                    )
                if "time" in phases:
                    report[kind] = await _time(conn, a.repeat)
            finally:
                await conn.close()
            print(f"{kind} done", file=sys.stderr)
    finally:
        if not a.keep:
            admin = await asyncpg.connect(server)
            for name in NAMES.values():
                await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            await admin.close()
    print(json.dumps(report, indent=2, default=str))
    return 0


if __name__ == "__main__":
    import uvloop

    sys.exit(uvloop.run(main(sys.argv[1:])))
