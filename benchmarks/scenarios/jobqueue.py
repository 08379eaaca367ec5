"""jobqueue: what a Python user would otherwise build on a popular PostgreSQL
job queue, procrastinate, against the dispatcher's own `fast` drain.

1. start `benchmarks.receiver` on a free 127.0.0.1 port (answers at once);
2. create a throwaway database beside the bench database, apply
   procrastinate's schema, and time `benchmarks.jobqueue_worker defer`: one
   `batch_defer_async` of N jobs, timed by its process's wall time as
   `dispatcher enqueue --file` is (and the call's own time);
3. time `benchmarks.jobqueue_worker work`: one procrastinate worker process,
   concurrency M, until the queue is empty; its wall time, CPU seconds and
   peak RSS, PostgreSQL and machine CPU meanwhile; then drop that database;
4. from the receiver: POSTs, duplicates and distinct ids on the worker's
   path, lost = N - distinct; lag from procrastinate's own event table;
5. the fast scenario's drain of N events to the same receiver
   (`dispatcher run --drain --max-in-flight M`), measured the same way;
6. the ratio dispatcher / procrastinate of deliveries/min.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import time
from typing import Any

import asyncpg

from dispatcher.db.embedded import with_database

from ..bench import Bench, EndpointDef, Options, scenario
from ..database import create_database, drop_database
from ..errors import BenchError
from ..meters import Meter, phase_metrics
from ..output import fmt, fmt_int, progress, rate_since, verdict
from ..phases import check_phase, drain_phase
from ..receiver_control import Receiver

PATH = "/jobqueue"

# Created -> delivered, as db_results reads it from webhook_queue: from the
# job's `deferred` event to its `succeeded` one.
PQ_RESULT_SQL = """
SELECT count(*) FILTER (WHERE j.status = 'succeeded') AS succeeded,
       coalesce(sum(j.attempts), 0) AS attempts,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY l.ms) AS lag_p50_ms,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY l.ms) AS lag_p99_ms,
       max(l.ms) AS lag_max_ms
