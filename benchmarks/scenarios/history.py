"""history: does a week of history cost anything? (issue 31)

The same run measures everything twice on one endpoint: first on a freshly
migrated database, then on one given what a steady flow over 7 days leaves
(`--rows N`, default 10,000,000): N final deliveries in history (1 % dead
letters) in arrival order, N attempts in the attempt log, N payloads in the
payload store, over 50 endpoints. On each:

1. enqueue: 16 producers, one `dispatcher_enqueue` per transaction (as the
   producers scenario), `--events` / 4 transactions; the rows are removed
   after;
2. an idle worker (`dispatcher run`, nothing due) for 30 s (smoke: 2): PostgreSQL's
   CPU seconds meanwhile (the bench database's backends);
3. each read an operator, the console or the portal makes
   (benchmarks.reads.READS), median of five after a warm-up;
4. with the history only: retention of the oldest day, the drop of each
   final status's, the attempt log's and the payload store's partition
   past a 6-day retention, timed (and its rows per second), while a
   second connection enqueues and cancels one delivery at a time (a row
   into live, then through the trigger into history's parent): that loop's
   latency before and during the drop;
5. `dispatcher run --drain` of `--events` fresh events (the fast scenario's
   phase: rate, CPU, WAL bytes and commits per delivery).

Ratios history / empty are printed for the enqueue, the drain and the idle
CPU. Filling 10 M of each takes minutes; look at `df` before a 100 M run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import statistics
import time
from typing import Any

import asyncpg

from dispatcher.core.retention import Retention
from dispatcher.db import upkeep

from ..bench import Bench, EndpointDef, Options, scenario
from ..meters import PgCpu
from ..output import fmt, fmt_int, progress
from ..payloads import postback_payload
from ..phases import drain_phase
from ..processes import dispatcher_argv
from ..producing import ENQUEUE_SQL, burst, close_all, connect_producers, enqueue_args
from ..reads import READS, WINDOW_S, _median_ms

ENDPOINTS = 50
FILL_CHUNK = 5_000_000
PRODUCERS = 16
IDLE_S = 30.0
DAYS = 7
# Kept by the drop of step 4: the day before the oldest goes.
DROP_KEEP_S = 6 * 86400.0
HISTORY_PARENTS = ("webhook_history_delivered", "webhook_history_dead", "webhook_history_cancelled")
# The partitioned tables whose oldest day step 4 drops.
DROP_PARENTS = (*HISTORY_PARENTS, "endpoint_latency", "event_payloads")
# The fastest rate BENCHMARKS publishes (fast, EPYC host): retention must
# remove rows at ten times it (issue 31).
FASTEST_PER_S = 542_321 / 60


async def fill(conn: asyncpg.Connection, rows: int) -> dict[str, float]:
    """`rows` each of final deliveries, attempts and payloads over DAYS days,
    oldest first (ids and times grow together, as a steady flow leaves
    them), on ENDPOINTS endpoints no bench event is for."""
    took: dict[str, float] = {}
    await conn.execute(
        "INSERT INTO endpoints (url, secret, event_types) SELECT 'https://example.com/' || g,"
        " 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', '{history.none}'"
        " FROM generate_series(1, $1) g",
        ENDPOINTS,
    )
    first = await conn.fetchval("SELECT min(id) FROM endpoints WHERE url LIKE 'https://example%'")
    for parent in ("endpoint_latency", "event_payloads", *HISTORY_PARENTS):
        await conn.execute(
            "SELECT dispatcher_day_partitions($1, 3, NULL, 86400, now() - $2 * interval '1 day')",
            parent,
            DAYS,  # the first day holding a row: each drop of step 4 takes rows
        )
    span = f"now() - (1 - g::float8 / $1) * interval '{DAYS} days'"
    steps = {
        "payloads": (
            "INSERT INTO event_payloads (id, created_at, body)"
            f" SELECT g, {span}, '{{\"n\": 1}}' FROM generate_series($2::bigint, $3::bigint) g"
        ),
        # Each delivery references its payload (the fan-out form); 1 % dead.
        "history": (
            "INSERT INTO webhook_history (id, endpoint_id, event_id, event_type, status,"
            " attempt_count, max_attempts, created_at, next_attempt_at, delivered_at, updated_at,"
            " last_status_code, last_response_ms, last_error, payload_id, payload_at,"
            " finished_at)"
            " SELECT nextval('webhook_queue_id_seq'), $2 + g % $3, 'h' || g, 't',"
            "  CASE WHEN g % 100 = 0 THEN 'dead_letter' ELSE 'delivered' END,"
            "  CASE WHEN g % 100 = 0 THEN 8 ELSE 1 END, 8, at, at,"
            "  CASE WHEN g % 100 = 0 THEN NULL ELSE at END, at,"
            "  CASE WHEN g % 100 = 0 THEN 503 ELSE 200 END, 40 + g % 200,"
            "  CASE WHEN g % 100 = 0 THEN 'http_503' END, g, at, at"
            f" FROM generate_series($4::bigint, $5::bigint) g, LATERAL (SELECT {span} AS at) t"
        ),
        "attempts": (
            "INSERT INTO endpoint_latency (endpoint_id, response_ms, status_code, measured_at,"
            " delivery_id)"
            " SELECT $2 + g % $3, (exp(3.5 + 1.5 * random()))::int,"
            f"  CASE WHEN g % 50 = 0 THEN 503 ELSE 200 END, {span}, g"
            " FROM generate_series($4::bigint, $5::bigint) g"
        ),
    }
    if rows == 0:
        return took
    await conn.execute("SELECT setval('event_payloads_id_seq', $1)", rows)
    for name, sql in steps.items():
        t0 = time.perf_counter()
        args = (rows,) if name == "payloads" else (rows, first, ENDPOINTS)
        # In chunks: one statement of 100 M rows would hold them all in
        # history's trigger's transition table (temporary files the size
        # of the table) on a disk the run needs for the table itself.
        for lo in range(1, rows + 1, FILL_CHUNK):
            await conn.execute(sql, *args, lo, min(lo + FILL_CHUNK - 1, rows))
        took[name] = round(time.perf_counter() - t0, 1)
        progress(f"fill: {rows:,} {name} in {took[name]:.0f} s")
    # What a steady flow's maintenance would have done meanwhile: the
    # minutes past the window rolled up and pruned, leaves past retention
    # dropped; then vacuum's visibility map and the planner's figures.
    t0 = time.perf_counter()
    while not await upkeep.maintain(conn, WINDOW_S, Retention(), max_batches=1_000):
        pass
    took["maintenance"] = round(time.perf_counter() - t0, 1)
    t0 = time.perf_counter()
    await conn.execute("VACUUM ANALYZE")
    # The fill's dirty pages written out now, not by a checkpoint during the
    # measurements (its writes slow every commit's flush, and the first
    # change of each page after it is logged whole).
    with contextlib.suppress(asyncpg.InsufficientPrivilegeError):
        await conn.execute("CHECKPOINT")
    took["vacuum_analyze_checkpoint"] = round(time.perf_counter() - t0, 1)
    # What N of each cost on disk: a 100 M run needs ten times this free.
    took["database_gb"] = round(
        await conn.fetchval("SELECT pg_database_size(current_database())") / 1e9, 2
    )
    return took


async def enqueue_rate(url: str, events: int, payload: str) -> float:
    """Transactions per second of PRODUCERS producers; their rows removed."""
    conns = await connect_producers(url, PRODUCERS)
    try:
        run_id = os.urandom(3).hex()
        n, seconds = await burst(conns, events, ENQUEUE_SQL, enqueue_args(f"h{run_id}", payload))
        await conns[0].execute("DELETE FROM webhook_live WHERE event_id LIKE $1", f"h{run_id}-%")
        return n / seconds
    finally:
        await close_all(conns)


async def idle_cpu(bench: Bench, seconds: float) -> float:
    """The bench database's PostgreSQL CPU seconds while a worker idles."""
    proc, _, _ = bench.children.spawn(dispatcher_argv("run"), name="idle")
    try:
        # Started, its first maintenance round done (a smoke run measures nothing).
        await asyncio.sleep(1.0 if bench.opts.smoke else 5.0)
        cpu = PgCpu(bench.opts.db_name)
        cpu.sample()
        for _ in range(int(seconds)):
            await asyncio.sleep(1.0)
            cpu.sample()
        totals = cpu.totals()
        return round(totals[1], 3) if totals else float("nan")
    finally:
        await bench.children.stop(proc)


