"""https: what TLS costs the fast path. The fast scenario's drain twice,
alternating, against two receivers of the same program that answer at
once: one plain http, one https with a certificate from a CA made for the
run (trusted through DISPATCHER_CA_FILE). Connections are kept alive, so
TLS costs one handshake per connection and the record layer per request.
Reported: deliveries/min of each (median of the rounds) and https / http
(issue 11 expects about 0.8-0.9 on these machines).
"""

from __future__ import annotations

import statistics
from typing import Any

from ..bench import Bench, Options, scenario
from ..output import fmt, fmt_int, verdict
from ..phases import alternating
from ..tlsca import make_ca

EXPECTED_RATIO = 0.8


@scenario
async def run_https(bench: Bench, opts: Options) -> dict[str, Any]:
    events = bench.size("events", 60_000, 300)
    rounds = bench.size("rounds", 2, 1)
    ep_mif = bench.size("endpoint_max_in_flight", 256, 64)
    bench.report.update(
        title=f"{events:,} events to one endpoint, http vs https, {rounds} round(s) each",
        events=events,
        rounds=rounds,
    )
    tls = make_ca(bench.workdir / "tls")
    bench.env["DISPATCHER_CA_FILE"] = str(tls.ca)
    receivers = {
        "http": await bench.receiver("receiver-http"),
        "https": await bench.receiver("receiver-https", tls=tls),
    }
    phases = await alternating(bench, receivers, events, rounds=rounds,
                               endpoint_max_in_flight=ep_mif)  # fmt: skip
    rates = {k: [m["deliveries_per_min"] for m in v] for k, v in phases.items()}
    last = {k: v[-1] for k, v in phases.items()}
    med = {k: statistics.median(v) for k, v in rates.items()}
    ratio = med["https"] / med["http"]
    bench.report.update(phases=last, rates=rates, ratio=round(ratio, 3))
    cpu = {k: last[k]["dispatcher_cpu_s_per_1000"] for k in ("http", "https")}
    table = [
        ["", "http", "https"],
        ["deliveries/min (median)", fmt_int(med["http"]), fmt_int(med["https"])],
        ["dispatcher CPU s / 1,000", fmt(cpu["http"], 3), fmt(cpu["https"], 3)],
        ["lost", fmt_int(last["http"]["lost"]), fmt_int(last["https"]["lost"])],
        ["https / http", f"{ratio:.2f}", ""],
    ]
    judged = None if opts.smoke else ratio >= EXPECTED_RATIO
    verdicts = [verdict(f"https >= {EXPECTED_RATIO} x http", judged, f"{ratio:.2f}")]
    return bench.finish(table, verdicts)
