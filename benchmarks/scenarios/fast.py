"""fast: one endpoint on a receiver that answers at once, `run --drain`.

1. start `benchmarks.receiver` on a free 127.0.0.1 port;
2. create a fresh database on DATABASE_URL's server, `dispatcher migrate`,
   one endpoint (max_in_flight 256) subscribed to every event type;
3. write N events as JSONL and time `dispatcher enqueue --file` (the events
   fan out by type, as a producer's would);
4. time `dispatcher run --drain --max-in-flight M`: wall time, CPU seconds and
   peak RSS of that process, PostgreSQL and machine CPU meanwhile;
5. from the database: delivered, lost, lag p50/p99; from the receiver: POSTs
   and duplicates;
6. the raw ceiling: a bare aiohttp client in its own process with the same
   concurrency, body kind and header set, against the same receiver.
"""

from __future__ import annotations

from typing import Any

from ..bench import TARGET_PER_MIN, Bench, EndpointDef, Options, scenario
from ..output import rate_verdict
from ..phases import drain_phase, drain_rows, raw_ceiling, raw_rows, report_raw


@scenario
async def run_fast(bench: Bench, opts: Options) -> dict[str, Any]:
    events = bench.size("events", 100_000, 300)
    mif = bench.size("max_in_flight", 256, 256)
    ep_mif = bench.size("endpoint_max_in_flight", 256, 256)
    latency = float(opts.given.get("latency_ms") or 0.0)
    bench.report.update(
        title=f"{events:,} events, max-in-flight {mif}, {bench.report['machine']['nproc']} cores",
        events=events,
        max_in_flight=mif,
        endpoint_max_in_flight=ep_mif,
        receiver_latency_ms=latency,
    )
    rcv = await bench.receiver("receiver", latency_ms=latency)
    eps = [EndpointDef("/hook", rcv, max_in_flight=ep_mif)]
    m = await drain_phase(bench, rcv, eps, events, max_in_flight=mif, label="run", addressed=False)
    m.pop("open_series")
    m.pop("paths")
    raw = await raw_ceiling(bench, rcv, secret=eps[0].secret, requests=events, concurrency=mif)
    ratio = report_raw(bench, m, raw)
    dpm = m["deliveries_per_min"]
    bench.report["meets_target"] = None if opts.smoke else dpm >= TARGET_PER_MIN
    return bench.finish(
        drain_rows(m) + raw_rows(raw, ratio), [rate_verdict(TARGET_PER_MIN, dpm, opts.smoke)]
    )