async def drop_under_load(url: str) -> dict[str, Any]:
    """The oldest day's partitions dropped (DROP_KEEP_S), timed, while a
    second connection moves one delivery at a time through live into
    history; that loop's latency before and during."""
    loop_conn = await asyncpg.connect(url)
    conn = await asyncpg.connect(url)
    endpoint = await conn.fetchval("SELECT min(id) FROM endpoints")
    lat: dict[str, list[float]] = {"before": [], "during": []}
    phase = "before"
    stop = asyncio.Event()

    async def mover() -> None:
        for i in range(1_000_000):
            if stop.is_set():
                return
            t0 = time.perf_counter()
            async with loop_conn.transaction():
                (rid,) = await loop_conn.fetchval(
                    "SELECT dispatcher_enqueue('t', '{}'::json, $1, $2)", f"drop-{i}", endpoint
                )
                await loop_conn.execute(
                    "UPDATE webhook_live SET status = 'cancelled' WHERE id = $1", rid
                )
            lat[phase].append((time.perf_counter() - t0) * 1000)
            await asyncio.sleep(0.005)

    # What each drop will take: its oldest partition past DROP_KEEP_S.
    oldest = {
        parent: await conn.fetchval(
            "SELECT relname FROM dispatcher_partitions($1)"
            " WHERE upper_bound <= now() - make_interval(secs => $2) ORDER BY upper_bound LIMIT 1",
            parent,
            DROP_KEEP_S,
        )
        for parent in DROP_PARENTS
    }
    rows = {
        parent: await conn.fetchval(f'SELECT count(*) FROM "{leaf}"') if leaf else 0
        for parent, leaf in oldest.items()
    }
    task = asyncio.create_task(mover())
    try:
        await asyncio.sleep(3.0)
        phase = "during"
        drops: dict[str, Any] = {}
        for parent in DROP_PARENTS:
            t0 = time.perf_counter()
            row = await conn.fetchrow(
                "SELECT * FROM dispatcher_day_partitions($1, 0, $2, 86400, NULL)",
                parent,
                DROP_KEEP_S,
            )
            assert row is not None
            took = time.perf_counter() - t0
            drops[parent] = {
                "dropped": row["dropped"],
                "s": round(took, 3),
                "rows": rows[parent] if row["dropped"] else 0,
                "rows_per_s": round(rows[parent] / took) if row["dropped"] else 0,
            }
        await asyncio.sleep(1.0)
        stop.set()
        await task
    finally:
        stop.set()
        await conn.close()
        await loop_conn.close()

    def summary(xs: list[float]) -> dict[str, float | int]:
        return {
            "n": len(xs),
            "p50_ms": round(statistics.median(xs), 2) if xs else float("nan"),
            "max_ms": round(max(xs), 2) if xs else float("nan"),
        }

    return {"drops": drops, "loop_before": summary(lat["before"]),
            "loop_during": summary(lat["during"])}  # fmt: skip


