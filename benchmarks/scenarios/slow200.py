"""slow200: receivers answering after 200 ms, thousands in flight.

4 endpoints x max_in_flight 1000, `run --drain --max-in-flight 4000`; samples
how many requests the receiver holds open (the adaptive concurrency ramp) and
measures the raw aiohttp ceiling at the same concurrency.
"""

from __future__ import annotations

import statistics
from typing import Any

from ..bench import TARGET_PER_MIN, Bench, EndpointDef, Options, scenario
from ..output import fmt_int, rate_verdict, verdict
from ..phases import drain_phase, drain_rows, raw_ceiling, raw_rows, report_raw

TARGET_RSS_MB = 300.0


@scenario
async def run_slow200(bench: Bench, opts: Options) -> dict[str, Any]:
    n_ep = bench.size("endpoints", 4, 2)
    ep_mif = bench.size("endpoint_max_in_flight", 1000, 50)
    mif = bench.size("max_in_flight", n_ep * ep_mif, n_ep * ep_mif)
    events = bench.size("events", 100_000, 1_000)
    latency = float(opts.given.get("latency_ms") or 200.0)
    per = max(1, events // n_ep)
    bench.report.update(
        title=f"{per * n_ep:,} events, {n_ep} endpoints x max_in_flight {ep_mif}, "
        f"run --max-in-flight {mif}, receiver latency {latency:g} ms",
        endpoints=n_ep,
        endpoint_max_in_flight=ep_mif,
        max_in_flight=mif,
        receiver_latency_ms=latency,
    )
    rcv = await bench.receiver("receiver", latency_ms=latency)
    eps = [EndpointDef(f"/s/{i}", rcv, max_in_flight=ep_mif) for i in range(n_ep)]
    m = await drain_phase(bench, rcv, eps, per, max_in_flight=mif, label="run", sample_open=True)
    m.pop("paths")
    series = m.pop("open_series")
    opens = [o for _, o in series]
    reach = {}
    for frac in (0.25, 0.5, 0.9):
        goal = frac * mif
        reach[frac] = next((round(t, 2) for t, o in series if o >= goal), None)
    m["in_flight"] = {
        "peak": m["receiver_max_open"],
        "median_sampled": statistics.median(opens) if opens else None,
        "samples": [[round(t, 2), o] for t, o in series],
        "seconds_to_25pct": reach[0.25],
        "seconds_to_50pct": reach[0.5],
        "seconds_to_90pct": reach[0.9],
    }
    raw = await raw_ceiling(bench, rcv, secret=eps[0].secret, requests=per * n_ep, concurrency=mif)
    ratio = report_raw(bench, m, raw)
    dpm = m["deliveries_per_min"]
    little = (dpm / 60) * (latency / 1000) if dpm else None
    table = drain_rows(m) + raw_rows(raw, ratio)
    table += [
        ["in flight at receiver: peak", fmt_int(m["in_flight"]["peak"])],
        ["in flight: median of samples", fmt_int(m["in_flight"]["median_sampled"])],
        ["in flight by Little (rate x latency)", fmt_int(little)],
        [
            "seconds to 25 / 50 / 90 % of max",
            " / ".join("-" if reach[f] is None else f"{reach[f]:.1f}" for f in (0.25, 0.5, 0.9)),
        ],
    ]
    smoke = opts.smoke
    rss = m["peak_rss_mb"]
    verdicts = [
        rate_verdict(TARGET_PER_MIN, dpm, smoke),
        verdict(
            f"peak RSS < {TARGET_RSS_MB:g} MB",
            None if smoke else rss < TARGET_RSS_MB,
            f"{rss:.1f} MB",
        ),
    ]
    bench.report["meets_target"] = None if smoke else dpm >= TARGET_PER_MIN and rss < TARGET_RSS_MB
    return bench.finish(table, verdicts)
