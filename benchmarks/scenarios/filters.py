"""filters: what subscription filters cost producers. 100 endpoints
subscribed to the event type; N asyncpg producers (default 8) commit one
event per transaction through `dispatcher_enqueue` (each event fans out to
every matching endpoint). Two cases alternate, four rounds each, so drift
on a shared machine falls on both: no endpoint filters, and 10 of the 100
filter (`payload @> filter`, half of them matching the payload). Reported:
events/s and rows/s of each and the ratio (issue 11's target: within 20 %).
No worker runs: this is the producers' path alone.
"""

from __future__ import annotations

import json
import os
import random
from typing import Any

import asyncpg

from ..bench import Bench, EndpointDef, Options, scenario
from ..output import fmt_int, progress, verdict
from ..payloads import postback_payload
from ..producing import ENQUEUE_SQL, burst, close_all, connect_producers, enqueue_args

TARGET_RATIO = 0.8
ROUNDS = 4
ENDPOINTS = 100
FILTERED = 10


@scenario
async def run_filters(bench: Bench, opts: Options) -> dict[str, Any]:
    n_prod = bench.size("producers", 8, 2)
    events = bench.size("events", 8_000, 80)
    bench.report.update(
        title=f"{n_prod} producers, {events:,} events per case through dispatcher_enqueue, "
        f"{ENDPOINTS} endpoints: none filtered vs {FILTERED} filtered",
        producers=n_prod,
        events=events,
    )
    rcv = await bench.receiver("receiver")
    await bench.fresh_db()
    eps = [EndpointDef(f"/e{i}", rcv) for i in range(ENDPOINTS)]
    await bench.add_endpoints(eps)
    doc = postback_payload(random.Random(3), 0)
    payload = json.dumps(doc, separators=(",", ":"))
    # Half the filters match this payload, half do not: both outcomes cost.
    filters = [
        {"status": doc["status"]} if i % 2 == 0 else {"status": "never", "country": doc["country"]}
        for i in range(FILTERED)
    ]
    filtered_ids = [e.id for e in eps[:FILTERED]]
    run_id = os.urandom(3).hex()
    admin = await asyncpg.connect(bench.bench_url, timeout=10)
    conns = await connect_producers(bench.bench_url, n_prod)
    totals = {"none": [0, 0.0, 0], "filtered": [0, 0.0, 0]}
    try:
        await bench.settle()
        shares = [events // ROUNDS + (1 if r < events % ROUNDS else 0) for r in range(ROUNDS)]
        for rnd, share in enumerate(shares):
            for case in ("none", "filtered"):
                for eid, f in zip(filtered_ids, filters, strict=True):
                    value = json.dumps(f) if case == "filtered" else None
                    await admin.execute("UPDATE endpoints SET filter = $2::jsonb WHERE id = $1",
                                        eid, value)  # fmt: skip
                before = await admin.fetchval("SELECT count(*) FROM webhook_queue")
                n, secs = await burst(conns, share, ENQUEUE_SQL,
                                      enqueue_args(f"{case}{rnd}-{run_id}", payload))  # fmt: skip
                rows = await admin.fetchval("SELECT count(*) FROM webhook_queue") - before
                progress(f"filters: {case} round {rnd + 1}: {n / secs:,.0f} events/s")
                totals[case][0] += n
                totals[case][1] += secs
                totals[case][2] += rows
    finally:
        await close_all(conns)
        await admin.close()
    await bench.drop_db()
    rate = {c: t[0] / t[1] for c, t in totals.items()}
    rows_rate = {c: t[2] / t[1] for c, t in totals.items()}
    ratio = rate["filtered"] / rate["none"]
    bench.report["filters_result"] = {
        "events_per_s": {c: round(v, 1) for c, v in rate.items()},
        "rows_per_s": {c: round(v, 1) for c, v in rows_rate.items()},
        "rows": {c: t[2] for c, t in totals.items()},
        "ratio": round(ratio, 3),
    }
    expected_rows = {"none": events * ENDPOINTS, "filtered": events * (ENDPOINTS - FILTERED // 2)}
    for case, want in expected_rows.items():
        if totals[case][2] != want:
            bench.problems.append(f"{case}: {totals[case][2]} rows, expected {want}")
    table = [
        ["", "no filters", f"{FILTERED} filtered"],
        ["events/s (transactions)", fmt_int(rate["none"]), fmt_int(rate["filtered"])],
        ["rows/s", fmt_int(rows_rate["none"]), fmt_int(rows_rate["filtered"])],
        ["filtered / none", f"{ratio:.2f}", ""],
    ]
    judged = None if opts.smoke else ratio >= TARGET_RATIO
    verdicts = [verdict(f"filtered >= {TARGET_RATIO} x unfiltered", judged, f"{ratio:.2f}")]
    return bench.finish(table, verdicts)
