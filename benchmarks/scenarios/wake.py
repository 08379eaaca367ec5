"""wake: `dispatcher run` idle; one `SELECT dispatcher_enqueue(...)` at a
time, committed by the harness; latency = first byte at the receiver
(time.time() there) minus the moment COMMIT returned (time.time() here)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import time
from typing import Any

import asyncpg

from ..bench import Bench, EndpointDef, Options, scenario
from ..database import db_results
from ..errors import BenchError
from ..meters import Meter
from ..output import fmt, fmt_int, pct, progress, verdict
from ..payloads import postback_payload
from ..processes import dispatcher_argv

TARGET_P99_MS = 50.0
GAP_S = (0.05, 0.3)


@scenario
async def run_wake(bench: Bench, opts: Options) -> dict[str, Any]:
    samples = bench.size("samples", 200, 20)
    idle_s = 0.5 if opts.smoke else 3.0
    bench.report.update(
        title=f"{samples} single enqueues into an idle `dispatcher run`, "
        f"gaps {GAP_S[0]:g}-{GAP_S[1]:g} s, {idle_s:g} s idle first",
        samples=samples,
    )
    rcv = await bench.receiver("receiver", record_arrivals=samples + 10)
    await bench.fresh_db()
    ep = EndpointDef("/wake", rcv)
    await bench.add_endpoints([ep])
    conn = await asyncpg.connect(bench.bench_url, timeout=10)
    sent: dict[str, tuple[float, float]] = {}
    run_id = os.urandom(4).hex()
    payload = json.dumps(postback_payload(random.Random(3), 0), separators=(",", ":"))
    state = {"phase": "warmup", "i": 0, "err": ""}
    meter = Meter(bench.admin_url, opts.db_name, bench.receivers)

    async def enqueue_one(event_id: str) -> None:
        t_before = time.time()
        await conn.fetchval(
            "SELECT dispatcher_enqueue($1, $2::json, $3, $4)",
            "bench.wake", payload, event_id, ep.id,
        )  # fmt: skip
        sent[event_id] = (t_before, time.time())  # autocommit: COMMIT has returned

    async def wait_arrival(event_id: str, limit_s: float) -> bool:
        end = time.monotonic() + limit_s
        while time.monotonic() < end:
            if event_id in await rcv.arrivals():
                return True
            await asyncio.sleep(0.05)
        return False

    async def driver() -> bool:
        # Warm-up: the worker is up, connected and listening.
        await enqueue_one(f"warm-{run_id}")
        if not await wait_arrival(f"warm-{run_id}", 30.0):
            state["err"] = "warm-up event never arrived"
            return True
        await asyncio.sleep(idle_s)
        await meter.start()
        state["phase"] = "measuring"
        rng = random.Random(5)
        for i in range(samples):
            state["i"] = i
            await enqueue_one(f"wake-{run_id}-{i}")
            await asyncio.sleep(rng.uniform(*GAP_S))
        # Everything has had at least a few seconds to arrive.
        await wait_arrival(f"wake-{run_id}-{samples - 1}", 10.0)
        await asyncio.sleep(1.0)
        return True

    driver_task: asyncio.Task[bool] | None = None

    async def stop_when() -> bool:
        nonlocal driver_task
        if driver_task is None:
            driver_task = asyncio.create_task(driver(), name="bench-wake-driver")
        if driver_task.done():
            driver_task.result()
            return True
        return False

    async def tick() -> None:
        if state["phase"] == "measuring":
            meter.sample()
        progress(f"wake: {state['phase']} {state['i']}/{samples}", transient=True)

    progress("wake: dispatcher run --max-in-flight 256")
    try:
        runs, stopped_at, t0 = await bench.children.run_together(
            [dispatcher_argv("run", "--max-in-flight", "256")],
            ["run"],
            limit_s=bench.run_limit_s(),
            on_tick=tick,
            stop_when=stop_when,
            tick_s=0.2,
        )
    finally:
        if driver_task is not None and not driver_task.done():
            driver_task.cancel()
            with contextlib.suppress(BaseException):
                await driver_task
        await conn.close()
    if state["err"]:
        raise BenchError(state["err"])
    m_meter = await meter.stop() if meter.started else None
    arrivals = await rcv.arrivals()
    stats = await rcv.stats()
    db = await db_results(bench.bench_url)
    await bench.drop_db()
    lat = []
    lat_before = []
    missing = 0
    for i in range(samples):
        eid = f"wake-{run_id}-{i}"
        if eid not in arrivals:
            missing += 1
            continue
        t_before, t_commit = sent[eid]
        lat.append((arrivals[eid] - t_commit) * 1000)
        lat_before.append((arrivals[eid] - t_before) * 1000)
    run = runs[0]
    counters = m_meter["db_counters"] if m_meter else None
    pg_cpu = m_meter["postgres_cpu_s"] if m_meter else None
    m: dict[str, Any] = {
        "samples": samples,
        "arrived": len(lat),
        "missing": missing,
        "p50_ms": pct(lat, 0.5),
        "p90_ms": pct(lat, 0.9),
        "p99_ms": pct(lat, 0.99),
        "max_ms": max(lat) if lat else None,
        "min_ms": min(lat) if lat else None,
        "negative": sum(1 for x in lat if x < 0),
        "from_call_start_p50_ms": pct(lat_before, 0.5),
        "from_call_start_p99_ms": pct(lat_before, 0.99),
        "commit_call_p50_ms": pct([(b - a) * 1000 for a, b in sent.values()], 0.5),
        "duplicates": stats["duplicates"],
        "exit_code": run.returncode,
        "peak_rss_mb": round(run.maxrss_mb, 1),
        "dispatcher_cpu_s": round(run.cpu_s, 3),
        "run_wall_s": round(run.wall_s, 3),
        "dispatcher_cpu_per_wall": round(run.cpu_s / run.wall_s, 4),
        "sigterm_to_exit_s": (
            None if stopped_at is None else round(t0 + run.wall_s - stopped_at, 3)
        ),
        "lag_p50_ms": db["lag_p50_ms"],
        "lag_p99_ms": db["lag_p99_ms"],
        "http_p50_ms": db["http_p50_ms"],
        "meter": m_meter,
        "db_xacts_per_1000": (
            round(counters["xact_commit"] * 1000 / samples, 1) if counters else None
        ),
        "postgres_cpu_s_per_1000": (
            round(pg_cpu * 1000 / samples, 3) if pg_cpu is not None else None
        ),
    }
    bench.report["wake"] = m
    if missing:
        bench.problems.append(f"{missing} of {samples} events never arrived")
    if stats["duplicates"]:
        bench.problems.append(f"{stats['duplicates']} duplicate POSTs")
    if run.returncode != 0:
        bench.problems.append(f"dispatcher run exited {run.returncode}")
    table = [
        ["wake latency p50 / p90 / p99", " / ".join(
            fmt(m[k]) for k in ("p50_ms", "p90_ms", "p99_ms")) + " ms"],
        ["wake latency min / max", f"{fmt(m['min_ms'])} / {fmt(m['max_ms'])} ms"],
        ["  from before the call, p50 / p99",
         f"{fmt(m['from_call_start_p50_ms'])} / {fmt(m['from_call_start_p99_ms'])} ms"],
        ["  dispatcher_enqueue call p50", f"{fmt(m['commit_call_p50_ms'], 2)} ms"],
        ["lag p50 / p99 (DB created->delivered)",
         f"{fmt_int(m['lag_p50_ms'])} / {fmt_int(m['lag_p99_ms'])} ms"],
        ["HTTP p50 (as measured)", f"{fmt(m['http_p50_ms'])} ms"],
        ["dispatcher CPU s / wall s (mostly idle)", fmt(m["dispatcher_cpu_per_wall"], 3)],
        ["PostgreSQL CPU s / 1,000 (measuring)", fmt(m["postgres_cpu_s_per_1000"], 3)],
        ["DB transactions / 1,000 (measuring)", fmt(m["db_xacts_per_1000"])],
        ["dispatcher peak RSS", f"{fmt(m['peak_rss_mb'])} MB"],
        ["arrived", f"{m['arrived']:,} of {samples:,} (lost {missing})"],
        ["duplicates", f"{m['duplicates']:,}"],
        ["run exit, s from SIGTERM", f"{run.returncode}, {fmt(m['sigterm_to_exit_s'], 2)} s"],
    ]  # fmt: skip
    p99 = m["p99_ms"]
    ok = None if opts.smoke or p99 is None else p99 < TARGET_P99_MS
    bench.report["meets_target"] = ok
    return bench.finish(table, [verdict(f"p99 < {TARGET_P99_MS:g} ms", ok, f"p99 {fmt(p99)} ms")])
