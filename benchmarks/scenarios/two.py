"""two: two `run --drain` processes on one database and one endpoint; no
event may be sent twice. Raw ceiling: two bare clients at once."""

from __future__ import annotations

from typing import Any

from ..bench import Bench, EndpointDef, Options, scenario
from ..output import fmt_int, rate_verdict, verdict
from ..phases import drain_phase, drain_rows, raw_ceiling, raw_rows, report_raw

TARGET_PER_MIN = 500_000


@scenario
async def run_two(bench: Bench, opts: Options) -> dict[str, Any]:
    events = bench.size("events", 200_000, 1_000)
    mif = bench.size("max_in_flight", 256, 64)
    ep_mif = bench.size("endpoint_max_in_flight", 2 * mif, 2 * mif)
    bench.report.update(
        title=f"{events:,} events, 2 x run --drain --max-in-flight {mif}, "
        f"one endpoint max_in_flight {ep_mif}",
        max_in_flight=mif,
        endpoint_max_in_flight=ep_mif,
    )
    rcv = await bench.receiver("receiver")
    eps = [EndpointDef("/hook", rcv, max_in_flight=ep_mif)]
    m = await drain_phase(bench, rcv, eps, events, processes=2, max_in_flight=mif, label="run")
    m.pop("open_series")
    m.pop("paths")
    per_proc = [(e or {}).get("delivered") for e in m["engine"]]
    raw = await raw_ceiling(
        bench, rcv, secret=eps[0].secret, requests=events // 2, concurrency=mif, clients=2
    )
    ratio = report_raw(bench, m, raw)
    dpm = m["deliveries_per_min"]
    table = drain_rows(m)
    table += [
        ["delivered by process 1 / 2", " / ".join(fmt_int(x) for x in per_proc)],
        ["exit codes", " / ".join(str(c) for c in m["exit_codes"])],
        *raw_rows(raw, ratio, what="s"),
    ]
    dup = m["duplicates"]
    verdicts = [
        rate_verdict(TARGET_PER_MIN, dpm, opts.smoke, " together"),
        verdict("no event sent twice", dup == 0, f"{dup} duplicates at the receiver"),
    ]
    bench.report["meets_target"] = None if opts.smoke else dpm >= TARGET_PER_MIN and dup == 0
    return bench.finish(table, verdicts)