async def reads(url: str) -> dict[str, float]:
    conn = await asyncpg.connect(url)
    try:
        return {name: await _median_ms(conn, read, 5) for name, read in READS.items()}
    finally:
        await conn.close()


@scenario
async def run_history(bench: Bench, opts: Options) -> dict[str, Any]:
    rows = bench.size("rows", 10_000_000, 20_000)
    events = bench.size("events", 100_000, 2_000)
    idle_s = 2.0 if opts.smoke else IDLE_S
    bench.report.update(
        title=f"a week of history ({rows:,} deliveries, attempts and payloads) vs empty:"
        f" enqueue, idle worker, reads, a day's drop, drain of {events:,} events",
        rows=rows,
        events=events,
    )
    rcv = await bench.receiver("receiver")
    payload = json.dumps(postback_payload(random.Random(3), 0), separators=(",", ":"))
    sides: dict[str, dict[str, Any]] = {}
    for side in ("empty", "history"):
        got: dict[str, Any] = {}

        async def before(side: str = side, got: dict[str, Any] = got) -> None:
            conn = await asyncpg.connect(bench.bench_url)
            try:  # the same 50 endpoints on both sides; rows on one
                got["fill_s"] = await fill(conn, rows if side == "history" else 0)
            finally:
                await conn.close()
            await bench.settle()
            progress(f"{side}: enqueue, {PRODUCERS} producers")
            got["enqueue_tps"] = round(
                await enqueue_rate(bench.bench_url, max(events // 4, 400), payload), 1
            )
            progress(f"{side}: idle worker, {idle_s:.0f} s")
            got["idle_pg_cpu_s"] = await idle_cpu(bench, idle_s)
            progress(f"{side}: reads")
            got["reads_ms"] = await reads(bench.bench_url)
            if side == "history":
                progress(f"{side}: the oldest day dropped under load")
                got["retention"] = await drop_under_load(bench.bench_url)

        eps = [EndpointDef("/hook", rcv, max_in_flight=256)]
        m = await drain_phase(
            bench, rcv, eps, events, max_in_flight=256, label=f"{side}: drain",
            addressed=False, before_enqueue=before, own_rows_only=True,
        )  # fmt: skip
        m.pop("open_series")
        m.pop("paths")
        got["drain"] = m
        sides[side] = got
    bench.report["sides"] = sides
    e, h = sides["empty"], sides["history"]

    def ratio(a: float | None, b: float | None) -> str:
        return fmt(b / a, 3) if a and b else "-"

    rate_e, rate_h = e["drain"]["deliveries_per_min"], h["drain"]["deliveries_per_min"]
    table: list[list[str]] = [
        ["", "empty", "history", "history / empty"],
        ["enqueue, 16 producers (tx/s)", fmt_int(e["enqueue_tps"]), fmt_int(h["enqueue_tps"]),
         ratio(e["enqueue_tps"], h["enqueue_tps"])],
        ["drain (deliveries/min)", fmt_int(rate_e), fmt_int(rate_h), ratio(rate_e, rate_h)],
        [f"idle worker, PostgreSQL CPU s / {idle_s:.0f} s", fmt(e["idle_pg_cpu_s"], 3),
         fmt(h["idle_pg_cpu_s"], 3), ratio(e["idle_pg_cpu_s"], h["idle_pg_cpu_s"])],
    ]  # fmt: skip
    for name in READS:
        table.append([f"read: {name} (ms)", fmt(e["reads_ms"][name], 1),
                      fmt(h["reads_ms"][name], 1), ""])  # fmt: skip
    table.append(["database size after the fill (GB)", fmt(e["fill_s"].get("database_gb"), 2),
                  fmt(h["fill_s"].get("database_gb"), 2), ""])  # fmt: skip
    ret = h["retention"]
    for parent, d in ret["drops"].items():
        table.append([f"drop of {parent}'s oldest day (s)", "", fmt(d["s"], 3),
                      f"{fmt_int(d['rows'])} rows, {fmt_int(d['rows_per_s'])}/s"])  # fmt: skip
    table.append(
        [
            "enqueue + cancel loop p50 / max, before the drop (ms)",
            "",
            f"{ret['loop_before']['p50_ms']} / {ret['loop_before']['max_ms']}",
            "",
        ]
    )
    table.append(
        [
            "the same during the drops (ms)",
            "",
            f"{ret['loop_during']['p50_ms']} / {ret['loop_during']['max_ms']}",
            "",
        ]
    )
    for key, what in (("dispatcher_cpu_s_per_1000", "drain: dispatcher CPU s / 1,000"),
                      ("postgres_cpu_s_per_1000", "drain: PostgreSQL CPU s / 1,000"),
                      ("wal_bytes_per_1000", "drain: WAL bytes / 1,000"),
                      ("db_xacts_per_1000", "drain: commits / 1,000")):  # fmt: skip
        a, b = e["drain"].get(key), h["drain"].get(key)
        table.append([what, fmt(a, 3), fmt(b, 3), ratio(a, b)])
    slowest = max(h["reads_ms"].values())
    verdicts = [
        f"enqueue ratio >= 0.95: {ratio(e['enqueue_tps'], h['enqueue_tps'])}",
        f"drain ratio >= 0.95: {ratio(rate_e, rate_h)}",
        f"every read < 100 ms with the history: slowest {slowest} ms",
        f"a day's drop < 1 s: slowest {max(d['s'] for d in ret['drops'].values())} s",
        "rows removed >= 10 x the fastest delivery rate ("
        f"{fmt_int(10 * FASTEST_PER_S)}/s): slowest drop "
        f"{fmt_int(min(d['rows_per_s'] for d in ret['drops'].values() if d['rows']))}/s",
    ]
    return bench.finish(table, verdicts)
