"""producers: asyncpg producers, each committing one event per transaction,
at several producer counts (1, 4 and `producers`, default 16): the
plain-INSERT reference (the same rows into a copy of webhook_queue with the
same indexes and no trigger, no function, no foreign key), then `SELECT
dispatcher_enqueue(...)` under each setting of the database's wake-up
switch (schema 016): `probe` (producers never NOTIFY) and `notify` (each
call that queues rows NOTIFYs, so commits take the server-wide notify lock
in turn). Phases alternate reference / probe / notify, four times each, a
quarter of the events each time, so that drift on a shared machine falls on
all three; the rates are totals over the four. No worker runs meanwhile:
every side measures the producers' commit path alone.

Then `dispatcher run` starts, delivers what the function phases queued
(checked: nothing lost, nothing twice), goes idle, and single events
committed one at a time measure the wake latency of an idle worker in each
mode: first byte at the receiver minus the return of COMMIT.
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
KINDS = ("plain", "probe", "notify")  # the reference, then the function in each wake mode
WAKE_MODES = ("probe", "notify")
# Fewer events with fewer producers: one producer commits one at a time.
EVENTS_PER_PRODUCER = 1_500


async def _set_wake(conn: asyncpg.Connection, mode: str) -> None:
    """As `dispatcher wake MODE` sets it: producers' next call obeys it."""
    await conn.execute("UPDATE dispatcher_settings SET wake = $1", mode)