FROM procrastinate_jobs j
LEFT JOIN LATERAL (
    SELECT extract(epoch FROM s.at - d.at) * 1000 AS ms
    FROM procrastinate_events d
    JOIN procrastinate_events s ON s.job_id = d.job_id AND s.type = 'succeeded'
    WHERE d.job_id = j.id AND d.type = 'deferred'
) l ON true
"""


def worker_argv(command: str, db_url: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "benchmarks.jobqueue_worker", command, "--db", db_url, *args]


def window_per_min(paths: dict[str, Any], path: str) -> float | None:
    """POSTs per minute between the first and the last one on `path`."""
    p = paths.get(path)
    if not p or p["count"] < 2 or p["last_ts"] <= p["first_ts"]:
        return None
    return round(float(p["count"] / (p["last_ts"] - p["first_ts"]) * 60), 1)


async def pq_results(db_url: str) -> dict[str, Any]:
    conn = await asyncpg.connect(db_url, timeout=10)
    try:
        row = await conn.fetchrow(PQ_RESULT_SQL)
    finally:
        await conn.close()
    assert row is not None
    return {k: None if v is None else float(v) for k, v in row.items()}


async def procrastinate_phase(
    bench: Bench, receiver: Receiver, events: int, concurrency: int
) -> dict[str, Any]:
    """throwaway db → schema → defer N → one worker until empty → metrics."""
    name = f"{bench.opts.db_name}_procrastinate"
    db_url = with_database(bench.admin_url, name)
    progress(f"procrastinate: creating {name}")
    await create_database(bench.admin_url, name)
    try:
        await bench.children.run(worker_argv("schema", db_url), name="pq-schema", timeout_s=60)
        await bench.settle()
        # Timed as `dispatcher enqueue --file` is, by its process's wall time;
        # the bulk call's own time is kept besides.
        res = await bench.children.run(
            worker_argv("defer", db_url, "--events", str(events)), name="pq-defer"
        )
        deferred = json.loads(res.stdout)
        if deferred["events"] != events:
            raise BenchError(f"procrastinate deferred {deferred['events']} jobs, not {events}")
        enq = {"seconds": round(res.wall_s, 3), "events_per_s": round(events / res.wall_s, 1)}
        progress(
            f"procrastinate: deferred {events:,} jobs, {enq['events_per_s']:,.0f}/s "
            f"({deferred['call_s']:.2f} s of {res.wall_s:.2f} s in batch_defer_async)"
        )
        # Any secret: the receiver does not check signatures, only their cost counts.
        secret = "whsec_" + base64.b64encode(os.urandom(24)).decode()
        argv = worker_argv(
            "work", db_url, "--url", receiver.url_for(PATH),
            "--secret", secret, "--concurrency", str(concurrency),
        )  # fmt: skip
        meter = Meter(bench.admin_url, name, bench.receivers)
        await meter.start()
        t_start = time.perf_counter()
        last = {"count": 0, "t": t_start}

        async def tick() -> None:
            meter.sample()
            s = await receiver.stats_or_none(paths=True)
            if s is None:
                return
            now = time.perf_counter()
            n = s["paths"].get(PATH, {}).get("count", 0)
            progress(
                f"procrastinate: delivered {n:,}/{events:,}  {rate_since(last, n, now):,.0f}/s"
                f"  open {s['open']:,}  elapsed {now - t_start:.0f} s",
                transient=True,
            )

        progress(f"procrastinate: worker, concurrency {concurrency}")
        runs, _, _ = await bench.children.run_together(
            [argv], ["pq-worker"], limit_s=bench.run_limit_s(), on_tick=tick
        )
        metered = await meter.stop()
        after = await receiver.stats(paths=True)
        db = await pq_results(db_url)
    finally:
        await drop_database(bench.admin_url, name)
    run = runs[0]
    path = after["paths"].get(PATH, {"count": 0, "duplicates": 0})
    distinct = path["count"] - path["duplicates"]
    m = phase_metrics(
        runs,
        metered,
        {"delivered": distinct, "http_p50_ms": None, "http_p99_ms": None} | db,
        enq,
        expected=events,
        seconds=run.wall_s,
        duplicates=path["duplicates"],
        posts=path["count"],
    )
    m["receiver_window_per_min"] = window_per_min(after["paths"], PATH)
    m["batch_defer_call_s"] = deferred["call_s"]
    m["jobs_succeeded"] = int(db["succeeded"] or 0)
    m["job_attempts"] = int(db["attempts"] or 0)
    m["receiver_unique_ids"] = distinct
    m["worker"] = json.loads(run.stdout) if run.returncode == 0 else None
    # The drain's checks (exit, lost, duplicates, POSTs = ids), and that
    # procrastinate's table agrees with the receiver.
    check_phase(m, bench.problems, "procrastinate", drain=True)
    if m["jobs_succeeded"] != distinct:
        bench.problems.append(
            f"procrastinate: {m['jobs_succeeded']} jobs succeeded, the receiver saw {distinct} ids"
        )
    progress(
        f"procrastinate: {distinct:,} delivered, {m['deliveries_per_min']:,.0f}/min, "
        f"lost {m['lost']}, duplicates {m['duplicates']}, exit {run.returncode}"
    )
    return m


def comparison_rows(pq: dict[str, Any], d: dict[str, Any]) -> list[list[str]]:
    """One row per figure, procrastinate's beside the dispatcher's."""

    def row(name: str, key: str, show: Any = fmt_int) -> list[str]:
        return [name, show(pq[key]), show(d[key])]

    def cpu(v: float | None) -> str:
        return fmt(v, 3)

    return [
        ["", "procrastinate", "dispatcher"],
        row("deliveries/min", "deliveries_per_min"),
        row("  receiver-window rate/min", "receiver_window_per_min"),
        row("  measured over (process wall)", "seconds", lambda v: f"{v:.2f} s"),
        row("enqueue events/s", "enqueue_events_per_s"),
        row("  enqueue process wall", "enqueue_s", lambda v: f"{v:.2f} s"),
        ["  in batch_defer_async", f"{pq['batch_defer_call_s']:.2f} s", "-"],
        row("lag p50 (created->delivered) ms", "lag_p50_ms"),
        row("lag p99 ms", "lag_p99_ms"),
        row("worker CPU s / 1,000", "dispatcher_cpu_s_per_1000", cpu),
        row("worker CPU s / wall s", "dispatcher_cpu_per_wall", lambda v: fmt(v, 2)),
        row("PostgreSQL CPU s / 1,000", "postgres_cpu_s_per_1000", cpu),
        row("DB transactions / 1,000", "db_xacts_per_1000", fmt),
        row("worker peak RSS MB", "peak_rss_mb", fmt),
        row("receiver POSTs", "receiver_posts"),
        row("delivered (distinct ids)", "delivered"),
        row("lost", "lost"),
        row("duplicates", "duplicates"),
    ]


@scenario
async def run_jobqueue(bench: Bench, opts: Options) -> dict[str, Any]:
    events = bench.size("events", 20_000, 300)
    mif = bench.size("max_in_flight", 256, 256)
    ep_mif = bench.size("endpoint_max_in_flight", 256, 256)
    bench.report.update(
        title=f"{events:,} events, procrastinate concurrency {mif} vs dispatcher "
        f"max-in-flight {mif}, {bench.report['machine']['nproc']} cores",
        events=events,
        max_in_flight=mif,
        endpoint_max_in_flight=ep_mif,
    )
    rcv = await bench.receiver("receiver", latency_ms=0.0)
    pq = await procrastinate_phase(bench, rcv, events, mif)
    eps = [EndpointDef("/hook", rcv, max_in_flight=ep_mif)]
    d = await drain_phase(bench, rcv, eps, events, max_in_flight=mif, label="run", addressed=False)
    d.pop("open_series")
    # The receiver has counted procrastinate's POSTs already, so drain_phase
    # cannot read the window off its totals; the path's own counters can.
    d["receiver_window_per_min"] = window_per_min(d.pop("paths"), "/hook")
    ratio = d["deliveries_per_min"] / pq["deliveries_per_min"] if pq["delivered"] else None
    bench.report.update(procrastinate=pq, dispatcher=d, ratio=ratio and round(ratio, 3))
    shown = "-" if ratio is None else f"{ratio:.2f}"
    table = [*comparison_rows(pq, d), ["dispatcher / procrastinate", shown, ""]]
    judged = None if opts.smoke or ratio is None else ratio >= 1
    return bench.finish(table, [verdict("dispatcher >= procrastinate", judged, f"{shown}x")])
