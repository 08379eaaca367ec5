"""wake: one `dispatcher run`, idle, under each setting of the database's
wake-up switch in turn (schema 016; `probe` first, then `notify`, switched
while it runs, as `dispatcher wake` does). For each: what idling costs
(dispatcher and PostgreSQL CPU, database transactions, over a quiet
window) and the wake latency of single `SELECT dispatcher_enqueue(...)`
calls committed one at a time by the harness: first byte at the receiver
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
from ..database import db_counters, db_results
from ..errors import BenchError
from ..meters import Meter, PgCpu, process_cpu_s
from ..output import fmt, pct, progress, verdict
from ..payloads import postback_payload
from ..processes import dispatcher_argv

TARGET_P99_MS = 50.0
GAP_S = (0.05, 0.3)
MODES = ("probe", "notify")
# How long after a switch the worker is given to hear of it (it hears in
# milliseconds: a trigger notifies its refresher).
SWITCH_S = 0.5


@scenario
async def run_wake(bench: Bench, opts: Options) -> dict[str, Any]:
    samples = bench.size("samples", 200, 20)
    idle_s = 1.0 if opts.smoke else 5.0
    bench.report.update(
        title=f"{samples} single enqueues per wake mode ({', '.join(MODES)}) into an idle "
        f"`dispatcher run`, gaps {GAP_S[0]:g}-{GAP_S[1]:g} s, after {idle_s:g} s idle measured",
        samples=samples,
    )
    rcv = await bench.receiver("receiver", record_arrivals=len(MODES) * samples + 10)
    await bench.fresh_db()
    ep = EndpointDef("/wake", rcv)
    await bench.add_endpoints([ep])
    conn = await asyncpg.connect(bench.bench_url, timeout=10)
    sent: dict[str, tuple[float, float]] = {}
    run_id = os.urandom(4).hex()
    payload = json.dumps(postback_payload(random.Random(3), 0), separators=(",", ":"))
    state = {"phase": "warmup", "i": 0, "err": ""}
    idle: dict[str, dict[str, Any]] = {}
    meters: dict[str, dict[str, Any] | None] = {}
    meter: Meter | None = None

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

    def worker_pid() -> int | None:
        pids = [pid for pid, p in bench.children.live.items()
                if isinstance(p.args, list) and "run" in p.args]  # fmt: skip
        return pids[0] if pids else None

    async def quiet_window(mode: str) -> None:
        """What idling costs, over idle_s with nothing enqueued."""
        state["phase"] = f"{mode}: idle"
        pid, pg = worker_pid(), PgCpu(opts.db_name)
        c0 = await db_counters(bench.admin_url, opts.db_name)
        d0, t0 = process_cpu_s(pid), time.monotonic()
        pg.sample()
        while time.monotonic() - t0 < idle_s:
            await asyncio.sleep(min(1.0, idle_s))
            pg.sample()
        secs = time.monotonic() - t0
        d1 = process_cpu_s(pid)
        c1 = await db_counters(bench.admin_url, opts.db_name)
        pg_total = pg.totals()
        idle[mode] = {
            "seconds": round(secs, 2),
            "dispatcher_cpu_per_s": None if d0 is None or d1 is None else (d1 - d0) / secs,
            # The backends of the bench database only: the server may serve others.
            "postgres_cpu_per_s": None if pg_total is None else pg_total[1] / secs,
            "xacts_per_s": ((c1["xact_commit"] - c0["xact_commit"]) / secs if c0 and c1 else None),
        }

    async def driver() -> bool:
        nonlocal meter
        # Warm-up: the worker is up, connected and listening.
        await conn.execute("UPDATE dispatcher_settings SET wake = 'probe'")
        await enqueue_one(f"warm-{run_id}")
        if not await wait_arrival(f"warm-{run_id}", 30.0):
            state["err"] = "warm-up event never arrived"
            return True
        for mode in MODES:
            await conn.execute("UPDATE dispatcher_settings SET wake = $1", mode)
            # Settle, then a window the pg_stat counters (reported up to a
            # second late) see whole.
            await asyncio.sleep(SWITCH_S + 1.0)
            await quiet_window(mode)
            meter = Meter(bench.admin_url, opts.db_name, bench.receivers)
            await meter.start()
            state["phase"] = f"{mode}: measuring"
            rng = random.Random(5)
            for i in range(samples):
                state["i"] = i
                await enqueue_one(f"wake-{run_id}-{mode}-{i}")
                await asyncio.sleep(rng.uniform(*GAP_S))
            # Everything has had at least a few seconds to arrive.
            await wait_arrival(f"wake-{run_id}-{mode}-{samples - 1}", 10.0)
            await asyncio.sleep(1.0)
            meters[mode] = await meter.stop()
            meter = None
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
        if meter is not None:
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
    arrivals = await rcv.arrivals()
    stats = await rcv.stats()
    db = await db_results(bench.bench_url)
    await bench.drop_db()
    run = runs[0]
    per_mode = {m: _mode_figures(m, samples, run_id, sent, arrivals, idle, meters)
                for m in MODES}  # fmt: skip
    missing = sum(per_mode[m]["missing"] for m in MODES)
    whole: dict[str, Any] = {
        "samples_per_mode": samples,
        "duplicates": stats["duplicates"],
        "exit_code": run.returncode,
        "peak_rss_mb": round(run.maxrss_mb, 1),
        "dispatcher_cpu_s": round(run.cpu_s, 3),
        "run_wall_s": round(run.wall_s, 3),
        "sigterm_to_exit_s": (
            None if stopped_at is None else round(t0 + run.wall_s - stopped_at, 3)
        ),
        "lag_p50_ms": db["lag_p50_ms"],
        "lag_p99_ms": db["lag_p99_ms"],
    }
    bench.report["wake"] = {**whole, **{m: per_mode[m] for m in MODES}}
    if missing:
        bench.problems.append(f"{missing} of {len(MODES) * samples} events never arrived")
    if stats["duplicates"]:
        bench.problems.append(f"{stats['duplicates']} duplicate POSTs")
    if run.returncode != 0:
        bench.problems.append(f"dispatcher run exited {run.returncode}")

    def row(name: str, cell: Any) -> list[str]:
        return [name, *(cell(per_mode[m]) for m in MODES)]

    table = [
        ["", *MODES],
        row("wake latency p50 / p90 / p99", lambda f: " / ".join(
            fmt(f[k]) for k in ("p50_ms", "p90_ms", "p99_ms")) + " ms"),
        row("wake latency min / max", lambda f: f"{fmt(f['min_ms'])} / {fmt(f['max_ms'])} ms"),
        row("  from before the call, p50 / p99", lambda f:
            f"{fmt(f['from_call_start_p50_ms'])} / {fmt(f['from_call_start_p99_ms'])} ms"),
        row("  dispatcher_enqueue call p50", lambda f: f"{fmt(f['commit_call_p50_ms'], 2)} ms"),
        row("idle: dispatcher CPU s / s", lambda f: fmt(f["idle"].get("dispatcher_cpu_per_s"), 4)),
        row("idle: PostgreSQL CPU s / s (its backends)",
            lambda f: fmt(f["idle"].get("postgres_cpu_per_s"), 4)),
        row("idle: DB transactions / s", lambda f: fmt(f["idle"].get("xacts_per_s"))),
        row("PostgreSQL CPU s / 1,000 (its backends, measuring)",
            lambda f: fmt(f["postgres_cpu_s_per_1000"], 3)),
        row("DB transactions / 1,000 (measuring)", lambda f: fmt(f["db_xacts_per_1000"])),
        row("arrived", lambda f: f"{f['arrived']:,} of {samples:,} (lost {f['missing']})"),
        ["lag p50 / p99 (DB created->delivered, both)",
         f"{fmt(whole['lag_p50_ms'])} / {fmt(whole['lag_p99_ms'])} ms"],
        ["dispatcher peak RSS", f"{fmt(whole['peak_rss_mb'])} MB"],
        ["duplicates", f"{whole['duplicates']:,}"],
        ["run exit, s from SIGTERM", f"{run.returncode}, {fmt(whole['sigterm_to_exit_s'], 2)} s"],
    ]  # fmt: skip
    oks = {}
    for m in MODES:
        p99 = per_mode[m]["p99_ms"]
        oks[m] = None if opts.smoke or p99 is None else p99 < TARGET_P99_MS
    bench.report["meets_target"] = None if opts.smoke else all(oks.values())
    return bench.finish(table, [
        verdict(f"{m}: p99 < {TARGET_P99_MS:g} ms", oks[m], f"p99 {fmt(per_mode[m]['p99_ms'])} ms")
        for m in MODES
    ])  # fmt: skip


def _mode_figures(
    mode: str,
    samples: int,
    run_id: str,
    sent: dict[str, tuple[float, float]],
    arrivals: dict[str, float],
    idle: dict[str, dict[str, Any]],
    meters: dict[str, dict[str, Any] | None],
) -> dict[str, Any]:
    lat: list[float] = []
    lat_before: list[float] = []
    calls: list[float] = []
    missing = 0
    for i in range(samples):
        eid = f"wake-{run_id}-{mode}-{i}"
        if eid not in sent:
            missing += 1
            continue
        t_before, t_commit = sent[eid]
        calls.append((t_commit - t_before) * 1000)
        if eid not in arrivals:
            missing += 1
            continue
        lat.append((arrivals[eid] - t_commit) * 1000)
        lat_before.append((arrivals[eid] - t_before) * 1000)
    m_meter = meters.get(mode)
    counters = m_meter["db_counters"] if m_meter else None
    # The bench database's backends: the server may be serving others too.
    pg_cpu = m_meter["postgres_bench_db_cpu_s"] if m_meter else None
    return {
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
        "commit_call_p50_ms": pct(calls, 0.5),
        "idle": idle.get(mode, {}),
        "meter": m_meter,
        "db_xacts_per_1000": (
            round(counters["xact_commit"] * 1000 / samples, 1) if counters else None
        ),
        "postgres_cpu_s_per_1000": (
            round(pg_cpu * 1000 / samples, 3) if pg_cpu is not None else None
        ),
    }
