"""producers: N asyncpg producers (default 16), each committing one event
per transaction through `SELECT dispatcher_enqueue(...)`, against the
plain-INSERT reference of the same run: the same rows into a copy of
webhook_queue with the same indexes and no trigger (no function, no foreign
key). Phases alternate reference / function, four times each, a quarter
of the events each time, so that drift on a shared machine falls on both;
the rates are totals over the four. No worker runs meanwhile: both sides
measure the producers' commit path alone.

Then `dispatcher run` starts, delivers what the function phases queued
(checked: nothing lost, nothing twice), goes idle, and single events
committed one at a time measure the wake latency of an idle worker: first
byte at the receiver minus the return of COMMIT.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
from typing import Any

import asyncpg

from ..bench import Bench, EndpointDef, Options, scenario
from ..database import Progress, db_results
from ..driven import run_driven
from ..errors import BenchError
from ..meters import settle
from ..output import fmt, fmt_int, progress, verdict
from ..payloads import postback_payload
from ..processes import dispatcher_argv
from ..producing import (
    ENQUEUE_SQL,
    PLAIN_SQL,
    burst,
    close_all,
    connect_producers,
    create_plain_copy,
    enqueue_args,
    event_args,
    wake_samples,
)

TARGET_RATIO = 0.7
# Reference and function alternate this many times each: on a shared machine
# the load of the moment falls on both.
ROUNDS = 4
TARGET_WAKE_P99_MS = 50.0


@scenario
async def run_producers(bench: Bench, opts: Options) -> dict[str, Any]:
    n_prod = bench.size("producers", 16, 4)
    events = bench.size("events", 40_000, 300)
    samples = bench.size("samples", 200, 20)
    bench.report.update(
        title=f"{n_prod} producers, one event per transaction: {events:,} through "
        f"dispatcher_enqueue vs {events:,} plain INSERTs; then {samples} idle wake-ups",
        producers=n_prod,
        events=events,
    )
    rcv = await bench.receiver("receiver", record_arrivals=events + samples + 10)
    await bench.fresh_db()
    ep = EndpointDef("/producers", rcv)
    await bench.add_endpoints([ep])
    payload = json.dumps(postback_payload(random.Random(3), 0), separators=(",", ":"))
    run_id = os.urandom(3).hex()
    admin = await asyncpg.connect(bench.bench_url, timeout=10)
    conns = await connect_producers(bench.bench_url, n_prod)
    try:
        await create_plain_copy(admin)
        if not opts.smoke:
            await settle()
        totals = {"plain": [0, 0.0], "enqueue": [0, 0.0]}
        shares = [events // ROUNDS + (1 if r < events % ROUNDS else 0) for r in range(ROUNDS)]
        for rnd, share in enumerate(shares):
            for kind in ("plain", "enqueue"):
                sql, args = (
                    (PLAIN_SQL, event_args(f"p{rnd}-{run_id}", ep.id, payload))
                    if kind == "plain"
                    else (ENQUEUE_SQL, enqueue_args(f"e{rnd}-{run_id}", payload))
                )
                n, secs = await burst(conns, share, sql, args)
                progress(f"producers: {kind} round {rnd + 1}: {n / secs:,.0f} transactions/s")
                totals[kind][0] += n
                totals[kind][1] += secs
    finally:
        await close_all(conns)
    plain_tps = totals["plain"][0] / totals["plain"][1]
    enq_tps = totals["enqueue"][0] / totals["enqueue"][1]
    queued = int(totals["enqueue"][0])

    state: dict[str, Any] = {"phase": "draining", "wake": None, "err": ""}

    async def driver() -> None:
        async with Progress(bench.bench_url) as prog:
            for _ in range(600):
                if await prog.finished() >= queued:
                    break
                await asyncio.sleep(0.2)
            else:
                state["err"] = "the queued events were not delivered within 120 s"
                return
        await asyncio.sleep(1.0 if opts.smoke else 3.0)  # idle: probing only
        state["phase"] = "wake"
        state["wake"] = await wake_samples(admin, rcv.arrivals, payload, samples)

    progress("producers: dispatcher run")
    try:
        runs = await run_driven(
            bench, [dispatcher_argv("run")], ["run"], driver,
            lambda: f"producers: {state['phase']}",
        )  # fmt: skip
    finally:
        await admin.close()
    if state["err"]:
        raise BenchError(state["err"])
    stats = await rcv.stats()
    db = await db_results(bench.bench_url)
    await bench.drop_db()
    run = runs[0]
    wake = state["wake"] or {}
    expected = queued + samples
    lost = expected - int(db["delivered"])
    m: dict[str, Any] = {
        "plain_tps": round(plain_tps, 1),
        "enqueue_tps": round(enq_tps, 1),
        "ratio": round(enq_tps / plain_tps, 3),
        "plain_s": round(totals["plain"][1], 2),
        "enqueue_s": round(totals["enqueue"][1], 2),
        "wake": wake,
        "delivered": db["delivered"],
        "lost": lost,
        "duplicates": stats["duplicates"],
        "exit_code": run.returncode,
        "peak_rss_mb": round(run.maxrss_mb, 1),
    }
    bench.report["producers_result"] = m
    if lost:
        bench.problems.append(f"{lost} of {expected} events not delivered")
    if stats["duplicates"]:
        bench.problems.append(f"{stats['duplicates']} duplicate POSTs")
    if wake.get("missing"):
        bench.problems.append(f"{wake['missing']} wake samples never arrived")
    if run.returncode != 0:
        bench.problems.append(f"dispatcher run exited {run.returncode}")
    table = [
        ["producers", f"{n_prod} connections, one event per transaction"],
        ["dispatcher_enqueue transactions/s", fmt_int(enq_tps)],
        ["plain INSERT transactions/s (reference)", fmt_int(plain_tps)],
        ["ratio enqueue / plain", fmt(m["ratio"], 3)],
        ["idle wake p50 / p90 / p99", " / ".join(
            fmt(wake.get(k)) for k in ("p50_ms", "p90_ms", "p99_ms")) + " ms"],
        ["idle wake max", f"{fmt(wake.get('max_ms'))} ms"],
        ["delivered", f"{db['delivered']:,} of {expected:,} (lost {lost})"],
        ["duplicates", f"{stats['duplicates']:,}"],
        ["dispatcher peak RSS", f"{fmt(m['peak_rss_mb'])} MB"],
    ]  # fmt: skip
    smoke = opts.smoke
    ok_ratio = None if smoke else m["ratio"] >= TARGET_RATIO
    p99 = wake.get("p99_ms")
    ok_wake = None if smoke or p99 is None else p99 < TARGET_WAKE_P99_MS
    bench.report["meets_target"] = None if smoke else bool(ok_ratio and ok_wake)
    return bench.finish(table, [
        verdict(f"ratio >= {TARGET_RATIO:g}", ok_ratio, f"{fmt(m['ratio'], 3)}"),
        verdict(f"idle wake p99 < {TARGET_WAKE_P99_MS:g} ms", ok_wake, f"{fmt(p99)} ms"),
    ])  # fmt: skip
