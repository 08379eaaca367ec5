"""fifo: what ordering costs. The same events, endpoint settings and
receiver twice: an unordered endpoint, then a FIFO one whose events carry
one of 1,000 ordering keys (`--ordering fifo --ordering-key customer_id`).
Each phase: fresh database, `enqueue --file`, `run --drain`. Reported:
deliveries/min of each and their ratio (issue 11's target: FIFO >= 0.5 of
unordered), lag p50/p99, and that nothing was lost or sent twice.
"""

from __future__ import annotations

from typing import Any

from ..bench import Bench, EndpointDef, Options, scenario
from ..output import fmt, fmt_int, verdict
from ..phases import drain_phase

TARGET_RATIO = 0.5


@scenario
async def run_fifo(bench: Bench, opts: Options) -> dict[str, Any]:
    events = bench.size("events", 60_000, 300)
    keys = bench.size("keys", 1000, 20)
    ep_mif = bench.size("endpoint_max_in_flight", 256, 64)
    latency = float(opts.given.get("latency_ms") or 0.0)
    bench.report.update(
        title=f"{events:,} events to one endpoint, unordered vs FIFO over {keys:,} keys",
        events=events,
        keys=keys,
        receiver_latency_ms=latency,
    )
    rcv = await bench.receiver("receiver", latency_ms=latency)
    phases: dict[str, dict[str, Any]] = {}
    for label, settings in (
        ("unordered", {}),
        ("fifo", {"ordering": "fifo", "ordering_key": "customer_id"}),
    ):
        ep = EndpointDef(f"/{label}", rcv, max_in_flight=ep_mif, settings=settings)
        m = await drain_phase(bench, rcv, [ep], events, max_in_flight=None, label=label,
                              keys=keys)  # fmt: skip
        m.pop("open_series")
        m.pop("paths")
        phases[label] = m
    plain, fifo = phases["unordered"], phases["fifo"]
    ratio = fifo["deliveries_per_min"] / plain["deliveries_per_min"]
    bench.report["phases"] = phases
    bench.report["ratio"] = round(ratio, 3)
    table = [["", "unordered", "fifo"]]
    for name, key, show in (
        ("deliveries/min", "deliveries_per_min", fmt_int),
        ("lag p50 ms", "lag_p50_ms", fmt),
        ("lag p99 ms", "lag_p99_ms", fmt),
        ("delivered", "delivered", fmt_int),
        ("lost", "lost", fmt_int),
        ("duplicates", "duplicates", fmt_int),
    ):
        table.append([name, show(plain.get(key)), show(fifo.get(key))])
    table.append(["fifo / unordered", f"{ratio:.2f}", ""])
    judged = None if opts.smoke else ratio >= TARGET_RATIO
    detail = f"{keys:,} keys: {ratio:.2f}"
    verdicts = [verdict(f"fifo >= {TARGET_RATIO} x unordered", judged, detail)]
    return bench.finish(table, verdicts)
