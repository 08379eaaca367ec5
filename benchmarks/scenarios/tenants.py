"""tenants: one application's backlog against another's fresh events (the
SPEC's "Fairness": capacity is shared across applications first, then
across their endpoints).

Two phases, each on a fresh database with one `dispatcher run` (its window
sized by itself), SIGTERM once done:

1. alone: application `a` with N events (200,000) queued over E endpoints
   (50) by one INSERT ... SELECT before the worker starts, drained;
2. with b: the same backlog, and application `b` with one endpoint on a
   receiver of its own: from A's first delivery until A is drained, one
   producer connection commits R events/s (20), one per transaction,
   through `dispatcher_enqueue_app('b', ...)`.

Reported: A's deliveries/min in each phase (A's rows, first to last
delivered_at) and their ratio (target >= 0.9); B's lag p50/p99 from the
return of COMMIT to the first byte at B's receiver (target p99 < 500 ms).
`--latency-ms` delays A's receiver only (B's answers at once): with slow
answers A's rows fill the worker's window. Correct: every event of both
delivered, none twice, the worker exits 0.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from typing import Any

import asyncpg

from ..bench import Bench, EndpointDef, Options, run_argv, scenario
from ..database import bulk_queue, db_results
from ..driven import run_driven
from ..output import fmt, fmt_int, pct, progress, verdict
from ..payloads import postback_payload
from ..processes import dispatcher_argv, engine_stats
from ..producing import ENQUEUE_APP_SQL, paced
from ..receiver_control import Receiver

TARGET_LAG_P99_MS = 500.0
TARGET_RATIO = 0.9
EVENT_TYPE = "bench.tenants"
B_WAIT_S = 30.0  # B's last events: how long they may take to arrive after A is done


@scenario
async def run_tenants(bench: Bench, opts: Options) -> dict[str, Any]:
    events = bench.size("events", 200_000, 300)
    n_ep = bench.size("endpoints", 50, 5)
    rate = bench.size("rate", 20, 20)
    b_min = bench.size("samples", 0, 20)  # B's events at least (a smoke run's A is over at once)
    latency = float(opts.given.get("latency_ms") or 0.0)
    bench.report.update(
        title=f"application a: {events:,} queued events over {n_ep} endpoints; application b: "
        f"{rate} events/s through dispatcher_enqueue_app while a drains",
        events=events,
        endpoints=n_ep,
        rate_per_s=rate,
        receiver_latency_ms=latency,
    )
    rcv_a = await bench.receiver("receiver-a", latency_ms=latency)
    rcv_b = await bench.receiver(
        "receiver-b", record_arrivals=min(1_000_000, int(rate * opts.timeout_s) + b_min + 10)
    )
    payload = json.dumps(postback_payload(random.Random(5), 0), separators=(",", ":"))
    phases = {}
    for label, b in (("alone", None), ("with_b", rcv_b)):
        phases[label] = await _phase(bench, label, rcv_a, b, payload, events, n_ep, rate, b_min)
    alone, shared = phases["alone"], phases["with_b"]
    # Either rate is None when a's drain ended before a rate could be read
    # (a smoke run's few events): no ratio then, rather than a crash.
    ratio = (
        shared["a_per_min"] / alone["a_per_min"]
        if shared["a_per_min"] and alone["a_per_min"]
        else None
    )
    bench.report["phases"] = phases
    bench.report["ratio"] = None if ratio is None else round(ratio, 3)
    b = shared["b"]
    table = [["", "a alone", "a with b"]]
    for name, key, show in (
        ("a deliveries/min", "a_per_min", fmt_int),
        ("a drained in (s)", "a_seconds", lambda v: fmt(v, 2)),
        ("a backlog written in (s)", "load_s", fmt),
        ("dispatcher CPU s / 1,000", "cpu_s_per_1000", lambda v: fmt(v, 3)),
        ("window end / max", "window", str),
        ("delivered", "delivered", fmt_int),
        ("lost", "lost", fmt_int),
        ("duplicates", "duplicates", fmt_int),
    ):
        table.append([name, show(alone.get(key)), show(shared.get(key))])
    table += [
        ["a with b / a alone", "", "-" if ratio is None else f"{ratio:.3f}"],
        ["b events committed / arrived", "", f"{b['committed']:,} / {b['arrived']:,}"],
        ["b lag p50 / p99 / max (COMMIT -> receiver)", "",
         f"{fmt(b['p50_ms'])} / {fmt(b['p99_ms'])} / {fmt(b['max_ms'])} ms"],
    ]  # fmt: skip
    judged = not opts.smoke
    ok_lag = None if not judged or b["p99_ms"] is None else b["p99_ms"] < TARGET_LAG_P99_MS
    ok_ratio = None if not judged or ratio is None else ratio >= TARGET_RATIO
    bench.report["meets_target"] = None if not judged else bool(ok_lag and ok_ratio)
    return bench.finish(table, [
        verdict(f"b lag p99 < {TARGET_LAG_P99_MS:g} ms", ok_lag, f"{fmt(b['p99_ms'])} ms"),
        verdict(f"a with b >= {TARGET_RATIO:g} x alone", ok_ratio,
                "-" if ratio is None else f"{ratio:.3f}"),
    ])  # fmt: skip


async def _phase(
    bench: Bench,
    label: str,
    rcv_a: Receiver,
    rcv_b: Receiver | None,
    payload: str,
    events: int,
    n_ep: int,
    rate: int,
    b_min: int,
) -> dict[str, Any]:
    """Fresh database, a's backlog, one worker; b's producer when rcv_b is given."""
    await bench.fresh_db()
    a_eps = [EndpointDef(f"/{label}/a/{i}", rcv_a, app="a") for i in range(n_ep)]
    b_eps = [] if rcv_b is None else [
        EndpointDef(f"/{label}/b", rcv_b, app="b", settings={"event_types": [EVENT_TYPE]})
    ]  # fmt: skip
    await bench.add_endpoints(a_eps + b_eps)
    a_ids, b_ids = [e.id for e in a_eps], [e.id for e in b_eps]
    run_id = os.urandom(3).hex()
    load_s = await bulk_queue(bench.bench_url, a_ids, events, prefix=f"a-{run_id}-",
                              event_type=EVENT_TYPE, payload=payload)  # fmt: skip
    progress(f"{label}: a's {events:,} events written in {load_s:.2f} s")
    await bench.settle()
    before_a = await rcv_a.stats()
    before_b = None if rcv_b is None else await rcv_b.stats()
    commits: dict[tuple[int, int], float] = {}
    done = [0]
    state: dict[str, Any] = {"phase": "draining", "a": 0}

    def b_id(k: int) -> str:
        return f"b-{run_id}-{k}"

    async def a_delivered() -> int:
        s = await rcv_a.stats()
        state["a"] = s["unique_ids"] - before_a["unique_ids"]
        if state["a"] >= events:
            state.setdefault("t_all", time.monotonic())
        return int(state["a"])

    async def driver() -> None:
        state["t0"] = time.monotonic()
        while await a_delivered() == 0:
            await asyncio.sleep(0.02)
        if rcv_b is None:
            while await a_delivered() < events:
                await asyncio.sleep(0.2)
            return
        stop = asyncio.Event()
        conn = await asyncpg.connect(bench.bench_url, timeout=10)
        try:
            producer = asyncio.create_task(paced(
                [conn], rate, bench.opts.timeout_s, lambda _, k: ("b", EVENT_TYPE, payload,
                b_id(k)), stop, done, sql=ENQUEUE_APP_SQL, commits=commits,
            ))  # fmt: skip
            while await a_delivered() < events or done[0] < b_min:
                if producer.done():
                    break
                await asyncio.sleep(0.2)
            stop.set()
            await producer
        finally:
            await conn.close()
        state["phase"] = "b's last events"
        for _ in range(int(B_WAIT_S / 0.1)):
            if len(await rcv_b.arrivals()) >= len(commits):
                break
            await asyncio.sleep(0.1)

    argv = run_argv(bench.opts, bench.opts.given.get("max_in_flight"), drain=False)
    progress(f"{label}: dispatcher {' '.join(argv)}")
    runs = await run_driven(
        bench, [dispatcher_argv(*argv)], ["run"], driver,
        lambda: f"{label}: {state['phase']}, a delivered {state['a']:,}/{events:,}, "
        f"b committed {done[0]:,}",
    )  # fmt: skip
    run = runs[0]
    after_a = await rcv_a.stats()
    db_a = await db_results(bench.bench_url, a_ids)
    db_b = await db_results(bench.bench_url, b_ids) if b_ids else None
    await bench.drop_db()
    span = (db_a["last_delivered_ts"] or 0.0) - (db_a["first_delivered_ts"] or 0.0)
    if span <= 0 and "t_all" in state:
        # A smoke run's few events can all be written back in one statement
        # (one delivered_at): the span from the dispatcher's start then,
        # which counts its start-up too and so understates the rate.
        span = state["t_all"] - state["t0"]
    delivered = int(db_a["delivered"])
    duplicates = after_a["duplicates"] - before_a["duplicates"]
    engine = engine_stats(run.stderr) or {}
    m: dict[str, Any] = {
        "a_per_min": round(delivered / span * 60, 1) if span > 0 else None,
        "a_seconds": round(span, 2),
        "load_s": round(load_s, 2),
        "delivered": delivered,
        "lost": events - delivered,
        "duplicates": duplicates,
        "cpu_s_per_1000": round(run.cpu_s * 1000 / max(delivered, 1), 4),
        "window": f"{fmt_int(engine.get('window'))} / {fmt_int(engine.get('window_max'))}",
        "exit_code": run.returncode,
    }
    problems = bench.problems
    if delivered != events or after_a["unique_ids"] - before_a["unique_ids"] != events:
        problems.append(f"{label}: a: {delivered:,} of {events:,} delivered")
    if run.returncode != 0:
        problems.append(f"{label}: dispatcher run exited {run.returncode}")
    if rcv_b is not None and before_b is not None and db_b is not None:
        arrivals = await rcv_b.arrivals()
        lags = [
            (arrivals[b_id(k)] - t) * 1000 for (_, k), t in commits.items() if b_id(k) in arrivals
        ]
        after_b = await rcv_b.stats()
        b = {
            "committed": len(commits),
            "arrived": len(lags),
            "delivered": int(db_b["delivered"]),
            "duplicates": after_b["duplicates"] - before_b["duplicates"],
            "p50_ms": pct(lags, 0.5),
            "p99_ms": pct(lags, 0.99),
            "max_ms": max(lags) if lags else None,
        }
        m["b"] = b
        m["duplicates"] += b["duplicates"]
        if (
            not b["committed"]
            or b["committed"] not in (b["arrived"], b["delivered"])
            or (b["arrived"] != b["delivered"])
        ):
            problems.append(f"{label}: b: {b['arrived']} of {b['committed']} events arrived")
    if m["duplicates"]:
        problems.append(f"{label}: {m['duplicates']} duplicate POSTs")
    progress(f"{label}: a {fmt_int(m['a_per_min'])}/min over {span:.1f} s"
             + ("" if "b" not in m else f"; b lag p99 {fmt(m['b']['p99_ms'])} ms"))  # fmt: skip
    return m
