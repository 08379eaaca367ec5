"""many: 1,000 endpoints on one fast receiver (paths /e/N), a few hundred
events each, `run --drain`; how evenly the endpoints are served (when each
got its first POST and its last)."""

from __future__ import annotations

from typing import Any

from ..bench import TARGET_PER_MIN, Bench, EndpointDef, Options, scenario
from ..output import fmt, pct, rate_verdict
from ..phases import drain_phase, drain_rows


@scenario
async def run_many(bench: Bench, opts: Options) -> dict[str, Any]:
    n_ep = bench.size("endpoints", 1000, 20)
    events = bench.size("events", 200_000, 1_000)
    mif = bench.size("max_in_flight", 256, 64)
    ep_mif = opts.given.get("endpoint_max_in_flight")
    per = max(1, events // n_ep)
    bench.report.update(
        title=f"{per * n_ep:,} events, {n_ep:,} endpoints x {per}, "
        f"run --max-in-flight {mif}, endpoint max_in_flight {ep_mif or 'default (100)'}",
        endpoints=n_ep,
        per_endpoint=per,
        max_in_flight=mif,
    )
    rcv = await bench.receiver("receiver")
    eps = [EndpointDef(f"/e/{i}", rcv, max_in_flight=ep_mif) for i in range(n_ep)]
    m = await drain_phase(bench, rcv, eps, per, max_in_flight=mif, label="run")
    m.pop("open_series")
    start = m["started_wall_ts"]
    paths = m.pop("paths")
    # When each endpoint's first and last event arrived, from the start.
    first_at = sorted(paths[e.path]["first_ts"] - start for e in eps if e.path in paths)
    done_at = sorted(paths[e.path]["last_ts"] - start for e in eps if e.path in paths)
    wrong = sum(1 for e in eps if paths.get(e.path, {}).get("count", 0) != per)
    if wrong:
        bench.problems.append(f"{wrong} endpoints did not get exactly {per} POSTs")
    sp = m["endpoint_spread"] = {
        "first_post_p50_s": pct(first_at, 0.5),
        "first_post_max_s": first_at[-1] if first_at else None,
        "done_min_s": done_at[0] if done_at else None,
        "done_p50_s": pct(done_at, 0.5),
        "done_max_s": done_at[-1] if done_at else None,
        "endpoints_wrong_count": wrong,
    }
    bench.report["dispatcher"] = m
    table = drain_rows(m)
    table += [
        [
            "endpoint first POST p50 / max",
            f"{fmt(sp['first_post_p50_s'])} / {fmt(sp['first_post_max_s'])} s after start",
        ],
        [
            "endpoint done min / p50 / max",
            f"{fmt(sp['done_min_s'])} / {fmt(sp['done_p50_s'])} / "
            f"{fmt(sp['done_max_s'])} s after start",
        ],
        ["endpoints with a wrong count", f"{wrong}"],
    ]
    dpm = m["deliveries_per_min"]
    verdicts = [rate_verdict(TARGET_PER_MIN, dpm, opts.smoke, " (stage target)")]
    bench.report["meets_target"] = None if opts.smoke else dpm >= TARGET_PER_MIN
    return bench.finish(table, verdicts)