@scenario
async def run_producers(bench: Bench, opts: Options) -> dict[str, Any]:
    n_prod = bench.size("producers", 16, 4)
    events = bench.size("events", 12_000, 300)
    samples = bench.size("samples", 200, 20)
    counts = sorted({c for c in (1, 4, n_prod) if c <= n_prod})
    sizes = {c: min(events, EVENTS_PER_PRODUCER * c) for c in counts}
    bench.report.update(
        title=f"{', '.join(map(str, counts))} producers, one event per transaction: up to "
        f"{events:,} plain INSERTs, {events:,} dispatcher_enqueue with wake probe and "
        f"{events:,} with wake notify per count; then {samples} idle wake-ups per mode",
        producers=n_prod,
        producer_counts=counts,
        events=events,
    )
    rcv = await bench.receiver(
        "receiver", record_arrivals=2 * sum(sizes.values()) + 2 * samples + 10
    )
    await bench.fresh_db()
    ep = EndpointDef("/producers", rcv)
    await bench.add_endpoints([ep])
    payload = json.dumps(postback_payload(random.Random(3), 0), separators=(",", ":"))
    run_id = os.urandom(3).hex()
    admin = await asyncpg.connect(bench.bench_url, timeout=10)
    by_count: dict[int, dict[str, list[float]]] = {}
    try:
        await create_plain_copy(admin)
        await _measure(bench, opts, admin, counts, sizes, by_count, ep.id, payload, run_id)
        await _set_wake(admin, "probe")
    except BaseException:
        await admin.close()
        raise
    rates = {c: {k: t[k][0] / t[k][1] for k in KINDS} for c, t in by_count.items()}
    top = rates[n_prod]
    plain_tps, enq_tps, notify_tps = top["plain"], top["probe"], top["notify"]
    queued = int(sum(t[k][0] for t in by_count.values() for k in WAKE_MODES))

    state: dict[str, Any] = {"phase": "draining", "wake": {}, "err": ""}

    async def driver() -> None:
        async with Progress(bench.bench_url) as prog:
            for _ in range(600):
                if await prog.finished() >= queued:
                    break
                await asyncio.sleep(0.2)
            else:
                state["err"] = "the queued events were not delivered within 120 s"
                return
        for mode in WAKE_MODES:
            await _set_wake(admin, mode)  # the worker hears of it in milliseconds
            await asyncio.sleep(1.0 if opts.smoke else 3.0)  # idle
            state["phase"] = f"wake, {mode}"
            state["wake"][mode] = await wake_samples(admin, rcv.arrivals, payload, samples)

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
    wakes: dict[str, dict[str, Any]] = {m: state["wake"].get(m) or {} for m in WAKE_MODES}
    wake = wakes["probe"]
    expected = queued + len(WAKE_MODES) * samples
    lost = expected - int(db["delivered"])
    m: dict[str, Any] = {
        "plain_tps": round(plain_tps, 1),
        "enqueue_tps": round(enq_tps, 1),
        "ratio": round(enq_tps / plain_tps, 3),
        "notify_tps": round(notify_tps, 1),
        "notify_ratio": round(notify_tps / plain_tps, 3),
        "by_producers": {
            str(c): {
                **{f"{k}_tps": round(r[k], 1) for k in KINDS},
                **{f"{k}_s": round(by_count[c][k][1], 2) for k in KINDS},
                "events": sizes[c],
            }
            for c, r in rates.items()
        },
        "wake": wake,
        "wake_notify": wakes["notify"],
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
    for mode, w in wakes.items():
        if w.get("missing"):
            bench.problems.append(f"{w['missing']} wake samples ({mode}) never arrived")
    if run.returncode != 0:
        bench.problems.append(f"dispatcher run exited {run.returncode}")
    table = [
        ["producers", "plain INSERT tx/s", "enqueue, wake probe", "enqueue, wake notify",
         "probe / plain", "notify / plain"],
        *([str(c), fmt_int(r["plain"]), fmt_int(r["probe"]), fmt_int(r["notify"]),
           fmt(r["probe"] / r["plain"], 3), fmt(r["notify"] / r["plain"], 3)]
          for c, r in rates.items()),
        [],
        *([f"idle wake ({mode}) p50 / p90 / p99", " / ".join(
            fmt(w.get(k)) for k in ("p50_ms", "p90_ms", "p99_ms")) + " ms"]
          for mode, w in wakes.items()),
        *([f"idle wake ({mode}) max", f"{fmt(w.get('max_ms'))} ms"] for mode, w in wakes.items()),
        ["delivered", f"{db['delivered']:,} of {expected:,} (lost {lost})"],
        ["duplicates", f"{stats['duplicates']:,}"],
        ["dispatcher peak RSS", f"{fmt(m['peak_rss_mb'])} MB"],
    ]  # fmt: skip
    smoke = opts.smoke
    ok_ratio = None if smoke else m["ratio"] >= TARGET_RATIO
    p99s = {mode: w.get("p99_ms") for mode, w in wakes.items()}
    ok_wake = {mode: None if smoke or p is None else p < TARGET_WAKE_P99_MS
               for mode, p in p99s.items()}  # fmt: skip
    bench.report["meets_target"] = None if smoke else bool(ok_ratio and all(ok_wake.values()))
    return bench.finish(table, [
        verdict(f"{n_prod} producers, wake probe: ratio >= {TARGET_RATIO:g}", ok_ratio,
                f"{fmt(m['ratio'], 3)}"),
        *(verdict(f"idle wake ({mode}) p99 < {TARGET_WAKE_P99_MS:g} ms", ok_wake[mode],
                  f"{fmt(p99s[mode])} ms") for mode in WAKE_MODES),
    ])  # fmt: skip


async def _measure(
    bench: Bench,
    opts: Options,
    admin: asyncpg.Connection,
    counts: list[int],
    sizes: dict[int, int],
    by_count: dict[int, dict[str, list[float]]],
    endpoint_id: int,
    payload: str,
    run_id: str,
) -> None:
    """The commit rates: every producer count, every kind, ROUNDS rounds."""
    for c in counts:
        conns = await connect_producers(bench.bench_url, c)
        try:
            await bench.settle()
            totals = by_count[c] = {k: [0, 0.0] for k in KINDS}
            total = sizes[c]
            shares = [total // ROUNDS + (1 if r < total % ROUNDS else 0) for r in range(ROUNDS)]
            for rnd, share in enumerate(shares):
                for kind in KINDS:
                    tag = f"{kind[:2]}{c}-{rnd}-{run_id}"
                    if kind == "plain":
                        sql, args = PLAIN_SQL, event_args(tag, endpoint_id, payload)
                    else:
                        await _set_wake(admin, kind)
                        sql, args = ENQUEUE_SQL, enqueue_args(tag, payload)
                    n, secs = await burst(conns, share, sql, args)
                    progress(f"producers: {c} producers, {kind} round {rnd + 1}: "
                             f"{n / secs:,.0f} transactions/s")  # fmt: skip
                    totals[kind][0] += n
                    totals[kind][1] += secs
        finally:
            await close_all(conns)
